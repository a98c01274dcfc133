//! `rendezvous`: run a fleet of hosts coordinating through one PostgreSQL, under chaos, show
//! a database's coordination status, or run a command against a throwaway cluster.
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use rendezvous_cli::cli::{Cli, ClusterCommand, Command};
use rendezvous_cli::{admin, check, cluster, dashboard, fleet, host, install, status};

#[tokio::main]
async fn main() {
    let command = Cli::parse().command;
    let name = command.name();
    let code = match run(command).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rendezvous {name}: {e}");
            2
        }
    };
    // Everything `run` started (a cluster, host processes) is stopped by now.
    std::process::exit(code);
}

/// The `--database-url` (or `DATABASE_URL`) a subcommand needs; without it, clap's usage
/// error for that subcommand, and exit status 2.
fn require_url(url: Option<String>, subcommand: &str) -> String {
    if let Some(url) = url.filter(|u| !u.is_empty()) {
        return url;
    }
    let mut cli = Cli::command();
    cli.build();
    let sub = cli.find_subcommand_mut(subcommand).expect("a subcommand");
    sub.error(ErrorKind::MissingRequiredArgument, "give --database-url URL, or set DATABASE_URL").exit()
}

async fn run(command: Command) -> Result<i32, String> {
    match command {
        Command::Fleet(opts) => {
            let report = fleet::run(opts).await?;
            fleet::print_report(&report);
            Ok(if report.pass() { 0 } else { 1 })
        }
        Command::Status(args) => {
            let url = require_url(args.url, "status");
            // Status only prints (it owns no cluster or process to clean up): when the reader
            // of its output goes away (`| head`), end quietly as Unix tools do instead of
            // panicking on the broken pipe.
            // SAFETY: restores the default action of one signal before any thread writes.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            let client = rendezvous_client::connect(&url).await.map_err(|e| e.to_string())?;
            if let Some(every) = args.watch {
                loop {
                    let v = status::collect(&client).await?;
                    // Home the cursor and clear the screen, so the status redraws in place.
                    print!("\x1b[H\x1b[2J");
                    status::print(&v);
                    tokio::time::sleep(every).await;
                }
            }
            let v = status::collect(&client).await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&v).unwrap());
            } else if args.prometheus {
                print!("{}", status::prometheus(&v));
            } else {
                status::print(&v);
            }
            Ok(0)
        }
        Command::Dashboard(args) => {
            let url = require_url(args.url, "dashboard");
            dashboard::serve(url, args.listen, args.allow_hosts).await?;
            Ok(0)
        }
        Command::Admin(args) => {
            let url = require_url(args.url, "admin");
            let client = rendezvous_client::connect(url.as_str()).await.map_err(|e| e.to_string())?;
            rendezvous_client::check_extension(&client).await.map_err(|e| e.to_string())?;
            match admin::run(&client, &args.action).await? {
                Ok(done) => {
                    println!("{done}");
                    Ok(0)
                }
                Err(admin::Refused(why)) => {
                    eprintln!("rendezvous admin: {why}");
                    Ok(1)
                }
            }
        }
        Command::Check(args) => {
            let url = require_url(args.url, "check");
            check::run(&url).await
        }
        Command::Install(args) => {
            let url = require_url(args.url, "install");
            install::run(&url, &install::scripts_dir(args.scripts)?).await
        }
        Command::Cluster { command: ClusterCommand::Run(r) } => cluster::run(&r.options(), &r.command).await,
        Command::Host(plan) => {
            host::run(plan).await?;
            Ok(0)
        }
    }
}
