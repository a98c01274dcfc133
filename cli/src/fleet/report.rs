//! The fleet's report: its figures, read from the database after the run, and how they print.
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use tokio_postgres::Client;

use crate::ha::Failover;
use crate::sql;

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
    /// Start lateness against the due instant (database clock), median, 99th percentile and
    /// longest, of each firing's first start.
    pub lateness: Option<(Duration, Duration, Duration)>,
    /// CPU hogs beside the hosts (`--hogs`).
    pub hogs: usize,
    /// The machine's load average (one minute) at the end of the run.
    pub load_average: Option<f64>,
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
    /// The last error of the first run failed for good, if any.
    pub runs_failed_error: Option<String>,
    /// Runs started again after their holder was lost (a takeover; fenced).
    pub runs_taken_over: i64,
    /// Pickup latency, admission to first start (database clock), p50 and p99.
    pub run_pickup: Option<(Duration, Duration)>,
    /// The agent workflow's durable steps: what ran twice and what must never.
    pub steps: StepFigures,
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
    /// With `--overload`: what the hosts did while the database was capped, and after.
    pub overload: Option<super::OverloadOutcome>,
    /// With a multi-host URL: the node the report was read on (the writable one on the newest
    /// timeline).
    pub read_on: Option<String>,
}

/// The agent workflow's durable steps (each run's five steps).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StepFigures {
    /// Steps whose work ran more than once (only steps in flight at a fault may).
    pub executed_twice: i64,
    /// Step executions by an attempt that began after the step was recorded: must be 0.
    pub recorded_reexecuted: i64,
    /// Runs whose external call reached the service under two keys (a duplicated effect):
    /// must be 0.
    pub external_duplicated: i64,
    /// Runs whose database step wrote twice: must be 0.
    pub saved_twice: i64,
    /// Inference calls made, their cost in cents, and those beyond one per run.
    pub inference_calls: i64,
    pub inference_cents: i64,
    pub inference_paid_twice: i64,
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
            hogs: 0,
            load_average: None,
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
            runs_failed_error: None,
            runs_taken_over: 0,
            run_pickup: None,
            steps: StepFigures::default(),
            split_brain_epochs: 0,
            lost_after_failover: crate::ledger::Lost::default(),
            leader_terms: 0,
            failovers: Vec::new(),
            takeovers: BTreeMap::new(),
            chaos: BTreeMap::new(),
            chaos_acts: Vec::new(),
            timeline: Err("not drawn".into()),
            database_failover: None,
            overload: None,
            read_on: None,
        }
    }
}

impl Report {
    /// Counts a chaos act of `kind` and places it, as `label`, on `host`'s lane of the
    /// timeline.
    pub(super) fn record_act(&mut self, kind: &'static str, label: &'static str, host: &str) {
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
            && self.steps.recorded_reexecuted == 0
            && self.steps.external_duplicated == 0
            && self.steps.saved_twice == 0
            && self.started_early == 0
            && self
                .database_failover
                .as_ref()
                .is_none_or(|(_, f)| f.as_ref().is_ok_and(|f| f.read_write.is_some() && f.leader.is_some()))
            && self.overload.as_ref().is_none_or(|o| o.held())
    }
}

/// The report's figures, read from the database: only the fleet's window counts (firings due
/// up to the end; a host may have started one due after it before stopping).
pub(super) async fn finish(admin: &Client, tag: &str, end: SystemTime, r: &mut Report) -> Result<(), String> {
    firing_figures(admin, tag, end, r).await?;
    run_figures(admin, tag, end, r).await?;
    if let Some(o) = &mut r.overload {
        let row = admin
            .query_one(sql::FLEET_OVERLOAD_DRAINED, &[&tag, &o.lifted_at])
            .await
            .map_err(|e| e.to_string())?;
        o.drained = row.get::<_, Option<f64>>(0).map(|s| Duration::from_secs_f64(s.max(0.0)));
    }
    latencies(admin, tag, end, r).await
}

/// Firings: completed, lost, retried, failed, executed twice, re-run, started early; runs
/// admitted and deduplicated per firing key.
async fn firing_figures(admin: &Client, tag: &str, end: SystemTime, r: &mut Report) -> Result<(), String> {
    // $1 is the tag, $2 the end, $3 the fleet's task ids.
    let like = format!("{tag}-task-%");
    let all: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&tag, &end, &like];
    let count = |sql: &'static str| async move {
        admin.query_one(sql, &all).await.map(|row| row.get::<_, i64>(0)).map_err(|e| e.to_string())
    };
    r.completed = count(sql::FLEET_FIRINGS_COMPLETED).await?;
    r.lost = r.due - r.completed;
    r.retried = count(sql::FLEET_FIRINGS_RETRIED).await?;
    r.failed = count(sql::FLEET_FIRINGS_FAILED).await?;
    r.executed_twice = count(sql::FLEET_EXECUTED_TWICE).await?;
    r.rerun_after_takeover = count(sql::FLEET_RERUN_AFTER_TAKEOVER).await?;
    r.started_early = count(sql::FLEET_STARTED_EARLY).await?;
    r.runs = count(sql::FLEET_RUNS_ADMITTED).await?;
    r.deduplicated = count(sql::FLEET_DEDUPLICATED).await?;
    r.keys_with_two_runs = count(sql::FLEET_KEYS_WITH_TWO_RUNS).await?;
    Ok(())
}

/// The runs the firings due up to the end admitted, executed by whichever host claimed them,
/// and the leader epochs two hosts acted in.
async fn run_figures(admin: &Client, tag: &str, end: SystemTime, r: &mut Report) -> Result<(), String> {
    let like = format!("{tag}-task-%");
    let all: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&tag, &end, &like];
    let runs = admin.query_one(sql::FLEET_RUN_OUTCOMES, &all).await.map_err(|e| e.to_string())?;
    (r.runs_executed, r.runs_unfinished, r.runs_failed, r.runs_retried, r.runs_failed_error) =
        (runs.get(0), runs.get(1), runs.get(2), runs.get(3), runs.get(4));
    r.runs_executed_twice = admin
        .query_one(sql::FLEET_RUNS_EXECUTED_TWICE, &[&tag])
        .await
        .map(|row| row.get::<_, i64>(0))
        .map_err(|e| e.to_string())?;
    // Started again with a higher token although no attempt of it failed: a takeover.
    r.runs_taken_over = admin
        .query_one(sql::FLEET_RUNS_TAKEN_OVER, &[&tag])
        .await
        .map(|row| row.get::<_, i64>(0))
        .map_err(|e| e.to_string())?;
    let s = admin.query_one(sql::FLEET_STEP_FIGURES, &[&tag, &end]).await.map_err(|e| e.to_string())?;
    r.steps = StepFigures {
        executed_twice: s.get(0),
        recorded_reexecuted: s.get(1),
        external_duplicated: s.get(2),
        saved_twice: s.get(3),
        inference_calls: s.get(4),
        inference_cents: s.get(5),
        inference_paid_twice: s.get(6),
    };
    r.split_brain_epochs = admin
        .query_one(sql::FLEET_SPLIT_BRAIN_EPOCHS, &[&tag])
        .await
        .map(|row| row.get::<_, i64>(0))
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Run pickup (admission to first start), p50 and p99, and firing start lateness, p50, p99
/// and max.
async fn latencies(admin: &Client, tag: &str, end: SystemTime, r: &mut Report) -> Result<(), String> {
    let pickup = admin.query_one(sql::FLEET_RUN_PICKUP, &[&tag]).await.map_err(|e| e.to_string())?;
    if let (Some(p50), Some(p99)) = (pickup.get::<_, Option<f64>>(0), pickup.get::<_, Option<f64>>(1)) {
        r.run_pickup = Some((Duration::from_secs_f64(p50.max(0.0)), Duration::from_secs_f64(p99.max(0.0))));
    }
    let lateness = admin.query_one(sql::FLEET_LATENESS, &[&tag, &end]).await.map_err(|e| e.to_string())?;
    let seconds = |i: usize| lateness.get::<_, Option<f64>>(i).map(|s| Duration::from_secs_f64(s.max(0.0)));
    if let (Some(p50), Some(p99), Some(max)) = (seconds(0), seconds(1), seconds(2)) {
        r.lateness = Some((p50, p99, max));
    }
    Ok(())
}

/// The timeline's data: the fleet's starts and completions, leader actions, and chaos acts.
pub(super) async fn timeline_data(
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
            sql::FLEET_TIMELINE_STARTS,
            &[&tag],
        )
        .await
        .map_err(e)?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get::<_, Option<bool>>(3).unwrap_or(false)))
        .collect::<Vec<(String, SystemTime, Option<SystemTime>, bool)>>();
    let terms = admin
        .query(sql::FLEET_TIMELINE_TERMS, &[&tag])
        .await
        .map_err(e)?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let start = runs.iter().map(|r| r.1).chain(report.chaos_acts.iter().map(|c| c.0)).min();
    Ok(crate::timeline::Timeline { start, hosts, runs, terms, chaos: report.chaos_acts.clone() })
}

/// Prints the report.
pub fn print_report(r: &Report) {
    print_work(r);
    print_faults(r);
    println!("verdict                  {}", if r.pass() { "PASS" } else { "FAIL" });
}

/// What was done: firings and runs, with their exactly-once counts and latencies.
fn print_work(r: &Report) {
    println!("\n== fleet report ==");
    if let Some(node) = &r.read_on {
        println!("read on                  {node}");
    }
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
        Some((p50, p99, max)) => println!(
            "start lateness           p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms   (first start against the due instant, database clock)",
            p50.as_secs_f64() * 1000.0,
            p99.as_secs_f64() * 1000.0,
            max.as_secs_f64() * 1000.0
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
    if let Some(error) = &r.runs_failed_error {
        println!("  a run failed for good: {}", crate::status::escape_controls(error));
    }
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
    let s = &r.steps;
    println!(
        "agent steps run twice    {}   (five durable steps a run: only steps in flight at a fault may repeat)",
        s.executed_twice
    );
    println!(
        "recorded steps re-run    {}   (a step run again by an attempt that began after it was recorded)",
        s.recorded_reexecuted
    );
    println!(
        "effects duplicated       {}   (external calls under two keys: {}; database steps written twice: {})",
        s.external_duplicated + s.saved_twice,
        s.external_duplicated,
        s.saved_twice
    );
    println!(
        "inference                {} calls, {} cents   (paid twice: {}, steps in flight at a fault only)",
        s.inference_calls, s.inference_cents, s.inference_paid_twice
    );
}

/// What the faults cost: losses after a failover, leader terms and failovers, takeovers by
/// fault, the chaos acts, the database failover, the timeline.
fn print_faults(r: &Report) {
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
        for ((fault, kind), times) in r.takeovers.iter().filter(|(_, t)| !t.is_empty()) {
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
    if r.hogs > 0 {
        println!(
            "machine load             {} CPU hogs beside the hosts, each in a session of its own (load average {})",
            r.hogs,
            r.load_average.map_or_else(|| "unknown".to_owned(), |l| format!("{l:.1} at the end"))
        );
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
    if let Some(o) = &r.overload {
        let drained = o.drained.map_or_else(|| "never".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()));
        println!(
            "overload                 CPU capped at a tenth of a core for {} s: host processes exited {}, backlog done {drained} after the lift (bound 30 s)",
            o.capped_for.as_secs(),
            o.host_exits
        );
        let opened: u32 = o.pieces.values().map(|s| s.opened).sum();
        let ended: u32 = o.pieces.values().map(|s| s.ended).sum();
        println!(
            "  host sessions          {opened} opened, {ended} ended while capped (bound {} a piece, a job pool's growth aside); connections received {}, given up before authorization {}",
            super::overload::SESSIONS_BOUND,
            o.received,
            o.received.saturating_sub(o.authorized)
        );
        for (name, s) in &o.pieces {
            println!("    {name:<40} opened {}, ended {}", s.opened, s.ended);
        }
    }
    match &r.timeline {
        Ok(path) => println!(
            "timeline                 {}   (hosts over time: firings, leader terms, chaos)",
            path.display()
        ),
        Err(why) => println!("timeline                 not drawn: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fault whose watcher never saw anything taken over leaves no times: the report prints
    /// without it (it panicked indexing the empty list before).
    #[test]
    fn a_takeover_entry_without_times_prints() {
        let mut r = Report::default();
        r.takeovers.insert(("SIGKILL", "firing"), Vec::new());
        r.takeovers.insert(("SIGKILL", "leader"), vec![Duration::from_millis(40)]);
        print_report(&r);
    }
}
