//! Durable runs in a handler: [`Job::step`] and its kin. A run's finished steps are recorded
//! in the database (fenced by the claim's token), so an attempt after a retry or a takeover,
//! on any host, gets each recorded step's output back without running it again, and carries
//! on at the first step not recorded. Timers, signals and children park the run (its slot
//! given back, no attempt counted) until they come. docs/agents.md has the model.
//!
//! The replay is positional: the n-th step an attempt asks for must be the n-th recorded
//! (else [`Error::NonDeterministic`]). Steps of one run therefore run one at a time: a step
//! asked for while another is in flight is refused, not raced.
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio_postgres::Transaction;

use super::job::{BoxError, Job, Work};
use crate::runs::{RetryPolicy, RunClaim};
use crate::steps::{self, ChildRun, Wait};
use crate::{replication, Error, Result};

/// Step names starting with this are the runtime's own (timers' deadlines, waits' outcomes).
const RESERVED_PREFIX: &str = "rz:";

/// The steps a run recorded, and how far this attempt has replayed them.
#[derive(Debug, Default)]
pub(super) struct Replay {
    recorded: Vec<(String, Option<Value>)>,
    next: usize,
}

impl Replay {
    /// The recorded output of the step at the next position, when `step` is recorded there;
    /// `None` once past the recorded steps.
    fn next(&mut self, run_id: i64, step: &str) -> Result<Option<Option<Value>>> {
        if let Some((recorded, output)) = self.recorded.get(self.next) {
            if recorded != step {
                return Err(Error::NonDeterministic {
                    run_id,
                    position: self.next + 1,
                    recorded: recorded.clone(),
                    requested: step.to_owned(),
                });
            }
            self.next += 1;
            return Ok(Some(output.clone()));
        }
        if self.recorded.iter().any(|(s, _)| s == step) {
            return Err(Error::InvalidArgument(format!(
                "step {step:?} of run {run_id} was recorded before: step names must be unique within a run"
            )));
        }
        Ok(None)
    }

    fn push(&mut self, step: &str, output: Option<Value>) {
        self.recorded.push((step.to_owned(), output));
        self.next = self.recorded.len();
    }
}

/// The job's replay, unless another step holds it: steps of a run run one at a time.
fn lock_replay(
    replay: &tokio::sync::Mutex<Option<Replay>>,
) -> Result<tokio::sync::MutexGuard<'_, Option<Replay>>> {
    replay.try_lock().map_err(|_| {
        Error::InvalidArgument(
            "a step was asked for while another step of this run is in flight: steps of a run run one at a time \
             (no nested or concurrent steps)"
                .into(),
        )
    })
}

/// The steps the run recorded, for this attempt to replay from the first.
async fn read_replay(client: &tokio_postgres::Client, run_id: i64) -> Result<Replay> {
    let recorded = steps::run_steps(client, run_id).await?;
    Ok(Replay { recorded: recorded.into_iter().map(|s| (s.step, s.output)).collect(), next: 0 })
}

fn decode<T: DeserializeOwned>(step: &str, output: Option<Value>) -> Result<T> {
    serde_json::from_value(output.unwrap_or(Value::Null)).map_err(|e| {
        Error::InvalidArgument(format!(
            "the recorded output of step {step:?} does not decode as this step's type: {e}"
        ))
    })
}

fn encode<T: Serialize>(step: &str, value: &T) -> Result<Value> {
    serde_json::to_value(value).map_err(|e| {
        Error::InvalidArgument(format!("the output of step {step:?} does not encode as JSON: {e}"))
    })
}

/// A step's own error: the runtime's errors that must reach the handler as they are (a parked
/// or cancelled run, a lost claim, a non-deterministic replay) pass; others are the step's.
fn step_error(step: &str, e: BoxError) -> Error {
    match e.downcast::<Error>() {
        Ok(e) => match *e {
            e @ (Error::Parked { .. }
            | Error::Cancelled(_)
            | Error::ClaimLost(_)
            | Error::NonDeterministic { .. }
            | Error::StepFailed { .. }) => e,
            e => Error::StepFailed { step: step.to_owned(), source: Box::new(e) },
        },
        Err(source) => Error::StepFailed { step: step.to_owned(), source },
    }
}

impl Job {
    fn durable_run(&self, what: &str) -> Result<&RunClaim> {
        match &self.work {
            Work::Run(r) => Ok(r),
            Work::Firing(_) => Err(Error::InvalidArgument(format!(
                "{what} is for runs (a workflow's handler); a task's firing has no durable steps"
            ))),
        }
    }

    /// The replay, read from the database on first use; refused while another step is in
    /// flight.
    async fn replay(&self, run_id: i64) -> Result<tokio::sync::MutexGuard<'_, Option<Replay>>> {
        let mut replay = lock_replay(&self.replay)?;
        if replay.is_none() {
            *replay = Some(read_replay(self.client().await?, run_id).await?);
        }
        Ok(replay)
    }

    /// A key for an external call made by step `step`: the same across attempts and hosts
    /// (`run:<run_id>:<step>`), so an API that deduplicates by idempotency key sees a repeated
    /// step as the same request. (For calls that must not repeat within one claim only, see
    /// [`Job::idempotency_key`].)
    pub fn step_key(&self, step: &str) -> String {
        format!("{}:{}", self.key, step)
    }

    /// A durable step: when this run recorded `step` (an earlier attempt, on any host, finished
    /// it), its recorded output, without running `work`; else `work` runs, and its output is
    /// recorded (as JSON, fenced by this claim's token, made durable) and returned.
    ///
    /// `work` runs at least once: a step in flight when its holder dies, or whose record is
    /// refused, runs again in the next attempt. Give an external call the step's
    /// [`step_key`](Self::step_key) as its idempotency key, or write to this database with
    /// [`step_tx`](Self::step_tx) (exactly once). Names are unique within a run (at most 512
    /// bytes; `rz:` starts the runtime's own); steps run one at a time, in the same order on
    /// every attempt ([`Error::NonDeterministic`] otherwise).
    ///
    /// ```no_run
    /// # async fn run(job: rendezvous_client::Job) -> rendezvous_client::Result<()> {
    /// let plan: Vec<String> = job.step("plan", async {
    ///     Ok::<_, std::io::Error>(vec!["search".to_owned()]) // an inference call, say
    /// }).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn step<T, E>(
        &self,
        step: &str,
        work: impl Future<Output = std::result::Result<T, E>>,
    ) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        E: Into<BoxError>,
    {
        check_name(step)?;
        self.checkpoint(step, async {
            let value = work.await.map_err(|e| step_error(step, e.into()))?;
            encode(step, &value)
        })
        .await
        .and_then(|output| decode(step, output))
    }

    /// The runtime's step: the recorded output, or `work`'s recorded.
    async fn checkpoint(
        &self,
        step: &str,
        work: impl Future<Output = Result<Value>>,
    ) -> Result<Option<Value>> {
        let run = self.durable_run("a durable step")?;
        if self.is_cancelled() {
            return Err(Error::Cancelled(run.run_id));
        }
        let mut guard = self.replay(run.run_id).await?;
        let replay = guard.as_mut().expect("read above");
        if let Some(output) = replay.next(run.run_id, step)? {
            return Ok(output);
        }
        let output = work.await?;
        steps::record_step(self.client().await?, run.run_id, self.token, step, Some(&output)).await?;
        replay.push(step, Some(output.clone()));
        Ok(Some(output))
    }

    /// A durable step that writes to this database: `work` runs in a transaction on the job's
    /// connection, and its writes commit with the step's record, fenced by this claim's token,
    /// or not at all: exactly once, across retries and takeovers. A replay returns the
    /// recorded output without running it.
    ///
    /// ```no_run
    /// # async fn run(mut job: rendezvous_client::Job) -> rendezvous_client::Result<()> {
    /// let rows: u64 = job.step_tx("save-answer", async |tx| {
    ///     tx.execute("INSERT INTO answers (body) VALUES ('42')", &[]).await
    /// }).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn step_tx<T, E, F>(&mut self, step: &str, work: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        E: Into<BoxError>,
        F: for<'t, 'c> AsyncFnOnce(&'t Transaction<'c>) -> std::result::Result<T, E>,
    {
        check_name(step)?;
        let run_id = self.durable_run("a durable step")?.run_id;
        if self.is_cancelled() {
            return Err(Error::Cancelled(run_id));
        }
        let token = self.token;
        self.client().await?;
        // The replay's lock and the connection are both the job's: take the connection from its
        // cell for the transaction, the replay through its own field.
        let mut guard = lock_replay(&self.replay)?;
        if guard.is_none() {
            *guard = Some(read_replay(self.client.get().expect("connected above"), run_id).await?);
        }
        let replay = guard.as_mut().expect("read above");
        if let Some(output) = replay.next(run_id, step)? {
            return decode(step, output);
        }
        let client = self.client.get_mut().expect("connected above");
        let tx = client.transaction().await?;
        let value = work(&tx).await.map_err(|e| step_error(step, e.into()))?;
        let output = encode(step, &value)?;
        let (recorded, pid) = steps::record_step_on_backend(&tx, run_id, token, step, Some(&output)).await?;
        if !recorded {
            return Err(Error::InvalidArgument(format!("step {step:?} of run {run_id} was recorded before")));
        }
        // Acknowledged only if its synchronous-replication wait was not cancelled, like a
        // FencedTransaction's commit.
        let commit = async { Ok((tx.commit().await?, Some(pid))) };
        replication::acknowledged("a durable step's commit", commit).await?;
        replay.push(step, Some(output));
        Ok(value)
    }

    /// A durable timer: the run gives its slot back for `duration` (from the first time this
    /// attempt's replay reaches it, on the database clock), without counting an attempt, and
    /// resumes on any host then. Returns [`Error::Parked`] while it sleeps (return it from the
    /// handler with `?`), `Ok` once the time has passed.
    pub async fn sleep(&self, name: &str, duration: Duration) -> Result<()> {
        check_name(name)?;
        let run = self.durable_run("a durable timer")?;
        let until = self.deadline(&format!("{RESERVED_PREFIX}sleep:{name}"), duration).await?;
        if steps::sleep_run(self.client().await?, run.run_id, self.token, &until).await? {
            return Err(self.parked(run.run_id, "sleep"));
        }
        Ok(())
    }

    /// Waits for signal `name` ([`steps::signal_run`]): its payload when it was sent (before
    /// this run waited or after), `None` when `timeout` passed first (both recorded, so a
    /// replay answers the same). Meanwhile the run is parked: [`Error::Parked`], to return from
    /// the handler; it resumes, on any host, when the signal comes or the time is up.
    pub async fn wait_for_signal(&self, name: &str, timeout: Duration) -> Result<Option<Value>> {
        check_name(name)?;
        let run_id = self.durable_run("waiting for a signal")?.run_id;
        let until = self.deadline(&format!("{RESERVED_PREFIX}signal-until:{name}"), timeout).await?;
        let outcome = self
            .checkpoint(&format!("{RESERVED_PREFIX}signal:{name}"), async {
                match steps::await_signal(self.client().await?, run_id, self.token, name, &until).await? {
                    Wait::Received(payload) => Ok(json!({ "received": true, "payload": payload })),
                    Wait::TimedOut => Ok(json!({ "received": false })),
                    _ => Err(self.parked(run_id, &format!("signal:{name}"))),
                }
            })
            .await?
            .unwrap_or_default();
        Ok(match outcome.get("received") {
            Some(Value::Bool(true)) => Some(outcome.get("payload").cloned().unwrap_or(Value::Null)),
            _ => None,
        })
    }

    /// Admits a child run (in this run's tenant, with the default [`RetryPolicy`]), once per
    /// `child_key` however often this run is replayed; returns its run id. Wait for the
    /// children with [`join_children`](Self::join_children).
    pub async fn spawn_child(
        &self,
        child_key: &str,
        workflow_ref: &str,
        input: &impl Serialize,
    ) -> Result<i64> {
        self.spawn_child_with_policy(child_key, workflow_ref, input, RetryPolicy::default()).await
    }

    /// [`spawn_child`](Self::spawn_child) with a retry policy.
    pub async fn spawn_child_with_policy(
        &self,
        child_key: &str,
        workflow_ref: &str,
        input: &impl Serialize,
        policy: RetryPolicy,
    ) -> Result<i64> {
        let run_id = self.durable_run("a child run")?.run_id;
        let input = encode(child_key, input)?;
        let admitted = steps::spawn_child(
            self.client().await?,
            run_id,
            self.token,
            child_key,
            workflow_ref,
            &input,
            policy,
        )
        .await?;
        Ok(admitted.run_id)
    }

    /// Waits until every child ended (succeeded, failed or cancelled), at most `timeout`, and
    /// returns the children with their states and outputs (recorded under `name`, so a replay
    /// answers the same; after a timeout some may be unfinished). Meanwhile the run is parked:
    /// [`Error::Parked`], to return from the handler.
    pub async fn join_children(&self, name: &str, timeout: Duration) -> Result<Vec<ChildRun>> {
        check_name(name)?;
        let run_id = self.durable_run("joining children")?.run_id;
        let until = self.deadline(&format!("{RESERVED_PREFIX}children-until:{name}"), timeout).await?;
        let children = self
            .checkpoint(&format!("{RESERVED_PREFIX}children:{name}"), async {
                let client = self.client().await?;
                match steps::await_children(client, run_id, self.token, &until).await? {
                    Wait::Finished | Wait::TimedOut => {
                        encode(name, &steps::run_children(client, run_id).await?)
                    }
                    _ => Err(self.parked(run_id, "children")),
                }
            })
            .await?;
        decode(name, children)
    }

    /// Says what the run is doing (any JSON, at most 64 KiB), shown in `rendezvous status` and
    /// `status_runs.progress`. Not a checkpoint. False when this claim no longer holds the run.
    pub async fn progress(&self, progress: &impl Serialize) -> Result<bool> {
        let run_id = self.durable_run("progress")?.run_id;
        let progress = encode("progress", progress)?;
        steps::set_run_progress(self.client().await?, run_id, self.token, &progress).await
    }

    /// Resolves when the run is cancelled (`cancel_run`; the worker hears of it at once, on
    /// channel `rendezvous_cancel`); never for a run that is not. Select on it to stop work
    /// early; a handler that does not return within the worker's `cancel_grace` is dropped.
    pub async fn cancelled(&self) {
        until_cancelled(self.cancel.clone()).await
    }

    /// Whether the run was cancelled (see [`cancelled`](Self::cancelled)).
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// A deadline `after` from the first time a replay reached it, recorded as step `step`.
    async fn deadline(&self, step: &str, after: Duration) -> Result<Value> {
        let deadline =
            self.checkpoint(step, async { steps::deadline(self.client().await?, after).await }).await?;
        deadline.ok_or_else(|| Error::InvalidArgument(format!("step {step:?} recorded no deadline")))
    }

    /// The run parked: the worker neither completes nor fails it when the handler returns.
    fn parked(&self, run_id: i64, waiting_for: &str) -> Error {
        self.parked.store(true, Ordering::SeqCst);
        Error::Parked { run_id, waiting_for: waiting_for.to_owned() }
    }
}

/// Resolves when `cancel` turns true; never when its run ends uncancelled (the switch is then
/// dropped). What `Job::cancelled` and the executor's cut-off wait for.
pub(super) async fn until_cancelled(mut cancel: tokio::sync::watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A step, timer or wait name: 1 to 400 bytes (the runtime's own names add a prefix; the
/// server's limit is 512), not starting with the runtime's prefix.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 400 {
        return Err(Error::InvalidArgument(format!(
            "a step name must be 1 to 400 bytes (got {} bytes)",
            name.len()
        )));
    }
    if name.starts_with(RESERVED_PREFIX) {
        return Err(Error::InvalidArgument(format!(
            "step names starting with {RESERVED_PREFIX:?} are the runtime's own"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(steps: &[&str]) -> Replay {
        Replay { recorded: steps.iter().map(|s| ((*s).to_owned(), Some(json!(s)))).collect(), next: 0 }
    }

    #[test]
    fn a_replay_returns_recorded_steps_in_order_then_runs_new_ones() {
        let mut r = replay(&["plan", "infer"]);
        assert_eq!(r.next(1, "plan").unwrap(), Some(Some(json!("plan"))));
        assert_eq!(r.next(1, "infer").unwrap(), Some(Some(json!("infer"))));
        assert_eq!(r.next(1, "act").unwrap(), None);
        r.push("act", None);
        assert_eq!(r.next(1, "answer").unwrap(), None);
    }

    #[test]
    fn another_step_at_a_recorded_position_is_non_deterministic() {
        let mut r = replay(&["plan", "infer"]);
        r.next(1, "plan").unwrap();
        match r.next(7, "search") {
            Err(Error::NonDeterministic { run_id: 7, position: 2, recorded, requested }) => {
                assert_eq!((recorded.as_str(), requested.as_str()), ("infer", "search"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_name_used_twice_is_refused() {
        let mut r = replay(&["plan"]);
        r.next(1, "plan").unwrap();
        assert!(matches!(r.next(1, "plan"), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(401)).is_err());
        assert!(check_name("rz:sleep:x").is_err());
        assert!(check_name("inference-3").is_ok());
    }

    #[test]
    fn a_step_keeps_the_runtime_s_errors_and_wraps_its_own() {
        let parked = step_error("s", Box::new(Error::Parked { run_id: 1, waiting_for: "sleep".into() }));
        assert!(matches!(parked, Error::Parked { .. }));
        let own = step_error("s", "boom".into());
        assert!(matches!(own, Error::StepFailed { ref step, .. } if step == "s"));
        let db = step_error("s", Box::new(Error::InvalidArgument("x".into())));
        assert!(matches!(db, Error::StepFailed { .. }));
    }
}
