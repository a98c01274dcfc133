//! The client's one error type.
use tokio_postgres::error::SqlState;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a client call can fail with.
///
/// Non-exhaustive: later versions may add variants, so a `match` needs a `_` arm. Errors from
/// `tokio_postgres` convert with `?` (see the [`From`] impl), so code mixing its own queries
/// with the client's calls can use this one error type.
///
/// `Debug` prints the message, as `Display` does (with the server's detail and hint), so a
/// `main` that returns `Result<(), Error>` says what went wrong and what to do, not a variant
/// name.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database has no `pg_rendezvous`.
    #[error("the pg_rendezvous extension is not installed in this database: run `CREATE EXTENSION pg_rendezvous;` as a superuser (or, where no library can be installed, the portable edition's script: docs/operations.md)")]
    ExtensionMissing,
    /// The installed extension is another version than this client.
    #[error("pg_rendezvous {installed} is installed but this client needs {expected}: run `ALTER EXTENSION pg_rendezvous UPDATE TO '{expected}';` or use a matching client")]
    VersionMismatch {
        /// Installed version.
        installed: String,
        /// Version this client was built for.
        expected: String,
    },
    /// The server scores with another HRW algorithm than this client.
    #[error("the server uses HRW algorithm {server} but this client computes {client}")]
    AlgorithmMismatch {
        /// The server's algorithm.
        server: String,
        /// This client's algorithm.
        client: &'static str,
    },
    /// An argument was refused before reaching the database.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A host set's weights were refused.
    #[error(transparent)]
    Weights(#[from] rendezvous_hrw::WeightError),
    /// A dedicated connection was lost.
    #[error("connection lost: {0}")]
    Disconnected(String),
    /// Session-level state (locks, `LISTEN`, the session a claim records) does not work
    /// through this connection: a transaction-mode pooler (pgbouncer `pool_mode =
    /// transaction`) shares server sessions between clients. Leader electors and `Worker`s
    /// refuse it.
    #[error("leader election and the work runtime need a server session of their own per connection, and this connection does not give one ({0}); connect directly or through a session-mode pooler")]
    PoolerDetected(String),
    /// A firing's claim is no longer this holder's: its lease ran out and another host took
    /// the firing over, so its writes were not committed.
    #[error("claim lost: {0}")]
    ClaimLost(String),
    /// The call's commit was acknowledged on the primary only: its wait for the synchronous
    /// standby was cancelled, so a failover may lose it (see [`crate::replication`]). Retry
    /// an idempotent call once replication is back; a claim or term so answered is not held.
    #[error("not replicated: {0} committed on the primary but its wait for the synchronous standby was cancelled, so a failover may lose it")]
    NotReplicated(&'static str),
    /// A background task panicked or was cancelled.
    #[error("background task failed: {0}")]
    TaskFailed(String),
    /// A [`Pool`](crate::Pool) had no connection to give: all stayed in use for its wait
    /// timeout, or it was closed.
    #[error("no pooled connection: {0}")]
    PoolUnavailable(String),
    /// A durable run's replay asked for another step than the one recorded at that position:
    /// the handler did not ask for the same steps in the same order (docs/agents.md). The
    /// attempt fails; the recorded steps stay.
    #[error("non-deterministic workflow: run {run_id} recorded step {position} as {recorded:?}, but this attempt asked for {requested:?} there; a durable handler must ask for the same steps in the same order on every attempt (docs/agents.md)")]
    NonDeterministic {
        /// The run.
        run_id: i64,
        /// The step's position (1 for the first).
        position: usize,
        /// The step recorded there.
        recorded: String,
        /// The step this attempt asked for.
        requested: String,
    },
    /// The run gave its slot back until something happens ([`Job::sleep`](crate::Job::sleep),
    /// [`Job::wait_for_signal`](crate::Job::wait_for_signal),
    /// [`Job::join_children`](crate::Job::join_children)): return it from the handler (with
    /// `?`). The run resumes, on any host, when that comes; no attempt is counted.
    #[error("run {run_id} is parked, waiting for {waiting_for}: return from the handler; the run resumes, on any host, when that comes")]
    Parked {
        /// The run.
        run_id: i64,
        /// What it waits for: `sleep`, `signal:<name>` or `children`.
        waiting_for: String,
    },
    /// The run was cancelled (`cancel_run`): its work stops; nothing it records is kept.
    #[error("run {0} was cancelled")]
    Cancelled(i64),
    /// A durable step's own work failed (the step is not recorded; the attempt fails with it
    /// unless the handler handles it).
    #[error("step {step:?} failed: {source}")]
    StepFailed {
        /// The step.
        step: String,
        /// What its work returned.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Could not connect.
    #[error("cannot connect to the database: {}", describe(.0))]
    Connect(#[source] tokio_postgres::Error),
    /// The database refused or failed a call (see [`Error::sqlstate`]).
    #[error("database error: {}", describe(.0))]
    Db(#[source] tokio_postgres::Error),
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// A driver error with what caused it: the server's message, SQLSTATE, detail and hint, or the
/// chain of causes (a refused TLS certificate, say). tokio-postgres's own text is only "db
/// error" or "error performing TLS handshake".
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{}: {} (SQLSTATE {})", db.severity(), db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            s.push_str(&format!("; detail: {detail}"));
        }
        if let Some(hint) = db.hint() {
            s.push_str(&format!("; hint: {hint}"));
        }
        return s;
    }
    let mut s = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        s.push_str(&format!(": {c}"));
        cause = c.source();
    }
    if s.contains("application verification failure") {
        // Set by the host name check of sslmode=verify-full (database.rs), which logs the names.
        s.push_str(" (the server's certificate does not name the host connected to, as sslmode=verify-full requires)");
    }
    s
}

impl From<tokio_postgres::Error> for Error {
    /// A database error, classified as [`Error::ExtensionMissing`] when it says the
    /// `rendezvous` schema or one of its functions or tables does not exist, else [`Error::Db`].
    ///
    /// ```no_run
    /// # async fn run(client: &mut tokio_postgres::Client) -> rendezvous_client::Result<()> {
    /// let tx = client.transaction().await?; // a tokio_postgres::Error converts with `?`
    /// tx.execute("INSERT INTO orders (id) VALUES (42)", &[]).await?;
    /// let input = serde_json::json!({ "order": 42 });
    /// rendezvous_client::spawn_run(&tx, "tenant-1", "send-receipt", &input, Some("order-42")).await?;
    /// tx.commit().await?;
    /// # Ok(())
    /// # }
    /// ```
    fn from(e: tokio_postgres::Error) -> Error {
        Error::from_db(e)
    }
}

impl Error {
    /// Classifies a driver error: a missing `rendezvous` schema or function means the
    /// extension is not installed.
    pub(crate) fn from_db(e: tokio_postgres::Error) -> Error {
        if let Some(db) = e.as_db_error() {
            let missing_schema = *db.code() == SqlState::INVALID_SCHEMA_NAME;
            let missing_function =
                *db.code() == SqlState::UNDEFINED_FUNCTION || *db.code() == SqlState::UNDEFINED_TABLE;
            if (missing_schema || missing_function) && db.message().contains("rendezvous") {
                return Error::ExtensionMissing;
            }
        }
        Error::Db(e)
    }

    /// True for a serialization failure (40001): retry the whole transaction.
    pub fn is_serialization_failure(&self) -> bool {
        self.sqlstate() == Some(&SqlState::T_R_SERIALIZATION_FAILURE)
    }

    /// The SQLSTATE of a database error, e.g. `22023` for an invalid argument.
    pub fn sqlstate(&self) -> Option<&SqlState> {
        match self {
            Error::Db(e) | Error::Connect(e) => e.code(),
            _ => None,
        }
    }
}

/// The most bytes an id may have (host ids, task ids, tenant ids, group names, candidates):
/// the extension's `rendezvous._max_id_bytes()`, which a test checks this equals.
pub const MAX_ID_BYTES: usize = 256;

/// Refuses an empty id or one longer than [`MAX_ID_BYTES`] before anything is sent, with the
/// one message every part of the client uses.
pub(crate) fn check_id(what: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.len() > MAX_ID_BYTES {
        return Err(Error::InvalidArgument(format!(
            "{what} must be 1 to {MAX_ID_BYTES} bytes (got {} bytes)",
            value.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_says_what_to_do_as_display_does() {
        let e = Error::ExtensionMissing;
        assert_eq!(format!("{e:?}"), e.to_string());
        assert!(format!("{e:?}").contains("CREATE EXTENSION pg_rendezvous"));
    }

    /// Every variant's name. A match with no `_` arm: a new variant does not compile until it is
    /// named here, and then the docs test below asks for it in docs/client.md.
    fn variant_name(e: &Error) -> &'static str {
        match e {
            Error::ExtensionMissing => "ExtensionMissing",
            Error::VersionMismatch { .. } => "VersionMismatch",
            Error::AlgorithmMismatch { .. } => "AlgorithmMismatch",
            Error::InvalidArgument(_) => "InvalidArgument",
            Error::Weights(_) => "Weights",
            Error::Disconnected(_) => "Disconnected",
            Error::PoolerDetected(_) => "PoolerDetected",
            Error::ClaimLost(_) => "ClaimLost",
            Error::NotReplicated(_) => "NotReplicated",
            Error::TaskFailed(_) => "TaskFailed",
            Error::PoolUnavailable(_) => "PoolUnavailable",
            Error::NonDeterministic { .. } => "NonDeterministic",
            Error::Parked { .. } => "Parked",
            Error::Cancelled(_) => "Cancelled",
            Error::StepFailed { .. } => "StepFailed",
            Error::Connect(_) => "Connect",
            Error::Db(_) => "Db",
        }
    }

    const VARIANTS: &[&str] = &[
        "ExtensionMissing",
        "VersionMismatch",
        "AlgorithmMismatch",
        "InvalidArgument",
        "Weights",
        "Disconnected",
        "PoolerDetected",
        "ClaimLost",
        "NotReplicated",
        "TaskFailed",
        "PoolUnavailable",
        "NonDeterministic",
        "Parked",
        "Cancelled",
        "StepFailed",
        "Connect",
        "Db",
    ];

    #[test]
    fn the_variant_list_is_complete() {
        // The examples that can be made without a driver error; the match above covers the rest.
        for e in [Error::ExtensionMissing, Error::ClaimLost(String::new()), Error::TaskFailed(String::new())]
        {
            assert!(VARIANTS.contains(&variant_name(&e)));
        }
        assert_eq!(VARIANTS.len(), 17, "name a new variant in variant_name and VARIANTS");
    }

    /// docs/client.md's error table names each variant once, in the enum's order, and nothing else.
    #[test]
    fn client_md_error_table_lists_every_variant() {
        let md = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/client.md")).unwrap();
        let section = md.split("\n## Errors\n").nth(1).expect("docs/client.md has an Errors section");
        let section = section.split("\n## ").next().unwrap_or_default();
        let documented: Vec<&str> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .map(|l| l.split(['`', ' ', '(', '{']).next().unwrap_or_default())
            .collect();
        assert_eq!(
            documented, VARIANTS,
            "docs/client.md's error table differs from rendezvous_client::Error"
        );
    }
}
