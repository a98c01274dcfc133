//! Durable runs: the calls under [`Job::step`](crate::Job::step) and its kin, for callers who
//! drive runs themselves. A holder checkpoints each finished step of its run
//! ([`record_step`], fenced by its token), and a later attempt, on any host, reads them back
//! ([`run_steps`]) and skips them. Others send a run signals ([`signal_run`]) and read its
//! children ([`run_children`]).
//!
//! A [`Worker`](crate::Worker)'s handlers use the [`Job`](crate::Job) methods instead, which
//! add the replay (recorded outputs returned in order, a different step at a recorded
//! position refused), durable timers, waits and children. docs/agents.md has the model,
//! docs/sql.md the same protocol in plain SQL.
use std::time::SystemTime;

use serde_json::Value;
use tokio_postgres::error::SqlState;
use tokio_postgres::GenericClient;

use crate::runs::{Admission, RetryPolicy};
use crate::{replication, sql, Error, Result};

/// A step a run recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedStep {
    /// Its name, unique within the run.
    pub step: String,
    /// What it returned (`None`: recorded without output).
    pub output: Option<Value>,
    /// The attempt that recorded it.
    pub attempt: i32,
    /// When, on the database clock.
    pub recorded_at: SystemTime,
}

/// A run a parent admitted with [`Job::spawn_child`](crate::Job::spawn_child).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChildRun {
    /// The key the parent admitted it under.
    pub child_key: String,
    /// The child run.
    pub run_id: i64,
    /// Its state: pending, running, succeeded, failed or cancelled.
    pub state: String,
    /// Its output, once it succeeded.
    pub output: Option<Value>,
    /// Its last error, if an attempt failed.
    pub last_error: Option<String>,
}

impl ChildRun {
    /// Whether it ended (succeeded, failed or cancelled).
    pub fn finished(&self) -> bool {
        matches!(self.state.as_str(), "succeeded" | "failed" | "cancelled")
    }
}

/// Maps a refused fence (SQLSTATE RZ001: the token no longer holds the run) to
/// [`Error::ClaimLost`], with the server's message.
pub(crate) fn fenced<T>(result: std::result::Result<T, tokio_postgres::Error>) -> Result<T> {
    result.map_err(|e| match e.as_db_error() {
        Some(db) if *db.code() == SqlState::from_code("RZ001") => Error::ClaimLost(db.message().to_owned()),
        _ => Error::from_db(e),
    })
}

/// Records a finished step of a run this `token` holds, with its output: true, or false when
/// the step was recorded before (the first record wins; nothing changes).
/// [`Error::ClaimLost`] when the token no longer holds the run, raised in the caller's
/// transaction: call it in the transaction of the step's own writes for both at once. Made
/// durable before it is acknowledged.
pub async fn record_step(
    client: &impl GenericClient,
    run_id: i64,
    token: i64,
    step: &str,
    output: Option<&Value>,
) -> Result<bool> {
    let call = async {
        let (recorded, pid) = record_step_on_backend(client, run_id, token, step, output).await?;
        Ok((recorded, Some(pid)))
    };
    replication::acknowledged("record_step", call).await
}

/// [`record_step`] without waiting on its commit (in the caller's transaction): whether it
/// recorded the step, and the backend that will commit it.
pub(crate) async fn record_step_on_backend(
    client: &impl GenericClient,
    run_id: i64,
    token: i64,
    step: &str,
    output: Option<&Value>,
) -> Result<(bool, i32)> {
    let row = fenced(sql::query_one(client, sql::RECORD_STEP, &[&run_id, &token, &step, &output]).await)?;
    Ok((row.get(0), row.get(1)))
}

/// A run's recorded steps, in the order recorded.
pub async fn run_steps(client: &impl GenericClient, run_id: i64) -> Result<Vec<RecordedStep>> {
    let rows = sql::query(client, sql::RUN_STEPS, &[&run_id]).await?;
    Ok(rows
        .iter()
        .map(|r| RecordedStep { step: r.get(0), output: r.get(1), attempt: r.get(2), recorded_at: r.get(3) })
        .collect())
}

/// Sends a named signal to a pending or running run: true when this call delivered it; false
/// when a signal of that name was delivered before (it counts once), or the run does not exist
/// or has finished. A run waiting for it ([`Job::wait_for_signal`](crate::Job::wait_for_signal))
/// resumes at once; one sent before the run waits is kept for it.
pub async fn signal_run(
    client: &impl GenericClient,
    run_id: i64,
    name: &str,
    payload: Option<&Value>,
) -> Result<bool> {
    Ok(sql::query_one(client, sql::SIGNAL_RUN, &[&run_id, &name, &payload]).await?.get(0))
}

/// A run's children (admitted with [`Job::spawn_child`](crate::Job::spawn_child)), oldest
/// first.
pub async fn run_children(client: &impl GenericClient, run_id: i64) -> Result<Vec<ChildRun>> {
    let rows = sql::query(client, sql::RUN_CHILDREN, &[&run_id]).await?;
    Ok(rows
        .iter()
        .map(|r| ChildRun {
            child_key: r.get(0),
            run_id: r.get(1),
            state: r.get(2),
            output: r.get(3),
            last_error: r.get(4),
        })
        .collect())
}

/// An instant `after` from now on the database clock, as the JSON string a durable timer or
/// wait records as its deadline (so a replay waits for the same instant).
pub(crate) async fn deadline(client: &impl GenericClient, after: std::time::Duration) -> Result<Value> {
    Ok(sql::query_one(client, sql::DEADLINE, &[&after.as_secs_f64()]).await?.get(0))
}

/// Parks the run until `until` (a recorded deadline): true when parked, false when it has
/// passed (carry on).
pub(crate) async fn sleep_run(
    client: &impl GenericClient,
    run_id: i64,
    token: i64,
    until: &Value,
) -> Result<bool> {
    Ok(fenced(sql::query_one(client, sql::SLEEP_RUN, &[&run_id, &token, until]).await)?.get(0))
}

/// What a wait answered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Wait {
    /// The signal was sent, with this payload.
    Received(Option<Value>),
    /// Every child ended.
    Finished,
    /// The deadline passed first.
    TimedOut,
    /// The run gave its slot back: the handler must stop.
    Parked,
}

fn wait(outcome: &str, payload: Option<Value>) -> Result<Wait> {
    match outcome {
        "received" => Ok(Wait::Received(payload)),
        "finished" => Ok(Wait::Finished),
        "timed_out" => Ok(Wait::TimedOut),
        "parked" => Ok(Wait::Parked),
        other => Err(Error::InvalidArgument(format!("unknown wait outcome {other:?} from the server"))),
    }
}

/// Waits for a named signal until a recorded deadline (parks the run if it has not come).
pub(crate) async fn await_signal(
    client: &impl GenericClient,
    run_id: i64,
    token: i64,
    name: &str,
    until: &Value,
) -> Result<Wait> {
    let row = fenced(sql::query_one(client, sql::AWAIT_SIGNAL, &[&run_id, &token, &name, until]).await)?;
    wait(row.get(0), row.get(1))
}

/// Waits for the run's children until a recorded deadline (parks the run if some are left).
pub(crate) async fn await_children(
    client: &impl GenericClient,
    run_id: i64,
    token: i64,
    until: &Value,
) -> Result<Wait> {
    let row = fenced(sql::query_one(client, sql::AWAIT_CHILDREN, &[&run_id, &token, until]).await)?;
    wait(row.get(0), None)
}

/// Admits a child run of a run this token holds, once per `child_key`.
pub(crate) async fn spawn_child(
    client: &impl GenericClient,
    run_id: i64,
    token: i64,
    child_key: &str,
    workflow_ref: &str,
    input: &Value,
    policy: RetryPolicy,
) -> Result<Admission> {
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
        &run_id,
        &token,
        &child_key,
        &workflow_ref,
        input,
        &policy.max_attempts,
        &policy.backoff.as_secs_f64(),
    ];
    let row = fenced(sql::query_one(client, sql::SPAWN_CHILD, &params).await)?;
    Ok(Admission { run_id: row.get(0), created: row.get(1), same_request: row.get(2) })
}

/// Says what the holder is doing (status_runs.progress); false when the token no longer holds
/// the run.
pub(crate) async fn set_run_progress(
    client: &impl GenericClient,
    run_id: i64,
    token: i64,
    progress: &Value,
) -> Result<bool> {
    Ok(sql::query_one(client, sql::SET_RUN_PROGRESS, &[&run_id, &token, progress]).await?.get(0))
}
