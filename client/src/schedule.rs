//! Recurring tasks on the database's clock, run once across the fleet: the [`Scheduler`], and
//! the SQL calls it is made of.
//!
//! Schedules live in the database (`rendezvous.schedule_task`); the database decides when a
//! firing is due (`rendezvous.due_firings`, its clock, the task's catch-up and overlap
//! policies) and who runs it (the claim). The HRW rank only decides who *tries* first: the
//! top-ranked live host claims a due firing at once, the next after one `rank_delay`, and so
//! on, so a dead host's firings are picked up without a herd. docs/schedules.md has the rules.
//!
//! ```no_run
//! use std::time::Duration;
//! use rendezvous_client::{Job, Scheduler, TaskSpec};
//!
//! # async fn run() -> rendezvous_client::Result<()> {
//! let scheduler = Scheduler::builder("postgres://app@db.internal/app", "host-1")
//!     .task(TaskSpec::new("nightly-report", "0 0 * * *").with_time_zone("Europe/Berlin"), |mut job: Job| async move {
//!         // Effects and completion in one transaction, fenced by the claim's token.
//!         let tx = job.transaction().await?;
//!         tx.execute("INSERT INTO reports (day) VALUES (current_date)", &[]).await?;
//!         tx.complete().await?;
//!         Ok::<_, rendezvous_client::Error>(())
//!     })
//!     .start()
//!     .await?;
//! // ... until the service stops:
//! let report = scheduler.shutdown(Duration::from_secs(10)).await?;
//! println!("{} firings released to other hosts", report.released);
//! # Ok(())
//! # }
//! ```
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, GenericClient, Transaction};

use crate::background::{Background, ShutdownReport};
use crate::firing::{self, Firing};
use crate::membership::{self, LiveView, DEFAULT_STALENESS};
use crate::runs::{self, RunClaim};
use crate::{replication, signals, sql, Database, Error, Pool, PoolOptions, PooledClient, Result};

/// What a task does with a firing whose previous one is still unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// Run it anyway, beside the previous one.
    Allow,
    /// Do not run it; it is counted in the task's `skipped` (the default).
    #[default]
    Skip,
}

/// Which missed fire times run after the whole fleet was down (or a task was behind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// Only the latest missed fire time runs (the default).
    #[default]
    Latest,
    /// Every missed fire time within the task's catch-up window runs, oldest first.
    All,
    /// A missed fire time runs only if it is within the catch-up window; older ones never.
    Skip,
}

impl Overlap {
    fn as_sql(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
        }
    }
}

impl CatchUp {
    fn as_sql(self) -> &'static str {
        match self {
            CatchUp::Latest => "latest",
            CatchUp::All => "all",
            CatchUp::Skip => "skip",
        }
    }
}

/// A recurring task's definition, as `rendezvous.schedule_task` takes it.
///
/// ```
/// use std::time::Duration;
/// use rendezvous_client::{CatchUp, TaskSpec};
///
/// let spec = TaskSpec::new("nightly-report", "0 0 * * *")
///     .with_time_zone("Europe/Berlin")
///     .with_catch_up(CatchUp::Latest)
///     .with_max_attempts(5);
/// let every = TaskSpec::every("sync", Duration::from_secs(30));
/// assert_eq!(every.schedule, "every 30 seconds");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TaskSpec {
    /// The task's id.
    pub task_id: String,
    /// 5-field cron (minute first), 6-field cron (seconds first), a macro (`@hourly`, `@daily`,
    /// …) or `every <n> seconds|minutes|hours|days`.
    pub schedule: String,
    /// IANA time zone the cron fields are read in. Default `UTC`.
    pub time_zone: String,
    /// Default [`Overlap::Skip`].
    pub overlap: Overlap,
    /// Default [`CatchUp::Latest`].
    pub catch_up: CatchUp,
    /// How far back [`CatchUp::All`] and [`CatchUp::Skip`] reach. Default 1 hour.
    pub catch_up_window: Duration,
    /// The lease of each claim: how long a live but silent holder (a stopped process, a
    /// partition) keeps a firing from others. Renewed every third of it while the handler
    /// runs, and the claim also ends with the holder's session, so it need not cover the
    /// work. Default 30 s (see operations.md, "Choosing a lease").
    pub lease: Duration,
    /// Failed attempts before a firing is failed for good. Default 3.
    pub max_attempts: i32,
    /// Wait before the first retry, doubling with each failure (at most 1 hour). Default 10 s.
    pub retry_backoff: Duration,
}

impl TaskSpec {
    /// A task on a cron schedule (or any schedule text the extension takes), in UTC.
    pub fn new(task_id: impl Into<String>, schedule: impl Into<String>) -> TaskSpec {
        TaskSpec {
            task_id: task_id.into(),
            schedule: schedule.into(),
            time_zone: "UTC".into(),
            overlap: Overlap::default(),
            catch_up: CatchUp::default(),
            catch_up_window: Duration::from_secs(3600),
            lease: Duration::from_secs(30),
            max_attempts: 3,
            retry_backoff: Duration::from_secs(10),
        }
    }

    /// A task every `period` (whole seconds), counted from the Unix epoch.
    pub fn every(task_id: impl Into<String>, period: Duration) -> TaskSpec {
        TaskSpec::new(task_id, format!("every {} seconds", period.as_secs()))
    }

    /// Sets [`time_zone`](Self::time_zone).
    #[must_use]
    pub fn with_time_zone(mut self, time_zone: impl Into<String>) -> Self {
        self.time_zone = time_zone.into();
        self
    }

    /// Sets [`overlap`](Self::overlap).
    #[must_use]
    pub fn with_overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// Sets [`catch_up`](Self::catch_up).
    #[must_use]
    pub fn with_catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// Sets [`catch_up_window`](Self::catch_up_window).
    #[must_use]
    pub fn with_catch_up_window(mut self, window: Duration) -> Self {
        self.catch_up_window = window;
        self
    }

    /// Sets [`lease`](Self::lease).
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets [`max_attempts`](Self::max_attempts).
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets [`retry_backoff`](Self::retry_backoff).
    #[must_use]
    pub fn with_retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = backoff;
        self
    }
}

/// Creates or updates a task (idempotent); returns its next fire time. Bad schedules, unknown
/// zones and bad policies fail with SQLSTATE 22023 (22004 for a missing value).
pub async fn schedule_task(client: &impl GenericClient, spec: &TaskSpec) -> Result<SystemTime> {
    crate::error::check_id("task_id", &spec.task_id)?;
    let row = sql::query_one(
        client,
        sql::SCHEDULE_TASK,
        &[
            &spec.task_id,
            &spec.schedule,
            &spec.time_zone,
            &spec.overlap.as_sql(),
            &spec.catch_up.as_sql(),
            &spec.catch_up_window.as_secs_f64(),
            &spec.lease.as_secs_f64(),
            &spec.max_attempts,
            &spec.retry_backoff.as_secs_f64(),
        ],
    )
    .await?;
    Ok(row.get(0))
}

/// Removes a task and its pending firings; true when it existed (needs `rendezvous_admin`).
pub async fn unschedule_task(client: &impl GenericClient, task_id: &str) -> Result<bool> {
    Ok(sql::query_one(client, sql::UNSCHEDULE_TASK, &[&task_id]).await?.get(0))
}

/// Stops new firings of a task (idempotent; needs `rendezvous_admin`). SQLSTATE P0002 when
/// there is no such task.
pub async fn pause_task(client: &impl GenericClient, task_id: &str) -> Result<()> {
    sql::execute(client, sql::PAUSE_TASK, &[&task_id]).await?;
    Ok(())
}

/// Resumes a paused task from its next fire time after now, which it returns (idempotent;
/// needs `rendezvous_admin`).
pub async fn resume_task(client: &impl GenericClient, task_id: &str) -> Result<Option<SystemTime>> {
    Ok(sql::query_one(client, sql::RESUME_TASK, &[&task_id]).await?.get(0))
}

/// The fire times of `schedule` in `time_zone` after `after`, up to `until` (inclusive), as the
/// extension evaluates them.
pub async fn fire_times(
    client: &impl GenericClient,
    schedule: &str,
    time_zone: &str,
    after: SystemTime,
    until: SystemTime,
) -> Result<Vec<SystemTime>> {
    let rows = sql::query(client, sql::FIRE_TIMES, &[&schedule, &time_zone, &after, &until]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// A firing that can be claimed now, as `rendezvous.due_firings` reports it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DueFiring {
    /// The firing.
    pub firing: Firing,
    /// Since when it can be claimed (database clock): its fire time, or the end of the last
    /// lease or retry backoff.
    pub claimable_since: SystemTime,
    /// Claims so far.
    pub attempts: i32,
    /// Failed attempts so far.
    pub failures: i32,
    /// Its task's lease.
    pub lease: Duration,
}

/// The firings claimable now by the database clock (after it made the ones that came due), and
/// the database's clock reading.
pub async fn due_firings(client: &impl GenericClient, max: i32) -> Result<(Vec<DueFiring>, SystemTime)> {
    let (due, db_now) = due_list(client, max).await?;
    let db_now = match db_now {
        Some(t) => t,
        None => sql::query_one(client, sql::CLOCK, &[]).await?.get(0),
    };
    Ok((due, db_now))
}

/// The due firings, and the database clock when there was at least one (a row carries it).
async fn due_list(client: &impl GenericClient, max: i32) -> Result<(Vec<DueFiring>, Option<SystemTime>)> {
    let rows = sql::query(client, sql::DUE_FIRINGS, &[&max]).await?;
    let db_now = rows.first().map(|r| r.get::<_, SystemTime>(6));
    let due = rows
        .iter()
        .map(|r| DueFiring {
            firing: Firing::new(r.get::<_, String>(0), r.get(1)),
            claimable_since: r.get(2),
            attempts: r.get(3),
            failures: r.get(4),
            lease: Duration::from_secs_f64(r.get::<_, f64>(5).max(0.001)),
        })
        .collect();
    Ok((due, db_now))
}

/// The database clock, and when a scheduled firing may next become claimable (`None`: nothing
/// scheduled).
pub async fn next_due_at(client: &impl GenericClient) -> Result<(SystemTime, Option<SystemTime>)> {
    let row = sql::query_one(client, sql::NEXT_DUE, &[]).await?;
    Ok((row.get(0), row.get(1)))
}

/// What [`fail_firing`] recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// It will be claimable again at this instant (database clock).
    RetryAt(SystemTime),
    /// It failed for good: max attempts reached (or a firing of no scheduled task).
    Failed,
    /// Nothing recorded: the token was stale or the firing finished.
    Stale,
}

/// Records a failed attempt of a claimed firing (retried with backoff up to the task's max
/// attempts, then failed for good). `error` is kept (its first 2,000 characters) for operators.
pub async fn fail_firing(
    client: &impl GenericClient,
    firing: &Firing,
    token: i64,
    error: &str,
) -> Result<FailOutcome> {
    let row =
        sql::query_one(client, sql::FAIL_FIRING, &[&firing.task_id, &firing.fire_at, &token, &error]).await?;
    let recorded: bool = row.get(0);
    let retry_at: Option<SystemTime> = row.get(1);
    Ok(match (recorded, retry_at) {
        (false, _) => FailOutcome::Stale,
        (true, Some(at)) => FailOutcome::RetryAt(at),
        (true, None) => FailOutcome::Failed,
    })
}

/// The error type handlers return: anything that converts into a boxed error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type HandlerFn =
    dyn Fn(Job) -> Pin<Box<dyn Future<Output = std::result::Result<(), BoxError>> + Send>> + Send + Sync;

/// A task's or workflow's handler, with its own error type boxed.
fn boxed<H, Fut, E>(handler: H) -> Arc<HandlerFn>
where
    H: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
    E: Into<BoxError>,
{
    Arc::new(move |job| {
        let fut = handler(job);
        Box::pin(async move { fut.await.map_err(Into::into) })
    })
}

/// How a host reads "now" to time its rank delays. Correctness never depends on it (leases
/// and claims use the database clock); only who tries first does.
#[derive(Clone, Default)]
pub enum Clock {
    /// The local clock corrected by its offset from the database's, measured at each look.
    #[default]
    Database,
    /// A clock of the caller's (for instance a deliberately skewed one, to test that skew
    /// changes nothing but timing).
    Local(Arc<dyn Fn() -> SystemTime + Send + Sync>),
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Clock::Database => "Clock::Database",
            Clock::Local(_) => "Clock::Local",
        })
    }
}

/// Settings for a [`Scheduler`].
///
/// Non-exhaustive (later versions may add settings): start from [`Default`] and change what
/// you need with the `with_*` methods.
///
/// ```
/// use std::time::Duration;
/// use rendezvous_client::SchedulerOptions;
///
/// let options = SchedulerOptions::default().with_max_concurrent(4).with_rank_delay(Duration::from_millis(200));
/// assert_eq!(options.max_concurrent, 4);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SchedulerOptions {
    /// Longest sleep between two looks at the database. The scheduler also wakes when the
    /// database says the next firing is due. Default 1 s.
    pub poll: Duration,
    /// The host ranked r for a firing tries it r × `rank_delay` after it became claimable.
    /// Default 500 ms.
    pub rank_delay: Duration,
    /// Firings run at once (one pooled connection each). Default 16.
    pub max_concurrent: usize,
    /// Time between membership heartbeats. Default 2 s.
    pub heartbeat: Duration,
    /// Staleness of the live set the ranks are computed over. Default 10 s.
    pub staleness: Duration,
    /// This host's weight in the live set. Default 1.
    pub weight: f64,
    /// Longest wait between two reconnection attempts (they start at 100 ms and double, with
    /// jitter). Default 5 s.
    pub max_backoff: Duration,
    /// How this host reads "now" for its rank delays (correctness never depends on it).
    pub clock: Clock,
    /// The lease of a claimed run (renewed every third of it while its handler runs; the claim
    /// also ends with this host's session). Default 30 s.
    pub run_lease: Duration,
    /// The longest the scheduler waits for one look at the database or one call on its side
    /// connection (a renewal, a batch of completions): a primary that cannot commit (cut off
    /// from its synchronous standby) or a dead network path would otherwise hold it forever.
    /// Past it, the connection is dropped and made again (through a multi-host URL, to whichever
    /// server accepts writes). Default 10 s.
    pub call_timeout: Duration,
    /// Runs claimed ahead of free slots into a local queue, so a handler that finishes starts
    /// the next run without a look at the database (a claim then fetches many). Queued runs
    /// are held by this host, their leases running from the claim: one queued for more than
    /// half its lease is released instead of run, and shutdown releases the queue. It trades
    /// balance across hosts for throughput with short handlers. Default 0 (none).
    pub prefetch: usize,
    /// How often a retention pass runs ([`retention`](crate::retention): finished firings and
    /// runs and dead hosts older than their settings are deleted, in bounded batches with
    /// pauses). Only the host ranking first for it among the live hosts runs it, on a
    /// connection of its own. `None`: this host never does. Default 60 s.
    pub retention: Option<Duration>,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            poll: Duration::from_secs(1),
            rank_delay: Duration::from_millis(500),
            max_concurrent: 16,
            heartbeat: Duration::from_secs(2),
            staleness: DEFAULT_STALENESS,
            weight: 1.0,
            max_backoff: Duration::from_secs(5),
            clock: Clock::Database,
            run_lease: Duration::from_secs(30),
            call_timeout: Duration::from_secs(10),
            prefetch: 0,
            retention: Some(Duration::from_secs(60)),
        }
    }
}

impl SchedulerOptions {
    /// Sets [`poll`](Self::poll).
    #[must_use]
    pub fn with_poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// Sets [`rank_delay`](Self::rank_delay).
    #[must_use]
    pub fn with_rank_delay(mut self, rank_delay: Duration) -> Self {
        self.rank_delay = rank_delay;
        self
    }

    /// Sets [`max_concurrent`](Self::max_concurrent).
    #[must_use]
    pub fn with_max_concurrent(mut self, max_concurrent: usize) -> Self {
        self.max_concurrent = max_concurrent;
        self
    }

    /// Sets [`heartbeat`](Self::heartbeat).
    #[must_use]
    pub fn with_heartbeat(mut self, heartbeat: Duration) -> Self {
        self.heartbeat = heartbeat;
        self
    }

    /// Sets [`staleness`](Self::staleness).
    #[must_use]
    pub fn with_staleness(mut self, staleness: Duration) -> Self {
        self.staleness = staleness;
        self
    }

    /// Sets [`weight`](Self::weight).
    #[must_use]
    pub fn with_weight(mut self, weight: f64) -> Self {
        self.weight = weight;
        self
    }

    /// Sets [`max_backoff`](Self::max_backoff).
    #[must_use]
    pub fn with_max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }

    /// Sets [`clock`](Self::clock).
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Sets [`prefetch`](Self::prefetch).
    #[must_use]
    pub fn with_prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Sets [`retention`](Self#structfield.retention).
    #[must_use]
    pub fn with_retention(mut self, retention: Option<Duration>) -> Self {
        self.retention = retention;
        self
    }

    /// Sets [`run_lease`](Self::run_lease).
    #[must_use]
    pub fn with_run_lease(mut self, run_lease: Duration) -> Self {
        self.run_lease = run_lease;
        self
    }

    /// Sets [`call_timeout`](Self::call_timeout).
    #[must_use]
    pub fn with_call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }
}

/// Counts of what a [`Scheduler`] did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerStats {
    /// Claims won.
    pub claimed: u64,
    /// Claim attempts lost (another host was first): wasted work.
    pub lost_claims: u64,
    /// Firings completed here.
    pub completed: u64,
    /// Completions refused: the lease had run out and another host took over.
    pub stale_completions: u64,
    /// Failed attempts recorded (each is retried, or failed for good).
    pub failed_attempts: u64,
    /// Failed attempts that were the last one: failed for good.
    pub failed_for_good: u64,
    /// Claims given back unfinished at shutdown.
    pub released: u64,
    /// New control connections after one was lost.
    pub reconnects: u64,
    /// Looks at the database and connection attempts given up at the call timeout (a primary
    /// that cannot commit, a dead network path); each drops the connection.
    pub timeouts: u64,
}

#[derive(Default)]
struct Counters {
    claimed: AtomicU64,
    lost_claims: AtomicU64,
    completed: AtomicU64,
    stale_completions: AtomicU64,
    failed_attempts: AtomicU64,
    failed_for_good: AtomicU64,
    released: AtomicU64,
    reconnects: AtomicU64,
    timeouts: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> SchedulerStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SchedulerStats {
            claimed: g(&self.claimed),
            lost_claims: g(&self.lost_claims),
            completed: g(&self.completed),
            stale_completions: g(&self.stale_completions),
            failed_attempts: g(&self.failed_attempts),
            failed_for_good: g(&self.failed_for_good),
            released: g(&self.released),
            reconnects: g(&self.reconnects),
            timeouts: g(&self.timeouts),
        }
    }
}

/// One shared connection for lease renewals, completions and failures (never the handlers'
/// transactions), reconnected when lost.
struct Side {
    database: Database,
    application_name: String,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// The longest one call may take before the connection is given up.
    timeout: Duration,
}

impl Side {
    async fn get(&self) -> Result<Arc<Client>> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let c = Arc::new(crate::connection::connect_as(&self.database, &self.application_name).await?);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Runs `call` on the side connection, reconnecting and trying again (three times in all)
    /// when the connection was lost or the call got no answer within the timeout (the
    /// connection is then dropped: a primary that cannot commit must not hold it).
    async fn call<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: Fn(Arc<Client>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut last = None;
        for attempt in 0..3u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
            let client = match self.get().await {
                Ok(c) => c,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            match tokio::time::timeout(self.timeout, call(client.clone())).await {
                // A lost connection, or a server that stopped taking writes (its connection
                // closes itself; lib.rs): the next attempt connects again.
                Ok(Err(e))
                    if client.is_closed() || e.sqlstate() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) =>
                {
                    last = Some(e)
                }
                Ok(other) => return other,
                Err(_) => {
                    tracing::warn!(timeout = ?self.timeout, "no answer on the side connection; connecting again");
                    let mut slot = self.client.lock().await;
                    if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, &client)) {
                        *slot = None;
                    }
                    last = Some(crate::connection::no_answer(self.timeout));
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }
}

/// A completion waiting for its batch: the firing or run, its token, and where to say how it
/// went.
type Completion = (Work, i64, Reply);

/// Where a completion's outcome goes: true when its token still held the work.
type Reply = tokio::sync::oneshot::Sender<std::result::Result<bool, String>>;

/// Completes firings and runs in batches on the side connection: one `complete_firings` and one
/// `complete_runs` statement (one commit, one flush each) for every completion that arrived
/// meanwhile. Ends when the scheduler is dropped (its sender with it).
async fn complete_in_batches(side: Arc<Side>, mut rx: tokio::sync::mpsc::UnboundedReceiver<Completion>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 512 {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        let (mut firings, mut runs) = (Vec::new(), Vec::new());
        for (work, token, reply) in batch {
            match work {
                Work::Firing(f) => firings.push(((f, token), reply)),
                Work::Run(r) => runs.push(((r.run_id, token), reply)),
            }
        }
        if !firings.is_empty() {
            let pairs: Vec<(Firing, i64)> = firings.iter().map(|(p, _)| p.clone()).collect();
            let result = side
                .call(|c| {
                    let pairs = pairs.clone();
                    async move {
                        let refs: Vec<(&Firing, i64)> = pairs.iter().map(|(f, t)| (f, *t)).collect();
                        firing::complete_firings(&*c, &refs).await
                    }
                })
                .await;
            answer(firings.into_iter().map(|(_, reply)| reply), result);
        }
        if !runs.is_empty() {
            let pairs: Vec<(i64, i64)> = runs.iter().map(|(p, _)| *p).collect();
            let result = side
                .call(|c| {
                    let pairs = pairs.clone();
                    async move { runs::complete_runs(&*c, &pairs).await }
                })
                .await;
            answer(runs.into_iter().map(|(_, reply)| reply), result);
        }
    }
}

/// Tells each completion of a batch how it went.
fn answer(replies: impl Iterator<Item = Reply>, result: Result<Vec<bool>>) {
    match result {
        Ok(done) => {
            for (reply, ok) in replies.zip(done) {
                let _ = reply.send(Ok(ok));
            }
        }
        Err(e) => {
            let e = e.to_string();
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

struct Shared {
    database: Database,
    host_id: String,
    options: SchedulerOptions,
    tasks: Vec<TaskSpec>,
    handlers: HashMap<String, Arc<HandlerFn>>,
    /// Handlers of admitted runs, by workflow_ref.
    workflows: HashMap<String, Arc<HandlerFn>>,
    pool: Pool,
    side: Arc<Side>,
    completions: tokio::sync::mpsc::UnboundedSender<Completion>,
    counters: Counters,
    /// Work running here, by key: what shutdown releases if it does not finish.
    running: Mutex<HashMap<String, (Work, i64)>>,
    slots: Arc<Semaphore>,
    /// Woken when a firing finishes (a slot is free).
    finished: Notify,
    /// Set when the last look filled every free slot with runs: more may be waiting, so a
    /// finishing job makes the next look at once instead of gathering others first.
    runs_waiting: AtomicBool,
    /// Set when the last look found more claimable firings than free slots: as for runs.
    firings_waiting: AtomicBool,
    /// Work claimed ahead of free slots, oldest claim first: runs (`prefetch`) and the
    /// firings this host ranks first for (up to `FIRINGS_AHEAD_PER_SLOT` a slot).
    queued: Mutex<std::collections::VecDeque<Queued>>,
    /// This host ranks first for retention in its last view of the live set.
    retention_owner: AtomicBool,
}

/// Claimed work waiting in the local queue for a free slot.
struct Queued {
    work: Work,
    token: i64,
    attempt: i32,
    lease: Duration,
    claimed_at: Instant,
    /// When a firing came due, on this host's monotonic clock (its start lateness is
    /// measured from it).
    due: Option<Instant>,
}

/// What a job runs: a scheduled firing, or an admitted run.
#[derive(Debug, Clone)]
enum Work {
    Firing(Firing),
    Run(RunClaim),
}

impl Work {
    fn key(&self) -> Result<String> {
        match self {
            Work::Firing(f) => f.key(),
            Work::Run(r) => Ok(r.key()),
        }
    }
}

/// Claimed work, handed to its handler: a firing of a task or an admitted run, its claim's
/// token, and a pooled connection for the handler's writes.
pub struct Job {
    work: Work,
    key: String,
    token: i64,
    attempt: i32,
    host_id: String,
    /// Taken from the pool on first use: a handler that never touches the database holds no
    /// connection.
    client: tokio::sync::OnceCell<PooledClient>,
    shared: Arc<Shared>,
    completed: Arc<AtomicBool>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("key", &self.key).field("token", &self.token).finish_non_exhaustive()
    }
}

impl Job {
    /// The firing, when this job runs a task's firing.
    pub fn firing(&self) -> Option<&Firing> {
        match &self.work {
            Work::Firing(f) => Some(f),
            Work::Run(_) => None,
        }
    }

    /// The run (its id, tenant, workflow and input), when this job runs an admitted run.
    pub fn run(&self) -> Option<&RunClaim> {
        match &self.work {
            Work::Run(r) => Some(r),
            Work::Firing(_) => None,
        }
    }

    /// The work's canonical key: the firing key, or `run:<run_id>`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This claim's token: fence database writes with it ([`Job::transaction`] does).
    pub fn token(&self) -> i64 {
        self.token
    }

    /// Which attempt this is (1 for the first claim; takeovers and retries count up).
    pub fn attempt(&self) -> i32 {
        self.attempt
    }

    /// The host running it.
    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// A key for external calls that must not repeat within this claim: `<key>#<token>`.
    pub fn idempotency_key(&self) -> String {
        format!("{}#{}", self.key, self.token)
    }

    /// The job's connection (from the scheduler's pool, taken on first use), for reads and
    /// writes outside the fenced transaction.
    pub async fn client(&self) -> Result<&Client> {
        Ok(self.client.get_or_try_init(|| self.shared.pool.get()).await?)
    }

    /// Begins a transaction on the job's connection whose [`FencedTransaction::complete`]
    /// checks the token, marks the firing or run done and commits, all at once: the handler's
    /// writes commit if and only if its claim is still current.
    pub async fn transaction(&mut self) -> Result<FencedTransaction<'_>> {
        self.client().await?;
        let client = self.client.get_mut().expect("connected just above");
        let tx = client.transaction().await?;
        Ok(FencedTransaction {
            tx,
            work: self.work.clone(),
            token: self.token,
            completed: self.completed.clone(),
        })
    }
}

/// A transaction on a [`Job`]'s connection (use it as a [`Transaction`]), ended by
/// [`complete`](Self::complete), or rolled back when dropped.
pub struct FencedTransaction<'a> {
    tx: Transaction<'a>,
    work: Work,
    token: i64,
    completed: Arc<AtomicBool>,
}

impl std::fmt::Debug for FencedTransaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedTransaction").field("work", &self.work).field("token", &self.token).finish()
    }
}

impl<'a> std::ops::Deref for FencedTransaction<'a> {
    type Target = Transaction<'a>;

    fn deref(&self) -> &Transaction<'a> {
        &self.tx
    }
}

impl FencedTransaction<'_> {
    /// Checks the token (SQLSTATE RZ001 if another host took the work over), marks the
    /// firing completed (the run succeeded) and commits the transaction with it.
    pub async fn complete(self) -> Result<()> {
        self.complete_with(None).await
    }

    /// [`complete`](Self::complete), recording `output` as a run's result (a firing keeps none).
    pub async fn complete_with(self, output: Option<serde_json::Value>) -> Result<()> {
        let (completed, pid) = match &self.work {
            Work::Firing(f) => {
                firing::assert_firing(&self.tx, f, self.token).await?;
                firing::complete_firing_on_backend(&self.tx, f, self.token).await?
            }
            Work::Run(r) => {
                runs::assert_run(&self.tx, r.run_id, self.token).await?;
                let row =
                    sql::query_one(&self.tx, sql::COMPLETE_RUN, &[&r.run_id, &self.token, &output]).await?;
                (row.get(0), row.get(1))
            }
        };
        if !completed {
            return Err(Error::ClaimLost(format!(
                "token {} no longer holds {}: another host took it over",
                self.token,
                self.work.key()?
            )));
        }
        let tx = self.tx;
        let commit = async { Ok((tx.commit().await?, Some(pid))) };
        replication::acknowledged("a fenced transaction's commit", commit).await?;
        self.completed.store(true, Ordering::SeqCst);
        Ok(())
    }
}

/// Builds a [`Scheduler`]: its tasks (schedules registered at start, idempotently) and
/// handlers.
pub struct SchedulerBuilder {
    database: Database,
    host_id: String,
    options: SchedulerOptions,
    tasks: Vec<TaskSpec>,
    handlers: HashMap<String, Arc<HandlerFn>>,
    workflows: HashMap<String, Arc<HandlerFn>>,
}

impl std::fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerBuilder")
            .field("host_id", &self.host_id)
            .field("tasks", &self.tasks)
            .field("handlers", &self.handlers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl SchedulerBuilder {
    /// Sets the options.
    #[must_use]
    pub fn options(mut self, options: SchedulerOptions) -> Self {
        self.options = options;
        self
    }

    /// A task this host schedules (at start, and again after each reconnection: idempotent)
    /// and runs with `handler`.
    #[must_use]
    pub fn task<H, Fut, E>(mut self, spec: TaskSpec, handler: H) -> Self
    where
        H: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let id = spec.task_id.clone();
        self.tasks.retain(|t| t.task_id != id);
        self.tasks.push(spec);
        self.handler(id, handler)
    }

    /// A handler for a task scheduled elsewhere (in SQL, or by another service).
    #[must_use]
    pub fn handler<H, Fut, E>(mut self, task_id: impl Into<String>, handler: H) -> Self
    where
        H: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.handlers.insert(task_id.into(), boxed(handler));
        self
    }

    /// A handler for admitted runs of `workflow_ref` ([`spawn_run`](crate::spawn_run)): this
    /// host claims them (its own by HRW at once, others' after a rank delay each), runs each
    /// with `handler` and completes or fails it, as it does firings. The [`Job`]'s
    /// [`run`](Job::run) has the run's input.
    #[must_use]
    pub fn workflow<H, Fut, E>(mut self, workflow_ref: impl Into<String>, handler: H) -> Self
    where
        H: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.workflows.insert(workflow_ref.into(), boxed(handler));
        self
    }

    /// Connects, checks the extension, registers the tasks, joins the membership and starts
    /// the scheduling loop. Configuration errors (bad schedules, unreachable database) fail
    /// here; after this, connection losses are retried by themselves.
    pub async fn start(self) -> Result<Scheduler> {
        crate::error::check_id("host_id", &self.host_id)?;
        let o = &self.options;
        if o.poll.is_zero()
            || o.max_concurrent == 0
            || o.heartbeat.is_zero()
            || o.staleness.is_zero()
            || o.call_timeout.is_zero()
        {
            return Err(Error::InvalidArgument(
                "poll, max_concurrent, heartbeat, staleness and call_timeout must be greater than zero"
                    .into(),
            ));
        }
        if o.heartbeat >= o.staleness {
            return Err(Error::InvalidArgument(format!(
                "heartbeat ({:?}) must be shorter than staleness ({:?}), or the host drops out of its own live set",
                o.heartbeat, o.staleness
            )));
        }
        if self.handlers.is_empty() && self.workflows.is_empty() {
            return Err(Error::InvalidArgument(
                "a scheduler needs at least one task or workflow handler".into(),
            ));
        }
        if o.run_lease < Duration::from_millis(30) {
            return Err(Error::InvalidArgument(format!(
                "run_lease ({:?}) must be at least 30 ms",
                o.run_lease
            )));
        }
        let application_name = format!("rendezvous scheduler {}", self.host_id);
        let side = Arc::new(Side {
            database: self.database.clone(),
            application_name: format!("{application_name} leases"),
            client: tokio::sync::Mutex::new(None),
            timeout: self.options.call_timeout,
        });
        let (completions, pending) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(complete_in_batches(side.clone(), pending));
        let shared = Arc::new(Shared {
            // One connection per running job at most, made on a job's first use.
            pool: Pool::new(
                &self.database,
                PoolOptions::default()
                    .with_max_size(self.options.max_concurrent)
                    .with_wait_timeout(self.options.call_timeout)
                    .with_connect_timeout(self.options.call_timeout)
                    .with_application_name(format!("{application_name} job")),
            )?,
            side: side.clone(),
            completions,
            slots: Arc::new(Semaphore::new(self.options.max_concurrent)),
            database: self.database,
            host_id: self.host_id,
            options: self.options,
            tasks: self.tasks,
            handlers: self.handlers,
            workflows: self.workflows,
            counters: Counters::default(),
            running: Mutex::new(HashMap::new()),
            finished: Notify::new(),
            runs_waiting: AtomicBool::new(false),
            firings_waiting: AtomicBool::new(false),
            queued: Mutex::new(std::collections::VecDeque::new()),
            retention_owner: AtomicBool::new(false),
        });
        let limit = shared.options.call_timeout;
        let control = tokio::time::timeout(limit, open_control(&shared))
            .await
            .map_err(|_| crate::connection::no_answer(limit))??;
        // What an earlier process under this host id still holds runs again at once.
        let released = runs::release_host_claims(&control.client, &shared.host_id).await?;
        if released > 0 {
            tracing::warn!(host_id = %shared.host_id, released, "ended claims an earlier process of this host still held");
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        if let Some(every) = shared.options.retention {
            tokio::spawn(retention_passes(shared.clone(), every, stop_rx.clone()));
        }
        let task = tokio::spawn(run(shared.clone(), control, stop_rx));
        Ok(Scheduler { shared, background: Arc::new(Background::new(stop_tx, task)) })
    }
}

/// Runs recurring tasks' firings on this host: one object a service starts and shuts down.
///
/// It joins the membership (heartbeats on its own connection), asks the database for due
/// firings, claims those it ranks first for (and, after r × `rank_delay`, those it ranks r-th
/// for that nobody took), and runs each claim as its own Tokio task with a pooled connection,
/// renewing its lease meanwhile, up to `max_concurrent` at once (the firings it ranks first
/// for are claimed even beyond its free slots, into a local queue). A handler's `Ok` completes the
/// firing (unless it completed it itself in a [`FencedTransaction`]); an `Err` or a panic
/// records a failed attempt, retried with the task's backoff until its max attempts. Lost
/// connections and terminated backends are reconnected with backoff and jitter.
#[derive(Clone)]
pub struct Scheduler {
    shared: Arc<Shared>,
    /// The scheduling loop; it returns the jobs still running when it stopped.
    background: Arc<Background<Vec<JoinHandle<()>>>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").field("host_id", &self.shared.host_id).finish_non_exhaustive()
    }
}

impl Scheduler {
    /// Starts building a scheduler for `host_id` on `database` (a URL, or a [`Database`]).
    pub fn builder(database: impl Into<Database>, host_id: impl Into<String>) -> SchedulerBuilder {
        SchedulerBuilder {
            database: database.into(),
            host_id: host_id.into(),
            options: SchedulerOptions::default(),
            tasks: Vec::new(),
            handlers: HashMap::new(),
            workflows: HashMap::new(),
        }
    }

    /// This host's id.
    pub fn host_id(&self) -> &str {
        &self.shared.host_id
    }

    /// What it did so far.
    pub fn stats(&self) -> SchedulerStats {
        self.shared.counters.snapshot()
    }

    /// Stops claiming at once (for every clone of this handle), lets running firings and runs
    /// finish until `deadline`, releases those still running then (so the next host takes them
    /// over at once instead of waiting out the lease), and leaves the membership.
    pub async fn shutdown(self, deadline: Duration) -> Result<ShutdownReport> {
        self.background.shutdown_once(self.stop_all(deadline)).await
    }

    async fn stop_all(&self, deadline: Duration) -> Result<ShutdownReport> {
        let until = Instant::now() + deadline;
        let mut report = ShutdownReport { on_time: true, ..ShutdownReport::default() };
        // The loop stops at once when asked; its jobs are awaited (to the deadline) below. Not
        // bounded here: cut off, it would leave jobs running whose claims are released below.
        let jobs = match self.background.stop_and_join().await {
            None => return Ok(ShutdownReport::default()),
            Some(jobs) => jobs?,
        };
        for mut job in jobs {
            if job.is_finished() {
                continue;
            }
            match tokio::time::timeout_at(until.into(), &mut job).await {
                Ok(_) => report.finished += 1,
                Err(_) => {
                    job.abort();
                    report.on_time = false;
                }
            }
        }
        let mut cut_off: Vec<(String, (Work, i64))> =
            self.shared.running.lock().expect("running lock").drain().collect();
        // Work queued ahead and never started goes back too.
        for q in self.shared.queued.lock().expect("queue lock").drain(..) {
            cut_off.push((q.work.key()?, (q.work, q.token)));
        }
        for (key, (work, token)) in cut_off {
            match release(&self.shared, &work, token).await {
                Ok(true) => {
                    report.released += 1;
                    Counters::add(&self.shared.counters.released);
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, key, "could not release a claim at shutdown"),
            }
        }
        let host = self.shared.host_id.clone();
        let left = self.shared.side.call(|c| {
            let host = host.clone();
            async move { membership::leave(&*c, &host).await }
        });
        match left.await {
            Ok(_) => report.left = true,
            Err(e) => tracing::warn!(error = %e, "could not leave the membership at shutdown"),
        }
        Ok(report)
    }
}

/// The scheduling loop's connection, and the wake-ups it listens for.
struct Control {
    client: Client,
    /// Announcements of runs that became runnable (when the scheduler has workflows) and of
    /// firings just made (when it has task handlers).
    wakeups: tokio::sync::mpsc::Receiver<tokio_postgres::Notification>,
}

/// A control connection, checked, with this host's tasks registered, listening for runnable
/// runs when the scheduler has workflows.
async fn open_control(shared: &Shared) -> Result<Control> {
    let watched = crate::connection::connect_watched(
        &shared.database,
        &format!("rendezvous scheduler {}", shared.host_id),
    )
    .await?;
    let client = watched.client;
    crate::connection::check_extension(&client).await?;
    for spec in &shared.tasks {
        schedule_task(&client, spec).await?;
    }
    if !shared.workflows.is_empty() {
        client.batch_execute(sql::LISTEN_RUNS).await?;
    }
    if !shared.handlers.is_empty() {
        client.batch_execute(sql::LISTEN_FIRINGS).await?;
    }
    membership::heartbeat(&client, &shared.host_id, shared.options.weight).await?;
    Ok(Control { client, wakeups: watched.notifications })
}

/// How far this host's "now" is from the database's: `now_local + offset ≈ now_db`.
#[derive(Clone, Copy)]
struct Offset {
    ahead: bool,
    by: Duration,
}

impl Offset {
    fn measure(db_now: SystemTime, local_before: SystemTime, local_after: SystemTime) -> Offset {
        let mid = local_before + local_after.duration_since(local_before).unwrap_or_default() / 2;
        match db_now.duration_since(mid) {
            Ok(d) => Offset { ahead: true, by: d },
            Err(e) => Offset { ahead: false, by: e.duration() },
        }
    }

    /// The database clock now, as this host estimates it.
    fn db_now(self) -> SystemTime {
        let now = SystemTime::now();
        if self.ahead {
            now + self.by
        } else {
            now - self.by
        }
    }

    /// The local instant at which the database clock reads `db`.
    fn to_local(self, db: SystemTime) -> SystemTime {
        if self.ahead {
            db - self.by
        } else {
            db + self.by
        }
    }
}

/// The shortest time between two looks at the database: an instant the clocks' measured
/// offset puts just past, or firings finishing one after another, wait this long.
const MIN_TICK: Duration = Duration::from_millis(10);

/// After a firing finishes, how long a scheduler gathers others finishing before it looks for
/// more work (unless its next look is due anyway).
const GATHER: Duration = Duration::from_millis(50);

/// Firings a host claims ahead of its free slots, per slot (`max_concurrent`): those it ranks
/// first for, held in its local queue until a slot frees. 16 a slot lets 16 slots take a
/// burst of 256 in one claim; a queue longer than its handlers can start within half the
/// lease is released, not run late.
const FIRINGS_AHEAD_PER_SLOT: usize = 16;

/// The scheduling loop; returns the handles of firings still running when it stopped.
async fn run(shared: Arc<Shared>, first: Control, mut stop: watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
    let mut control = Some(first);
    let mut jobs: Vec<JoinHandle<()>> = Vec::new();
    let mut backoff = Duration::from_millis(100);
    let mut last_heartbeat = Instant::now();
    let mut view: Option<LiveView> = None;
    let mut offset: Option<Offset> = None;
    loop {
        if *stop.borrow() {
            break;
        }
        jobs.retain(|j| !j.is_finished());
        let mut control_now = match control.take().filter(|c| !c.client.is_closed()) {
            Some(c) => c,
            None => match opened(&shared, &mut stop).await {
                Ok(c) => {
                    Counters::add(&shared.counters.reconnects);
                    metrics::counter!(signals::RECONNECTS, "component" => "scheduler").increment(1);
                    tracing::info!(host_id = %shared.host_id, "scheduler reconnected");
                    backoff = Duration::from_millis(100);
                    view = None;
                    offset = None;
                    c
                }
                Err(e) => {
                    tracing::warn!(host_id = %shared.host_id, error = %e, ?backoff, "scheduler cannot connect; retrying");
                    sleep_or_stop(jittered(backoff), &mut stop).await;
                    backoff = (backoff * 2).min(shared.options.max_backoff);
                    continue;
                }
            },
        };
        let ticked = Instant::now();
        // A look that gets no answer (a primary that cannot commit, a dead path) ends with the
        // timeout, and the connection is made again; a shutdown does not wait for it.
        let looked = tokio::select! {
            r = tokio::time::timeout(
                shared.options.call_timeout,
                tick(&shared, &control_now.client, &mut view, &mut offset, &mut last_heartbeat, &mut jobs),
            ) => r,
            _ = stop.changed() => break,
        };
        let looked = looked.unwrap_or_else(|_| {
            Counters::add(&shared.counters.timeouts);
            Err(crate::connection::no_answer(shared.options.call_timeout))
        });
        match looked {
            Ok(wait) => {
                let wakeups = &mut control_now.wakeups;
                let mut next_look = ticked + wait;
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep_until(next_look.into()) => break,
                        Some(_) = wakeups.recv() => {
                            // Runs became runnable, or another host made a burst of firings:
                            // look now, once for all announced meanwhile.
                            while wakeups.try_recv().is_ok() {}
                            break;
                        }
                        _ = shared.finished.notified() => {
                            // Work queued here takes a freed slot with no look at the database.
                            if !shared.queued.lock().expect("queue lock").is_empty() {
                                if let Err(e) = start_queued(&shared, &mut jobs) {
                                    tracing::warn!(error = %e, "could not start queued work");
                                }
                                continue;
                            }
                            // With work waiting, a freed slot is claimed at once. Otherwise
                            // jobs finishing one by one must not make a look each (each costs
                            // the database a query): the next look gathers what finished
                            // meanwhile, and an announced run still wakes the host at once.
                            if shared.runs_waiting.load(Ordering::Relaxed)
                                || shared.firings_waiting.load(Ordering::Relaxed)
                            {
                                break;
                            }
                            next_look = next_look.min(ticked + GATHER);
                        }
                        _ = stop.changed() => break,
                    }
                }
                control = Some(control_now);
            }
            Err(e) => {
                tracing::warn!(host_id = %shared.host_id, error = %e, "scheduler's look failed; connecting again");
                sleep_or_stop(jittered(backoff), &mut stop).await;
                backoff = (backoff * 2).min(shared.options.max_backoff);
            }
        }
    }
    jobs.retain(|j| !j.is_finished());
    jobs
}

/// A new control connection within the call timeout (registering tasks and heartbeating are
/// commits, which a primary cut off from its synchronous standby never acknowledges).
async fn opened(shared: &Shared, stop: &mut watch::Receiver<bool>) -> Result<Control> {
    let limit = shared.options.call_timeout;
    tokio::select! {
        r = tokio::time::timeout(limit, open_control(shared)) => {
            r.unwrap_or_else(|_| {
                Counters::add(&shared.counters.timeouts);
                Err(crate::connection::no_answer(limit))
            })
        }
        _ = stop.changed() => Err(Error::Disconnected("stopping".into())),
    }
}

async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.changed() => {}
    }
}

/// The key whose HRW winner among the live hosts runs the retention passes: one host at a time
/// in the normal case (two with different views of the set share the work: the deletes skip
/// each other's locked rows).
const RETENTION_KEY: &str = "rendezvous:retention";

/// Most steps in one pass; what is left waits for the next pass.
const RETENTION_STEPS: usize = 1000;

/// Every `every`, when this host ranks first for it: retention steps with pauses, until a step
/// leaves nothing more to do.
async fn retention_passes(shared: Arc<Shared>, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut client: Option<Client> = None;
    let name = format!("rendezvous scheduler {} retention", shared.host_id);
    let limit = shared.options.call_timeout;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(jittered(every)) => {}
            _ = stop.changed() => return,
        }
        if !shared.retention_owner.load(Ordering::Relaxed) {
            client = None; // another host does it: hold no connection for it
            continue;
        }
        for _ in 0..RETENTION_STEPS {
            let step = async {
                if client.as_ref().is_none_or(|c| c.is_closed()) {
                    client = Some(crate::connection::connect_as(&shared.database, &name).await?);
                }
                crate::retention::prune(client.as_ref().expect("connected above"), crate::retention::BATCH)
                    .await
            };
            let outcome = tokio::select! {
                r = tokio::time::timeout(limit, step) => r.unwrap_or_else(|_| Err(crate::connection::no_answer(limit))),
                _ = stop.changed() => return,
            };
            match outcome {
                Ok(pruned) => {
                    metrics::counter!(signals::PRUNED, "kind" => "firings").increment(pruned.firings as u64);
                    metrics::counter!(signals::PRUNED, "kind" => "runs").increment(pruned.runs as u64);
                    metrics::counter!(signals::PRUNED, "kind" => "hosts").increment(pruned.hosts as u64);
                    if pruned.most() < i64::from(crate::retention::BATCH) {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "retention step failed; trying again at the next pass");
                    client = None;
                    break;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(crate::retention::PAUSE) => {}
                _ = stop.changed() => return,
            }
        }
    }
}

/// `d` scaled by a factor in [0.5, 1.5), so reconnecting hosts do not arrive together.
fn jittered(d: Duration) -> Duration {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let mixed = u64::from(nanos).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40; // 24 bits
    d.mul_f64(0.5 + mixed as f64 / (1u64 << 24) as f64)
}

/// One look at the database: heartbeat when due, claim what this host should run now, start it;
/// returns how long to sleep before the next look.
async fn tick(
    shared: &Arc<Shared>,
    client: &Client,
    view: &mut Option<LiveView>,
    offset: &mut Option<Offset>,
    last_heartbeat: &mut Instant,
    jobs: &mut Vec<JoinHandle<()>>,
) -> Result<Duration> {
    let o = &shared.options;
    let heartbeat_due = view.is_none() || last_heartbeat.elapsed() >= o.heartbeat;
    if heartbeat_due {
        let ok = membership::heartbeat(client, &shared.host_id, o.weight).await;
        metrics::counter!(signals::HEARTBEATS, "result" => if ok.is_ok() { "ok" } else { "error" })
            .increment(1);
        ok?;
        *last_heartbeat = Instant::now();
        // The whole set only when it changed: what a fleet of many hosts can afford.
        match view {
            Some(v) => {
                v.refresh(client).await?;
            }
            None => *view = Some(LiveView::read(client, o.staleness).await?),
        }
        let live = view.as_ref().expect("read above").hosts();
        let owner = live.winner(RETENTION_KEY) == Some(shared.host_id.as_str());
        shared.retention_owner.store(owner, Ordering::Relaxed);
    }
    let view = view.as_ref().expect("read above").hosts();
    let free = shared.slots.available_permits();
    if free == 0 {
        return Ok(o.poll); // woken early by a finishing firing
    }
    // Enough of the oldest due firings for this host to find its share among them (about
    // what it can take: its free slots and room in its queue), not every due firing each time.
    let queued = shared.queued.lock().expect("queue lock").len();
    let room = free + (o.max_concurrent * FIRINGS_AHEAD_PER_SLOT).saturating_sub(queued);
    let want = (room * view.len().max(1) * 2).clamp(64, 1000) as i32;
    // When something becomes claimable next, read *before* the due firings: firings another
    // host makes in between are then either in the due list or make this instant past (so the
    // next look comes soon), never missed until the next fire time.
    // A scheduler of workflows alone reads no firings: it measures the clocks' offset (for
    // when the next run becomes runnable) with each heartbeat instead.
    let local_before = SystemTime::now();
    let (next, due) = if shared.handlers.is_empty() {
        if heartbeat_due || offset.is_none() {
            let db_now: SystemTime = sql::query_one(client, sql::CLOCK, &[]).await?.get(0);
            *offset = Some(Offset::measure(db_now, local_before, SystemTime::now()));
        }
        (None, Vec::new())
    } else {
        let (next_db_now, next) = next_due_at(client).await?;
        *offset = Some(Offset::measure(next_db_now, local_before, SystemTime::now()));
        (next, due_list(client, want).await?.0)
    };
    let offset = offset.expect("measured above");
    let now_local = || match &o.clock {
        Clock::Database => SystemTime::now(),
        Clock::Local(f) => f(),
    };
    // With Clock::Database, "now" by the database is the local clock shifted by the offset.
    let db_now_est = || match &o.clock {
        Clock::Database => offset.db_now(),
        Clock::Local(f) => f(),
    };
    let running: HashSet<String> = shared.running.lock().expect("running lock").keys().cloned().collect();
    let mut wait = o.poll;
    let mut claim: Vec<(usize, &DueFiring)> = Vec::new();
    for d in &due {
        if !shared.handlers.contains_key(&d.firing.task_id) {
            continue;
        }
        let key = d.firing.key()?;
        if running.contains(&key) {
            continue;
        }
        // A host missing from its own view ranks last.
        let rank = view.rank_of(&key, &shared.host_id).unwrap_or(view.len());
        let try_at = d.claimable_since + o.rank_delay * rank as u32;
        match try_at.duration_since(db_now_est()) {
            Ok(later) if !later.is_zero() => wait = wait.min(later),
            _ => claim.push((rank, d)),
        }
    }
    // Its own firings first, then, with slots to spare, those of hosts that let them wait
    // (dead, or busy): a busy fleet does not fight over the oldest firings.
    claim.sort_by_key(|(rank, d)| (*rank > 0, d.claimable_since));
    // The free slots' worth, and beyond them the firings this host ranks first for, into
    // the local queue: HRW gives those to this host anyway (no other host tries them before
    // its rank delay), and a burst is claimed in a look or two instead of a look per free
    // slot. Bounded, so a queue of slow handlers never holds a lease for long.
    let own = claim.iter().filter(|(rank, _)| *rank == 0).count();
    let take = free.max(own.min(room));
    // More claimable than taken: a slot freed by a finishing firing makes a look at once.
    shared.firings_waiting.store(claim.len() > take, Ordering::Relaxed);
    claim.truncate(take);
    let claim: Vec<&DueFiring> = claim.into_iter().map(|(_, d)| d).collect();
    // One claim call per lease.
    let mut by_lease: BTreeMap<Duration, Vec<&DueFiring>> = BTreeMap::new();
    for d in claim {
        by_lease.entry(d.lease).or_default().push(d);
    }
    for (lease, batch) in by_lease {
        let firings: Vec<&Firing> = batch.iter().map(|d| &d.firing).collect();
        let claiming = Instant::now();
        let claims = firing::claim_firings(client, &firings, &shared.host_id, lease).await?;
        signals::seconds(signals::FIRING_CLAIM_DURATION, claiming.elapsed());
        for (d, c) in batch.into_iter().zip(claims) {
            match c {
                Some(c) if c.claimed => {
                    let token = c.token.expect("a won claim has a token");
                    Counters::add(&shared.counters.claimed);
                    metrics::counter!(signals::FIRINGS_CLAIMED).increment(1);
                    let now = Instant::now();
                    let late = db_now_est().duration_since(d.firing.fire_at).unwrap_or_default();
                    shared.queued.lock().expect("queue lock").push_back(Queued {
                        work: Work::Firing(d.firing.clone()),
                        token,
                        attempt: d.attempts + 1,
                        lease,
                        claimed_at: now,
                        due: now.checked_sub(late),
                    });
                }
                _ => {
                    Counters::add(&shared.counters.lost_claims);
                    metrics::counter!(signals::FIRING_CLAIMS_LOST).increment(1);
                }
            }
        }
    }
    // Firings claimed now and work queued before go into the free slots, oldest claim first.
    start_queued(shared, jobs)?;
    // Admitted runs, with the slots the firings left: this host's own by HRW at once, others'
    // after the rank delay (the database decides which, on its clock).
    let mut next = next;
    if !shared.workflows.is_empty() {
        let queued = shared
            .queued
            .lock()
            .expect("queue lock")
            .iter()
            .filter(|q| matches!(q.work, Work::Run(_)))
            .count();
        let free = shared.slots.available_permits();
        // What to claim: the free slots (the queue is empty when any is free), and, with
        // prefetch, a refill of the queue once it is half empty (each claim fetching many).
        let refill = if queued <= o.prefetch / 2 { o.prefetch - queued } else { 0 };
        let want = free + refill;
        let mut all_taken = false;
        if want > 0 {
            let refs: Vec<&str> = shared.workflows.keys().map(String::as_str).collect();
            let options = runs::ClaimRuns {
                max: want.min(10_000) as i32,
                lease: o.run_lease,
                workflow_refs: Some(&refs),
                grace: o.rank_delay,
            };
            let claims = runs::claim_runs(client, &shared.host_id, &options).await?;
            all_taken = claims.len() == want;
            let claimed_at = Instant::now();
            {
                let mut queue = shared.queued.lock().expect("queue lock");
                for claim in claims {
                    Counters::add(&shared.counters.claimed);
                    metrics::counter!(signals::RUNS_CLAIMED).increment(1);
                    let (token, attempt) = (claim.token, claim.attempt);
                    queue.push_back(Queued {
                        work: Work::Run(claim),
                        token,
                        attempt,
                        lease: o.run_lease,
                        claimed_at,
                        due: None,
                    });
                }
            }
            start_queued(shared, jobs)?;
            if !all_taken {
                // A retry's backoff or a lease ending: when a run next becomes runnable.
                if let Some(at) = runs::next_runnable_at(client, Some(&refs)).await? {
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
            }
        }
        // Runs waiting (queued here, or maybe more in the database): a finishing job makes
        // the next look at once.
        let queued_now = !shared.queued.lock().expect("queue lock").is_empty();
        if want > 0 || queued_now {
            shared.runs_waiting.store(all_taken || queued_now, Ordering::Relaxed);
        }
        if all_taken && !queued_now {
            return Ok(MIN_TICK); // there may be more: look again once slots free up
        }
    }
    if shared.slots.available_permits() == 0 {
        return Ok(o.poll); // woken early by a finishing job
    }
    // Sleep until the database says something becomes due next (by its clock), at most `poll`.
    if let Some(next) = next {
        let at_local = match &o.clock {
            Clock::Database => offset.to_local(next),
            // A host with its own clock believes the database's instant is its own.
            Clock::Local(_) => next,
        };
        let until = at_local.duration_since(now_local()).unwrap_or_default();
        wait = wait.min(until);
    }
    // Never spin: an instant already past (the clocks' offset is measured, not exact) is
    // looked at again after a few milliseconds.
    Ok(wait.max(MIN_TICK))
}

/// Starts queued work in the free slots, oldest claim first; work queued for more than half
/// its lease is released instead (another host may run it at once), not run on a claim near
/// its end.
fn start_queued(shared: &Arc<Shared>, jobs: &mut Vec<JoinHandle<()>>) -> Result<()> {
    loop {
        if shared.slots.available_permits() == 0 {
            return Ok(());
        }
        let Some(q) = shared.queued.lock().expect("queue lock").pop_front() else {
            return Ok(());
        };
        if q.claimed_at.elapsed() > q.lease / 2 {
            let side = shared.clone();
            tokio::spawn(async move {
                if let Err(e) = release(&side, &q.work, q.token).await {
                    tracing::warn!(error = %e, "could not release work queued too long");
                }
            });
            continue;
        }
        if let Some(due) = q.due {
            signals::seconds(signals::FIRING_START_LATENESS, due.elapsed());
        }
        jobs.push(start_job(shared.clone(), q.work, q.token, q.attempt, q.lease)?);
    }
}

/// Starts claimed work's handler on its own task.
fn start_job(
    shared: Arc<Shared>,
    work: Work,
    token: i64,
    attempt: i32,
    lease: Duration,
) -> Result<JoinHandle<()>> {
    let key = work.key()?;
    let permit = shared.slots.clone().try_acquire_owned().map_err(|e| Error::TaskFailed(e.to_string()))?;
    shared.running.lock().expect("running lock").insert(key.clone(), (work.clone(), token));
    Ok(tokio::spawn(async move {
        run_job(&shared, work, key.clone(), token, attempt, lease, permit).await;
        shared.running.lock().expect("running lock").remove(&key);
    }))
}

/// Renews a claim's lease on the side connection: `Some` with the new end, `None` when the
/// claim is gone.
async fn renew(shared: &Shared, work: &Work, token: i64, lease: Duration) -> Result<Option<SystemTime>> {
    shared
        .side
        .call(|c| {
            let work = work.clone();
            async move {
                match work {
                    Work::Firing(f) => firing::renew_firing(&*c, &f, token, lease).await,
                    Work::Run(r) => runs::renew_run(&*c, r.run_id, token, lease).await,
                }
            }
        })
        .await
}

/// Gives a claim back unfinished, so the next host takes it at once.
async fn release(shared: &Shared, work: &Work, token: i64) -> Result<bool> {
    shared
        .side
        .call(|c| {
            let work = work.clone();
            async move {
                match work {
                    Work::Firing(f) => firing::release_firing(&*c, &f, token).await,
                    Work::Run(r) => runs::release_run(&*c, r.run_id, token).await,
                }
            }
        })
        .await
}

#[tracing::instrument(level = "debug", skip_all, fields(host_id = %shared.host_id, key = %key, token = token))]
async fn run_job(
    shared: &Arc<Shared>,
    work: Work,
    key: String,
    token: i64,
    attempt: i32,
    lease: Duration,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    // The slot is free before the loop is told: woken first, it would see no free slot and
    // sleep a whole poll.
    let mut permit = Some(permit);
    let mut free_slot = || {
        if let Some(p) = permit.take() {
            drop(p);
            shared.finished.notify_one();
        }
    };
    let handler = match &work {
        Work::Firing(f) => shared.handlers.get(&f.task_id),
        Work::Run(r) => shared.workflows.get(&r.workflow_ref),
    };
    let Some(handler) = handler.cloned() else { return };
    let completed = Arc::new(AtomicBool::new(false));
    let job = Job {
        work: work.clone(),
        key: key.clone(),
        token,
        attempt,
        host_id: shared.host_id.clone(),
        client: tokio::sync::OnceCell::new(),
        shared: shared.clone(),
        completed: completed.clone(),
    };
    let handled = std::panic::AssertUnwindSafe(handler(job)).catch_unwind();
    // Renewals run beside the handler on the side connection, never in its way.
    let renewals = async {
        let every = (lease / 3).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            match renew(shared, &work, token, lease).await {
                Ok(Some(_)) => {}
                Ok(None) => tracing::warn!("lease lost while running: another host took over"),
                Err(e) => tracing::warn!(error = %e, "lease renewal failed"),
            }
        }
    };
    tokio::pin!(handled, renewals);
    let outcome = tokio::select! {
        r = &mut handled => r,
        _ = &mut renewals => unreachable!("renewals loop until the work ends"),
    };
    match outcome {
        Ok(Ok(())) if completed.load(Ordering::SeqCst) => done(shared, &work, token),
        Ok(Ok(())) => {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let _ = shared.completions.send((work.clone(), token, reply));
            // The slot is free once the handler has returned: its completion goes into the
            // next batch meanwhile. Nobody else claims the work meanwhile (it is held), and
            // this host's loop skips it while it is in `running` (until this job ends, after
            // the answer). Should the completion fail, the work is taken over at its holder's
            // end or lease, and run again under a new token.
            free_slot();
            let result = answer.await.unwrap_or_else(|_| Err("the scheduler stopped".into()));
            match result {
                Ok(true) => done(shared, &work, token),
                Ok(false) => {
                    Counters::add(&shared.counters.stale_completions);
                    tracing::warn!("completion refused: the lease ran out and another host took over");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not complete; the firing will be taken over when its lease ends")
                }
            }
        }
        // The database failed the handler, not its work (its connection closed, or the server
        // stopped taking writes: a fenced or demoted primary): the claim is handed back for a
        // host on the new primary, and no attempt is counted.
        Ok(Err(e)) if connection_failure(&*e) => {
            tracing::warn!(error = %e, "the handler's connection failed; handing the claim back");
            if let Err(e) = release(shared, &work, token).await {
                tracing::warn!(error = %e, "could not hand the claim back; it is taken over when its holder is gone");
            }
        }
        Ok(Err(e)) => record_failure(shared, &work, token, &e.to_string()).await,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            record_failure(shared, &work, token, &format!("handler panicked: {what}")).await;
        }
    }
    free_slot();
}

/// Whether a handler's error says its database connection failed it (closed, none to be had,
/// or the server stopped taking writes: 25006) rather than its own work.
fn connection_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let broken = |pg: &tokio_postgres::Error| {
        pg.is_closed() || pg.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION)
    };
    let mut cause = Some(e);
    while let Some(err) = cause {
        if let Some(pg) = err.downcast_ref::<tokio_postgres::Error>() {
            return broken(pg);
        }
        match err.downcast_ref::<Error>() {
            Some(Error::Db(pg)) => return broken(pg),
            // No connection could be had for the job (the server restarting or failing over):
            // not the handler's failure either.
            Some(Error::Connect(_) | Error::Disconnected(_) | Error::PoolUnavailable(_)) => return true,
            Some(_) => return false,
            None => {}
        }
        cause = err.source();
    }
    false
}

fn done(shared: &Shared, work: &Work, token: i64) {
    Counters::add(&shared.counters.completed);
    match work {
        Work::Firing(_) => {
            metrics::counter!(signals::FIRINGS_COMPLETED).increment(1);
            if token > 1 {
                metrics::counter!(signals::FIRINGS_TAKEN_OVER).increment(1);
            }
        }
        Work::Run(_) => metrics::counter!(signals::RUNS_COMPLETED).increment(1),
    }
}

/// Where a failed attempt left its firing or run.
enum Failure {
    /// Retried (at this instant, when known).
    Retry(Option<SystemTime>),
    /// Failed for good.
    Final,
    /// Nothing recorded: the claim had been taken over.
    Stale,
}

async fn record_failure(shared: &Shared, work: &Work, token: i64, error: &str) {
    Counters::add(&shared.counters.failed_attempts);
    let outcome = match work {
        Work::Firing(firing) => {
            metrics::counter!(signals::FIRINGS_FAILED).increment(1);
            shared
                .side
                .call(|c| {
                    let f = firing.clone();
                    let error = error.to_owned();
                    async move { fail_firing(&*c, &f, token, &error).await }
                })
                .await
                .map(|f| match f {
                    FailOutcome::RetryAt(at) => Failure::Retry(Some(at)),
                    FailOutcome::Failed => Failure::Final,
                    FailOutcome::Stale => Failure::Stale,
                })
        }
        Work::Run(run) => {
            metrics::counter!(signals::RUNS_FAILED).increment(1);
            let run_id = run.run_id;
            let failed = shared
                .side
                .call(|c| {
                    let error = error.to_owned();
                    async move { runs::fail_run(&*c, run_id, token, &error).await }
                })
                .await;
            failed.map(|f| match f {
                runs::RunFailure::Retrying => Failure::Retry(None),
                runs::RunFailure::Failed => Failure::Final,
                runs::RunFailure::Stale => Failure::Stale,
            })
        }
    };
    match outcome {
        Ok(Failure::Retry(at)) => tracing::warn!(error, retry_at = ?at, "attempt failed; it will be retried"),
        Ok(Failure::Final) => {
            Counters::add(&shared.counters.failed_for_good);
            tracing::error!(error, "failed for good (max attempts reached)");
        }
        Ok(Failure::Stale) => tracing::warn!(error, "attempt failed, but the claim had been taken over"),
        Err(e) => {
            tracing::warn!(error = %e, "could not record the failure; the lease will run out and it is retried")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failing_connection_hands_a_claim_back() {
        let boxed = |e: BoxError| connection_failure(&*e);
        assert!(boxed(Box::new(Error::Disconnected("gone".into()))));
        assert!(!boxed(Box::new(Error::InvalidArgument("bad".into()))));
        assert!(!boxed(Box::new(std::io::Error::other("the handler's own failure"))));
        assert!(!boxed("a plain message".into()));
    }
}
