//! The fleet's host processes: started, signalled, woken, restarted when they exit early, and
//! the live progress line.
use std::time::{Duration, Instant, SystemTime};

use tokio::process::{Child, Command};
use tokio_postgres::Client;

use super::report::Report;
use crate::host::HostPlan;
use crate::sql;

pub(super) struct Host {
    pub(super) plan: HostPlan,
    pub(super) child: Option<Child>,
    /// Stopped with SIGSTOP (a hung host).
    pub(super) stopped: bool,
    /// Cut off by a silent partition.
    pub(super) partition: Option<crate::partition::Partition>,
    /// Since when it has been stopped or cut off.
    pub(super) silent_since: Option<Instant>,
    /// When the process was last started.
    pub(super) started: Instant,
    /// A restart waiting for its backoff to pass.
    pub(super) restart_at: Option<Instant>,
    /// Exits in a row soon after starting: each doubles the wait before the next start.
    pub(super) quick_exits: u32,
}

/// Before restarting a host that exited: 200 ms, doubling with each quick exit in a row, at
/// most 5 s, so a database that is away (a failover) does not meet a storm of restarts.
fn restart_backoff(quick_exits: u32) -> Duration {
    (Duration::from_millis(200) * 2u32.saturating_pow(quick_exits.min(5))).min(Duration::from_secs(5))
}

/// Starts a host process (this executable, `host` subcommand) with its plan.
pub(super) fn spawn(plan: &HostPlan) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Command::new(exe)
        .args(plan.to_args())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start a host process: {e}"))
}

/// Sends `sig` to a host process (SIGSTOP, SIGCONT).
pub(super) fn signal(child: &Child, sig: &str) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]).status();
    }
}

/// Restarts host processes that exited early (their sessions were cut and they gave up), as a
/// supervisor would, after a backoff that grows with quick exits in a row; one that exits after
/// the end has finished.
pub(super) fn restart_exited(hosts: &mut [Host], end: SystemTime, report: &mut Report) -> Result<(), String> {
    for h in hosts {
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
    Ok(())
}

/// Ends every pause and partition (at the end of the run, or before the next act once a host
/// has been silent for [`SILENT_FOR`]).
pub(super) fn wake(hosts: &mut [Host], only_after: Option<Duration>) {
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

/// One line of live progress: hosts up, the leader, firings done.
pub(super) async fn progress(
    admin: &Client,
    tag: &str,
    group: &str,
    hosts: &[Host],
    due: i64,
    end: SystemTime,
    report: &Report,
) {
    let done: i64 = admin
        .query_one(sql::FLEET_PROGRESS, &[&format!("{tag}-%"), &end])
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
