//! The executor: claimed work started in free slots, each job on its own task with its lease
//! renewed beside it, and its outcome (completion, failure, a claim handed back) recorded.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::FutureExt;
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;

use super::job::{Job, Work};
use super::stats::Counters;
use super::steps::until_cancelled;
use super::BoxError;
use super::{Queued, Shared};
use crate::firing::{self, fail_firing, FailOutcome};
use crate::runs;
use crate::{signals, Error, Result};

/// Starts queued work in the free slots, oldest claim first; work queued for more than half
/// its lease is released instead (another host may run it at once), not run on a claim near
/// its end.
pub(super) fn start_queued(shared: &Arc<Shared>) -> Result<()> {
    loop {
        if shared.slots.available_permits() == 0 {
            return Ok(());
        }
        let Some(q) = shared.queued.lock().expect("queue lock").pop_front() else {
            return Ok(());
        };
        if held_too_long(&q) {
            release_queued(shared, q);
            continue;
        }
        if let Some(due) = q.due {
            signals::seconds(signals::FIRING_START_LATENESS, due.elapsed());
        }
        if matches!(q.work, Work::Run(_)) {
            shared.run_pace.started.fetch_add(1, Ordering::Relaxed);
        }
        let job = start_job(shared.clone(), q.work, q.token, q.attempt, q.lease)?;
        shared.jobs.lock().expect("jobs lock").push(job);
    }
}

/// Whether queued work waited past half its lease: started now, its lease could end before
/// its first renewal.
fn held_too_long(q: &Queued) -> bool {
    q.claimed_at.elapsed() > q.lease / 2
}

/// Gives queued work back (the database refunds its attempt), in the background.
fn release_queued(shared: &Arc<Shared>, q: Queued) {
    Counters::add(&shared.counters.released);
    let side = shared.clone();
    tokio::spawn(async move {
        if let Err(e) = release(&side, &q.work, q.token).await {
            tracing::warn!(error = %e, "could not release work queued too long");
        }
    });
}

/// Gives back the queued work that waited past half its lease, whether or not a slot is free:
/// left in the queue of a host whose handlers are slow (a starved machine), its lease would
/// end there, and another host's takeover would count the attempt it never began, until the
/// run fails for good without having run (#43). Released, its attempt is refunded and the next
/// host with a free slot takes it.
pub(super) fn release_held_too_long(shared: &Arc<Shared>) {
    let stale: Vec<Queued> = {
        let mut queue = shared.queued.lock().expect("queue lock");
        // Every look asks: the queue is rebuilt only when something is to go.
        if !queue.iter().any(held_too_long) {
            return;
        }
        let (stale, kept): (Vec<Queued>, Vec<Queued>) = queue.drain(..).partition(held_too_long);
        queue.extend(kept);
        stale
    };
    for q in stale {
        release_queued(shared, q);
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
pub(super) async fn release(shared: &Shared, work: &Work, token: i64) -> Result<bool> {
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

/// How a job's handler ended: it returned (or panicked), its claim was lost, or it did not
/// return within `cancel_grace` of its run's cancellation.
enum Ending<R> {
    Returned(R),
    LeaseLost,
    CutOff,
}

/// What a handler returned, or its panic.
type Outcome = std::thread::Result<std::result::Result<(), BoxError>>;

/// What the executor watches of a running job: whether its handler completed or parked the
/// work itself, whether the run was cancelled, and the statement it runs (cancelled when the
/// claim is lost).
struct Watch {
    completed: Arc<AtomicBool>,
    parked: Arc<AtomicBool>,
    told: tokio::sync::watch::Receiver<bool>,
    statement: Arc<std::sync::Mutex<Option<tokio_postgres::CancelToken>>>,
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
    // A run's cancellation switch, thrown by the control loop when rendezvous_cancel names it.
    let (cancel, told) = tokio::sync::watch::channel(false);
    let run_id = match &work {
        Work::Run(r) => Some(r.run_id),
        Work::Firing(_) => None,
    };
    if let Some(id) = run_id {
        shared.cancels.lock().expect("cancels lock").insert(id, cancel);
    }
    let watch = Watch {
        completed: Arc::new(AtomicBool::new(false)),
        parked: Arc::new(AtomicBool::new(false)),
        told,
        statement: Arc::new(std::sync::Mutex::new(None)),
    };
    let job = Job {
        work: work.clone(),
        key,
        token,
        attempt,
        host_id: shared.host_id.clone(),
        client: tokio::sync::OnceCell::new(),
        statement: watch.statement.clone(),
        shared: shared.clone(),
        completed: watch.completed.clone(),
        parked: watch.parked.clone(),
        cancel: watch.told.clone(),
        replay: tokio::sync::Mutex::new(None),
    };
    let ended = supervise(shared, handler(job), &work, token, lease, &watch).await;
    if let Some(id) = run_id {
        shared.cancels.lock().expect("cancels lock").remove(&id);
    }
    let outcome = match ended {
        Ending::Returned(outcome) => outcome,
        Ending::LeaseLost => {
            Counters::add(&shared.counters.lost_leases);
            free_slot();
            return;
        }
        Ending::CutOff => {
            Counters::add(&shared.counters.cancelled);
            tracing::warn!(grace = ?shared.options.cancel_grace, "the cancelled run's handler did not return in time: dropped");
            free_slot();
            return;
        }
    };
    if *watch.told.borrow() {
        Counters::add(&shared.counters.cancelled);
        tracing::info!("the run was cancelled while its handler ran");
    } else if watch.parked.load(Ordering::SeqCst) {
        // A timer or a wait gave the slot back: the run resumes when it comes, on any host.
        Counters::add(&shared.counters.parked);
    } else {
        record_outcome(shared, &work, token, outcome, watch.completed.load(Ordering::SeqCst), &mut free_slot)
            .await;
    }
    free_slot();
}

/// Runs a job's handler to its end, with its lease renewed beside it: what it returned, or that
/// its claim was lost (its statement then cancelled), or that it did not return within
/// `cancel_grace` of its run's cancellation.
async fn supervise(
    shared: &Arc<Shared>,
    handler: impl std::future::Future<Output = std::result::Result<(), BoxError>>,
    work: &Work,
    token: i64,
    lease: Duration,
    watch: &Watch,
) -> Ending<Outcome> {
    let handled = std::panic::AssertUnwindSafe(handler).catch_unwind();
    // Cancelled: the handler is told (Job::cancelled) and has cancel_grace to return.
    let cut_off = async {
        until_cancelled(watch.told.clone()).await;
        tokio::time::sleep(shared.options.cancel_grace).await;
    };
    // Renewals run beside the handler on the side connection, never in its way. They end when
    // the claim is lost: another host took the work over. (A renewal also finds no claim once
    // the handler completed the work itself, parked the run or it was cancelled: those end as
    // they do, and renewing stops.)
    let renewals = async {
        let every = (lease / 3).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            match renew(shared, work, token, lease).await {
                Ok(Some(_)) => {}
                Ok(None)
                    if watch.completed.load(Ordering::SeqCst)
                        || watch.parked.load(Ordering::SeqCst)
                        || *watch.told.borrow() =>
                {
                    std::future::pending::<()>().await
                }
                Ok(None) => return,
                Err(e) => tracing::warn!(error = %e, "lease renewal failed"),
            }
        }
    };
    tokio::pin!(handled, renewals, cut_off);
    tokio::select! {
        // The handler's end first: a renewal that raced its completion finds no claim.
        biased;
        r = &mut handled => Ending::Returned(r),
        _ = &mut renewals => {
            // The claim is gone: the handler's statement is cancelled (one stuck in a lock or a
            // synchronous-replication wait would hold the slot for ever) and the handler has
            // cancel_grace to return; its result counts for nothing, the work is another's.
            tracing::warn!("lease lost while running: another host took over; the handler's statement is cancelled");
            let cancel = watch.statement.lock().expect("statement lock").clone();
            if let Some(cancel) = cancel {
                if let Err(e) = shared.database.cancel(&cancel).await {
                    tracing::debug!(error = %e, "could not cancel the handler's statement");
                }
            }
            let _ = tokio::time::timeout(shared.options.cancel_grace, &mut handled).await;
            Ending::LeaseLost
        }
        _ = &mut cut_off => Ending::CutOff,
    }
}

/// Records what a handler that returned did: a success is completed in the next batch (unless
/// the handler completed the work itself), a failure recorded for a retry, a claim whose
/// connection failed handed back. The slot is freed as soon as nothing more runs here.
async fn record_outcome(
    shared: &Arc<Shared>,
    work: &Work,
    token: i64,
    outcome: Outcome,
    completed: bool,
    free_slot: &mut impl FnMut(),
) {
    match outcome {
        Ok(Ok(())) if completed => done(shared, work, token),
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
                Ok(true) => done(shared, work, token),
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
            if let Err(e) = release(shared, work, token).await {
                tracing::warn!(error = %e, "could not hand the claim back; it is taken over when its holder is gone");
            }
        }
        Ok(Err(e)) => record_failure(shared, work, token, &e.to_string()).await,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            record_failure(shared, work, token, &format!("handler panicked: {what}")).await;
        }
    }
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
            // A durable step's work failed: look at why.
            Some(Error::StepFailed { .. }) => {}
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
        let step = |source: BoxError| Box::new(Error::StepFailed { step: "s".into(), source });
        assert!(boxed(step(Box::new(Error::Disconnected("gone".into())))));
        assert!(!boxed(step("the step's own failure".into())));
    }
}
