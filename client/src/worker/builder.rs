//! [`WorkerBuilder`]: a worker's tasks, handlers and options, checked and started.
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify, Semaphore};

use super::job::{boxed, BoxError, HandlerFn, Job};
use super::stats::Counters;
use super::{completer, control, maintenance, Shared, Worker, WorkerOptions};
use crate::background::Background;
use crate::runs;
use crate::session::Session;
use crate::task::TaskSpec;
use crate::{Database, Error, Pool, PoolOptions, Result};

/// Builds a [`Worker`]: its tasks (schedules registered at start, idempotently) and
/// handlers.
pub struct WorkerBuilder {
    database: Database,
    host_id: String,
    options: WorkerOptions,
    tasks: Vec<TaskSpec>,
    handlers: HashMap<String, Arc<HandlerFn>>,
    workflows: HashMap<String, Arc<HandlerFn>>,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("host_id", &self.host_id)
            .field("tasks", &self.tasks)
            .field("handlers", &self.handlers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    pub(super) fn new(database: Database, host_id: String) -> WorkerBuilder {
        WorkerBuilder {
            database,
            host_id,
            options: WorkerOptions::default(),
            tasks: Vec::new(),
            handlers: HashMap::new(),
            workflows: HashMap::new(),
        }
    }

    /// Sets the options.
    #[must_use]
    pub fn options(mut self, options: WorkerOptions) -> Self {
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
    /// the scheduling loop. Configuration errors (bad schedules, a missing extension, a role
    /// without rights) fail here at once; a database that does not answer yet (busy, starting,
    /// unreachable) is tried again until [`start_timeout`](WorkerOptions::start_timeout), then
    /// fails. After this, connection losses are retried by themselves.
    pub async fn start(self) -> Result<Worker> {
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
        let mut options = self.options.clone();
        if let Some(max) = self.database.max_connections() {
            // The control loop, the side connection, retention's when it is on, and one job's:
            // with fewer a capped host would wait for a connection that never ends.
            let needs = 3 + usize::from(o.retention.is_some());
            if max < needs {
                return Err(Error::InvalidArgument(format!(
                    "the database's max_connections ({max}) is below the {needs} sessions a Worker needs to \
                     make progress: its control loop, side connection, {}and one job's",
                    if o.retention.is_some() { "retention pass, " } else { "" }
                )));
            }
            // Handlers run at most as many at once as the cap leaves job connections beside the
            // Worker's other sessions: running handlers and their connections are bounded
            // together, and a handler never waits for a connection that another one holds.
            options.max_concurrent = options.max_concurrent.min(max - (needs - 1));
            if options.max_concurrent < self.options.max_concurrent {
                tracing::info!(
                    host_id = %self.host_id,
                    max_concurrent = options.max_concurrent,
                    max_connections = max,
                    "max_concurrent lowered to the job connections the database's max_connections leaves"
                );
            }
        }
        let application_name = format!("rendezvous scheduler {}", self.host_id);
        let side = Arc::new(Session::new(
            self.database.clone(),
            format!("{application_name} leases"),
            self.options.call_timeout,
        ));
        let (completions, pending) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(completer::complete_in_batches(side.clone(), pending));
        let shared = Arc::new(Shared {
            // One connection per running job at most, made on a job's first use.
            pool: Pool::new(
                &self.database,
                PoolOptions::default()
                    .with_max_size(options.max_concurrent)
                    .with_wait_timeout(options.call_timeout)
                    .with_connect_timeout(options.call_timeout)
                    .with_application_name(format!("{application_name} job")),
            )?,
            side: side.clone(),
            completions,
            slots: Arc::new(Semaphore::new(options.max_concurrent)),
            database: self.database,
            host_id: self.host_id,
            options,
            tasks: self.tasks,
            handlers: self.handlers,
            workflows: self.workflows,
            counters: Counters::default(),
            running: Mutex::new(HashMap::new()),
            finished: Notify::new(),
            runs_waiting: AtomicBool::new(false),
            firings_waiting: AtomicBool::new(false),
            more_runs: AtomicBool::new(false),
            jobs: Mutex::default(),
            queued: Mutex::new(std::collections::VecDeque::new()),
            run_pace: super::run_source::Pace::default(),
            retention_owner: AtomicBool::new(false),
            cancels: Mutex::new(HashMap::new()),
        });
        let control = first_control(&shared).await?;
        // What an earlier process under this host id still holds runs again at once.
        let released = runs::release_host_claims(&control.client, &shared.host_id).await?;
        if released > 0 {
            tracing::warn!(host_id = %shared.host_id, released, "ended claims an earlier process of this host still held");
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        if let Some(every) = shared.options.retention {
            tokio::spawn(maintenance::retention_passes(shared.clone(), every, stop_rx.clone()));
        }
        let task = tokio::spawn(control::run(shared.clone(), control, stop_rx));
        Ok(Worker { shared, background: Arc::new(Background::new(stop_tx, task)) })
    }
}

/// The first control connection, tried again while the database does not answer yet (a busy
/// or starting server, a restart, a refused connection) until `start_timeout` has passed; what
/// trying again cannot fix fails at once.
async fn first_control(shared: &Shared) -> Result<control::Control> {
    let deadline = tokio::time::Instant::now() + shared.options.start_timeout;
    let mut backoff = Duration::from_millis(100);
    loop {
        match control::open_within(shared, true).await {
            Err(e) if not_yet(&e) && tokio::time::Instant::now() + backoff < deadline => {
                tracing::warn!(host_id = %shared.host_id, error = %e, ?backoff, "worker starting: the database does not answer yet; trying again");
                tokio::time::sleep(super::clock::jittered(backoff)).await;
                backoff = (backoff * 2).min(shared.options.max_backoff);
            }
            other => return other,
        }
    }
}

/// Whether a failed start may succeed if tried again: no answer in time, a connection refused
/// (no server error) or lost, or a server starting, shutting down, full or read-only (a standby
/// being promoted).
fn not_yet(e: &Error) -> bool {
    use tokio_postgres::error::SqlState;
    let retried = [
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::TOO_MANY_CONNECTIONS,
        SqlState::READ_ONLY_SQL_TRANSACTION,
    ];
    match e {
        Error::Disconnected(_) => true,
        Error::Connect(c) => c.code().is_none_or(|code| retried.contains(code)),
        Error::Db(c) => c.is_closed() || c.code().is_some_and(|code| retried.contains(code)),
        _ => false,
    }
}
