//! `rendezvous`: run a fleet of hosts coordinating through one PostgreSQL, under chaos, show
//! a database's coordination status, or run a command against a throwaway cluster.
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use rendezvous_cli::cli::{Cli, ClusterCommand, Command};
use rendezvous_cli::{admin, check, cluster, dashboard, fleet, host, status};

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

async fn run(command: Command) -> Result<i32, String> {
    match command {
        Command::Fleet(opts) => {
            let report = fleet::run(opts).await?;
            fleet::print_report(&report);
            Ok(if report.pass() { 0 } else { 1 })
        }
        Command::Status(args) => {
            let Some(url) = args.url.filter(|u| !u.is_empty()) else {
                let mut cli = Cli::command();
                cli.build();
                let status = cli.find_subcommand_mut("status").expect("status is a subcommand");
                status
                    .error(ErrorKind::MissingRequiredArgument, "give --database-url URL, or set DATABASE_URL")
                    .exit()
            };
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
            let Some(url) = args.url.filter(|u| !u.is_empty()) else {
                let mut cli = Cli::command();
                cli.build();
                let sub = cli.find_subcommand_mut("dashboard").expect("dashboard is a subcommand");
                sub.error(ErrorKind::MissingRequiredArgument, "give --database-url URL, or set DATABASE_URL")
                    .exit()
            };
            dashboard::serve(url, args.listen, args.allow_hosts).await?;
            Ok(0)
        }
        Command::Admin(args) => {
            let Some(url) = args.url.filter(|u| !u.is_empty()) else {
                let mut cli = Cli::command();
                cli.build();
                let admin = cli.find_subcommand_mut("admin").expect("admin is a subcommand");
                admin
                    .error(ErrorKind::MissingRequiredArgument, "give --database-url URL, or set DATABASE_URL")
                    .exit()
            };
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
            let Some(url) = args.url.filter(|u| !u.is_empty()) else {
                let mut cli = Cli::command();
                cli.build();
                let sub = cli.find_subcommand_mut("check").expect("check is a subcommand");
                sub.error(ErrorKind::MissingRequiredArgument, "give --database-url URL, or set DATABASE_URL")
                    .exit()
            };
            check::run(&url).await
        }
        Command::Cluster { command: ClusterCommand::Run(r) } => cluster::run(&r.options(), &r.command).await,
        Command::Host(plan) => {
            host::run(plan).await?;
            Ok(0)
        }
    }
}
