//! `rendezvous`: run a fleet of hosts coordinating through one PostgreSQL, under chaos, or show
//! a database's coordination status.
use rendezvous_cli::args::Args;
use rendezvous_cli::{fleet, host, status};

const USAGE: &str = "usage:
  rendezvous fleet  [--hosts 6] [--duration 60] [--tasks 12] [--period-ms 1000] [--chaos] [--seed 1] [--database-url URL]
  rendezvous status [--database-url URL] [--json]

Without --database-url, `fleet` starts a throwaway PostgreSQL in a temp dir on its own port
(with pg_rendezvous installed) and stops it afterwards; `status` reads DATABASE_URL.";

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = argv.split_first() else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    let code = match run(cmd, rest).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rendezvous {cmd}: {e}");
            2
        }
    };
    std::process::exit(code);
}

async fn run(cmd: &str, rest: &[String]) -> Result<i32, String> {
    match cmd {
        "fleet" => {
            let opts = fleet::FleetOptions::from_args(&Args::parse(rest, &["chaos"])?)?;
            let report = fleet::run(opts).await?;
            fleet::print_report(&report);
            Ok(if report.pass() { 0 } else { 1 })
        }
        "status" => {
            let args = Args::parse(rest, &["json"])?;
            let url = args
                .get("database-url")
                .map(str::to_owned)
                .or_else(|| std::env::var("DATABASE_URL").ok())
                .ok_or("give --database-url or set DATABASE_URL")?;
            let client = rendezvous_client::connect(&url).await.map_err(|e| e.to_string())?;
            let v = status::collect(&client).await?;
            if args.on("json") {
                println!("{}", serde_json::to_string_pretty(&v).unwrap());
            } else {
                status::print(&v);
            }
            Ok(0)
        }
        "host" => {
            host::run(host::HostPlan::from_args(&Args::parse(rest, &[])?)?).await?;
            Ok(0)
        }
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(0)
        }
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    }
}
