//! One fleet host, as its own OS process (`rendezvous host …`, started by `rendezvous fleet`).
//!
//! It competes for the shared agent's leadership (gating the leader-only surface on
//! `is_leader()` and fencing its write with the epoch), and runs the fleet's cron tasks with a
//! [`Worker`]: the database says when each firing is due and who runs it. Each firing admits
//! one run through `spawn_run` with the firing key as `dispatch_key`, then writes its effect and
//! completes the firing in one fenced transaction. Some firings fail their first attempt on
//! purpose, to show retries.
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::ledger::Ledger;
use crate::sql;
use rendezvous_client::leader::assert_leader;
use rendezvous_client::replication::cancelled_sync_waits;
use rendezvous_client::Clock;
use rendezvous_client::{
    spawn_run, CatchUp, Database, Job, LeaderElector, LeaderOptions, Overlap, RetryPolicy, TaskSpec, Worker,
    WorkerOptions,
};

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
    /// Number of cron tasks
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub tasks: u32,
    /// Period of each task, in seconds (1 to 59)
    #[arg(long, value_name = "SECONDS", default_value_t = 1)]
    pub period: u32,
    /// Firings due after this (unix ms) are not the fleet's: the host stops once every earlier
    /// one is completed
    #[arg(long, value_name = "UNIX_MS", default_value_t = 0)]
    pub end_ms: u64,
    /// This host's clock skew in ms (chaos), 0 for none
    #[arg(long, value_name = "MS", default_value_t = 0, allow_negative_numbers = true)]
    pub skew_ms: i64,
    /// Append what the database acknowledged to this file (see `ledger`)
    #[arg(long, value_name = "PATH")]
    pub ledger: Option<PathBuf>,
    /// Run with the client's default options (leases, timeouts, polling), not the short ones
    /// that move a faulted host's work within seconds under chaos
    #[arg(long)]
    pub client_defaults: bool,
    /// Cap this host's server sessions, all its pieces together (one capped `Database`), so
    /// the fleet fits the server's max_connections
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
}

impl HostPlan {
    /// The command-line arguments (`host` and its flags) that carry this plan.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "host".into(),
            "--database-url".into(),
            self.url.clone(),
            "--host-id".into(),
            self.host_id.clone(),
            "--tag".into(),
            self.tag.clone(),
            "--tasks".into(),
            self.tasks.to_string(),
            "--period".into(),
            self.period.to_string(),
            "--end-ms".into(),
            self.end_ms.to_string(),
            // One argument: a negative skew must not look like a flag.
            format!("--skew-ms={}", self.skew_ms),
        ];
        if let Some(ledger) = &self.ledger {
            args.extend(["--ledger".into(), ledger.display().to_string()]);
        }
        if self.client_defaults {
            args.push("--client-defaults".into());
        }
        if let Some(n) = self.max_connections {
            args.extend(["--max-connections".into(), n.to_string()]);
        }
        args
    }

    /// The fleet's tasks: task i fires every `period` seconds, at second `i mod period` of each
    /// period (a 6-field cron), so the tasks' firings spread over each period. Overlap allowed
    /// and every missed fire time caught up: the fleet checks that every fire time runs. Under
    /// chaos, a 2 s lease and a 200 ms retry backoff; with the client's defaults, its own.
    pub fn task_specs(&self) -> Vec<TaskSpec> {
        (0..self.tasks)
            .map(|i| {
                let schedule = if self.period <= 1 {
                    "* * * * * *".to_owned()
                } else {
                    format!("{}-59/{} * * * * *", i % self.period, self.period)
                };
                let spec = TaskSpec::new(format!("{}-task-{i}", self.tag), schedule)
                    .with_overlap(Overlap::Allow)
                    .with_catch_up(CatchUp::All)
                    .with_catch_up_window(Duration::from_secs(600))
                    .with_max_attempts(ATTEMPTS);
                if self.client_defaults {
                    spec
                } else {
                    spec.with_lease(Duration::from_secs(2)).with_retry_backoff(Duration::from_millis(200))
                }
            })
            .collect()
    }

    /// The retry policy of the runs the firings admit: [`ATTEMPTS`] attempts; under chaos
    /// retried after 1 s (doubling), so a run whose attempts failed around a failover is done
    /// before the hosts stop; with the client's defaults, its 10 s.
    pub fn run_policy(&self) -> RetryPolicy {
        let policy = RetryPolicy { max_attempts: ATTEMPTS, ..RetryPolicy::default() };
        if self.client_defaults {
            policy
        } else {
            RetryPolicy { backoff: Duration::from_secs(1), ..policy }
        }
    }

    /// The shared agent's leader group.
    pub fn group(&self) -> String {
        format!("{}:shared-agent", self.tag)
    }

    /// The end of the fleet's firings.
    pub fn end(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.end_ms)
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

/// Attempts of each firing and run. A planned first-attempt failure takes one; a holder lost
/// (killed, hung, cut off, or its primary killed: a failover outlasts the chaos settings' 3 s
/// run lease, and a host on a loaded machine may renew late) makes a takeover, which takes
/// another. Five leave room for both under chaos on a busy machine, as a service sizes its
/// retries for the faults it expects; the verdict still needs every one done, once.
const ATTEMPTS: i32 = 5;

/// True for about one firing in seven: its first attempt fails on purpose.
fn fails_first_attempt(key: &str) -> bool {
    key.bytes().map(u64::from).sum::<u64>() % 7 == 0
}

/// A firing's work: record the start, admit its run (a redelivered request too, for some), a
/// short "agent loop", then the effect and the completion in one transaction. What the
/// database acknowledges goes into the ledger. The run is executed by whichever host claims it
/// ([`run_work`]).
async fn work(
    mut job: Job,
    tag: Arc<str>,
    ledger: Arc<Ledger>,
    policy: RetryPolicy,
) -> Result<(), rendezvous_client::Error> {
    let key = job.key().to_owned();
    let firing = job.firing().expect("a task's handler runs firings").clone();
    let (token, host, fire_at, task_id) =
        (job.token(), job.host_id().to_owned(), firing.fire_at, firing.task_id);
    job.client().await?.execute(sql::FLEET_START, &[&&*tag, &key, &token, &host, &fire_at]).await?;
    if job.attempt() == 1 && fails_first_attempt(&key) {
        return Err(rendezvous_client::Error::InvalidArgument(format!(
            "{key}: a planned first-attempt failure"
        )));
    }
    // The run this firing starts, admitted by its key: a re-execution gets the same run back.
    let input = serde_json::json!({ "task": task_id, "token": token });
    let admission = rendezvous_client::runs::spawn_run_with_policy(
        job.client().await?,
        &tag,
        &task_id,
        &input,
        Some(&key),
        policy,
    )
    .await?;
    ledger.record(format_args!("run {key} {}", admission.run_id));
    let mut admissions = vec![admission];
    if key.bytes().map(u64::from).sum::<u64>() % 4 == 0 {
        // A redelivered spawn request (at-least-once transport): same key, same run.
        let again = spawn_run(job.client().await?, &tag, &task_id, &input, Some(&key)).await?;
        if again.run_id != admission.run_id || again.created {
            return Err(rendezvous_client::Error::InvalidArgument(format!(
                "redelivery of {key} admitted a second run"
            )));
        }
        admissions.push(again);
    }
    for a in admissions {
        job.client().await?.execute(sql::FLEET_ADMISSION, &[&&*tag, &key, &a.run_id, &a.created]).await?;
    }
    tokio::time::sleep(Duration::from_millis(150)).await; // the "agent loop"
    let tx = job.transaction().await?;
    tx.execute(sql::FLEET_EFFECT, &[&&*tag, &key, &token, &host, &admission.run_id, &fire_at]).await?;
    tx.complete().await?;
    ledger.record(format_args!("completed {key} {token}"));
    Ok(())
}

/// An admitted run's work (the workflow named after the firing's task): an agent loop of five
/// durable steps. `plan`; `inference` (a fake model call that costs 3 cents and 100 ms);
/// `tool` (a call to a fake external service that deduplicates by the step's key); `save` (a
/// database step: its write and its record commit together); `answer`; then the run's effect
/// and its completion in one fenced transaction. Each step's work is logged when it runs, so
/// the report counts what ran twice. A retry or a takeover replays the recorded steps without
/// running them. One run in nine fails its first attempt on purpose, after its inference
/// (retried with the run's backoff: the inference is not paid again).
async fn run_work(mut job: Job, tag: Arc<str>, ledger: Arc<Ledger>) -> Result<(), rendezvous_client::Error> {
    let run_id = job.run().expect("a workflow's handler runs runs").run_id;
    let (token, host) = (job.token(), job.host_id().to_owned());
    job.client().await?.execute(sql::FLEET_RUN_START, &[&&*tag, &run_id, &token, &host]).await?;
    let plan: String = job
        .step("plan", async { step_call(&job, &tag, "plan", 0).await.map(|()| "look it up".to_owned()) })
        .await?;
    let answer: String = job
        .step("inference", async {
            step_call(&job, &tag, "inference", 3).await?;
            tokio::time::sleep(Duration::from_millis(100)).await; // the model thinking
            Ok::<_, rendezvous_client::Error>(format!("{plan}: 42"))
        })
        .await?;
    if job.attempt() == 1 && run_id % 9 == 0 {
        return Err(rendezvous_client::Error::InvalidArgument(format!(
            "run {run_id}: a planned first-attempt failure"
        )));
    }
    let key = job.step_key("tool");
    job.step("tool", async {
        step_call(&job, &tag, "tool", 0).await?;
        job.client().await?.execute(sql::FLEET_EXTERNAL_REQUEST, &[&&*tag, &key, &run_id]).await?;
        Ok::<_, rendezvous_client::Error>(())
    })
    .await?;
    job.step_tx("save", async |tx| tx.execute(sql::FLEET_ANSWER, &[&&*tag, &run_id, &token, &host]).await)
        .await?;
    let _: () = job.step("answer", step_call(&job, &tag, "answer", 0)).await?;
    let tx = job.transaction().await?;
    tx.execute(sql::FLEET_RUN_EFFECT, &[&&*tag, &run_id, &token, &host]).await?;
    tx.complete_with(Some(serde_json::json!({ "host": host, "answer": answer }))).await?;
    ledger.record(format_args!("run-completed {run_id} {token}"));
    Ok(())
}

/// Logs one execution of an agent step's work (what a provider would bill).
async fn step_call(
    job: &Job,
    tag: &str,
    step: &str,
    cost_cents: i32,
) -> Result<(), rendezvous_client::Error> {
    let run_id = job.run().expect("a workflow's handler runs runs").run_id;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
        [&tag, &run_id, &step, &job.token(), &job.host_id(), &cost_cents];
    job.client().await?.execute(sql::FLEET_STEP_CALL, &params).await?;
    Ok(())
}

/// Runs one host until every firing up to the plan's end is completed, then stops promptly.
pub async fn run(plan: HostPlan) -> Result<(), String> {
    let e = |e: rendezvous_client::Error| e.to_string();
    let leader_options = if plan.client_defaults {
        LeaderOptions::default()
    } else {
        LeaderOptions::default().with_refresh(Duration::from_millis(500)).with_lease(None)
    };
    // Every piece from one Database: the cap, when given, bounds them together.
    let db = match plan.max_connections {
        Some(n) => Database::from_url(&plan.url).with_max_connections(n),
        None => Database::from_url(&plan.url),
    };
    let elector = LeaderElector::start(&db, &plan.group(), &plan.host_id, leader_options).await.map_err(e)?;
    let options = if plan.client_defaults {
        WorkerOptions::default()
    } else {
        WorkerOptions::default()
            .with_poll(Duration::from_millis(500))
            .with_rank_delay(Duration::from_millis(300))
            .with_heartbeat(Duration::from_millis(300))
            .with_staleness(Duration::from_secs(2))
            // Within the cap: the Worker's own 3 sessions, the elector's and the writer's beside.
            .with_max_concurrent(
                plan.max_connections
                    .map_or(HANDLERS, |n| n.saturating_sub(SESSIONS_BESIDE_HANDLERS).clamp(1, HANDLERS)),
            )
            .with_max_backoff(Duration::from_secs(1))
            // Short, so a hung or cut-off host's runs are taken over within the chaos.
            .with_run_lease(Duration::from_secs(3))
            .with_call_timeout(Duration::from_secs(3))
    }
    .with_clock(skewed_clock(plan.skew_ms));
    let tag: Arc<str> = plan.tag.clone().into();
    let ledger = Arc::new(Ledger::open(plan.ledger.as_deref())?);
    let mut builder = Worker::builder(&db, &plan.host_id).options(options);
    for spec in plan.task_specs() {
        let (run_tag, run_ledger) = (tag.clone(), ledger.clone());
        builder = builder
            .workflow(spec.task_id.clone(), move |job| run_work(job, run_tag.clone(), run_ledger.clone()));
        let (tag, ledger) = (tag.clone(), ledger.clone());
        let policy = plan.run_policy();
        builder = builder.task(spec, move |job| work(job, tag.clone(), ledger.clone(), policy));
    }
    let scheduler = builder.start().await.map_err(e)?;

    // The host's own connection (its leader-only writes), named like the client's pieces. With
    // the client's defaults it is as patient as they are: a slow server is waited for.
    let writer_name = format!("rendezvous fleet writer {}", plan.host_id);
    let call_timeout = if plan.client_defaults { Duration::from_secs(30) } else { CALL_TIMEOUT };
    let mut writer = rendezvous_client::connect_as(&db, &writer_name).await.map_err(e)?;
    let expected = plan.tasks; // at least one firing per task before the end, checked below
    let mut term = None;
    loop {
        if writer.is_closed() {
            reconnect(&mut writer, &db, &writer_name, call_timeout).await;
        }
        // Leader-only surface, gated on is_leader() and fenced by the epoch.
        if let Some(epoch) = elector.epoch() {
            if term != Some(epoch) {
                term = Some(epoch);
                ledger.record(format_args!("term {epoch}"));
            }
            // Each action's own id (microseconds since the epoch: unique for one host).
            let action_id = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as i64;
            // Bounded, like every call of the client's own pieces: a commit on a primary cut off
            // from its synchronous standby never returns; the connection is then given up.
            match tokio::time::timeout(call_timeout, leader_action(&mut writer, &plan, epoch, action_id))
                .await
            {
                Ok(true) => ledger.record(format_args!("action {epoch} {action_id}")),
                Ok(false) => {}
                Err(_) => reconnect(&mut writer, &db, &writer_name, call_timeout).await,
            }
        }
        let done = async {
            tokio::time::timeout(call_timeout, all_done(&writer, &plan, expected)).await.unwrap_or(false)
        };
        if SystemTime::now() >= plan.end() && (late(&plan) || done.await) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    scheduler.shutdown(Duration::from_secs(1)).await.map_err(e)?;
    elector.shutdown(Duration::from_secs(10)).await.map_err(e)?;
    Ok(())
}

/// Replaces `writer` with a new connection, within `limit`; if none can be made now (a
/// failover in progress), the next round tries again.
async fn reconnect(writer: &mut tokio_postgres::Client, db: &Database, name: &str, limit: Duration) {
    if let Ok(Ok(fresh)) = tokio::time::timeout(limit, rendezvous_client::connect_as(db, name)).await {
        *writer = fresh;
    }
}

/// A fleet host's handlers at most (`WorkerOptions::max_concurrent`, each with a job
/// connection), under chaos and failovers.
pub const HANDLERS: usize = 32;

/// A fleet host's sessions beside its handlers': the Worker's control, side and retention
/// connections, the elector's and the writer's.
pub const SESSIONS_BESIDE_HANDLERS: usize = 5;

/// How long the host waits for one call on its own connection (under chaos).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Past the end by more than 20 s: stop whatever is left (the report shows it).
fn late(plan: &HostPlan) -> bool {
    SystemTime::now() > plan.end() + Duration::from_secs(20)
}

/// The leader-only surface (an autonomous heartbeat prompt, say), fenced by the epoch:
/// a deposed leader's action is refused and written nowhere. True when it was committed and
/// replicated as the server's settings ask (a commit of our own: the cancelled-wait count is
/// checked around it).
async fn leader_action(
    client: &mut tokio_postgres::Client,
    plan: &HostPlan,
    epoch: i64,
    action_id: i64,
) -> bool {
    let Ok(tx) = client.transaction().await else { return false };
    if assert_leader(&tx, &plan.group(), epoch).await.is_err() {
        return false;
    }
    let inserted =
        tx.execute(sql::FLEET_LEADER_ACTION, &[&plan.tag, &epoch, &plan.host_id, &action_id]).await;
    let before = cancelled_sync_waits();
    inserted.is_ok() && tx.commit().await.is_ok() && cancelled_sync_waits() == before
}

/// Every firing of the fleet's tasks due up to the end is completed (nothing pending,
/// running or waiting for a retry, and the cursor of every task past the end).
async fn all_done(client: &tokio_postgres::Client, plan: &HostPlan, tasks: u32) -> bool {
    let end = plan.end();
    client
        .query_one(
            sql::FLEET_ALL_DONE,
            &[&format!("{}-task-%", plan.tag), &end, &i64::from(tasks), &plan.tag],
        )
        .await
        .map(|r| r.get(0))
        .unwrap_or(false)
}
