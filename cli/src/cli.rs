//! The command line of `rendezvous` (clap, derive API). Each subcommand's flags live beside
//! the code that uses them: [`FleetOptions`], [`HostPlan`], [`StatusArgs`], [`ClusterRun`].
use std::ffi::OsString;

use clap::{Args, Parser, Subcommand};

use crate::cluster::{parse_setting, ClusterOptions, DEFAULT_PG_CONFIG};
use crate::fleet::FleetOptions;
use crate::host::HostPlan;

/// `rendezvous`: coordinate a fleet of hosts through the PostgreSQL database they already run.
#[derive(Debug, Parser)]
#[command(
    name = "rendezvous",
    version,
    about = "Run a fleet of hosts coordinating through one PostgreSQL under chaos, show a \
             database's coordination status, or run a command against a throwaway cluster",
    after_help = format!(
        "PostgreSQL's programs (initdb, pg_ctl) come from `pg_config --bindir`, with pg_config \
         from $PG_CONFIG (default {DEFAULT_PG_CONFIG}).\n\
         Run `rendezvous <COMMAND> --help` for a command's flags."
    ),
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run N hosts as separate processes against one database, optionally under chaos, with
    /// live progress, a report and a PASS/FAIL verdict (exit status 1 on FAIL)
    // A later flag overrides an earlier one: scripts/demo.sh passes its defaults first and the
    // user's flags after them (`scripts/demo.sh --duration 30`).
    #[command(long_about = FLEET_ABOUT, args_override_self = true)]
    Fleet(FleetOptions),
    /// Show who is live, who leads each group at which epoch, in-flight and recent firings,
    /// and recent runs
    Status(StatusArgs),
    /// Serve a live dashboard of the fleet (hosts and their share of keys, leaders, tasks,
    /// firings, runs) on a local web page, read-only
    Dashboard(DashboardArgs),
    /// An operator's actions: pause, resume or remove a task, release a stuck firing claim,
    /// purge finished runs and firings, remove a host, ask a leader to step down (as a member
    /// of rendezvous_admin)
    Admin(AdminArgs),
    /// Check a database URL: connect as every rendezvous host would (TLS as libpq's sslmode
    /// says), and show the server, the TLS in use, the installed pg_rendezvous and what the role
    /// may do (exit status 1 if the extension is missing or another version or the role cannot
    /// run a host, 2 if no connection is made)
    Check(CheckArgs),
    /// Install the portable edition (SQL and PL/pgSQL only, for a server that loads no library)
    /// into a database, or upgrade it to this command's version, as the connected role (the
    /// database's owner), from the scripts that come with this command
    Install(InstallArgs),
    /// Throwaway PostgreSQL clusters (for scripts and tests)
    #[command(subcommand_required = true, arg_required_else_help = true)]
    Cluster {
        /// What to do with a cluster.
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// One fleet host (internal: `rendezvous fleet` starts these)
    #[command(hide = true)]
    Host(HostPlan),
}

impl Command {
    /// The subcommand's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Fleet(_) => "fleet",
            Command::Status(_) => "status",
            Command::Admin(_) => "admin",
            Command::Dashboard(_) => "dashboard",
            Command::Check(_) => "check",
            Command::Install(_) => "install",
            Command::Cluster { command: ClusterCommand::Run(_) } => "cluster run",
            Command::Host(_) => "host",
        }
    }
}

/// The flags of `rendezvous check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The database to check
    #[arg(long = "database-url", value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
    pub url: Option<String>,
}

/// The flags of `rendezvous install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The portable edition (the native one installs from a package for the server's major:
    /// docs/operations.md, Installing)
    #[arg(long, required = true)]
    pub portable: bool,
    /// The database to install into, as its owner
    #[arg(long = "database-url", value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
    pub url: Option<String>,
    /// The directory with pg_rendezvous-<version>-portable.sql and the upgrade scripts
    /// (default: $RENDEZVOUS_PORTABLE_DIR, else share/rendezvous/portable beside this command's
    /// bin/, where the packages put them)
    #[arg(long, value_name = "DIR")]
    pub scripts: Option<std::path::PathBuf>,
}

/// The flags of `rendezvous status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The database to read
    #[arg(long = "database-url", value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
    pub url: Option<String>,
    /// Print JSON (for scripts) instead of text
    #[arg(long, conflicts_with = "prometheus")]
    pub json: bool,
    /// Print Prometheus text exposition format (for a scraper or node_exporter's textfile
    /// collector) instead of text
    #[arg(long)]
    pub prometheus: bool,
    /// Refresh every SECONDS in place until interrupted (text output only)
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2",
          conflicts_with_all = ["json", "prometheus"], value_parser = parse_watch)]
    pub watch: Option<std::time::Duration>,
}

/// A `--watch` interval: a positive number of seconds.
fn parse_watch(s: &str) -> Result<std::time::Duration, String> {
    match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.1 => Ok(std::time::Duration::from_secs_f64(secs)),
        _ => Err(format!("give the refresh interval in seconds, 0.1 or more (got {s:?})")),
    }
}

/// The flags of `rendezvous dashboard`.
#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// The database to watch (a rendezvous_observer login is enough)
    #[arg(long = "database-url", value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
    pub url: Option<String>,
    /// Address to serve on
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// Another name the dashboard answers to, as `Host` headers carry it (NAME or NAME:PORT;
    /// repeatable). Requests for any other name are refused, so a web page cannot read the
    /// dashboard through a name it makes point here (DNS rebinding)
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
}

/// The flags of `rendezvous admin`.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The database (connect as a member of rendezvous_admin)
    #[arg(long = "database-url", value_name = "URL", env = "DATABASE_URL", hide_env_values = true)]
    pub url: Option<String>,
    /// What to do
    #[command(subcommand)]
    pub action: crate::admin::AdminAction,
}

/// The subcommands of `rendezvous cluster`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Run a command against a throwaway cluster, then stop and remove the cluster
    #[command(long_about = CLUSTER_RUN_ABOUT, after_help = CLUSTER_RUN_EXAMPLE)]
    Run(ClusterRun),
}

/// The flags of `rendezvous cluster run`.
#[derive(Debug, Args)]
pub struct ClusterRun {
    /// A server setting, written into postgresql.conf; repeatable (-c fsync=off -c work_mem=64MB).
    /// Defaults: max_connections=300, durability on
    #[arg(short = 'c', long = "set", value_name = "NAME=VALUE", value_parser = parse_setting)]
    pub settings: Vec<(String, String)>,
    /// Leave database postgres without pg_rendezvous (by default it gets `CREATE EXTENSION
    /// pg_rendezvous`, which needs the extension installed)
    #[arg(long)]
    pub no_extension: bool,
    /// The command to run, and its arguments (put `--` before it)
    #[arg(value_name = "COMMAND", required = true, trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

impl ClusterRun {
    /// The cluster these flags ask for.
    pub fn options(&self) -> ClusterOptions {
        ClusterOptions { settings: self.settings.clone(), extension: !self.no_extension }
    }
}

/// `rendezvous fleet --help`.
const FLEET_ABOUT: &str = "\
Run N hosts as separate OS processes against one database, optionally under chaos, with live \
progress, then a report and a PASS/FAIL verdict (exit status 1 on FAIL).

Without --database-url it starts a throwaway PostgreSQL in a temp dir on its own port (with \
pg_rendezvous installed: scripts/install.sh) and stops it afterwards; it prints the URL, for \
`rendezvous status` from another terminal.";

/// `rendezvous cluster run --help`.
const CLUSTER_RUN_ABOUT: &str = "\
Start a throwaway PostgreSQL cluster (a temp dir, a free port on 127.0.0.1, its unix socket in \
that dir, run as the postgres OS user when root), run COMMAND against it, then stop and remove \
the cluster however COMMAND ends. Exits with COMMAND's exit status (128 + N when signal N ended \
it, 127 when it is not found); SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to COMMAND.

COMMAND gets DATABASE_URL (database postgres), PGHOST=127.0.0.1, PGPORT, PGUSER=postgres, \
PGDATABASE=postgres, and RENDEZVOUS_CLUSTER_DIR: the cluster's directory, removed with it \
(server.log is there, and room for scratch files).";

/// The example under `rendezvous cluster run --help`.
const CLUSTER_RUN_EXAMPLE: &str = "Example: rendezvous cluster run -c fsync=off -- psql -c '\\dx'";

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("rendezvous").chain(args.iter().copied())).map(|c| c.command)
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Splits a shell command line into words ('…' and "…" quoting, no expansion).
    fn shell_words(line: &str) -> Vec<String> {
        let (mut words, mut cur, mut quote, mut in_word) = (Vec::new(), String::new(), None, false);
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => cur.push(c),
                (None, '\'' | '"') => (quote, in_word) = (Some(c), true),
                (None, c) if c.is_whitespace() => {
                    if in_word {
                        words.push(std::mem::take(&mut cur));
                    }
                    in_word = false;
                }
                (None, c) => (cur, in_word) = (cur + &c.to_string(), true),
            }
        }
        if in_word {
            words.push(cur);
        }
        words
    }

    /// Every `rendezvous …` command line the README and docs/ show (code lines and inline code,
    /// not synopses with placeholders) parses: a renamed or removed flag fails here.
    #[test]
    fn every_command_line_in_the_docs_parses() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let mut files = vec![format!("{root}/README.md")];
        for entry in std::fs::read_dir(format!("{root}/docs")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path.display().to_string());
            }
        }
        let subcommands = ["fleet", "status", "dashboard", "admin", "check", "install", "cluster"];
        let (mut checked, mut problems) = (0, Vec::new());
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for line in text.lines() {
                // A code line, or each complete inline code span of a prose line.
                let candidates: Vec<&str> = if line.starts_with("rendezvous ") {
                    vec![line.split(" # ").next().unwrap_or_default()]
                } else {
                    line.split('`').skip(1).step_by(2).filter(|c| c.starts_with("rendezvous ")).collect()
                };
                for command in candidates {
                    let words = shell_words(command);
                    let placeholder = ["[", "<", "...", "COMMAND", "…"].iter().any(|p| command.contains(p));
                    if words.len() < 2 || !subcommands.contains(&words[1].as_str()) || placeholder {
                        continue;
                    }
                    checked += 1;
                    // A command named in prose (`rendezvous cluster run`) may leave out what it
                    // requires; any flag or value it shows must exist and be valid.
                    if let Err(e) = Cli::try_parse_from(&words) {
                        use clap::error::ErrorKind::*;
                        let partial = [
                            DisplayHelp,
                            DisplayHelpOnMissingArgumentOrSubcommand,
                            MissingRequiredArgument,
                            MissingSubcommand,
                        ];
                        if !partial.contains(&e.kind()) {
                            problems.push(format!(
                                "{file}: `{command}`: {}",
                                e.to_string().lines().next().unwrap_or("")
                            ));
                        }
                    }
                }
            }
        }
        assert!(checked >= 10, "only {checked} command lines found in the docs");
        assert!(problems.is_empty(), "command lines in the docs that do not parse:\n{}", problems.join("\n"));
    }

    #[test]
    fn fleet_defaults_are_the_documented_ones() {
        let Command::Fleet(o) = parse(&["fleet"]).unwrap() else { panic!() };
        assert_eq!(o.url, None);
        assert_eq!(o.hosts, 6);
        assert_eq!(o.duration, Duration::from_secs(60));
        assert_eq!(o.tasks, 12);
        assert_eq!(o.period, 1);
        assert!(!o.chaos);
        assert_eq!(o.seed, 1);
        assert_eq!(o.ha, None);
    }

    #[test]
    fn ha_takes_an_optional_engine_and_not_a_database_url() {
        use crate::ha::Engine;
        for (args, engine) in [
            (&["fleet", "--ha"][..], Engine::PgAutoFailover),
            (&["fleet", "--ha", "--chaos"][..], Engine::PgAutoFailover),
            (&["fleet", "--ha=promote"][..], Engine::Promote),
            (&["fleet", "--ha", "promote-async"][..], Engine::PromoteAsync),
            (&["fleet", "--ha", "promote-partitioned"][..], Engine::PromotePartitioned),
            (&["fleet", "--ha", "promote-unfenced"][..], Engine::PromoteUnfenced),
        ] {
            let Command::Fleet(o) = parse(args).unwrap() else { panic!() };
            assert_eq!(o.ha, Some(engine), "{args:?}");
        }
        for (args, hint) in [
            (&["fleet", "--ha", "--database-url", "postgresql://x@h/db"][..], "cannot be used with"),
            (&["fleet", "--ha=patroni"][..], "pg-auto-failover"),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(hint), "{args:?}: {e}");
        }
    }

    #[test]
    fn fleet_flags_in_both_forms() {
        let Command::Fleet(o) = parse(&[
            "fleet",
            "--chaos",
            "--duration",
            "15",
            "--hosts=4",
            "--tasks",
            "8",
            "--period",
            "5",
            "--seed",
            "3",
            "--database-url",
            "postgresql://x@h/db",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (o.hosts, o.duration, o.tasks, o.period, o.chaos, o.seed),
            (4, Duration::from_secs(15), 8, 5, true, 3)
        );
        assert_eq!(o.url.as_deref(), Some("postgresql://x@h/db"));
    }

    #[test]
    fn a_later_fleet_flag_overrides_an_earlier_one() {
        let Command::Fleet(o) =
            parse(&["fleet", "--chaos", "--duration", "60", "--duration", "30", "--chaos"]).unwrap()
        else {
            panic!()
        };
        assert_eq!((o.duration, o.chaos), (Duration::from_secs(30), true));
    }

    #[test]
    fn bad_fleet_flags_say_what_to_do() {
        for (args, hint) in [
            (&["fleet", "--hosts", "1"][..], "from 2 to 64"),
            (&["fleet", "--hosts", "65"][..], "from 2 to 64"),
            (&["fleet", "--tasks", "0"][..], "1.."),
            (&["fleet", "--period", "0"][..], "1..=59"),
            (&["fleet", "--period", "60"][..], "1..=59"),
            (&["fleet", "--duration", "soon"][..], "whole number of seconds"),
            (&["fleet", "--hosts"][..], "a value is required"),
            (&["fleet", "--bogus"][..], "unexpected argument"),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(hint), "{args:?}: {e}");
        }
    }

    #[test]
    fn every_subcommand_answers_help() {
        for args in [
            &["--help"][..],
            &["fleet", "--help"],
            &["status", "--help"],
            &["cluster", "--help"],
            &["admin", "--help"],
            &["admin", "release", "--help"],
        ] {
            let e = parse(args).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{args:?}");
        }
        let e = parse(&["cluster", "run", "--help"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
        let help = Cli::command().render_help().to_string();
        assert!(
            help.contains("  fleet ") && help.contains("  cluster ") && !help.contains("  host "),
            "{help}"
        );
    }

    #[test]
    fn a_host_plan_survives_its_own_command_line() {
        let plan = HostPlan {
            url: "postgresql://postgres@127.0.0.1:5/postgres".into(),
            host_id: "host-3".into(),
            tag: "fleet42".into(),
            tasks: 8,
            period: 5,
            end_ms: 1_700_000_060_000,
            skew_ms: -170_000,
            ledger: Some("/tmp/fleet42/host-3.ledger".into()),
            client_defaults: false,
            max_connections: Some(21),
        };
        let other = HostPlan {
            skew_ms: 0,
            ledger: None,
            client_defaults: true,
            max_connections: None,
            ..plan.clone()
        };
        for plan in [plan, other] {
            let args = plan.to_args();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let Command::Host(back) = parse(&args).unwrap() else { panic!() };
            assert_eq!(back, plan);
        }
    }

    #[test]
    fn host_takes_a_negative_skew_as_two_arguments_too() {
        let Command::Host(p) =
            parse(&["host", "--database-url", "u", "--host-id", "h", "--tag", "t", "--skew-ms", "-1500"])
                .unwrap()
        else {
            panic!()
        };
        assert_eq!((p.skew_ms, p.tasks, p.period), (-1500, 10, 1));
        let e = parse(&["host", "--host-id", "h", "--tag", "t"]).unwrap_err().to_string();
        assert!(e.contains("--database-url"), "{e}");
    }

    #[test]
    fn cluster_run_takes_settings_and_a_command() {
        let Command::Cluster { command: ClusterCommand::Run(r) } = parse(&[
            "cluster",
            "run",
            "-c",
            "fsync=off",
            "--set",
            "work_mem=64MB",
            "--",
            "psql",
            "-c",
            "SELECT 1",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(r.settings, [("fsync".into(), "off".into()), ("work_mem".into(), "64MB".into())]);
        assert_eq!(r.command, ["psql", "-c", "SELECT 1"]);
        assert!(r.options().extension);
        let Command::Cluster { command: ClusterCommand::Run(r) } =
            parse(&["cluster", "run", "--no-extension", "sh", "-c", "exit 3"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(r.command, ["sh", "-c", "exit 3"]);
        assert!(!r.options().extension);
        for (args, hint) in [
            (&["cluster", "run"][..], "COMMAND"),
            (&["cluster", "run", "-c", "fsync", "--", "true"][..], "name=value"),
            (&["cluster", "run", "--bogus", "--", "true"][..], "unexpected argument"),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(hint), "{args:?}: {e}");
        }
    }
}
