//! The worker's second source of work: admitted runs. With the slots the firings left (and,
//! with `prefetch`, a refill of the local queue once it is half empty), one `claim_runs` call
//! takes this host's own runs by HRW at once and others' after the rank delay (the database
//! decides which, on its clock).
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio::task::JoinHandle;
use tokio_postgres::Client;

use super::executor::start_queued;
use super::job::Work;
use super::stats::Counters;
use super::{Queued, Shared};
use crate::runs;
use crate::{signals, Result};

/// What a look for runs found.
pub(super) enum RunLook {
    /// Every run asked for was claimed: there may be more, so look again once slots free up.
    MoreWaiting,
    /// When a run next becomes runnable (a retry's backoff, a lease ending), when known.
    NextRunnable(Option<SystemTime>),
}

/// Claims runs into the local queue and starts them in the free slots.
pub(super) async fn claim(
    shared: &Arc<Shared>,
    client: &Client,
    jobs: &mut Vec<JoinHandle<()>>,
) -> Result<RunLook> {
    let o = &shared.options;
    let queued =
        shared.queued.lock().expect("queue lock").iter().filter(|q| matches!(q.work, Work::Run(_))).count();
    let free = shared.slots.available_permits();
    // What to claim: the free slots (the queue is empty when any is free), and, with
    // prefetch, a refill of the queue once it is half empty (each claim fetching many).
    let refill = if queued <= o.prefetch / 2 { o.prefetch - queued } else { 0 };
    let want = free + refill;
    let mut all_taken = false;
    let mut next = None;
    if want > 0 {
        let refs: Vec<&str> = shared.workflows.keys().map(String::as_str).collect();
        let options = runs::ClaimRuns {
            max: want.min(10_000) as i32,
            lease: o.run_lease,
            workflow_refs: Some(&refs),
            grace: o.rank_delay,
        };
        let claims = runs::claim_runs(client, &shared.host_id, &options).await?;
        all_taken = claims.len() == want;
        let claimed_at = Instant::now();
        {
            let mut queue = shared.queued.lock().expect("queue lock");
            for claim in claims {
                Counters::add(&shared.counters.claimed);
                metrics::counter!(signals::RUNS_CLAIMED).increment(1);
                let (token, attempt) = (claim.token, claim.attempt);
                queue.push_back(Queued {
                    work: Work::Run(claim),
                    token,
                    attempt,
                    lease: o.run_lease,
                    claimed_at,
                    due: None,
                });
            }
        }
        start_queued(shared, jobs)?;
        if !all_taken {
            // A retry's backoff or a lease ending: when a run next becomes runnable.
            next = runs::next_runnable_at(client, Some(&refs)).await?;
        }
    }
    // Runs waiting (queued here, or maybe more in the database): a finishing job makes
    // the next look at once.
    let queued_now = !shared.queued.lock().expect("queue lock").is_empty();
    if want > 0 || queued_now {
        shared.runs_waiting.store(all_taken || queued_now, Ordering::Relaxed);
    }
    if all_taken && !queued_now {
        return Ok(RunLook::MoreWaiting);
    }
    Ok(RunLook::NextRunnable(next))
}
