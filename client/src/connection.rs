//! Opening connections and driving them: the plain [`connect`] helpers, and the watched
//! connections the long-lived pieces and the [`Pool`](crate::Pool) are made of.
use std::sync::Arc;

use rendezvous_hrw::ALGORITHM;
use tokio_postgres::GenericClient;

use crate::{replication, sql, Database, Error, Result};

/// The extension version this client speaks (the workspace version, shared by both).
pub const EXTENSION_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What [`check_extension`] found installed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Installed {
    /// The installed version.
    pub version: String,
    /// `native` (the extension with its library) or `portable` (SQL and PL/pgSQL only, for
    /// managed services: docs/operations.md).
    pub edition: String,
}

impl std::fmt::Display for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} edition)", self.version, self.edition)
    }
}

/// Checks that `pg_rendezvous` is installed, in either edition, at the version this client
/// expects and that the server runs the same HRW algorithm; returns the version and edition.
///
/// A missing extension is [`Error::ExtensionMissing`], another version
/// [`Error::VersionMismatch`]; both say what to run.
///
/// ```no_run
/// # async fn check() -> rendezvous_client::Result<()> {
/// let client = rendezvous_client::connect("postgres://app@db.internal/app").await?;
/// match rendezvous_client::check_extension(&client).await {
///     Ok(installed) => println!("pg_rendezvous {installed}"), // "0.3.0 (native edition)"
///     Err(e) => eprintln!("{e}"), // e.g. "... run `CREATE EXTENSION pg_rendezvous;` ..."
/// }
/// # Ok(())
/// # }
/// ```
pub async fn check_extension(client: &impl GenericClient) -> Result<Installed> {
    let row = sql::query_one(client, sql::EXTENSION_INSTALLED, &[]).await?;
    let (extversion, has_edition): (Option<String>, bool) = (row.get(0), row.get(1));
    let installed = match (extversion, has_edition) {
        // The portable edition installed by psql (no extension row), or 0.3.0 and later.
        (_, true) => {
            let row = sql::query_one(client, sql::EDITION, &[]).await?;
            Installed { edition: row.get(0), version: row.get(1) }
        }
        // An extension older than 0.3.0 (no edition() yet): the native one.
        (Some(version), false) => Installed { version, edition: "native".to_owned() },
        (None, false) => return Err(Error::ExtensionMissing),
    };
    if installed.version != EXTENSION_VERSION {
        return Err(Error::VersionMismatch {
            installed: installed.version,
            expected: EXTENSION_VERSION.to_owned(),
        });
    }
    let algorithm: String = sql::query_one(client, sql::HRW_ALGORITHM, &[]).await?.get(0);
    if algorithm != ALGORITHM {
        return Err(Error::AlgorithmMismatch { server: algorithm, client: ALGORITHM });
    }
    Ok(installed)
}

/// Connects with `tokio_postgres` and drives the connection on a background task (spawned
/// with `tokio::spawn`, so call it inside a Tokio runtime).
///
/// `database` is a URL (`postgres://user@host/db?...` or `host=... dbname=...`, multi-host
/// URLs with `target_session_attrs=read-write` included, TLS as libpq's `sslmode`,
/// `sslrootcert`, `sslcert`, … say: see [`database`](crate::database)) or a [`Database`] of your own settings.
/// The session's `application_name` is the program's name and ` (rendezvous client)`
/// (`billing-api (rendezvous client)`) unless the URL sets one; [`connect_as`] names it.
///
/// ```no_run
/// # async fn run() -> rendezvous_client::Result<()> {
/// let client = rendezvous_client::connect("postgres://app@db.internal/app").await?;
/// let live = rendezvous_client::membership::live_hosts(&client, std::time::Duration::from_secs(10)).await?;
/// println!("{} hosts live", live.len());
/// # Ok(())
/// # }
/// ```
pub async fn connect(database: impl Into<Database>) -> Result<tokio_postgres::Client> {
    connect_as(database, &default_application_name()).await
}

/// The session name [`connect`] gives: the program's own name, marked as made through this
/// client (`billing-api (rendezvous client)`), so an application's sessions are told apart
/// from the library's own (`rendezvous scheduler <host>`, …) in `pg_stat_activity`. At most
/// 63 bytes, PostgreSQL's limit.
pub(crate) fn default_application_name() -> String {
    let program = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "application".to_owned());
    let suffix = " (rendezvous client)";
    let mut name: String = program.chars().filter(|c| !c.is_control()).collect();
    while name.len() + suffix.len() > 63 {
        name.pop();
    }
    name + suffix
}

/// Like [`connect`], naming the session `application_name` (unless the URL sets one), so a
/// host's sessions are recognisable in `pg_stat_activity`.
pub async fn connect_as(
    database: impl Into<Database>,
    application_name: &str,
) -> Result<tokio_postgres::Client> {
    Ok(connect_watched(&database.into(), application_name).await?.client)
}

/// Runs `call`, a call on the connection `give_up` ends, bounded by `limit`. With no answer
/// by then its statement is cancelled: a server that answers the cancel request is alive and
/// only slow (a checkpoint, a noisy neighbour, a starved CPU), and the call gets `limit` more to
/// return its answer or the cancellation's error (57014), so what the server did is known and
/// the connection kept; reconnecting would add a connection's cost to a slow server's load at
/// the worst moment, and forget claims it had made. A server that does not answer the cancel
/// (a dead path), or a call still unanswered, gives the connection up: [`no_answer`].
pub(crate) async fn bounded<T>(
    give_up: &GiveUp,
    limit: std::time::Duration,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::pin!(call);
    if let Ok(answer) = tokio::time::timeout(limit, &mut call).await {
        return answer;
    }
    let asked = std::time::Instant::now();
    if give_up.cancel_answered().await {
        tracing::info!(
            ?limit,
            "no answer in time from a server that answered the cancel request: waiting for the call's end"
        );
        if let Ok(answer) = tokio::time::timeout(limit, &mut call).await {
            tokio::task::yield_now().await;
            if !replication::cancelled_since(give_up.pid, asked) {
                return answer;
            }
            // What was cancelled was a wait for a synchronous standby: what the call committed
            // is on the primary only.
            drop(answer);
        }
    }
    // A wait for a synchronous standby was cancelled (the call may have gone on to its next
    // commit, waiting again): the server is not slow but cut off from its standby (#43). It is
    // suspect: this connection and the others to it are given up, and the next ones try the
    // URL's other hosts first.
    if replication::cancelled_on(give_up.pid, asked) {
        give_up.suspect_server();
    }
    give_up.now();
    Err(no_answer(limit))
}

/// Whether `e` is a statement cancelled by [`bounded`] (the connection is kept).
pub(crate) fn cancelled_statement(e: &Error) -> bool {
    e.sqlstate() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED)
}

/// What a call that got no answer within `limit` fails with (its connection is given up).
pub(crate) fn no_answer(limit: std::time::Duration) -> Error {
    Error::Disconnected(format!("the database gave no answer within {limit:?}"))
}

/// Ends a connection from the client's side at once, for an owner that got no answer in time:
/// the socket is closed (dropping the client would not: the driver waits for the answer of the
/// statement in flight, so the server's session would live on, waiting, e.g. in a
/// synchronous-replication wait that never ends) and the statement is cancelled, so the
/// server's session ends too instead of piling up with each new connection.
///
/// A slow server is not a gone one (#39): [`bounded`] cancels a call that got no answer in
/// time and gives the connection up only if the server does not answer the cancel either.
#[derive(Clone)]
pub(crate) struct GiveUp {
    close: Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>>,
    cancel: tokio_postgres::CancelToken,
    database: Database,
    /// The server the connection is on.
    server: crate::database::Server,
    /// The server backend it runs on.
    pid: i32,
}

impl GiveUp {
    /// Asks the server to cancel the connection's statement; whether it answered the request
    /// in time (it is alive, only slow).
    async fn cancel_answered(&self) -> bool {
        matches!(
            tokio::time::timeout(SLOW_SERVER_CANCEL_TIMEOUT, self.database.cancel(&self.cancel)).await,
            Ok(Ok(()))
        )
    }

    /// The server waited for its synchronous standby past a call's bound: see
    /// [`database::hosts`](crate::database).
    fn suspect_server(&self) {
        self.server.suspect();
    }

    /// Gives up a connection whose call got no answer in time, for an owner whose call is
    /// bounded more tightly than [`bounded`] allows (the leader elector's, by its lease): where
    /// the server could be suspect (see [`database::hosts`](crate::database)), the statement is
    /// cancelled first and the connection kept open a moment for the server's WARNING, which
    /// says whether what it waited for was a synchronous standby; otherwise it is given up at
    /// once.
    pub(crate) async fn after_no_answer(&self) {
        if !self.server.can_be_suspect() {
            return self.now();
        }
        let asked = std::time::Instant::now();
        if self.cancel_answered().await {
            let deadline = asked + SYNC_WAIT_WARNING;
            while std::time::Instant::now() < deadline {
                if replication::cancelled_on(self.pid, asked) {
                    self.suspect_server();
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            // Cancelled already.
            self.close();
            return;
        }
        self.now();
    }

    /// Whether the connection was given up (it may take a moment to show as closed).
    pub(crate) fn given_up(&self) -> bool {
        self.close.lock().expect("give-up lock").is_none()
    }

    /// Closes the connection and cancels its statement (once; later calls do nothing).
    pub(crate) fn now(&self) {
        if self.close() {
            spawn_cancel(self.database.clone(), self.cancel.clone());
        }
    }

    /// Closes the connection; false if it was closed before.
    fn close(&self) -> bool {
        let Some(close) = self.close.lock().expect("give-up lock").take() else { return false };
        let _ = close.send(());
        true
    }

    /// A guard that gives the connection up when dropped, unless disarmed first: for a
    /// connection being set up inside a bounded call that may be abandoned midway.
    pub(crate) fn on_drop(&self) -> GiveUpOnDrop {
        GiveUpOnDrop(Some(self.clone()))
    }
}

/// See [`GiveUp::on_drop`].
pub(crate) struct GiveUpOnDrop(Option<GiveUp>);

impl GiveUpOnDrop {
    /// The connection is kept.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for GiveUpOnDrop {
    fn drop(&mut self) {
        if let Some(give_up) = self.0.take() {
            // Abandoned (no answer in time, or an error): as any call given up, with its
            // statement cancelled first where the server could be suspect, to see whether it
            // waited for a synchronous standby.
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) if give_up.server.can_be_suspect() => {
                    runtime.spawn(async move { give_up.after_no_answer().await });
                }
                _ => give_up.now(),
            }
        }
    }
}

/// The longest a cancel request may take.
const CANCEL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Cancels, in the background and bounded, the statement of a connection closed from the
/// client's side: a closed socket does not end a server session that waits (for a lock, or a
/// synchronous standby). Nothing to do outside a runtime (the connection's driver is gone then).
fn spawn_cancel(database: Database, cancel: tokio_postgres::CancelToken) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    runtime.spawn(async move {
        // Bounded: on a dead path the cancel request gets no answer either.
        match tokio::time::timeout(CANCEL_TIMEOUT, database.cancel(&cancel)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "could not cancel the statement of a connection closed")
            }
            Err(_) => tracing::debug!("the cancel request of a connection closed got no answer"),
        }
    });
}

/// How soon a server must answer [`bounded`]'s cancel request to count as alive (the kernel
/// accepts the connection and the postmaster hands the request on: milliseconds, or a second
/// or two on a starved machine).
const SLOW_SERVER_CANCEL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long [`GiveUp::after_no_answer`] listens for a cancelled synchronous wait's WARNING
/// after the server answered the cancel request.
const SYNC_WAIT_WARNING: std::time::Duration = std::time::Duration::from_millis(500);

/// A connection whose owner must notice its loss at once, and may LISTEN on it.
pub(crate) struct Watched {
    pub(crate) client: tokio_postgres::Client,
    /// Fires when the connection ends.
    pub(crate) closed: tokio::sync::oneshot::Receiver<()>,
    /// Notifications from channels the session listens on (the newest are dropped when the
    /// owner falls 64 behind: they are wake-ups, and the owner re-checks the database anyway).
    pub(crate) notifications: tokio::sync::mpsc::Receiver<tokio_postgres::Notification>,
    /// The server's WARNING messages on this session, newest dropped past 16 (the elector reads
    /// an operator's step-down reason there).
    pub(crate) warnings: tokio::sync::mpsc::Receiver<String>,
    /// The server backend it runs on.
    pub(crate) pid: i32,
    /// Ends it at once (see [`GiveUp`]).
    pub(crate) give_up: GiveUp,
}

/// [`connect_as`], plus a signal when the connection ends and its notifications.
pub(crate) async fn connect_watched(database: &Database, application_name: &str) -> Result<Watched> {
    // Taken before connecting, so a suspicion that arises meanwhile is not missed.
    let opened = std::time::Instant::now();
    let mut suspicions = crate::database::suspicions();
    let (client, mut connection, permit, server) = database.open(application_name).await?;
    let suspected_server = server.clone();
    // Whether the server takes writes, as it reports it (PostgreSQL 14+ reports both settings
    // at the start and whenever they change). A connection made to a read-write server that
    // turns read-only (a primary fenced or demoted by a failover tool, while it stays up) is
    // closed, so its owner connects again, through a multi-host URL to the new primary: left
    // open, every write on it would fail with 25006 for as long as the old primary runs.
    fn read_only<S, T>(c: &tokio_postgres::Connection<S, T>) -> bool
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        c.parameter("default_transaction_read_only") == Some("on")
            || c.parameter("in_hot_standby") == Some("on")
    }
    let writable_at_start = !read_only(&connection);
    let (closed_tx, closed) = tokio::sync::oneshot::channel();
    let (notification_tx, notifications) = tokio::sync::mpsc::channel(64);
    let (warning_tx, warnings) = tokio::sync::mpsc::channel(16);
    let (pid_tx, pid_rx) = tokio::sync::oneshot::channel::<i32>();
    let (close_tx, mut close_rx) = tokio::sync::oneshot::channel::<()>();
    let cancel = client.cancel_token();
    let (driver_cancel, driver_database) = (cancel.clone(), database.clone());
    tokio::spawn(async move {
        // The backend this connection runs on (asked below, before the connection is handed
        // out): its cancelled synchronous-replication waits are recorded under it.
        let mut pid_rx = pid_rx;
        let mut pid = None;
        use tokio_postgres::AsyncMessage;
        // Drives the connection as awaiting it would, keeping its notifications and logging
        // its notices (a WARNING from the server must not go unseen).
        let mut turned_read_only = false;
        let driven = std::future::poll_fn(|cx| loop {
            match connection.poll_message(cx) {
                std::task::Poll::Ready(Some(Ok(AsyncMessage::Notification(n)))) => {
                    let _ = notification_tx.try_send(n);
                }
                std::task::Poll::Ready(Some(Ok(AsyncMessage::Notice(notice)))) => {
                    if pid.is_none() {
                        pid = pid_rx.try_recv().ok();
                    }
                    if replication::observe_notice(&notice, pid.unwrap_or(0)) {
                        tracing::warn!(message = notice.message(), "commit not replicated");
                    } else if notice.severity() == "WARNING" {
                        tracing::warn!(message = notice.message(), "server warning");
                        let _ = warning_tx.try_send(notice.message().to_owned());
                    } else {
                        tracing::debug!(
                            severity = notice.severity(),
                            message = notice.message(),
                            "server notice"
                        );
                    }
                }
                std::task::Poll::Ready(Some(Ok(_))) => {}
                std::task::Poll::Ready(Some(Err(e))) => return std::task::Poll::Ready(Err(e)),
                std::task::Poll::Ready(None) => return std::task::Poll::Ready(Ok(())),
                // Everything read is processed now; it may have been the server reporting
                // itself read-only (a ParameterStatus, kept by the connection, not returned).
                std::task::Poll::Pending if writable_at_start && read_only(&connection) => {
                    turned_read_only = true;
                    return std::task::Poll::Ready(Ok(()));
                }
                std::task::Poll::Pending => return std::task::Poll::Pending,
            }
        });
        // A commit on this server waited for its synchronous standby past a call's bound (on
        // another connection to it): every connection to it is closed, to be made again
        // through the URL's other hosts first.
        let suspected = async {
            while suspicions.changed().await.is_ok() {
                if suspected_server.suspect_since(opened) {
                    return;
                }
            }
            std::future::pending().await
        };
        // Driven until it ends, or until its owner gives it up (a closed sender is not that:
        // the owner kept no GiveUp).
        let ended = tokio::select! {
            r = driven => r,
            Ok(()) = &mut close_rx => {
                tracing::debug!("connection given up: closing it");
                Ok(())
            }
            () = suspected => {
                tracing::warn!("the server's commits wait for a synchronous standby that does not answer: closing this connection to connect again");
                // Its statement may wait for the standby too, which a closed socket does not end.
                spawn_cancel(driver_database, driver_cancel);
                Ok(())
            }
        };
        if let Err(e) = ended {
            tracing::debug!(error = %e, "rendezvous connection ended");
        }
        if turned_read_only {
            tracing::warn!("the server stopped taking writes (fenced or demoted): closing this connection to connect again");
        }
        // Closed here (its socket with it), and only then its place in the host's budget given
        // back: a connection made again never overlaps the one it replaces.
        drop(connection);
        drop(permit);
        if let Some(p) = pid.or_else(|| pid_rx.try_recv().ok()) {
            replication::forget(p);
        }
        let _ = closed_tx.send(());
    });
    let pid: i32 = sql::query_one(&client, sql::BACKEND_PID, &[]).await?.get(0);
    replication::watch(pid);
    if pid_tx.send(pid).is_err() {
        // The connection ended already: nothing left to watch.
        replication::forget(pid);
    }
    let give_up = GiveUp {
        close: Arc::new(std::sync::Mutex::new(Some(close_tx))),
        cancel,
        database: database.clone(),
        server,
        pid,
    };
    Ok(Watched { client, closed, notifications, warnings, pid, give_up })
}

/// Refuses connections whose server sessions are shared ([`Error::PoolerDetected`]): a
/// transaction-mode pooler hands each transaction whichever server connection is free, so a
/// host's claims would record a session that outlives it and its `LISTEN` would hear another
/// client's session. `first` is an open connection on backend `first_pid`; a second connection
/// holds a transaction open while `first` asks for its backend again. On their own sessions
/// (direct, or a session-mode pooler) the two backends differ and `first`'s stays the same;
/// through a transaction-mode pooler the second lands on `first`'s idle server connection (the
/// one PgBouncer reuses first) or `first` moves to another (or waits for the only one).
pub(crate) async fn refuse_shared_sessions(
    database: &Database,
    first: &tokio_postgres::Client,
    first_pid: i32,
    application_name: &str,
) -> Result<()> {
    let second = connect_watched(database, application_name).await?;
    let abandoned = second.give_up.on_drop();
    second.client.batch_execute("BEGIN").await?;
    let pinned: i32 = sql::query_one(&second.client, sql::BACKEND_PID, &[]).await?.get(0);
    let asked = sql::query_one(first, sql::BACKEND_PID, &[]);
    tokio::pin!(asked);
    // Through a pooler with one server connection, `first` waits for the transaction held here.
    let early = tokio::time::timeout(std::time::Duration::from_millis(500), &mut asked).await;
    let ended = second.client.batch_execute("ROLLBACK").await;
    let now: i32 = match early {
        Ok(answer) => answer?,
        Err(_) => asked.await?,
    }
    .get(0);
    ended?;
    abandoned.disarm();
    if pinned == first_pid {
        return Err(Error::PoolerDetected(format!(
            "another connection's transaction ran on this connection's backend ({first_pid})"
        )));
    }
    if now != first_pid {
        return Err(Error::PoolerDetected(format!(
            "the connection's backend changed from pid {first_pid} to {now} between statements"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// `connect`'s session name says whose it is: this program's, through the client.
    #[test]
    fn the_default_session_name_is_the_programs() {
        let name = super::default_application_name();
        assert!(name.ends_with(" (rendezvous client)"), "{name}");
        assert!(!name.starts_with(" (rendezvous"), "{name}");
        assert!(name.len() <= 63, "{name}");
    }
}
