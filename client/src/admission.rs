//! Idempotent spawn admission (`rendezvous.spawn_run`); running what was admitted is
//! [`crate::runs`]'s.
use serde::Serialize;
use tokio_postgres::error::SqlState;
use tokio_postgres::GenericClient;

use crate::runs::RetryPolicy;
use crate::{replication, signals, sql, Error, Result};

/// How many times a serialization failure (40001) is retried before it is returned.
pub const SERIALIZATION_RETRIES: usize = 5;

/// The outcome of [`spawn_run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// The run: new, or the one first admitted with this dispatch key.
    pub run_id: i64,
    /// True when this call created the run; false when it returned an earlier one.
    pub created: bool,
    /// For a repeat: whether it carried the same `workflow_ref` and `input` as the first
    /// request (a different one is still a duplicate, and still returns the first run).
    pub same_request: bool,
}

/// Admits a run for `tenant_id`. With a `dispatch_key`, however many times and however
/// concurrently this is called, one run exists and every caller gets its id; without one,
/// every call is a new run.
///
/// Works on a plain client (autocommit) or inside the caller's transaction. A serialization
/// failure (40001, possible under REPEATABLE READ or SERIALIZABLE) is retried here when the
/// call is its own transaction; inside the caller's transaction it aborts that transaction,
/// so it is returned for the caller to retry the whole transaction
/// ([`Error::is_serialization_failure`]).
///
/// ```no_run
/// use rendezvous_client::spawn_run;
///
/// # async fn run() -> rendezvous_client::Result<()> {
/// let client = rendezvous_client::connect("postgres://app@db.internal/app").await?;
/// let input = serde_json::json!({ "ticket": 1234 });
/// // A redelivered message carries the same dispatch key: it gets the first run back.
/// let first = spawn_run(&client, "tenant-1", "triage", &input, Some("msg-7f3a")).await?;
/// let again = spawn_run(&client, "tenant-1", "triage", &input, Some("msg-7f3a")).await?;
/// assert!(first.created && !again.created);
/// assert_eq!(first.run_id, again.run_id);
/// # Ok(())
/// # }
/// ```
#[tracing::instrument(level = "debug", skip_all, fields(tenant_id = tenant_id, workflow_ref = workflow_ref, dispatch_key = ?dispatch_key))]
pub async fn spawn_run(
    client: &impl GenericClient,
    tenant_id: &str,
    workflow_ref: &str,
    input: &impl Serialize,
    dispatch_key: Option<&str>,
) -> Result<Admission> {
    spawn(client, tenant_id, workflow_ref, input, dispatch_key, None).await
}

/// [`spawn_run`], with the server's default retry policy or `policy`.
pub(crate) async fn spawn(
    client: &impl GenericClient,
    tenant_id: &str,
    workflow_ref: &str,
    input: &impl Serialize,
    dispatch_key: Option<&str>,
    policy: Option<RetryPolicy>,
) -> Result<Admission> {
    let input = serde_json::to_value(input).map_err(|e| Error::InvalidArgument(format!("input: {e}")))?;
    let started = std::time::Instant::now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let call = async {
            let row = match policy {
                None => {
                    sql::query_one(
                        client,
                        sql::SPAWN_RUN,
                        &[&tenant_id, &workflow_ref, &input, &dispatch_key],
                    )
                    .await
                }
                Some(p) => {
                    let backoff = p.backoff.as_secs_f64();
                    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
                        [&tenant_id, &workflow_ref, &input, &dispatch_key, &p.max_attempts, &backoff];
                    sql::query_one(client, sql::SPAWN_RUN_WITH_POLICY, &params).await
                }
            }
            .map_err(Error::Db)?;
            let pid = row.get(3);
            Ok((row, Some(pid)))
        };
        match replication::acknowledged("spawn_run", call).await {
            Ok(row) => {
                let admission =
                    Admission { run_id: row.get(0), created: row.get(1), same_request: row.get(2) };
                let result = if admission.created { "created" } else { "deduplicated" };
                metrics::counter!(signals::ADMISSIONS, "result" => result).increment(1);
                signals::seconds(signals::ADMISSION_DURATION, started.elapsed());
                tracing::debug!(tenant_id, dispatch_key, run_id = admission.run_id, result, "admitted");
                return Ok(admission);
            }
            Err(Error::Db(e))
                if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE)
                    && attempt <= SERIALIZATION_RETRIES =>
            {
                tracing::debug!(attempt, "spawn_run: serialization failure, retrying");
                metrics::counter!(signals::ADMISSION_RETRIES).increment(1);
                // Inside the caller's transaction a retry cannot succeed: probe cheaply and
                // hand the original error back.
                if let Err(probe) = sql::query_one(client, sql::PROBE, &[]).await {
                    if probe.code() == Some(&SqlState::IN_FAILED_SQL_TRANSACTION) {
                        return Err(Error::from_db(e));
                    }
                }
            }
            Err(Error::Db(e)) => return Err(Error::from_db(e)),
            Err(e) => return Err(e),
        }
    }
}

/// Deletes finished runs last updated more than `older_than` ago; returns how many. A
/// dispatch key whose run was purged admits a new run when redelivered.
pub async fn purge_runs(client: &impl GenericClient, older_than: std::time::Duration) -> Result<i64> {
    let row = sql::query_one(client, sql::PURGE_RUNS, &[&older_than.as_secs_f64()]).await?;
    Ok(row.get(0))
}
