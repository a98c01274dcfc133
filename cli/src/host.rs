//! One fleet host, as its own OS process (`rendezvous host …`, started by `rendezvous fleet`).
//!
//! It heartbeats, competes for the shared agent's leadership (gating the leader-only surface on
//! `is_leader()` and fencing its write with the epoch), and dispatches the recurring tasks'
//! firings with the HRW dispatcher. Each firing admits one run through `spawn_run` with the
//! firing key as `dispatch_key`, then writes its effect and completes the firing in one
//! transaction fenced by its token.
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rendezvous_client::firing::{assert_firing, complete_firing, Clock};
use rendezvous_client::hrw::HostSet;
use rendezvous_client::leader::assert_leader;
use rendezvous_client::{
    membership, spawn_run, Dispatcher, DispatcherOptions, Firing, LeaderElector, LeaderOptions, Membership,
    MembershipOptions,
};
use tokio::sync::Mutex;

/// What a host is told by the fleet controller: the flags of `rendezvous host` (see
/// [`HostPlan::to_args`]).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct HostPlan {
    /// Database URL
    #[arg(long = "database-url", value_name = "URL")]
    pub url: String,
    /// This host's id
    #[arg(long, value_name = "ID")]
    pub host_id: String,
    /// The run's tag: prefixes task ids, names the leader group and the tenant
    #[arg(long)]
    pub tag: String,
    /// Number of recurring tasks
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub tasks: u32,
    /// Period of each task, in milliseconds
    #[arg(long = "period-ms", value_name = "MS", default_value = "1000", value_parser = parse_millis)]
    pub period: Duration,
    /// First firing time, in unix ms
    #[arg(long, value_name = "UNIX_MS", default_value_t = 0)]
    pub start_ms: u64,
    /// No firing at or after this, in unix ms
    #[arg(long, value_name = "UNIX_MS", default_value_t = 0)]
    pub end_ms: u64,
    /// This host's clock skew in ms (chaos), 0 for none
    #[arg(long, value_name = "MS", default_value_t = 0, allow_negative_numbers = true)]
    pub skew_ms: i64,
    /// A host this host leaves out of its view of the live set (chaos)
    #[arg(long, value_name = "ID")]
    pub hide: Option<String>,
}

fn parse_millis(s: &str) -> Result<Duration, String> {
    s.parse::<u64>().map(Duration::from_millis).map_err(|_| "give a whole number of milliseconds".into())
}

impl HostPlan {
    /// The command-line arguments (`host` and its flags) that carry this plan.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "host".into(),
            "--database-url".into(),
            self.url.clone(),
            "--host-id".into(),
            self.host_id.clone(),
            "--tag".into(),
            self.tag.clone(),
            "--tasks".into(),
            self.tasks.to_string(),
            "--period-ms".into(),
            self.period.as_millis().to_string(),
            "--start-ms".into(),
            self.start_ms.to_string(),
            "--end-ms".into(),
            self.end_ms.to_string(),
            // One argument: a negative skew must not look like a flag.
            format!("--skew-ms={}", self.skew_ms),
        ];
        if let Some(h) = &self.hide {
            a.extend(["--hide".into(), h.clone()]);
        }
        a
    }

    /// Every firing of the run: task i fires at start + i × period / tasks + k × period.
    pub fn all_firings(&self) -> Vec<Firing> {
        let mut out = Vec::new();
        let period_ms = self.period.as_millis() as u64;
        for t in 0..self.tasks {
            let mut at = self.start_ms + u64::from(t) * period_ms / u64::from(self.tasks.max(1));
            while at < self.end_ms {
                out.push(Firing::new(
                    format!("{}-task-{t}", self.tag),
                    UNIX_EPOCH + Duration::from_millis(at),
                ));
                at += period_ms;
            }
        }
        out
    }

    /// The shared agent's leader group.
    pub fn group(&self) -> String {
        format!("{}:shared-agent", self.tag)
    }
}

fn skewed_clock(skew_ms: i64) -> Clock {
    if skew_ms == 0 {
        return Clock::Database;
    }
    Clock::Local(Arc::new(move || {
        let now = SystemTime::now();
        if skew_ms > 0 {
            now + Duration::from_millis(skew_ms as u64)
        } else {
            now - Duration::from_millis((-skew_ms) as u64)
        }
    }))
}

/// Runs one host until the plan's end, then leaves cleanly.
pub async fn run(plan: HostPlan) -> Result<(), String> {
    let e = |e: rendezvous_client::Error| e.to_string();
    let me = Membership::start(
        &plan.url,
        &plan.host_id,
        MembershipOptions::default().with_weight(1.0).with_interval(Duration::from_millis(300)),
    )
    .await
    .map_err(e)?;
    let elector = LeaderElector::start(
        &plan.url,
        &plan.group(),
        &plan.host_id,
        LeaderOptions::default().with_refresh(Duration::from_millis(500)).with_lease(None),
    )
    .await
    .map_err(e)?;
    let clock = skewed_clock(plan.skew_ms);
    let now_fn: Arc<dyn Fn() -> SystemTime + Send + Sync> = match &clock {
        Clock::Local(f) => f.clone(),
        Clock::Database => Arc::new(SystemTime::now),
    };
    let options = DispatcherOptions::default()
        .with_grace(Duration::from_millis(300))
        .with_lease(Duration::from_secs(2))
        .with_renew_every(Some(Duration::from_millis(500)))
        .with_poll(Duration::from_millis(100))
        .with_max_in_flight(32)
        .with_clock(clock);
    let mut dispatcher = Dispatcher::connect(&plan.url, &plan.host_id, options.clone()).await.map_err(e)?;
    let mut writer = Arc::new(Mutex::new(rendezvous_client::connect(&plan.url).await.map_err(e)?));
    let mut reader = rendezvous_client::connect(&plan.url).await.map_err(e)?;

    let all = plan.all_firings();
    let mut done: HashSet<usize> = HashSet::new();
    let end = UNIX_EPOCH + Duration::from_millis(plan.end_ms);
    let mut last_leader_action = SystemTime::UNIX_EPOCH;
    loop {
        let now = now_fn();
        // Leader-only surface, gated on is_leader() and fenced by the epoch.
        if let Some(epoch) = elector.epoch() {
            if now.duration_since(last_leader_action).unwrap_or_default() >= Duration::from_millis(400) {
                last_leader_action = now;
                let mut w = writer.lock().await;
                leader_action(&mut w, &plan, epoch).await;
            }
        }
        // Due firings this host has not seen completed yet.
        let due_idx: Vec<usize> =
            (0..all.len()).filter(|i| !done.contains(i) && all[*i].fire_at <= now).collect();
        if !due_idx.is_empty() {
            let due: Vec<Firing> = due_idx.iter().map(|i| all[*i].clone()).collect();
            let mut live = membership::live_hosts(&reader, Duration::from_secs(2)).await.unwrap_or_default();
            if let Some(h) = &plan.hide {
                live.retain(|x| x != h);
            }
            let view = HostSet::new(&live);
            let tag = plan.tag.clone();
            let outcome = dispatcher
                .dispatch(&due, &view, |ctx| {
                    let (writer, tag, client) = (writer.clone(), tag.clone(), dispatcher.client());
                    async move {
                        let s = |e: tokio_postgres::Error| e.to_string();
                        client
                            .execute(
                                "INSERT INTO fleet_starts (tag, firing_key, token, host_id) VALUES ($1, $2, $3, $4)",
                                &[&tag, &ctx.key, &ctx.token, &ctx.host_id],
                            )
                            .await
                            .map_err(s)?;
                        // The run this firing starts, admitted by its key: a re-execution after
                        // a takeover gets the same run back.
                        let input = serde_json::json!({ "task": ctx.firing.task_id, "token": ctx.token });
                        let admission = spawn_run(client, &tag, &ctx.firing.task_id, &input, Some(&ctx.key))
                            .await
                            .map_err(|e| e.to_string())?;
                        let mut admissions = vec![admission];
                        if ctx.key.bytes().map(u64::from).sum::<u64>() % 4 == 0 {
                            // A redelivered spawn request (at-least-once transport): same key, same run.
                            let again = spawn_run(client, &tag, &ctx.firing.task_id, &input, Some(&ctx.key))
                                .await
                                .map_err(|e| e.to_string())?;
                            if again.run_id != admission.run_id || again.created {
                                return Err(format!("redelivery of {} admitted a second run", ctx.key));
                            }
                            admissions.push(again);
                        }
                        for a in admissions {
                            client
                                .execute(
                                    "INSERT INTO fleet_admissions (tag, firing_key, run_id, created) VALUES ($1, $2, $3, $4)",
                                    &[&tag, &ctx.key, &a.run_id, &a.created],
                                )
                                .await
                                .map_err(s)?;
                        }
                        tokio::time::sleep(Duration::from_millis(150)).await; // the "agent loop"
                        // Effect and completion in one transaction, fenced by the token.
                        let mut w = writer.lock().await;
                        let tx = w.transaction().await.map_err(s)?;
                        assert_firing(&tx, &ctx.firing, ctx.token).await.map_err(|e| e.to_string())?;
                        tx.execute(
                            "INSERT INTO fleet_effects (tag, firing_key, token, host_id, run_id) VALUES ($1, $2, $3, $4, $5)",
                            &[&tag, &ctx.key, &ctx.token, &ctx.host_id, &admission.run_id],
                        )
                        .await
                        .map_err(s)?;
                        rendezvous_client::admission::set_run_state(&tx, admission.run_id, "succeeded")
                            .await
                            .map_err(|e| e.to_string())?;
                        if complete_firing(&tx, &ctx.firing, ctx.token).await.map_err(|e| e.to_string())? {
                            tx.commit().await.map_err(s)?;
                        }
                        Ok(())
                    }
                })
                .await;
            match outcome {
                Ok(_) => done.extend(due_idx),
                Err(err) => {
                    // Our sessions were cut (a terminated backend, a restart): reconnect and go on;
                    // claims we held expire and are taken over, or retaken by us.
                    eprintln!("{}: dispatch interrupted ({err}); reconnecting", plan.host_id);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    dispatcher =
                        Dispatcher::connect(&plan.url, &plan.host_id, options.clone()).await.map_err(e)?;
                    writer = Arc::new(Mutex::new(rendezvous_client::connect(&plan.url).await.map_err(e)?));
                    reader = rendezvous_client::connect(&plan.url).await.map_err(e)?;
                }
            }
        } else if SystemTime::now() >= end
            && (done.len() == all.len() || all_completed(&reader, &plan, all.len()).await)
        {
            // Finished by the real clock once every firing is done: a host whose clock is slow
            // has seen its late firings completed by others.
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    elector.shutdown().await.map_err(e)?;
    me.shutdown().await.map_err(e)?;
    Ok(())
}

/// The leader-only surface (an autonomous heartbeat prompt, say), fenced by the epoch:
/// a deposed leader's action is refused and written nowhere.
async fn leader_action(client: &mut tokio_postgres::Client, plan: &HostPlan, epoch: i64) {
    let Ok(tx) = client.transaction().await else { return };
    if assert_leader(&tx, &plan.group(), epoch).await.is_err() {
        return;
    }
    let inserted = tx
        .execute(
            "INSERT INTO fleet_leader_actions (tag, epoch, host_id) VALUES ($1, $2, $3)",
            &[&plan.tag, &epoch, &plan.host_id],
        )
        .await;
    if inserted.is_ok() {
        let _ = tx.commit().await;
    }
}

async fn all_completed(reader: &tokio_postgres::Client, plan: &HostPlan, total: usize) -> bool {
    reader
        .query_one(
            "SELECT count(*) FROM rendezvous.status_firings WHERE task_id LIKE $1 AND completed_at IS NOT NULL",
            &[&format!("{}-task-%", plan.tag)],
        )
        .await
        .map(|r| r.get::<_, i64>(0) as usize >= total)
        .unwrap_or(false)
}
