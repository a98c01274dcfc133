//! `rendezvous fleet`: N hosts as separate OS processes against one database, optionally under
//! chaos, with live progress and a final report and verdict.
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::{Rng, SeedableRng};
use tokio::process::{Child, Command};
use tokio_postgres::Client;

use crate::ha::{Failover, Ha};
use crate::host::HostPlan;

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
}

fn parse_hosts(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (2..=64).contains(&n) => Ok(n),
        _ => Err("give a number of hosts from 2 to 64".into()),
    }
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    s.parse::<u64>().map(Duration::from_secs).map_err(|_| "give a whole number of seconds, e.g. 60".into())
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS fleet_starts (tag text, firing_key text, token bigint, host_id text, at timestamptz DEFAULT clock_timestamp());
ALTER TABLE fleet_starts ADD COLUMN IF NOT EXISTS fire_at timestamptz;
CREATE TABLE IF NOT EXISTS fleet_effects (tag text, firing_key text, token bigint, host_id text, run_id bigint, at timestamptz DEFAULT clock_timestamp());
ALTER TABLE fleet_effects ADD COLUMN IF NOT EXISTS fire_at timestamptz;
CREATE TABLE IF NOT EXISTS fleet_admissions (tag text, firing_key text, run_id bigint, created boolean);
CREATE TABLE IF NOT EXISTS fleet_leader_actions (tag text, epoch bigint, host_id text, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS fleet_run_starts (tag text, run_id bigint, token bigint, host_id text, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS fleet_run_effects (tag text, run_id bigint, token bigint, host_id text, at timestamptz DEFAULT clock_timestamp());
ALTER TABLE fleet_leader_actions ADD COLUMN IF NOT EXISTS action_id bigint;";

struct Host {
    plan: HostPlan,
    child: Option<Child>,
    /// Stopped with SIGSTOP (a hung host).
    stopped: bool,
    /// Cut off by a silent partition.
    partition: Option<crate::partition::Partition>,
    /// Since when it has been stopped or cut off.
    silent_since: Option<Instant>,
    /// When the process was last started.
    started: Instant,
    /// A restart waiting for its backoff to pass.
    restart_at: Option<Instant>,
    /// Exits in a row soon after starting: each doubles the wait before the next start.
    quick_exits: u32,
}

/// Before restarting a host that exited: 200 ms, doubling with each quick exit in a row, at
/// most 5 s, so a database that is away (a failover) does not meet a storm of restarts.
fn restart_backoff(quick_exits: u32) -> Duration {
    (Duration::from_millis(200) * 2u32.saturating_pow(quick_exits.min(5))).min(Duration::from_secs(5))
}

/// A directory removed when this goes out of scope.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How long the controller waits for one call: a primary cut off from its synchronous standby
/// never acknowledges a commit, and a dead network path never answers.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The controller's session name (in pg_stat_activity).
const CONTROLLER: &str = "rendezvous fleet controller";
/// How long the report's reads of the run's history may take.
const REPORT_TIMEOUT: Duration = Duration::from_secs(60);

/// A controller connection, within the call timeout.
async fn connect_controller(url: &str) -> Result<Client, String> {
    match tokio::time::timeout(CALL_TIMEOUT, rendezvous_client::connect_as(url, CONTROLLER)).await {
        Ok(connected) => connected.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {CALL_TIMEOUT:?}")),
    }
}

/// The controller's connection, made again if it was lost (a terminated backend, a failover).
async fn reconnected(admin: &mut Client, url: &str) {
    if admin.is_closed() {
        match connect_controller(url).await {
            Ok(c) => *admin = c,
            Err(e) => println!("  controller: cannot reconnect yet ({e})"),
        }
    }
}

/// One controller call on its connection (made again first if it was lost), given up after
/// `limit`: the connection is then dropped, so the next call goes through the URL again (to
/// whichever server accepts writes).
async fn bounded<T>(
    admin: &mut Client,
    url: &str,
    limit: Duration,
    call: impl AsyncFnOnce(&Client) -> Result<T, String>,
) -> Result<T, String> {
    reconnected(admin, url).await;
    let answer = tokio::time::timeout(limit, call(admin)).await;
    match answer {
        Ok(result) => result,
        Err(_) => {
            // A fresh connection replaces the one that hangs; if none can be made now, the
            // next call tries again.
            if let Ok(fresh) = connect_controller(url).await {
                *admin = fresh;
            }
            Err(format!("no answer within {limit:?}"))
        }
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

fn spawn(plan: &HostPlan) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Command::new(exe)
        .args(plan.to_args())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start a host process: {e}"))
}

fn signal(child: &Child, sig: &str) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]).status();
    }
}

/// The final figures.
#[derive(Debug)]
pub struct Report {
    /// Firings that came due.
    pub due: i64,
    /// Firings completed.
    pub completed: i64,
    /// Firings whose effect (written with their completion) exists more than once.
    pub executed_twice: i64,
    /// Firings never completed.
    pub lost: i64,
    /// Firings started again after a holder died or stalled past its lease.
    pub rerun_after_takeover: i64,
    /// Firing starts before the firing was due by the database clock (hosts run skewed clocks).
    pub started_early: i64,
    /// Start lateness against the due instant (database clock), median and 99th percentile,
    /// of each firing's first start.
    pub lateness: Option<(Duration, Duration)>,
    /// Firings whose attempt failed and that a retry completed.
    pub retried: i64,
    /// Firings failed for good (max attempts reached).
    pub failed: i64,
    /// Runs admitted (one per firing key expected).
    pub runs: i64,
    /// spawn_run calls that returned an existing run.
    pub deduplicated: i64,
    /// Firing keys with more than one run.
    pub keys_with_two_runs: i64,
    /// Runs executed to success (their effect written with the completion).
    pub runs_executed: i64,
    /// Runs whose effect was written twice: must be 0.
    pub runs_executed_twice: i64,
    /// Runs still pending or running at the end: must be 0.
    pub runs_unfinished: i64,
    /// Runs that a retry completed after a failed attempt.
    pub runs_retried: i64,
    /// Runs failed for good.
    pub runs_failed: i64,
    /// Runs started again after their holder was lost (a takeover; fenced).
    pub runs_taken_over: i64,
    /// Pickup latency, admission to first start (database clock), p50 and p99.
    pub run_pickup: Option<(Duration, Duration)>,
    /// Leader epochs that saw leader actions from two hosts, or that two hosts' ledgers say
    /// they led in.
    pub split_brain_epochs: i64,
    /// What the database acknowledged to a host (the hosts' ledgers, kept outside it) and no
    /// longer has: lost in a failover.
    pub lost_after_failover: crate::ledger::Lost,
    /// Leadership terms won during the run (distinct epochs in the hosts' ledgers).
    pub leader_terms: i64,
    /// Failover latencies measured after killing the leader.
    pub failovers: Vec<Duration>,
    /// Per chaos fault and kind of work (leader, firing, run): the time from the fault to
    /// what the faulted host held being held again by a live host, one entry per piece.
    pub takeovers: BTreeMap<(&'static str, &'static str), Vec<Duration>>,
    /// Chaos events by kind.
    pub chaos: BTreeMap<&'static str, u32>,
    /// Each chaos act: when, a short name, on which host (for the timeline).
    pub chaos_acts: Vec<(SystemTime, &'static str, String)>,
    /// Where the timeline picture was written, or why it was not.
    pub timeline: Result<std::path::PathBuf, String>,
    /// With `--ha`: the engine, and how long its failover took (or why it did not happen).
    pub database_failover: Option<(&'static str, Result<Failover, String>)>,
}

impl Default for Report {
    fn default() -> Self {
        Report {
            due: 0,
            completed: 0,
            executed_twice: 0,
            lost: 0,
            rerun_after_takeover: 0,
            started_early: 0,
            lateness: None,
            retried: 0,
            failed: 0,
            runs: 0,
            deduplicated: 0,
            keys_with_two_runs: 0,
            runs_executed: 0,
            runs_executed_twice: 0,
            runs_unfinished: 0,
            runs_retried: 0,
            runs_failed: 0,
            runs_taken_over: 0,
            run_pickup: None,
            split_brain_epochs: 0,
            lost_after_failover: crate::ledger::Lost::default(),
            leader_terms: 0,
            failovers: Vec::new(),
            takeovers: BTreeMap::new(),
            chaos: BTreeMap::new(),
            chaos_acts: Vec::new(),
            timeline: Err("not drawn".into()),
            database_failover: None,
        }
    }
}

impl Report {
    /// Counts a chaos act of `kind` and places it, as `label`, on `host`'s lane of the
    /// timeline.
    fn record_act(&mut self, kind: &'static str, label: &'static str, host: &str) {
        *self.chaos.entry(kind).or_default() += 1;
        self.chaos_acts.push((SystemTime::now(), label, host.to_owned()));
    }

    /// True when every guarantee held.
    pub fn pass(&self) -> bool {
        self.executed_twice == 0
            && self.lost == 0
            && self.failed == 0
            && self.keys_with_two_runs == 0
            && self.split_brain_epochs == 0
            && self.lost_after_failover.total() == 0
            && self.completed == self.due
            && self.runs == self.due
            && self.runs_executed == self.runs
            && self.runs_executed_twice == 0
            && self.runs_unfinished == 0
            && self.runs_failed == 0
            && self.started_early == 0
            && self
                .database_failover
                .as_ref()
                .is_none_or(|(_, f)| f.as_ref().is_ok_and(|f| f.read_write.is_some() && f.leader.is_some()))
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
    let (_cluster, mut ha, url) = start_database(&o).await?;
    if *interrupted.borrow() {
        return Err("interrupted".into());
    }
    // From here a signal ends the run at whatever step it is, a call waiting on a primary that
    // cannot commit included: dropping the run kills its host processes (kill_on_drop) and
    // removes its ledgers; the database is stopped after it.
    tokio::select! {
        report = drive(o, url, ha.as_mut()) => report,
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
            let cluster = crate::cluster::Cluster::start().await?;
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
async fn drive(o: FleetOptions, url: String, mut ha: Option<&mut Ha>) -> Result<Report, String> {
    let mut admin = connect_controller(&url).await.map_err(|e| format!("cannot connect: {e}"))?;
    bounded(&mut admin, &url, CALL_TIMEOUT, async |admin| {
        rendezvous_client::check_extension(admin).await.map_err(|e| e.to_string())?;
        admin.batch_execute(SCHEMA).await.map_err(|e| e.to_string())
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
    };
    // The tasks, scheduled in the database (the hosts register the same specs again, which
    // changes nothing); what is due is what the database's schedules say up to the end.
    let due = bounded(&mut admin, &url, CALL_TIMEOUT, async |admin| {
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
    .await?;
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
    for h in &mut hosts {
        h.child = Some(spawn(&h.plan)?);
    }
    let mut report = Report { due, ..Report::default() };
    let mut rng = rand::rngs::StdRng::seed_from_u64(o.seed);
    let mut next_chaos = Instant::now() + Duration::from_secs(3);
    let mut next_progress = Instant::now();
    let group = base.group();
    let deadline = end + Duration::from_secs(45);
    // With --ha, the primary dies halfway through the firings.
    let fail_at = end - o.duration / 2;
    let mut failover_watch = None;
    let takeovers = Takeovers::default();
    loop {
        // A host process that exits early (its sessions were cut and it gave up) is restarted,
        // as a supervisor would; one that exits after the end has finished.
        for h in &mut hosts {
            if let Some(c) = &mut h.child {
                if let Ok(Some(status)) = c.try_wait() {
                    h.child = None;
                    h.stopped = false;
                    if !status.success() && SystemTime::now() < end {
                        h.quick_exits =
                            if h.started.elapsed() < Duration::from_secs(5) { h.quick_exits + 1 } else { 0 };
                        h.restart_at = Some(Instant::now() + restart_backoff(h.quick_exits));
                    }
                }
            }
            if h.child.is_none() && h.restart_at.is_some_and(|at| Instant::now() >= at) {
                h.restart_at = None;
                if SystemTime::now() < end {
                    h.child = Some(spawn(&h.plan)?);
                    h.started = Instant::now();
                    report.record_act("restart after a host process exited", "restart", &h.plan.host_id);
                }
            }
        }
        // Past the end, no host stays paused or cut off: it must finish its part and stop.
        if SystemTime::now() >= end {
            wake(&mut hosts, None);
        }
        let alive = hosts.iter().filter(|h| h.child.is_some()).count();
        if alive == 0 && SystemTime::now() >= end {
            break;
        }
        if SystemTime::now() > deadline {
            for h in &mut hosts {
                if let Some(c) = &mut h.child {
                    let _ = c.start_kill();
                }
            }
            println!("hosts did not finish by the deadline; stopping them");
            break;
        }
        if Instant::now() >= next_progress {
            next_progress += Duration::from_secs(1);
            let _ = bounded(&mut admin, &url, CALL_TIMEOUT, async |admin| {
                progress(admin, &tag, &group, &hosts, due, end, &report).await;
                Ok(())
            })
            .await;
        }
        if let Some(pair) = ha.as_mut().filter(|_| failover_watch.is_none() && SystemTime::now() >= fail_at) {
            println!("  killing the primary ({})", pair.engine().name());
            let killed = Instant::now();
            report.record_act("primary killed", "primary killed", crate::timeline::DATABASE);
            let watch = match pair.kill_primary().await {
                Ok(()) => {
                    let watch = crate::ha::watch_failover(
                        url.clone(),
                        group.clone(),
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
            };
            failover_watch = Some(watch);
        }
        if o.chaos && Instant::now() >= next_chaos && SystemTime::now() + Duration::from_secs(3) < end {
            next_chaos = Instant::now() + Duration::from_millis(rng.random_range(1500..3500));
            let step = async |admin: &Client| {
                chaos_step(admin, &url, &group, &tag, &mut hosts, &mut rng, &mut report, &takeovers).await
            };
            if let Err(e) = bounded(&mut admin, &url, CALL_TIMEOUT, step).await {
                println!("  chaos step skipped: {e}");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(pair) = &ha {
        let watched = match failover_watch {
            Some(Ok(watch)) => watch.await.map_err(|e| format!("failover watch: {e}")),
            Some(Err(e)) => Err(e),
            None => Err("the run ended before the primary was killed".into()),
        };
        report.database_failover = Some((pair.engine().name(), watched));
    }
    report.takeovers = takeovers.lock().expect("takeovers lock").clone();
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
    // The report's reads: bounded more generously (they scan the run's history).
    bounded(&mut admin, &url, REPORT_TIMEOUT, async |admin| finish(admin, &tag, end, &mut report).await)
        .await?;
    let acknowledged = crate::ledger::read(&ledgers)?;
    report.lost_after_failover = bounded(&mut admin, &url, REPORT_TIMEOUT, async |admin| {
        crate::ledger::lost(admin, &acknowledged, &group).await
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
    let hosts: Vec<String> = hosts.iter().map(|h| h.plan.host_id.clone()).collect();
    let timeline = async |admin: &Client| timeline_data(admin, &tag, hosts, &report).await;
    report.timeline = match bounded(&mut admin, &url, REPORT_TIMEOUT, timeline).await {
        Ok(t) => crate::timeline::write(&path, &t).map(|()| path),
        Err(e) => Err(e),
    };
    Ok(report)
}

async fn progress(
    admin: &Client,
    tag: &str,
    group: &str,
    hosts: &[Host],
    due: i64,
    end: SystemTime,
    report: &Report,
) {
    let done: i64 = admin
        .query_one(
            "SELECT count(*) FROM rendezvous.status_firings
              WHERE task_id LIKE $1 AND completed_at IS NOT NULL AND fire_at <= $2",
            &[&format!("{tag}-%"), &end],
        )
        .await
        .map(|r| r.get(0))
        .unwrap_or(-1);
    let leader = rendezvous_client::leader::leader(admin, group).await.ok();
    let up = hosts.iter().filter(|h| h.child.is_some() && !h.stopped).count();
    let paused = hosts.iter().filter(|h| h.stopped).count();
    println!(
        "  hosts up {up}/{} (paused {paused}) | leader {} epoch {} | firings done {done}/{due} | failovers {}",
        hosts.len(),
        leader.as_ref().and_then(|l| l.leader.clone()).unwrap_or_else(|| "-".into()),
        leader.as_ref().map(|l| l.epoch).unwrap_or(0),
        report.failovers.len(),
    );
}

/// How long a hung host stays stopped, and a partitioned one cut off: longer than every lease
/// the hosts use (tasks 2 s, runs 3 s, a leader's 1 s plus the next candidate's 1 s grace), so
/// its work is taken over while it is silent.
const SILENT_FOR: Duration = Duration::from_secs(4);

/// Takeover times by fault and kind of work (leader, firing, run), filled by watchers.
type Takeovers = std::sync::Arc<std::sync::Mutex<BTreeMap<(&'static str, &'static str), Vec<Duration>>>>;

/// What a host holds when it is faulted: its group's epoch if it leads, its firings' keys and
/// tokens, its runs' ids and attempts.
#[derive(Debug, Default)]
struct Held {
    leader_epoch: Option<i64>,
    firings: Vec<(String, i64)>,
    runs: Vec<(i64, i32)>,
}

async fn held_by(
    admin: &Client,
    host: &str,
    leader: &rendezvous_client::leader::CurrentLeader,
) -> Result<Held, String> {
    let e = |e: tokio_postgres::Error| e.to_string();
    let firings = admin
        .query(
            "SELECT firing_key, token FROM rendezvous.status_firings WHERE holder = $1 AND state = 'running'",
            &[&host],
        )
        .await
        .map_err(e)?;
    let runs = admin
        .query(
            "SELECT run_id, attempts FROM rendezvous.status_runs WHERE holder = $1 AND state = 'running'",
            &[&host],
        )
        .await
        .map_err(e)?;
    Ok(Held {
        leader_epoch: (leader.leader.as_deref() == Some(host)).then_some(leader.epoch),
        firings: firings.iter().map(|r| (r.get(0), r.get(1))).collect(),
        runs: runs.iter().map(|r| (r.get(0), r.get(1))).collect(),
    })
}

/// Watches what a faulted host held until each piece is held again (a new term; a firing
/// claimed with a higher token or completed; a run claimed again or finished), and records
/// the time from the fault, per kind. Gives up after a minute.
async fn watch_takeover(
    url: String,
    group: String,
    fault: &'static str,
    mut held: Held,
    at: Instant,
    into: Takeovers,
) {
    let Ok(Ok(c)) = tokio::time::timeout(
        CALL_TIMEOUT,
        rendezvous_client::connect_as(url.as_str(), "rendezvous fleet watcher"),
    )
    .await
    else {
        return;
    };
    let record = |kind: &'static str, n: usize| {
        let mut t = into.lock().expect("takeovers lock");
        t.entry((fault, kind)).or_default().extend(std::iter::repeat_n(at.elapsed(), n));
    };
    while at.elapsed() < Duration::from_secs(60)
        && (held.leader_epoch.is_some() || !held.firings.is_empty() || !held.runs.is_empty())
    {
        if let Some(epoch) = held.leader_epoch {
            if let Ok(Ok(l)) =
                tokio::time::timeout(CALL_TIMEOUT, rendezvous_client::leader::leader(&c, &group)).await
            {
                if l.epoch > epoch && l.leader.is_some() {
                    record("leader", 1);
                    held.leader_epoch = None;
                }
            }
        }
        if !held.firings.is_empty() {
            let (keys, tokens): (Vec<&str>, Vec<i64>) =
                held.firings.iter().map(|(k, t)| (k.as_str(), *t)).unzip();
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&keys, &tokens];
            let again = c.query(
                "SELECT f.firing_key FROM rendezvous.status_firings f
                   JOIN unnest($1::text[], $2::int8[]) AS h(key, token) ON h.key = f.firing_key
                  WHERE f.completed_at IS NOT NULL OR f.token > h.token",
                &params,
            );
            if let Ok(Ok(rows)) = tokio::time::timeout(CALL_TIMEOUT, again).await {
                let done: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
                record("firing", done.len());
                held.firings.retain(|(k, _)| !done.contains(k));
            }
        }
        if !held.runs.is_empty() {
            let (ids, attempts): (Vec<i64>, Vec<i32>) = held.runs.iter().copied().unzip();
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&ids, &attempts];
            let again = c.query(
                "SELECT r.run_id FROM rendezvous.status_runs r
                   JOIN unnest($1::int8[], $2::int4[]) AS h(run_id, attempts) ON h.run_id = r.run_id
                  WHERE r.state IN ('succeeded', 'failed', 'cancelled') OR r.attempts > h.attempts",
                &params,
            );
            if let Ok(Ok(rows)) = tokio::time::timeout(CALL_TIMEOUT, again).await {
                let done: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
                record("run", done.len());
                held.runs.retain(|(id, _)| !done.contains(id));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ends every pause and partition (at the end of the run, or before the next act once a host
/// has been silent for [`SILENT_FOR`]).
fn wake(hosts: &mut [Host], only_after: Option<Duration>) {
    for h in hosts.iter_mut() {
        if h.silent_since.is_some_and(|t| only_after.is_none_or(|d| t.elapsed() >= d)) {
            if h.stopped {
                if let Some(c) = &h.child {
                    signal(c, "CONT");
                }
                h.stopped = false;
            }
            if let Some(p) = h.partition.take() {
                p.heal();
            }
            h.silent_since = None;
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn chaos_step(
    admin: &Client,
    url: &str,
    group: &str,
    tag: &str,
    hosts: &mut [Host],
    rng: &mut impl Rng,
    report: &mut Report,
    takeovers: &Takeovers,
) -> Result<(), String> {
    // Wake anyone silent long enough before picking the next act.
    wake(hosts, Some(SILENT_FOR));
    let leader_now = rendezvous_client::leader::leader(admin, group).await.map_err(|e| e.to_string())?;
    // The next act's target: a host that is running and not silent already.
    let candidates: Vec<usize> =
        (0..hosts.len()).filter(|&i| hosts[i].child.is_some() && hosts[i].silent_since.is_none()).collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let i = candidates[rng.random_range(0..candidates.len())];
    let act = match rng.random_range(0..5) {
        4 if !crate::partition::available() => 2,
        a => a,
    };
    // What the target holds, watched from the fault on until it is held again.
    let watch = |fault: &'static str, held: Held| {
        tokio::spawn(watch_takeover(
            url.to_owned(),
            group.to_owned(),
            fault,
            held,
            Instant::now(),
            takeovers.clone(),
        ));
    };
    match act {
        0 => {
            // SIGKILL (prefer the leader, to measure failover), then restart it, misled.
            let target = leader_now
                .leader
                .as_ref()
                .and_then(|l| candidates.iter().copied().find(|&h| &hosts[h].plan.host_id == l))
                .filter(|_| rng.random_bool(0.6))
                .unwrap_or(i);
            let was_leader = leader_now.leader.as_deref() == Some(hosts[target].plan.host_id.as_str());
            let held = held_by(admin, &hosts[target].plan.host_id, &leader_now).await?;
            if let Some(c) = &mut hosts[target].child {
                let killed = Instant::now();
                let _ = c.start_kill();
                watch("SIGKILL", held);
                let _ = c.wait().await;
                report.record_act("SIGKILL", "SIGKILL, back with its clock off", &hosts[target].plan.host_id);
                if was_leader {
                    let before = leader_now.epoch;
                    while killed.elapsed() < Duration::from_secs(10) {
                        let now = rendezvous_client::leader::leader(admin, group)
                            .await
                            .map_err(|e| e.to_string())?;
                        if now.epoch > before && now.leader.is_some() {
                            report.failovers.push(killed.elapsed());
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
            }
            // Back with a clock minutes off: it asks early or late, the database decides.
            let h = &mut hosts[target];
            h.plan.skew_ms = rng.random_range(-180_000..180_000);
            h.child = Some(spawn(&h.plan)?);
            h.started = Instant::now();
            *report.chaos.entry("restart with a clock ±3 min off").or_default() += 1;
        }
        1 => {
            // SIGSTOP: a hung host, stopped longer than its leases; SIGCONT at a later step.
            let held = held_by(admin, &hosts[i].plan.host_id, &leader_now).await?;
            if let Some(c) = &hosts[i].child {
                signal(c, "STOP");
                watch("SIGSTOP (hung host)", held);
                hosts[i].stopped = true;
                hosts[i].silent_since = Some(Instant::now());
                report.record_act("SIGSTOP (hung host)", "SIGSTOP", &hosts[i].plan.host_id);
            }
        }
        4 => {
            // A silent partition: every packet the host sends is dropped, without a reset; its
            // sessions live on in the server, and it reconnects in vain until healed.
            let held = held_by(admin, &hosts[i].plan.host_id, &leader_now).await?;
            let pid = hosts[i].child.as_ref().and_then(|c| c.id());
            if let Some(pid) = pid {
                let name = format!("rendezvous-{tag}-{}", hosts[i].plan.host_id);
                let cut = crate::partition::Partition::cut(pid, &name)?;
                watch("silent partition", held);
                hosts[i].partition = Some(cut);
                hosts[i].silent_since = Some(Instant::now());
                report.record_act("silent partition", "partitioned", &hosts[i].plan.host_id);
            }
        }
        _ => {
            // Terminate the host's backends: its election and scheduler sessions.
            let held = held_by(admin, &hosts[i].plan.host_id, &leader_now).await?;
            let pattern = format!("rendezvous % {}", hosts[i].plan.host_id);
            admin
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1",
                    &[&pattern],
                )
                .await
                .map_err(|e| e.to_string())?;
            watch("pg_terminate_backend", held);
            report.record_act("pg_terminate_backend", "backends terminated", &hosts[i].plan.host_id);
        }
    }
    Ok(())
}

/// The timeline's data: the fleet's starts and completions, leader actions, and chaos acts.
async fn timeline_data(
    admin: &Client,
    tag: &str,
    hosts: Vec<String>,
    report: &Report,
) -> Result<crate::timeline::Timeline, String> {
    let e = |e: tokio_postgres::Error| e.to_string();
    let runs = admin
        .query(
            // Ran again: an earlier start of the same firing had a lower token (tokens start
            // at (timeline - 1) << 32 after a promotion, so not "token > 1"), or it failed.
            "SELECT s.host_id, s.at, e.at,
                    EXISTS (SELECT 1 FROM fleet_starts p
                             WHERE p.tag = s.tag AND p.firing_key = s.firing_key AND p.token < s.token)
                    OR f.failures > 0
               FROM fleet_starts s
               LEFT JOIN fleet_effects e ON e.tag = s.tag AND e.firing_key = s.firing_key AND e.token = s.token
               LEFT JOIN rendezvous.status_firings f ON f.firing_key = s.firing_key
              WHERE s.tag = $1",
            &[&tag],
        )
        .await
        .map_err(e)?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get::<_, Option<bool>>(3).unwrap_or(false)))
        .collect::<Vec<(String, SystemTime, Option<SystemTime>, bool)>>();
    let terms = admin
        .query(
            "SELECT host_id, epoch, min(at), max(at) FROM fleet_leader_actions WHERE tag = $1 GROUP BY 1, 2",
            &[&tag],
        )
        .await
        .map_err(e)?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let start = runs.iter().map(|r| r.1).chain(report.chaos_acts.iter().map(|c| c.0)).min();
    Ok(crate::timeline::Timeline { start, hosts, runs, terms, chaos: report.chaos_acts.clone() })
}

async fn finish(admin: &Client, tag: &str, end: SystemTime, r: &mut Report) -> Result<(), String> {
    // Only the fleet's window counts: firings due up to the end (a host may have started one
    // due after it before stopping). $1 is the tag, $2 the end, $3 the fleet's task ids.
    let like = format!("{tag}-task-%");
    let all: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&tag, &end, &like];
    let count = |sql: &'static str| async move {
        admin.query_one(sql, &all).await.map(|row| row.get::<_, i64>(0)).map_err(|e| e.to_string())
    };
    let firings = |filter: &'static str| {
        let sql = format!(
            "SELECT count(*) FROM rendezvous.status_firings WHERE $1::text IS NOT NULL AND task_id LIKE $3 AND fire_at <= $2 AND {filter}"
        );
        async move { admin.query_one(&sql, &all).await.map(|row| row.get::<_, i64>(0)).map_err(|e| e.to_string()) }
    };
    r.completed = firings("completed_at IS NOT NULL").await?;
    r.lost = r.due - r.completed;
    r.retried = firings("failures > 0 AND completed_at IS NOT NULL").await?;
    r.failed = firings("state = 'failed'").await?;
    r.executed_twice = count(
        "SELECT count(*) FROM (SELECT e.firing_key FROM fleet_effects e
           JOIN rendezvous.status_firings f ON f.firing_key = e.firing_key AND f.task_id LIKE $3
          WHERE e.tag = $1 AND f.fire_at <= $2 GROUP BY 1 HAVING count(*) > 1) x",
    )
    .await?;
    r.rerun_after_takeover = count(
        "SELECT count(*) FROM (SELECT s.firing_key FROM fleet_starts s
           JOIN rendezvous.status_firings f ON f.firing_key = s.firing_key AND f.task_id LIKE $3
          WHERE s.tag = $1 AND f.fire_at <= $2 AND f.failures = 0 GROUP BY 1 HAVING count(DISTINCT s.token) > 1) x",
    )
    .await?;
    r.started_early = count(
        "SELECT count(*) FROM fleet_starts s JOIN rendezvous.status_firings f ON f.firing_key = s.firing_key
          WHERE s.tag = $1 AND s.at < f.fire_at AND f.fire_at <= $2 AND f.task_id LIKE $3",
    )
    .await?;
    r.runs = count(
        "SELECT count(*) FROM rendezvous.status_runs r JOIN rendezvous.status_firings f ON f.firing_key = r.dispatch_key
          WHERE r.tenant_id = $1 AND f.fire_at <= $2 AND f.task_id LIKE $3",
    )
    .await?;
    r.deduplicated = count(
        "SELECT count(*) FROM fleet_admissions a JOIN rendezvous.status_firings f ON f.firing_key = a.firing_key
          WHERE a.tag = $1 AND NOT a.created AND f.fire_at <= $2 AND f.task_id LIKE $3",
    )
    .await?;
    r.keys_with_two_runs = count(
        "SELECT count(*) FROM (SELECT r.dispatch_key FROM rendezvous.status_runs r
           JOIN rendezvous.status_firings f ON f.firing_key = r.dispatch_key AND f.task_id LIKE $3
          WHERE r.tenant_id = $1 AND f.fire_at <= $2 GROUP BY 1 HAVING count(*) > 1) x",
    )
    .await?;
    // The runs the firings due up to the end admitted, executed by whichever host claimed them.
    let runs = admin
        .query_one(
            "SELECT count(*) FILTER (WHERE r.state = 'succeeded'),
                    count(*) FILTER (WHERE r.state IN ('pending', 'running')),
                    count(*) FILTER (WHERE r.state = 'failed'),
                    count(*) FILTER (WHERE r.state = 'succeeded' AND r.attempts > 1
                                       AND r.run_id IN (SELECT run_id FROM fleet_run_starts WHERE tag = $1
                                                         GROUP BY 1 HAVING count(*) > 1))
               FROM rendezvous.status_runs r JOIN rendezvous.status_firings f ON f.firing_key = r.dispatch_key
              WHERE r.tenant_id = $1 AND f.fire_at <= $2 AND f.task_id LIKE $3",
            &all,
        )
        .await
        .map_err(|e| e.to_string())?;
    (r.runs_executed, r.runs_unfinished, r.runs_failed, r.runs_retried) =
        (runs.get(0), runs.get(1), runs.get(2), runs.get(3));
    r.runs_executed_twice = admin
        .query_one(
            "SELECT count(*) FROM (SELECT run_id FROM fleet_run_effects WHERE tag = $1 GROUP BY 1 HAVING count(*) > 1) x",
            &[&tag],
        )
        .await
        .map(|row| row.get::<_, i64>(0))
        .map_err(|e| e.to_string())?;
    // Started again with a higher token although no attempt of it failed: a takeover.
    r.runs_taken_over = admin
        .query_one(
            "SELECT count(*) FROM (SELECT s.run_id FROM fleet_run_starts s WHERE s.tag = $1
              GROUP BY 1 HAVING count(DISTINCT s.token) > 1 AND s.run_id % 9 <> 0) x",
            &[&tag],
        )
        .await
        .map(|row| row.get::<_, i64>(0))
        .map_err(|e| e.to_string())?;
    let pickup = admin
        .query_one(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l), percentile_cont(0.99) WITHIN GROUP (ORDER BY l)
               FROM (SELECT extract(epoch FROM min(s.at) - r.created_at)::float8 AS l
                       FROM fleet_run_starts s JOIN rendezvous.status_runs r ON r.run_id = s.run_id
                      WHERE s.tag = $1 GROUP BY s.run_id, r.created_at) x",
            &[&tag],
        )
        .await
        .map_err(|e| e.to_string())?;
    if let (Some(p50), Some(p99)) = (pickup.get::<_, Option<f64>>(0), pickup.get::<_, Option<f64>>(1)) {
        r.run_pickup = Some((Duration::from_secs_f64(p50.max(0.0)), Duration::from_secs_f64(p99.max(0.0))));
    }
    r.split_brain_epochs = admin
        .query_one(
            "SELECT count(*) FROM (SELECT epoch FROM fleet_leader_actions WHERE tag = $1
              GROUP BY 1 HAVING count(DISTINCT host_id) > 1) x",
            &[&tag],
        )
        .await
        .map(|row| row.get::<_, i64>(0))
        .map_err(|e| e.to_string())?;
    let lateness = admin
        .query_one(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l), percentile_cont(0.99) WITHIN GROUP (ORDER BY l)
               FROM (SELECT extract(epoch FROM min(s.at) - s.fire_at)::float8 AS l FROM fleet_starts s
                      WHERE s.tag = $1 AND s.fire_at <= $2 GROUP BY s.firing_key, s.fire_at) x",
            &[&tag, &end],
        )
        .await
        .map_err(|e| e.to_string())?;
    if let (Some(p50), Some(p99)) = (lateness.get::<_, Option<f64>>(0), lateness.get::<_, Option<f64>>(1)) {
        r.lateness = Some((Duration::from_secs_f64(p50.max(0.0)), Duration::from_secs_f64(p99.max(0.0))));
    }
    Ok(())
}

/// Prints the report.
pub fn print_report(r: &Report) {
    println!("\n== fleet report ==");
    println!("firings due              {}", r.due);
    println!("firings completed        {}", r.completed);
    println!(
        "executed twice           {}   (effects written with the completion, per firing; the database and the hosts' ledgers)",
        r.executed_twice
    );
    println!("lost                     {}", r.lost);
    println!(
        "re-run after a takeover  {}   (a holder died or stalled past its lease: at-least-once, fenced)",
        r.rerun_after_takeover
    );
    println!(
        "started before due       {}   (by the database clock; hosts run clocks up to 3 min off)",
        r.started_early
    );
    match r.lateness {
        Some((p50, p99)) => println!(
            "start lateness           p50 {:.0} ms, p99 {:.0} ms   (first start against the due instant, database clock)",
            p50.as_secs_f64() * 1000.0,
            p99.as_secs_f64() * 1000.0
        ),
        None => println!("start lateness           no starts"),
    }
    println!(
        "retried after a failure  {}   (first attempts failed on purpose, then completed by a retry)",
        r.retried
    );
    println!("failed for good          {}", r.failed);
    println!(
        "runs admitted            {}   (one per firing key: {} keys with two runs)",
        r.runs, r.keys_with_two_runs
    );
    println!("runs deduplicated        {}   (spawn_run returned the existing run)", r.deduplicated);
    println!(
        "runs executed            {}   (executed twice: {}; still pending or running: {}; failed for good: {})",
        r.runs_executed, r.runs_executed_twice, r.runs_unfinished, r.runs_failed
    );
    println!(
        "runs retried             {}   (one in nine fails its first attempt on purpose; taken over from a lost holder: {})",
        r.runs_retried, r.runs_taken_over
    );
    match r.run_pickup {
        Some((p50, p99)) => println!(
            "run pickup               p50 {:.0} ms, p99 {:.0} ms   (admitted to first start, database clock)",
            p50.as_secs_f64() * 1000.0,
            p99.as_secs_f64() * 1000.0
        ),
        None => println!("run pickup               no runs started"),
    }
    let l = &r.lost_after_failover;
    println!(
        "lost after failover      {}   (of {} acknowledged to hosts, missing from the database: runs {}, completions {}, run completions {}, terms {}, fenced writes {})",
        l.total(),
        l.checked,
        l.runs,
        l.completions,
        l.run_completions,
        l.terms,
        l.actions
    );
    println!(
        "leader terms             {}   (epochs with two leaders acting: {})",
        r.leader_terms, r.split_brain_epochs
    );
    if r.failovers.is_empty() {
        println!("leader failovers         none measured");
    } else {
        let mut f = r.failovers.clone();
        f.sort();
        let ms: Vec<String> = f.iter().map(|d| format!("{:.0} ms", d.as_secs_f64() * 1000.0)).collect();
        println!("leader failovers         {} after SIGKILL of the leader: {}", f.len(), ms.join(", "));
    }
    if !r.takeovers.is_empty() {
        println!("takeover after a fault   (fault → what the host held is held again by a live host: p50 / max, pieces)");
        let mut by_fault: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for ((fault, kind), times) in &r.takeovers {
            let mut t = times.clone();
            t.sort();
            let ms = |d: Duration| d.as_secs_f64() * 1000.0;
            by_fault.entry(fault).or_default().push(format!(
                "{kind} {:.0} / {:.0} ms ({})",
                ms(t[t.len() / 2]),
                ms(t[t.len() - 1]),
                t.len()
            ));
        }
        for (fault, kinds) in by_fault {
            println!("  {fault:<22} {}", kinds.join(" · "));
        }
    }
    if !r.chaos.is_empty() {
        let c: Vec<String> = r.chaos.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
        println!("chaos                    {}", c.join(", "));
    }
    match &r.database_failover {
        Some((engine, Ok(f))) => {
            let ms = |d: Option<Duration>| {
                d.map_or_else(|| "never (60 s)".to_owned(), |d| format!("{:.0} ms", d.as_secs_f64() * 1000.0))
            };
            println!(
                "database failover        {engine}: primary killed → read-write after {} → a leader on the new primary after {}",
                ms(f.read_write),
                ms(f.leader)
            );
        }
        Some((engine, Err(why))) => println!("database failover        {engine}: {why}"),
        None => {}
    }
    match &r.timeline {
        Ok(path) => println!(
            "timeline                 {}   (hosts over time: firings, leader terms, chaos)",
            path.display()
        ),
        Err(why) => println!("timeline                 not drawn: {why}"),
    }
    println!("verdict                  {}", if r.pass() { "PASS" } else { "FAIL" });
}
