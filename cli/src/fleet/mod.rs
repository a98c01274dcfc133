//! `rendezvous fleet`: N hosts as separate OS processes against one database, optionally under
//! chaos, with live progress and a final report and verdict.
mod chaos;
mod controller;
mod hosts;
mod overload;
mod report;

use std::time::{Duration, Instant, SystemTime};

use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::ha::{Failover, Ha};
use crate::host::HostPlan;
use chaos::{chaos_step, Takeovers, Watcher};
use controller::{bounded, connect_controller, report_node, unix_ms, CALL_TIMEOUT, REPORT_TIMEOUT};
use hosts::{progress, restart_exited, spawn, wake, Host};
pub use overload::OverloadOutcome;
use overload::{OverloadAct, Server};
pub use report::{print_report, Report};

/// Fleet settings: the flags of `rendezvous fleet`.
#[derive(Debug, Clone, clap::Args)]
pub struct FleetOptions {
    /// Run against this database instead of a throwaway cluster; it needs pg_rendezvous
    /// installed, and the fleet creates four fleet_* bookkeeping tables in it
    #[arg(long = "database-url", value_name = "URL")]
    pub url: Option<String>,
    /// Number of hosts, each a separate OS process (2 to 64)
    #[arg(long, value_name = "N", default_value = "6", value_parser = parse_hosts)]
    pub hosts: usize,
    /// How long firings come due for, in seconds
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = parse_seconds)]
    pub duration: Duration,
    /// Number of recurring tasks (at least 1)
    #[arg(long, value_name = "N", default_value = "12", value_parser = clap::value_parser!(u32).range(1..))]
    pub tasks: u32,
    /// Period of each task, in seconds (1 to 59): task i runs on the 6-field cron
    /// `<i mod period>-59/<period> * * * * *`
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = clap::value_parser!(u32).range(1..=59))]
    pub period: u32,
    /// Kill, pause, cut off and mislead hosts while it runs
    #[arg(long)]
    pub chaos: bool,
    /// Seed for the chaos (the same seed picks the same acts)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Run on a throwaway highly available pair (a primary and a standby) and kill the primary
    /// midway: ENGINE `pg-auto-failover` (the default: a pg_auto_failover monitor and two
    /// synchronous nodes), `promote` (two plain clusters, synchronous; the controller promotes
    /// the standby) or `promote-async` (the same, asynchronous, the standby a second behind).
    /// The report adds how long the failover took and what it lost
    #[arg(long, value_enum, value_name = "ENGINE", num_args = 0..=1, default_missing_value = "pg-auto-failover", conflicts_with = "url")]
    pub ha: Option<crate::ha::Engine>,
    /// Where to write the timeline picture (SVG); default: the temp directory
    #[arg(long, value_name = "PATH")]
    pub timeline: Option<std::path::PathBuf>,
    /// Overload the database midway: its server's CPU capped at a tenth of a core for 30 s
    /// (half the run if that is shorter), with 4 CPU hogs beside the hosts, which run with the
    /// client's default options. The report adds how long the backlog took to drain once the
    /// cap was lifted and the connections the hosts opened meanwhile (a throwaway database only)
    #[arg(long, conflicts_with_all = ["url", "ha", "chaos"])]
    pub overload: bool,
    /// Load the machine: N busy processes beside the hosts for the whole run, each in a session
    /// of its own, as other programs' load would be (0 to 64). The report adds the longest
    /// start lateness, where a frozen host shows
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub hogs: u32,
}

/// How long `--overload` caps the database (at most half the run).
const OVERLOAD_FOR: Duration = Duration::from_secs(30);
/// The CPU hogs beside the hosts while it does.
const OVERLOAD_HOGS: usize = 4;

fn parse_hosts(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (2..=64).contains(&n) => Ok(n),
        _ => Err("give a number of hosts from 2 to 64".into()),
    }
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    s.parse::<u64>().map(Duration::from_secs).map_err(|_| "give a whole number of seconds, e.g. 60".into())
}

/// A directory removed when this goes out of scope.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the fleet; returns the report (the caller prints it and sets the exit status).
pub async fn run(o: FleetOptions) -> Result<Report, String> {
    // Ctrl-C (SIGINT), SIGTERM and SIGHUP stop the hosts and the throwaway cluster cleanly,
    // from the start: a signal while the cluster starts stops it once it is up.
    let (interrupt, mut interrupted) = tokio::sync::watch::channel(false);
    let interrupt = std::sync::Arc::new(interrupt);
    {
        use tokio::signal::unix::{signal, SignalKind};
        for kind in [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()] {
            let mut stream = signal(kind).map_err(|e| format!("cannot catch signals: {e}"))?;
            let interrupt = interrupt.clone();
            tokio::spawn(async move {
                if stream.recv().await.is_some() {
                    let _ = interrupt.send(true);
                }
            });
        }
    }
    // The database is started whole (a start cut short could leave a server behind).
    let (cluster, mut ha, url) = start_database(&o).await?;
    if *interrupted.borrow() {
        return Err("interrupted".into());
    }
    let server =
        cluster.as_ref().and_then(|c| Some(Server { pid: c.postmaster_pid()?, log: c.server_log() }));
    // From here a signal ends the run at whatever step it is, a call waiting on a primary that
    // cannot commit included: dropping the run kills its host processes (kill_on_drop) and
    // removes its ledgers; the database is stopped after it.
    tokio::select! {
        report = drive(o, url, ha.as_mut(), server) => report,
        _ = interrupted.wait_for(|stop| *stop) => Err("interrupted".into()),
    }
}

/// The throwaway database of a run (a cluster, or a pair with `--ha`), or none with `--database-url`.
async fn start_database(
    o: &FleetOptions,
) -> Result<(Option<crate::cluster::Cluster>, Option<Ha>, String), String> {
    Ok(match (&o.url, o.ha) {
        (Some(u), _) => (None, None, u.clone()),
        (None, Some(engine)) => {
            println!("starting a throwaway {} pair: a primary and a standby…", engine.name());
            let pair = Ha::start(engine).await?;
            let url = pair.url();
            println!("  database: {url}");
            (None, Some(pair), url)
        }
        (None, None) => {
            println!("starting a throwaway PostgreSQL (temp dir, own port)…");
            // Every session's start and end logged, with its application_name: an overloaded
            // run counts those the hosts opened and gave up.
            let settings = [
                ("fsync", "off"),
                ("log_connections", "on"),
                ("log_disconnections", "on"),
                ("log_line_prefix", "%m [%p] %a: "),
            ];
            let options = crate::cluster::ClusterOptions {
                settings: settings.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
                ..Default::default()
            };
            let cluster = crate::cluster::Cluster::start_with(&options).await?;
            println!(
                "  database: {}   (watch it: rendezvous status --database-url {})",
                cluster.url(),
                cluster.url()
            );
            let url = cluster.url();
            (Some(cluster), None, url)
        }
    })
}

/// The run itself, on a database that is up: hosts, chaos, the report.
async fn drive(
    o: FleetOptions,
    url: String,
    ha: Option<&mut Ha>,
    server: Option<Server>,
) -> Result<Report, String> {
    let mut admin = connect_controller(&url).await.map_err(|e| format!("cannot connect: {e}"))?;
    bounded(&mut admin, &url, CALL_TIMEOUT, async |admin| {
        rendezvous_client::check_extension(admin).await.map_err(|e| e.to_string())?;
        admin.batch_execute(crate::sql::FLEET_SCHEMA).await.map_err(|e| e.to_string())
    })
    .await?;
    let tag = format!("fleet{}", unix_ms(SystemTime::now()) % 100_000_000);
    // Each host's ledger of what the database acknowledged to it, outside the database;
    // removed however the run ends.
    let ledgers = std::env::temp_dir().join(format!("rendezvous-{tag}-ledgers"));
    std::fs::create_dir_all(&ledgers).map_err(|e| format!("{}: {e}", ledgers.display()))?;
    let _remove_ledgers = RemoveOnDrop(ledgers.clone());
    let end = SystemTime::now() + Duration::from_secs(2) + o.duration;
    let base = HostPlan {
        url: url.clone(),
        host_id: String::new(),
        tag: tag.clone(),
        tasks: o.tasks,
        period: o.period,
        end_ms: unix_ms(end),
        skew_ms: 0,
        ledger: None,
        client_defaults: o.overload,
        max_connections: Some(host_cap(&mut admin, &url, o.hosts).await?),
    };
    let due = schedule_tasks(&mut admin, &url, &base, end).await?;
    let example = base.task_specs().into_iter().last().map(|s| s.schedule).unwrap_or_default();
    println!(
        "fleet {tag}: {} hosts, {} cron tasks every {} s (\"{example}\", …), {:?} of firings ({due} due){}",
        o.hosts,
        o.tasks,
        o.period,
        o.duration,
        if o.chaos { ", with chaos" } else { "" }
    );
    let mut hosts: Vec<Host> = (0..o.hosts)
        .map(|i| Host {
            plan: HostPlan {
                host_id: format!("host-{i}"),
                ledger: Some(crate::ledger::path(&ledgers, &format!("host-{i}"))),
                ..base.clone()
            },
            child: None,
            stopped: false,
            partition: None,
            silent_since: None,
            started: Instant::now(),
            restart_at: None,
            quick_exits: 0,
        })
        .collect();
    let hogs = crate::overload::Hogs::start(o.hogs as usize)?;
    if hogs.count() > 0 {
        println!("  {} CPU hogs beside the hosts, each in a session of its own", hogs.count());
    }
    for h in &mut hosts {
        h.child = Some(spawn(&h.plan)?);
    }
    let mut report = Report { due, hogs: hogs.count(), ..Report::default() };
    let watcher = Watcher { url: url.clone(), group: base.group(), takeovers: Takeovers::default() };
    let failover =
        supervise(&o, &mut admin, &tag, end, &mut hosts, ha, server.as_ref(), &mut report, &watcher).await?;
    report.load_average = load_average();
    drop(hogs);
    report.database_failover = failover;
    report.takeovers = watcher.takeovers.lock().expect("takeovers lock").clone();
    // The fleet's tasks go with it (their pending firings too); the history stays.
    let specs = base.task_specs();
    let unscheduled = bounded(&mut admin, &url, CALL_TIMEOUT, async |admin| {
        for spec in &specs {
            rendezvous_client::task::unschedule_task(admin, &spec.task_id)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
    .await;
    if let Err(e) = unscheduled {
        println!("  controller: the fleet's tasks stay scheduled ({e})");
    }
    let hosts: Vec<String> = hosts.iter().map(|h| h.plan.host_id.clone()).collect();
    wrap_up(&o, &mut admin, &watcher, &tag, end, &ledgers, hosts, &mut report).await?;
    Ok(report)
}

/// Server sessions a fleet leaves to others: the controller's, the failover watcher's, the
/// report's, an HA engine's (pg_auto_failover's monitor and replication), an operator's psql.
const OTHER_SESSIONS: i32 = 12;

/// The most sessions each host may hold so that the fleet fits the server's `max_connections`
/// (less the superuser reservation and [`OTHER_SESSIONS`]), as docs/operations.md's connection
/// budget plans it: at most what a host can use (its handlers and the sessions beside them), at
/// least 6. Without it a failover's backlog grew every host's job pool until the promoted
/// server refused connections, on pg_auto_failover's nodes (max_connections 100) with 4 hosts.
async fn host_cap(admin: &mut Client, url: &str, hosts: usize) -> Result<usize, String> {
    let available: i32 = bounded(admin, url, CALL_TIMEOUT, async |admin| {
        let row =
            admin.query_one(crate::sql::FLEET_CONNECTIONS_AVAILABLE, &[]).await.map_err(|e| e.to_string())?;
        Ok(row.get::<_, i32>(0))
    })
    .await?;
    let per_host = (available - OTHER_SESSIONS).max(0) as usize / hosts.max(1);
    Ok(per_host.clamp(6, crate::host::HANDLERS + crate::host::SESSIONS_BESIDE_HANDLERS))
}

/// The machine's load average over the last minute, from /proc.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// The fleet's tasks, scheduled in the database (the hosts register the same specs again,
/// which changes nothing); returns how many firings are due up to the end, as the database's
/// schedules say.
async fn schedule_tasks(
    admin: &mut Client,
    url: &str,
    base: &HostPlan,
    end: SystemTime,
) -> Result<i64, String> {
    bounded(admin, url, CALL_TIMEOUT, async |admin| {
        let mut due = 0;
        for spec in base.task_specs() {
            let first =
                rendezvous_client::task::schedule_task(admin, &spec).await.map_err(|e| e.to_string())?;
            let times = rendezvous_client::task::fire_times(
                admin,
                &spec.schedule,
                &spec.time_zone,
                first - Duration::from_micros(1),
                end,
            )
            .await
            .map_err(|e| e.to_string())?;
            due += times.len() as i64;
        }
        Ok(due)
    })
    .await
}

/// Watches the hosts until every one has finished (or the deadline, 45 s past the end, stops
/// them): restarts those that exit early, prints progress every second, kills the primary
/// halfway with `--ha`, caps the database midway with `--overload`, and acts chaos every
/// 1.5–3.5 s with `--chaos`. Returns the database failover's outcome with `--ha`.
#[allow(clippy::too_many_arguments)]
async fn supervise(
    o: &FleetOptions,
    admin: &mut Client,
    tag: &str,
    end: SystemTime,
    hosts: &mut [Host],
    mut ha: Option<&mut Ha>,
    server: Option<&Server>,
    report: &mut Report,
    watcher: &Watcher,
) -> Result<Option<(&'static str, Result<Failover, String>)>, String> {
    let mut overload = match (o.overload, server) {
        (true, Some(server)) => Some(OverloadAct::new(server, end, o.duration)),
        (true, None) => return Err("--overload needs the throwaway database's server".into()),
        (false, _) => None,
    };
    let url = watcher.url.as_str();
    let mut rng = rand::rngs::StdRng::seed_from_u64(o.seed);
    let mut next_chaos = Instant::now() + Duration::from_secs(3);
    let mut next_progress = Instant::now();
    let deadline = end + Duration::from_secs(45);
    // With --ha, the primary dies halfway through the firings.
    let fail_at = end - o.duration / 2;
    let mut failover_watch = None;
    loop {
        restart_exited(hosts, end, report)?;
        // Past the end, no host stays paused or cut off: it must finish its part and stop.
        if SystemTime::now() >= end {
            wake(hosts, None);
        }
        let alive = hosts.iter().filter(|h| h.child.is_some()).count();
        if alive == 0 && SystemTime::now() >= end {
            break;
        }
        if SystemTime::now() > deadline {
            for h in hosts.iter_mut() {
                if let Some(c) = &mut h.child {
                    let _ = c.start_kill();
                }
            }
            println!("hosts did not finish by the deadline; stopping them");
            break;
        }
        if Instant::now() >= next_progress {
            next_progress += Duration::from_secs(1);
            let _ = bounded(admin, url, CALL_TIMEOUT, async |admin| {
                progress(admin, tag, &watcher.group, hosts, report.due, end, report).await;
                Ok(())
            })
            .await;
        }
        if let Some(pair) = ha.as_mut().filter(|_| failover_watch.is_none() && SystemTime::now() >= fail_at) {
            report.record_act("primary killed", "primary killed", crate::timeline::DATABASE);
            failover_watch = Some(kill_primary(pair, url, &watcher.group).await);
            // The controller follows the promoted node (an old primary left up and writable
            // would keep answering its reads with what it had at the cut).
            if let Ok(fresh) = connect_controller(url).await {
                *admin = fresh;
            }
        }
        if let Some(act) = overload.as_mut() {
            act.step(report)?;
        }
        if o.chaos && Instant::now() >= next_chaos && SystemTime::now() + Duration::from_secs(3) < end {
            next_chaos = Instant::now() + Duration::from_millis(rng.random_range(1500..3500));
            let step = async |admin: &Client| chaos_step(admin, tag, hosts, &mut rng, report, watcher).await;
            if let Err(e) = bounded(admin, url, CALL_TIMEOUT, step).await {
                println!("  chaos step skipped: {e}");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(act) = overload {
        report.overload = Some(act.finish(hosts, report)?);
    }
    let Some(pair) = &ha else { return Ok(None) };
    let watched = match failover_watch {
        Some(Ok(watch)) => watch.await.map_err(|e| format!("failover watch: {e}")),
        Some(Err(e)) => Err(e),
        None => Err("the run ended before the primary was killed".into()),
    };
    Ok(Some((pair.engine().name(), watched)))
}

/// Kills the primary of an `--ha` pair and has the standby take over; the failover is watched
/// (until the new primary takes writes and a leader holds on it) by the returned task.
async fn kill_primary(
    pair: &mut Ha,
    url: &str,
    group: &str,
) -> Result<tokio::task::JoinHandle<Failover>, String> {
    println!("  killing the primary ({})", pair.engine().name());
    let killed = Instant::now();
    match pair.kill_primary().await {
        Ok(()) => {
            let watch = crate::ha::watch_failover(
                controller::nodes(url),
                group.to_owned(),
                killed,
                Duration::from_secs(60),
            );
            let watch = tokio::spawn(watch);
            match pair.take_over() {
                Ok(()) => Ok(watch),
                Err(e) => Err(format!("promotion failed: {e}")),
            }
        }
        Err(e) => Err(format!("could not kill the primary: {e}")),
    }
}

/// The report's reads (bounded more generously: they scan the run's history), what the hosts'
/// ledgers say the database acknowledged, and the timeline picture.
#[allow(clippy::too_many_arguments)]
async fn wrap_up(
    o: &FleetOptions,
    admin: &mut Client,
    watcher: &Watcher,
    tag: &str,
    end: SystemTime,
    ledgers: &std::path::Path,
    hosts: Vec<String>,
    report: &mut Report,
) -> Result<(), String> {
    // Read on the node that won, where a failover left two writable ones (and said so).
    let (report_url, node) = report_node(&watcher.url).await;
    if report_url != watcher.url {
        *admin = connect_controller(&report_url)
            .await
            .map_err(|e| format!("cannot read the report on {node}: {e}"))?;
        report.read_on = Some(node);
    }
    let url = report_url.as_str();
    bounded(admin, url, REPORT_TIMEOUT, async |admin| report::finish(admin, tag, end, report).await).await?;
    let acknowledged = crate::ledger::read(ledgers)?;
    report.lost_after_failover = bounded(admin, url, REPORT_TIMEOUT, async |admin| {
        crate::ledger::lost(admin, &acknowledged, &watcher.group).await
    })
    .await?;
    report.split_brain_epochs = report.split_brain_epochs.max(crate::ledger::epochs_led_twice(&acknowledged));
    // The database counts what it kept; after a failover that lost commits, the ledgers know
    // more (the promoted database holds only one of two runs of a key).
    let twice = crate::ledger::twice(&acknowledged);
    report.executed_twice = report.executed_twice.max(twice.firings);
    report.keys_with_two_runs = report.keys_with_two_runs.max(twice.keys_with_two_runs);
    report.runs_executed_twice = report.runs_executed_twice.max(twice.runs);
    // Terms the hosts saw themselves win (epochs jump to (timeline - 1) << 32 at a promotion,
    // so the highest epoch does not count them).
    report.leader_terms =
        acknowledged.terms.iter().map(|(_, epoch)| epoch).collect::<std::collections::BTreeSet<_>>().len()
            as i64;
    let path = o
        .timeline
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("rendezvous-{tag}-timeline.svg")));
    let timeline = async |admin: &Client| report::timeline_data(admin, tag, hosts, report).await;
    report.timeline = match bounded(admin, url, REPORT_TIMEOUT, timeline).await {
        Ok(t) => crate::timeline::write(&path, &t).map(|()| path),
        Err(e) => Err(e),
    };
    Ok(())
}
