//! The work runtime: a [`Worker`] runs a host's share of the fleet's work — the firings of
//! recurring tasks ([`crate::task`]) and admitted runs ([`crate::runs`]) — exactly once across
//! the fleet, and is the host's heartbeat in the live set.
//!
//! The database decides what is due (`rendezvous.due_firings`, `claim_runs`: its clock, the
//! tasks' catch-up and overlap policies, the runs' retry policies) and who runs it (the claim).
//! The HRW rank only decides who *tries* first: the top-ranked live host claims at once, the
//! next after one `rank_delay`, and so on, so a dead host's work is picked up without a herd.
//! docs/schedules.md has the rules.
//!
//! Its pieces, a file each: the loop (`control`: one look at a time, and the wake-ups
//! between), the sources of work (`firing_source`, `run_source`), the `executor` (a job per
//! claim, its lease renewed beside it), the `completer` (completions in batches on a side
//! connection), `maintenance` (retention passes), the handler's [`Job`] and
//! [`FencedTransaction`], and the [`WorkerOptions`].
//!
//! ```no_run
//! use std::time::Duration;
//! use rendezvous_client::{Job, TaskSpec, Worker};
//!
//! # async fn run() -> rendezvous_client::Result<()> {
//! let worker = Worker::builder("postgres://app@db.internal/app", "host-1")
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
//! let report = worker.shutdown(Duration::from_secs(10)).await?;
//! println!("{} firings released to other hosts", report.released);
//! # Ok(())
//! # }
//! ```
mod builder;
mod clock;
mod completer;
mod control;
mod executor;
mod firing_source;
mod job;
mod maintenance;
mod options;
mod run_source;
mod stats;
mod steps;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

pub use builder::WorkerBuilder;
pub use job::{BoxError, FencedTransaction, Job};
pub use options::{Clock, WorkerOptions};
pub use stats::WorkerStats;

use crate::background::{Background, ShutdownReport};
use crate::membership;
use crate::session::Session;
use crate::task::TaskSpec;
use crate::{Database, Pool, Result};
use completer::Completion;
use job::{HandlerFn, Work};
use stats::Counters;

/// What the worker's pieces share: its settings and handlers, its connections, its slots and
/// local queue, and its counters.
struct Shared {
    database: Database,
    host_id: String,
    options: WorkerOptions,
    tasks: Vec<TaskSpec>,
    handlers: HashMap<String, Arc<HandlerFn>>,
    /// Handlers of admitted runs, by workflow_ref.
    workflows: HashMap<String, Arc<HandlerFn>>,
    pool: Pool,
    side: Arc<Session>,
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
    /// Set when the last claim of runs took all it asked for: the database may hold more, so
    /// the local queue is refilled once half empty, while the other half runs.
    more_runs: AtomicBool,
    /// The handles of the jobs started (the loop drops those that ended): what shutdown waits
    /// for. Queued work is started by the loop, also while a look is out.
    jobs: Mutex<Vec<JoinHandle<()>>>,
    /// Work claimed ahead of free slots, oldest claim first: runs (`prefetch`) and the
    /// firings this host ranks first for (up to `FIRINGS_AHEAD_PER_SLOT` a slot).
    queued: Mutex<VecDeque<Queued>>,
    /// The pace runs start at here, which sizes the local queue of runs.
    run_pace: run_source::Pace,
    /// This host ranks first for retention in its last view of the live set.
    retention_owner: AtomicBool,
    /// The running runs' cancellation switches, by run id (told on channel rendezvous_cancel).
    cancels: Mutex<HashMap<i64, tokio::sync::watch::Sender<bool>>>,
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

/// The work runtime of a host: runs its share of recurring tasks' firings and admitted runs;
/// one object a service starts and shuts down. (Called `Scheduler` before 0.4.0; that name is
/// a deprecated alias for one release.)
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
pub struct Worker {
    shared: Arc<Shared>,
    /// The scheduling loop; it returns the jobs still running when it stopped.
    background: Arc<Background<Vec<JoinHandle<()>>>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("host_id", &self.shared.host_id).finish_non_exhaustive()
    }
}

impl Worker {
    /// Starts building a worker for `host_id` on `database` (a URL, or a [`Database`]).
    pub fn builder(database: impl Into<Database>, host_id: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder::new(database.into(), host_id.into())
    }

    /// This host's id.
    pub fn host_id(&self) -> &str {
        &self.shared.host_id
    }

    /// What it did so far.
    pub fn stats(&self) -> WorkerStats {
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
            match executor::release(&self.shared, &work, token).await {
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
