//! Pooled connections that heal ([`Pool`]): the way to call the stateless functions from an
//! application.
use std::time::Duration;

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use deadpool::Runtime;

use crate::{Database, Error, Result};

/// Settings for a [`Pool`].
///
/// Non-exhaustive: start from [`Default`] and change what you need with the `with_*` methods.
///
/// ```
/// use std::time::Duration;
/// use rendezvous_client::PoolOptions;
///
/// let options = PoolOptions::default().with_max_size(32).with_wait_timeout(Duration::from_secs(2));
/// assert_eq!(options.max_size, 32);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PoolOptions {
    /// The most connections open at once. Default 16.
    pub max_size: usize,
    /// How long [`Pool::get`] waits for a connection when all are in use. Default 10 s.
    pub wait_timeout: Duration,
    /// How long making one connection may take. Default 10 s.
    pub connect_timeout: Duration,
    /// The sessions' `application_name` (unless the URL sets one). Default: the program's name
    /// and ` (rendezvous client)`, as [`connect`](crate::connect) names it.
    pub application_name: Option<String>,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            max_size: 16,
            wait_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            application_name: None,
        }
    }
}

impl PoolOptions {
    /// Sets [`max_size`](Self::max_size).
    #[must_use]
    pub fn with_max_size(mut self, max_size: usize) -> Self {
        self.max_size = max_size;
        self
    }

    /// Sets [`wait_timeout`](Self::wait_timeout).
    #[must_use]
    pub fn with_wait_timeout(mut self, wait_timeout: Duration) -> Self {
        self.wait_timeout = wait_timeout;
        self
    }

    /// Sets [`connect_timeout`](Self::connect_timeout).
    #[must_use]
    pub fn with_connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// Sets [`application_name`](Self::application_name).
    #[must_use]
    pub fn with_application_name(mut self, application_name: impl Into<String>) -> Self {
        self.application_name = Some(application_name.into());
        self
    }
}

/// Makes connections for the pool, and tells a live one from one that ended.
#[derive(Debug)]
pub(crate) struct Manager {
    database: Database,
    application_name: String,
    connect_timeout: Duration,
}

impl managed::Manager for Manager {
    type Type = tokio_postgres::Client;
    type Error = Error;

    async fn create(&self) -> Result<tokio_postgres::Client> {
        let connecting = crate::connection::connect_watched(&self.database, &self.application_name);
        match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(watched) => Ok(watched?.client),
            Err(_) => Err(crate::connection::no_answer(self.connect_timeout)),
        }
    }

    async fn recycle(&self, client: &mut tokio_postgres::Client, _: &Metrics) -> RecycleResult<Error> {
        // The connection's driver ends it when the server closes it (a terminated backend, a
        // restart) or stops taking writes: no round trip is needed to know.
        if client.is_closed() {
            return Err(RecycleError::message("the connection ended"));
        }
        Ok(())
    }
}

/// A pool of connections that replaces broken ones by itself: the way to call the stateless
/// functions ([`spawn_run`](crate::spawn_run), [`assert_leader`](crate::leader::assert_leader),
/// [`claim_firing`](crate::firing::claim_firing), …) from an application. Cheap to clone (clones
/// share the connections).
///
/// A [`deadpool`] pool of connections made from a [`Database`] (the same URL and TLS settings
/// the long-lived pieces use). A connection's driver notices when its session ends (a
/// terminated backend, a server restart, a primary that turned read-only), and such a
/// connection is dropped and replaced when it is next handed out, so callers need no reconnect
/// code: a call on a connection that breaks while in use fails once (retry it if it is
/// idempotent, as [`spawn_run`](crate::spawn_run) with a dispatch key is), and while the server
/// is down [`get`](Self::get) fails ([`Error::Connect`], or [`Error::Disconnected`] past
/// `connect_timeout`) and succeeds again once it is back.
///
/// Give connections back as you found them: session state (`SET`, `LISTEN`, a prepared
/// statement) stays with the connection for its next user. A transaction dropped without a
/// commit is rolled back.
///
/// ```no_run
/// use rendezvous_client::{Pool, PoolOptions};
///
/// # async fn run() -> rendezvous_client::Result<()> {
/// let pool = Pool::start("postgres://app@db.internal/app", PoolOptions::default()).await?;
/// let conn = pool.get().await?;
/// let input = serde_json::json!({ "order": 42 });
/// rendezvous_client::spawn_run(&*conn, "tenant-1", "send-receipt", &input, Some("order-42")).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Pool {
    inner: managed::Pool<Manager>,
    options: PoolOptions,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.inner.status();
        f.debug_struct("Pool")
            .field("database", &self.inner.manager().database)
            .field("max_size", &status.max_size)
            .field("open", &status.size)
            .field("idle", &status.available)
            .finish()
    }
}

/// A connection taken from a [`Pool`]; it goes back when dropped (or is closed then, when
/// another connection waits for a place in its [`Database`]'s
/// [cap](Database::with_max_connections)). Use it as a [`tokio_postgres::Client`] (`&*conn`
/// where a function takes `&impl GenericClient`, `conn.transaction()` for a transaction).
pub struct PooledClient(Option<managed::Object<Manager>>);

impl PooledClient {
    fn object(&self) -> &managed::Object<Manager> {
        self.0.as_ref().expect("a PooledClient holds its connection until dropped")
    }
}

impl Drop for PooledClient {
    fn drop(&mut self) {
        let Some(object) = self.0.take() else { return };
        let contended = managed::Object::pool(&object)
            .is_some_and(|pool| pool.manager().database.budget().is_some_and(|b| b.contended()));
        if contended {
            // Out of the pool and closed: its place in the budget goes to the waiting one.
            drop(managed::Object::take(object));
        }
    }
}

impl std::fmt::Debug for PooledClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledClient").field("closed", &self.object().is_closed()).finish()
    }
}

impl std::ops::Deref for PooledClient {
    type Target = tokio_postgres::Client;

    fn deref(&self) -> &tokio_postgres::Client {
        self.object()
    }
}

impl std::ops::DerefMut for PooledClient {
    fn deref_mut(&mut self) -> &mut tokio_postgres::Client {
        self.0.as_mut().expect("a PooledClient holds its connection until dropped")
    }
}

impl Pool {
    /// Makes the pool and its first connection, and checks the extension on it (so a bad URL, an
    /// unreachable server or a missing extension fails here); it stays open for the first
    /// [`get`](Self::get).
    pub async fn start(database: impl Into<Database>, options: PoolOptions) -> Result<Pool> {
        let pool = Pool::new(database, options)?;
        let first = pool.get().await?;
        crate::connection::check_extension(&*first).await?;
        Ok(pool)
    }

    /// Makes the pool without connecting: the first [`get`](Self::get) connects.
    pub fn new(database: impl Into<Database>, options: PoolOptions) -> Result<Pool> {
        if options.max_size == 0 || options.wait_timeout.is_zero() || options.connect_timeout.is_zero() {
            return Err(Error::InvalidArgument(
                "a pool's max_size, wait_timeout and connect_timeout must be greater than zero".into(),
            ));
        }
        let manager = Manager {
            database: database.into(),
            application_name: options
                .application_name
                .clone()
                .unwrap_or_else(crate::connection::default_application_name),
            connect_timeout: options.connect_timeout,
        };
        let inner = managed::Pool::builder(manager)
            .max_size(options.max_size)
            .wait_timeout(Some(options.wait_timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| Error::InvalidArgument(format!("connection pool: {e}")))?;
        if let Some(budget) = inner.manager().database.budget() {
            // Its idle connections make way for a connection waiting for a place in the cap.
            let weak = inner.weak();
            budget.add_pool(move |close| match weak.upgrade() {
                Some(pool) => {
                    if close {
                        pool.retain(|_, _| false);
                    }
                    true
                }
                None => false,
            });
        }
        Ok(Pool { inner, options })
    }

    /// A live connection: an idle one, or a new one when none is idle and fewer than
    /// `max_size` are open. Waits up to `wait_timeout` when all are in use.
    pub async fn get(&self) -> Result<PooledClient> {
        self.inner.get().await.map(|o| PooledClient(Some(o))).map_err(|e| match e {
            managed::PoolError::Backend(e) => e,
            managed::PoolError::Timeout(_) => Error::PoolUnavailable(format!(
                "all {} connections stayed in use for {:?} (raise PoolOptions::max_size, or hold connections for less time)",
                self.options.max_size, self.options.wait_timeout
            )),
            managed::PoolError::Closed => Error::PoolUnavailable("the pool was closed".into()),
            other => Error::PoolUnavailable(other.to_string()),
        })
    }

    /// Connections open now, and how many of them are idle (a connection whose session ended is
    /// counted until it is next handed out, and replaced then).
    pub fn status(&self) -> PoolStatus {
        let s = self.inner.status();
        PoolStatus { max_size: s.max_size, open: s.size, idle: s.available }
    }

    /// Closes the idle connections and refuses further [`get`](Self::get)s; connections in use
    /// close when dropped.
    pub fn close(&self) {
        self.inner.close();
    }

    /// Closes the connections idle for longer than `idle`; returns how many.
    pub(crate) fn close_idle(&self, idle: Duration) -> usize {
        self.inner.retain(|_, metrics| metrics.last_used() <= idle).removed.len()
    }
}

/// A [`Pool`]'s connections at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStatus {
    /// The most it opens.
    pub max_size: usize,
    /// Open now (idle or in use).
    pub open: usize,
    /// Open and idle.
    pub idle: usize,
}
