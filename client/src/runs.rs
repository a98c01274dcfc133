//! Runs: idempotent admission ([`spawn_run`], `rendezvous.spawn_run`), retry policies, and the
//! low-level calls that run what was admitted, for callers who compute their own work. A
//! [`Worker`](crate::Worker) with [`workflow`](crate::worker::WorkerBuilder::workflow) handlers
//! drives the running part by itself.
//!
//! A run is claimed by one host at a time ([`claim_runs`]), with a token and a lease on the
//! database clock; the claim also ends when the claiming (or last renewing) session does, so a
//! dead holder's run is taken over at once. The holder renews ([`renew_run`]) and ends the
//! attempt with [`complete_run`] (in the same transaction as its effects, after
//! [`assert_run`], for effects exactly once), [`fail_run`] (retried after its backoff while
//! attempts are left) or [`release_run`]. A finished run never runs again.
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio_postgres::error::SqlState;
use tokio_postgres::GenericClient;

use crate::{replication, signals, sql, Error, Result};

/// A run this host claimed.
#[derive(Debug, Clone, PartialEq)]
pub struct RunClaim {
    /// The run.
    pub run_id: i64,
    /// This claim's token: fences the run's writes ([`assert_run`]) and ends the attempt.
    pub token: i64,
    /// Whose run it is.
    pub tenant_id: String,
    /// What to run.
    pub workflow_ref: String,
    /// The run's input, as admitted.
    pub input: serde_json::Value,
    /// Which attempt this is: 1 for the first; retries and takeovers count up.
    pub attempt: i32,
}

impl RunClaim {
    /// The run's key, as HRW places it: `run:<run_id>`.
    pub fn key(&self) -> String {
        format!("run:{}", self.run_id)
    }
}

/// How a run is retried: at most `max_attempts` attempts, the n-th retry after
/// `backoff × 2^(n−1)` (at most an hour). The default is 3 attempts, 10 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, 1 to 1000 (1: never retried).
    pub max_attempts: i32,
    /// The first retry's delay; each later one doubles it.
    pub backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_attempts: 3, backoff: Duration::from_secs(10) }
    }
}

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
async fn spawn(
    client: &impl GenericClient,
    tenant_id: &str,
    workflow_ref: &str,
    input: &impl Serialize,
    dispatch_key: Option<&str>,
    policy: Option<RetryPolicy>,
) -> Result<Admission> {
    let input = serde_json::to_value(input).map_err(|e| Error::InvalidArgument(format!("input: {e}")))?;
    let started = std::time::Instant::now();
    let admission = retrying_serialization(client, "spawn_run", || async {
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
        let row = replication::acknowledged("spawn_run", call).await?;
        Ok(Admission { run_id: row.get(0), created: row.get(1), same_request: row.get(2) })
    })
    .await?;
    let result = if admission.created { "created" } else { "deduplicated" };
    metrics::counter!(signals::ADMISSIONS, "result" => result).increment(1);
    signals::seconds(signals::ADMISSION_DURATION, started.elapsed());
    tracing::debug!(tenant_id, dispatch_key, run_id = admission.run_id, result, "admitted");
    Ok(admission)
}

/// Runs one admission call, retrying a serialization failure (40001) up to
/// [`SERIALIZATION_RETRIES`] times when the call is its own transaction; inside the caller's
/// transaction a retry cannot succeed, so the failure is returned for the caller to retry.
async fn retrying_serialization<T, F, Fut>(client: &impl GenericClient, what: &str, mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match call().await {
            Ok(answer) => return Ok(answer),
            Err(Error::Db(e))
                if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE)
                    && attempt <= SERIALIZATION_RETRIES =>
            {
                tracing::debug!(attempt, what, "serialization failure, retrying");
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

/// One run of a batch for [`spawn_runs`]: what [`spawn_run`] takes per run.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun<'a> {
    /// The workflow that runs it.
    pub workflow_ref: &'a str,
    /// Its input (`{}` for none).
    pub input: serde_json::Value,
    /// Its dispatch key: a repeat (in this batch, an earlier one, or a concurrent caller's)
    /// gets the first run back.
    pub dispatch_key: Option<&'a str>,
    /// How it is retried.
    pub policy: RetryPolicy,
}

impl<'a> NewRun<'a> {
    /// A run of `workflow_ref` with no input, no dispatch key and the default retry policy.
    pub fn new(workflow_ref: &'a str) -> Self {
        NewRun {
            workflow_ref,
            input: serde_json::json!({}),
            dispatch_key: None,
            policy: RetryPolicy::default(),
        }
    }

    /// Sets its input.
    #[must_use]
    pub fn input(mut self, input: serde_json::Value) -> Self {
        self.input = input;
        self
    }

    /// Sets its dispatch key.
    #[must_use]
    pub fn dispatch_key(mut self, dispatch_key: &'a str) -> Self {
        self.dispatch_key = Some(dispatch_key);
        self
    }

    /// Sets its retry policy.
    #[must_use]
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }
}

/// Admits many runs for `tenant_id` in one statement and one round trip
/// (`rendezvous.spawn_runs`): each as [`spawn_run`] would, with the same guarantee per
/// dispatch key under any concurrency. Answers in the order given; a key repeated within the
/// batch is admitted at its first occurrence and answered as a repeat after it. At most 10,000
/// runs a call. Serialization failures are retried as [`spawn_run`] retries them.
///
/// ```no_run
/// use rendezvous_client::runs::{spawn_runs, NewRun};
///
/// # async fn run() -> rendezvous_client::Result<()> {
/// let client = rendezvous_client::connect("postgres://app@db.internal/app").await?;
/// // A consumer's batch: each message's id is its dispatch key.
/// let messages = [("msg-1", 17), ("msg-2", 18), ("msg-1", 17)];
/// let batch: Vec<NewRun> = messages
///     .iter()
///     .map(|(id, ticket)| NewRun::new("triage").input(serde_json::json!({ "ticket": ticket })).dispatch_key(id))
///     .collect();
/// let admitted = spawn_runs(&client, "tenant-1", &batch).await?;
/// assert_eq!(admitted[0].run_id, admitted[2].run_id); // msg-1 redelivered in the batch
/// # Ok(())
/// # }
/// ```
#[tracing::instrument(level = "debug", skip_all, fields(tenant_id = tenant_id, runs = runs.len()))]
pub async fn spawn_runs(
    client: &impl GenericClient,
    tenant_id: &str,
    runs: &[NewRun<'_>],
) -> Result<Vec<Admission>> {
    let refs: Vec<&str> = runs.iter().map(|r| r.workflow_ref).collect();
    let inputs: Vec<&serde_json::Value> = runs.iter().map(|r| &r.input).collect();
    let keys: Vec<Option<&str>> = runs.iter().map(|r| r.dispatch_key).collect();
    let attempts: Vec<i32> = runs.iter().map(|r| r.policy.max_attempts).collect();
    let backoffs: Vec<f64> = runs.iter().map(|r| r.policy.backoff.as_secs_f64()).collect();
    let started = std::time::Instant::now();
    let rows = retrying_serialization(client, "spawn_runs", || async {
        let call = async {
            let rows = sql::query(
                client,
                sql::SPAWN_RUNS,
                &[&tenant_id, &refs, &inputs, &keys, &attempts, &backoffs],
            )
            .await
            .map_err(Error::Db)?;
            let pid = rows.first().map(|r| r.get(4));
            Ok((rows, pid))
        };
        replication::acknowledged("spawn_runs", call).await
    })
    .await?;
    let mut out = vec![Admission { run_id: 0, created: false, same_request: false }; runs.len()];
    for r in rows {
        out[(r.get::<_, i32>(0) - 1) as usize] =
            Admission { run_id: r.get(1), created: r.get(2), same_request: r.get(3) };
    }
    let created = out.iter().filter(|a| a.created).count() as u64;
    metrics::counter!(signals::ADMISSIONS, "result" => "created").increment(created);
    metrics::counter!(signals::ADMISSIONS, "result" => "deduplicated").increment(out.len() as u64 - created);
    signals::seconds(signals::ADMISSION_DURATION, started.elapsed());
    tracing::debug!(tenant_id, runs = out.len(), created, "admitted a batch");
    Ok(out)
}

/// Deletes finished runs last updated more than `older_than` ago; returns how many. A
/// dispatch key whose run was purged admits a new run when redelivered.
pub async fn purge_runs(client: &impl GenericClient, older_than: std::time::Duration) -> Result<i64> {
    let row = sql::query_one(client, sql::PURGE_RUNS, &[&older_than.as_secs_f64()]).await?;
    Ok(row.get(0))
}

/// [`spawn_run`] with a retry policy of its own. A repeat with the same
/// dispatch key returns the first run, whose policy stays as first admitted.
pub async fn spawn_run_with_policy(
    client: &impl GenericClient,
    tenant_id: &str,
    workflow_ref: &str,
    input: &impl Serialize,
    dispatch_key: Option<&str>,
    policy: RetryPolicy,
) -> Result<Admission> {
    spawn(client, tenant_id, workflow_ref, input, dispatch_key, Some(policy)).await
}

/// What [`claim_runs`] takes beyond the host: how many, for how long, which workflows, and how
/// long a run waits per HRW rank before this host may take it.
#[derive(Debug, Clone)]
pub struct ClaimRuns<'a> {
    /// At most this many runs (1 to 10,000).
    pub max: i32,
    /// The lease; renew well within it.
    pub lease: Duration,
    /// Only these workflows (`None`: any).
    pub workflow_refs: Option<&'a [&'a str]>,
    /// A run's rank-r host (over the live set) may claim it r × `grace` after it became
    /// runnable; its rank-0 host at once.
    pub grace: Duration,
}

impl Default for ClaimRuns<'_> {
    fn default() -> Self {
        ClaimRuns {
            max: 1,
            lease: Duration::from_secs(30),
            workflow_refs: None,
            grace: Duration::from_secs(1),
        }
    }
}

/// Claims up to `options.max` runnable runs for `host_id`, oldest first, skipping runs another
/// session holds a lock on (it never waits for another claimer). Durable before it answers.
#[tracing::instrument(level = "debug", skip_all, fields(host_id = host_id, max = options.max))]
pub async fn claim_runs(
    client: &impl GenericClient,
    host_id: &str,
    options: &ClaimRuns<'_>,
) -> Result<Vec<RunClaim>> {
    let refs: Option<Vec<&str>> = options.workflow_refs.map(<[&str]>::to_vec);
    let call = async {
        let rows = sql::query(
            client,
            sql::CLAIM_RUNS,
            &[&host_id, &options.max, &options.lease.as_secs_f64(), &refs, &options.grace.as_secs_f64()],
        )
        .await?;
        let pid = rows.first().map(|r| r.get(6));
        Ok((rows, pid))
    };
    let rows = replication::acknowledged("claim_runs", call).await?;
    Ok(rows
        .iter()
        .map(|r| RunClaim {
            run_id: r.get(0),
            token: r.get(1),
            tenant_id: r.get(2),
            workflow_ref: r.get(3),
            input: r.get(4),
            attempt: r.get(5),
        })
        .collect())
}

/// Extends the claim's lease from now and binds it to this connection's session; `None` when
/// the claim is gone (stop working on the run).
pub async fn renew_run(
    client: &impl GenericClient,
    run_id: i64,
    token: i64,
    lease: Duration,
) -> Result<Option<SystemTime>> {
    Ok(sql::query_one(client, sql::RENEW_RUN, &[&run_id, &token, &lease.as_secs_f64()]).await?.get(0))
}

/// Marks the run succeeded, with `output`; false when `token` no longer holds it. Call it in
/// the transaction that writes the run's effects, after [`assert_run`], for effects exactly
/// once (repeating it is harmless).
pub async fn complete_run(
    client: &impl GenericClient,
    run_id: i64,
    token: i64,
    output: Option<&serde_json::Value>,
) -> Result<bool> {
    let call = async {
        let row = sql::query_one(client, sql::COMPLETE_RUN, &[&run_id, &token, &output]).await?;
        let pid = row.get(1);
        Ok((row, Some(pid)))
    };
    Ok(replication::acknowledged("complete_run", call).await?.get(0))
}

/// Where a failed attempt left its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunFailure {
    /// Pending again: retried after its backoff.
    Retrying,
    /// Failed for good: that was its last attempt.
    Failed,
    /// Nothing recorded: the token no longer held the run.
    Stale,
}

/// [`complete_run`] for many `(run_id, token)` claims in one statement and one commit (no
/// outputs); per input, in order, false when its token no longer held the run.
pub async fn complete_runs(client: &impl GenericClient, claims: &[(i64, i64)]) -> Result<Vec<bool>> {
    let (ids, tokens): (Vec<i64>, Vec<i64>) = claims.iter().copied().unzip();
    let call = async {
        let rows = sql::query(client, sql::COMPLETE_RUNS, &[&ids, &tokens]).await?;
        let pid = rows.first().map(|r| r.get(2));
        Ok((rows, pid))
    };
    let rows = replication::acknowledged("complete_runs", call).await?;
    let mut out = vec![false; claims.len()];
    for r in rows {
        out[(r.get::<_, i32>(0) - 1) as usize] = r.get(1);
    }
    Ok(out)
}

/// Records a failed attempt with its error.
pub async fn fail_run(
    client: &impl GenericClient,
    run_id: i64,
    token: i64,
    error: &str,
) -> Result<RunFailure> {
    let call = async {
        let row = sql::query_one(client, sql::FAIL_RUN, &[&run_id, &token, &error]).await?;
        let pid = row.get(1);
        Ok((row, Some(pid)))
    };
    let left_in: Option<String> = replication::acknowledged("fail_run", call).await?.get(0);
    Ok(match left_in.as_deref() {
        Some("pending") => RunFailure::Retrying,
        Some(_) => RunFailure::Failed,
        None => RunFailure::Stale,
    })
}

/// Gives the run back unfinished (its attempt not counted), so another host claims it at once.
pub async fn release_run(client: &impl GenericClient, run_id: i64, token: i64) -> Result<bool> {
    Ok(sql::query_one(client, sql::RELEASE_RUN, &[&run_id, &token]).await?.get(0))
}

/// Fencing: fails with SQLSTATE `RZ001` unless `token` is the run's current claim and the run
/// is running. Call it in the same transaction as the run's writes.
pub async fn assert_run(client: &impl GenericClient, run_id: i64, token: i64) -> Result<()> {
    sql::execute(client, sql::ASSERT_RUN, &[&run_id, &token]).await?;
    Ok(())
}

/// Ends the claims `host_id` holds from other sessions than this connection's (an earlier
/// process of this host, hung or cut off, whose session lives on): its firings become claimable
/// at once and its runs pending again. Only claims this connection's login role made end (a
/// claim is bound to its role). Returns how many claims ended. A [`Worker`](crate::Worker)
/// calls it when it starts.
pub async fn release_host_claims(client: &impl GenericClient, host_id: &str) -> Result<i64> {
    Ok(sql::query_one(client, sql::RELEASE_HOST_CLAIMS, &[&host_id]).await?.get(0))
}

/// Cancels a pending or running run (as a member of `rendezvous_admin`): it never runs again,
/// and its holder's token completes and fences nothing. False when it had finished.
pub async fn cancel_run(client: &impl GenericClient, run_id: i64) -> Result<bool> {
    Ok(sql::query_one(client, sql::CANCEL_RUN, &[&run_id]).await?.get(0))
}

/// When the next run becomes runnable that is not runnable now (a retry's backoff, a lease's
/// end), on the database clock; `None` when there is none.
pub async fn next_runnable_at(
    client: &impl GenericClient,
    workflow_refs: Option<&[&str]>,
) -> Result<Option<SystemTime>> {
    let refs: Option<Vec<&str>> = workflow_refs.map(<[&str]>::to_vec);
    Ok(sql::query_one(client, sql::NEXT_RUNNABLE_AT, &[&refs]).await?.get(0))
}
