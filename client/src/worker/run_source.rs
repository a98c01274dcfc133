//! The worker's second source of work: admitted runs. With the slots the firings left and a
//! refill of the local queue once it is half empty, one `claim_runs` call takes this host's own
//! runs by HRW at once and others' after the rank delay (the database decides which, on its
//! clock). The queue's size follows the pace this host starts runs at ([`Pace`]).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

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
pub(super) async fn claim(shared: &Arc<Shared>, client: &Client) -> Result<RunLook> {
    let o = &shared.options;
    let queued = queued_runs(shared);
    let free = shared.slots.available_permits();
    // What to claim: the free slots (the queue is empty when any is free), and a refill of
    // the queue once it is half empty (each claim fetching many).
    let target = shared.run_pace.queue_target(o.prefetch, o.queue_horizon, o.max_concurrent);
    let refill = if queued <= target / 2 { target - queued } else { 0 };
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
        shared.more_runs.store(all_taken, Ordering::Relaxed);
        let none = claims.is_empty();
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
        start_queued(shared)?;
        if none {
            // A retry's backoff or a lease ending: when a run next becomes runnable. (After a
            // claim that took some, the jobs it started make the next look as they finish, or
            // the poll does: the extra statement would cost as much as the claim.)
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

/// The runs in the local queue.
fn queued_runs(shared: &Shared) -> usize {
    shared.queued.lock().expect("queue lock").iter().filter(|q| matches!(q.work, Work::Run(_))).count()
}

/// Whether the local queue of runs wants its refill now: the last claim took all it asked for
/// (the database may hold more) and the queue is down to half its target or less. The refill's
/// claim then runs while the other half does, so no handler waits for its round trip.
/// A queue of a few runs is refilled only once empty (at half it would make a look per
/// finished run).
pub(super) fn wants_refill(shared: &Shared) -> bool {
    if !shared.more_runs.load(Ordering::Relaxed) {
        return false;
    }
    let o = &shared.options;
    let target = shared.run_pace.last_target(o.prefetch, o.queue_horizon);
    target >= 4 && queued_runs(shared) <= target / 2
}

/// Counts a freed slot that found no run queued while the database may hold more.
pub(super) fn note_empty_queue(shared: &Shared) {
    if shared.more_runs.load(Ordering::Relaxed) {
        Counters::add(&shared.counters.waits_for_claims);
    }
}

/// The pace this host starts runs at, which sizes its local queue: about `queue_horizon` of
/// work at that pace, so a claim fetches hundreds where handlers are short, and a host with
/// slow handlers holds little that another host could start sooner.
pub(super) struct Pace {
    /// Runs started here so far.
    pub(super) started: AtomicU64,
    /// The last sample: when, the runs started by then, and the smoothed runs per second.
    sample: Mutex<(Instant, u64, f64)>,
}

/// The interval a pace is measured over (looks can come much closer together), unless twice
/// the slots' worth of runs started sooner: a host with short handlers then learns its pace
/// within a few claims instead of claiming only its free slots for the first interval (a
/// quarter of a 10,000-run backlog's drain in the runs bench), while a host with slow
/// handlers, which starts few, is still measured over the whole interval.
const PACE_SAMPLE: Duration = Duration::from_millis(50);

/// The shortest interval a pace is measured over.
const PACE_SAMPLE_MIN: Duration = Duration::from_millis(2);

impl Default for Pace {
    fn default() -> Self {
        Pace { started: AtomicU64::new(0), sample: Mutex::new((Instant::now(), 0, 0.0)) }
    }
}

impl Pace {
    /// How many runs the local queue should hold now: `horizon` of runs at the recent pace
    /// (each sample averaged with the last: a change shows within a few looks), at most `cap`;
    /// always `cap` without a horizon. `slots`: the host's handlers.
    pub(super) fn queue_target(&self, cap: usize, horizon: Option<Duration>, slots: usize) -> usize {
        let Some(horizon) = horizon else { return cap };
        let mut sample = self.sample.lock().expect("pace lock");
        let (since, started_then, rate) = *sample;
        let elapsed = since.elapsed();
        let started = self.started.load(Ordering::Relaxed);
        let since_sample = started.saturating_sub(started_then);
        let many = since_sample >= 2 * slots as u64;
        if elapsed >= PACE_SAMPLE || (many && elapsed >= PACE_SAMPLE_MIN) {
            let now_rate = since_sample as f64 / elapsed.as_secs_f64();
            let rate = if rate == 0.0 { now_rate } else { (rate + now_rate) / 2.0 };
            *sample = (Instant::now(), started, rate);
        }
        target(sample.2, horizon, cap)
    }

    /// The target at the last sample's pace, taking no sample (asked after every finished
    /// run, it would measure the pace over a few milliseconds).
    pub(super) fn last_target(&self, cap: usize, horizon: Option<Duration>) -> usize {
        let Some(horizon) = horizon else { return cap };
        target(self.sample.lock().expect("pace lock").2, horizon, cap)
    }
}

/// `horizon` of runs at `rate` runs a second, at most `cap`.
fn target(rate: f64, horizon: Duration, cap: usize) -> usize {
    ((rate * horizon.as_secs_f64()).ceil() as usize).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_follows_the_pace_and_stays_under_its_cap() {
        let horizon = Some(Duration::from_millis(100));
        let pace = Pace::default();
        assert_eq!(pace.queue_target(500, None, 4), 500, "no horizon: always full");
        assert_eq!(pace.queue_target(5_000, horizon, 4), 0, "nothing started yet");
        // 1,000 runs in about 100 ms (more on a loaded machine): a pace of up to 10,000 a
        // second, so up to 1,000 runs of work; never more than the cap.
        std::thread::sleep(Duration::from_millis(100));
        pace.started.store(1_000, Ordering::Relaxed);
        let busy = pace.queue_target(5_000, horizon, 4);
        assert!((1..=1_000).contains(&busy), "{busy}");
        assert!(pace.queue_target(10, horizon, 4) <= 10);
        // Then nothing starts: the target falls with each sample.
        std::thread::sleep(Duration::from_millis(100));
        let idle = pace.queue_target(5_000, horizon, 4);
        assert!(idle < busy, "{idle} after {busy}");
        std::thread::sleep(Duration::from_millis(100));
        assert!(pace.queue_target(5_000, horizon, 4) < idle.max(1));
    }

    /// Short handlers: twice the slots' worth of starts gives a pace within milliseconds, not
    /// after the whole sample interval; a single start (a slow host) does not.
    #[test]
    fn short_handlers_get_a_pace_within_a_few_claims() {
        let horizon = Some(Duration::from_millis(100));
        let fast = Pace::default();
        assert_eq!(fast.queue_target(500, horizon, 4), 0);
        std::thread::sleep(PACE_SAMPLE_MIN);
        fast.started.store(8, Ordering::Relaxed);
        let target = fast.queue_target(500, horizon, 4);
        assert!(target >= 8, "8 runs started within a few ms: a pace of thousands a second, queue {target}");
        let slow = Pace::default();
        assert_eq!(slow.queue_target(500, horizon, 4), 0);
        std::thread::sleep(PACE_SAMPLE_MIN);
        slow.started.store(1, Ordering::Relaxed);
        assert_eq!(slow.queue_target(500, horizon, 4), 0, "one start is no pace before the interval ends");
    }
}
