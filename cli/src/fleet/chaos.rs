//! Chaos for the fleet: one act at a time on a random host, and watchers that time how long
//! what the faulted host held takes to be held again by a live host.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::Rng;
use rendezvous_client::leader::CurrentLeader;
use tokio_postgres::Client;

use super::controller::CALL_TIMEOUT;
use super::hosts::{signal, spawn, wake, Host};
use super::report::Report;
use crate::sql;

/// How long a hung host stays stopped, and a partitioned one cut off: longer than every lease
/// the hosts use (tasks 2 s, runs 3 s, a leader's 1 s plus the next candidate's 1 s grace), so
/// its work is taken over while it is silent.
pub(super) const SILENT_FOR: Duration = Duration::from_secs(4);

/// Takeover times by fault and kind of work (leader, firing, run), filled by watchers.
pub(super) type Takeovers =
    std::sync::Arc<std::sync::Mutex<BTreeMap<(&'static str, &'static str), Vec<Duration>>>>;

/// What a host holds when it is faulted: its group's epoch if it leads, its firings' keys and
/// tokens, its runs' ids and attempts.
#[derive(Debug, Default)]
struct Held {
    leader_epoch: Option<i64>,
    firings: Vec<(String, i64)>,
    runs: Vec<(i64, i32)>,
}

async fn held_by(admin: &Client, host: &str, leader: &CurrentLeader) -> Result<Held, String> {
    let e = |e: tokio_postgres::Error| e.to_string();
    let firings = admin.query(sql::FLEET_HELD_FIRINGS, &[&host]).await.map_err(e)?;
    let runs = admin.query(sql::FLEET_HELD_RUNS, &[&host]).await.map_err(e)?;
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
        if n == 0 {
            return; // nothing taken over in this look: no entry (the report reads each entry's times)
        }
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
            let again = c.query(sql::FLEET_FIRINGS_HELD_AGAIN, &params);
            if let Ok(Ok(rows)) = tokio::time::timeout(CALL_TIMEOUT, again).await {
                let done: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
                record("firing", done.len());
                held.firings.retain(|(k, _)| !done.contains(k));
            }
        }
        if !held.runs.is_empty() {
            let (ids, attempts): (Vec<i64>, Vec<i32>) = held.runs.iter().copied().unzip();
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&ids, &attempts];
            let again = c.query(sql::FLEET_RUNS_HELD_AGAIN, &params);
            if let Ok(Ok(rows)) = tokio::time::timeout(CALL_TIMEOUT, again).await {
                let done: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
                record("run", done.len());
                held.runs.retain(|(id, _)| !done.contains(id));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Where takeover watchers report: what they watch with (the URL, the leader group) and where
/// their times go.
pub(super) struct Watcher {
    pub(super) url: String,
    pub(super) group: String,
    pub(super) takeovers: Takeovers,
}

impl Watcher {
    /// Watches, from now on, what a faulted host held until it is held again.
    fn watch(&self, fault: &'static str, held: Held) {
        tokio::spawn(watch_takeover(
            self.url.clone(),
            self.group.clone(),
            fault,
            held,
            Instant::now(),
            self.takeovers.clone(),
        ));
    }
}

/// One chaos act on a random running host that is not silent already: SIGKILL (preferring the
/// leader) and a restart with its clock off, SIGSTOP (a hung host), a silent partition, or its
/// backends terminated. Hosts silent for [`SILENT_FOR`] are woken first.
pub(super) async fn chaos_step(
    admin: &Client,
    tag: &str,
    hosts: &mut [Host],
    rng: &mut impl Rng,
    report: &mut Report,
    watcher: &Watcher,
) -> Result<(), String> {
    // Wake anyone silent long enough before picking the next act.
    wake(hosts, Some(SILENT_FOR));
    let leader_now =
        rendezvous_client::leader::leader(admin, &watcher.group).await.map_err(|e| e.to_string())?;
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
    match act {
        0 => {
            // SIGKILL (prefer the leader, to measure failover), then restart it, misled.
            let target = leader_now
                .leader
                .as_ref()
                .and_then(|l| candidates.iter().copied().find(|&h| &hosts[h].plan.host_id == l))
                .filter(|_| rng.random_bool(0.6))
                .unwrap_or(i);
            kill_and_restart(admin, &mut hosts[target], &leader_now, rng, report, watcher).await
        }
        1 => hang(admin, &mut hosts[i], &leader_now, report, watcher).await,
        4 => partition(admin, tag, &mut hosts[i], &leader_now, report, watcher).await,
        _ => terminate_backends(admin, &hosts[i], &leader_now, report, watcher).await,
    }
}

/// SIGKILL, the leader's failover timed when it led, then a restart with a clock minutes off:
/// it asks early or late, the database decides.
async fn kill_and_restart(
    admin: &Client,
    host: &mut Host,
    leader_now: &CurrentLeader,
    rng: &mut impl Rng,
    report: &mut Report,
    watcher: &Watcher,
) -> Result<(), String> {
    let was_leader = leader_now.leader.as_deref() == Some(host.plan.host_id.as_str());
    let held = held_by(admin, &host.plan.host_id, leader_now).await?;
    if let Some(c) = &mut host.child {
        let killed = Instant::now();
        let _ = c.start_kill();
        watcher.watch("SIGKILL", held);
        let _ = c.wait().await;
        report.record_act("SIGKILL", "SIGKILL, back with its clock off", &host.plan.host_id);
        if was_leader {
            let before = leader_now.epoch;
            while killed.elapsed() < Duration::from_secs(10) {
                let now = rendezvous_client::leader::leader(admin, &watcher.group)
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
    host.plan.skew_ms = rng.random_range(-180_000..180_000);
    host.child = Some(spawn(&host.plan)?);
    host.started = Instant::now();
    *report.chaos.entry("restart with a clock ±3 min off").or_default() += 1;
    Ok(())
}

/// SIGSTOP: a hung host, stopped longer than its leases; SIGCONT at a later step.
async fn hang(
    admin: &Client,
    host: &mut Host,
    leader_now: &CurrentLeader,
    report: &mut Report,
    watcher: &Watcher,
) -> Result<(), String> {
    let held = held_by(admin, &host.plan.host_id, leader_now).await?;
    if let Some(c) = &host.child {
        signal(c, "STOP");
        watcher.watch("SIGSTOP (hung host)", held);
        host.stopped = true;
        host.silent_since = Some(Instant::now());
        report.record_act("SIGSTOP (hung host)", "SIGSTOP", &host.plan.host_id);
    }
    Ok(())
}

/// A silent partition: every packet the host sends is dropped, without a reset; its sessions
/// live on in the server, and it reconnects in vain until healed.
async fn partition(
    admin: &Client,
    tag: &str,
    host: &mut Host,
    leader_now: &CurrentLeader,
    report: &mut Report,
    watcher: &Watcher,
) -> Result<(), String> {
    let held = held_by(admin, &host.plan.host_id, leader_now).await?;
    if let Some(pid) = host.child.as_ref().and_then(|c| c.id()) {
        let name = format!("rendezvous-{tag}-{}", host.plan.host_id);
        let cut = crate::partition::Partition::cut(pid, &name)?;
        watcher.watch("silent partition", held);
        host.partition = Some(cut);
        host.silent_since = Some(Instant::now());
        report.record_act("silent partition", "partitioned", &host.plan.host_id);
    }
    Ok(())
}

/// The host's backends terminated: its election and worker sessions.
async fn terminate_backends(
    admin: &Client,
    host: &Host,
    leader_now: &CurrentLeader,
    report: &mut Report,
    watcher: &Watcher,
) -> Result<(), String> {
    let held = held_by(admin, &host.plan.host_id, leader_now).await?;
    let pattern = format!("rendezvous % {}", host.plan.host_id);
    admin.execute(sql::FLEET_TERMINATE_HOST, &[&pattern]).await.map_err(|e| e.to_string())?;
    watcher.watch("pg_terminate_backend", held);
    report.record_act("pg_terminate_backend", "backends terminated", &host.plan.host_id);
    Ok(())
}
