//! What a [`Worker`](super::Worker) did so far: [`WorkerStats`], kept as atomic counters.
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts of what a [`Worker`] did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Claims won.
    pub claimed: u64,
    /// Claim attempts lost (another host was first): wasted work.
    pub lost_claims: u64,
    /// Firings completed here.
    pub completed: u64,
    /// Completions refused: the lease had run out and another host took over.
    pub stale_completions: u64,
    /// Failed attempts recorded (each is retried, or failed for good).
    pub failed_attempts: u64,
    /// Failed attempts that were the last one: failed for good.
    pub failed_for_good: u64,
    /// Claims given back unfinished: at shutdown, and queued work that waited past half its
    /// lease for a slot (its attempt refunded, for another host to take).
    pub released: u64,
    /// New control connections after one was lost.
    pub reconnects: u64,
    /// Looks at the database and connection attempts with no answer within the call timeout:
    /// each is cancelled, and its connection kept if the server answered the cancel (only slow),
    /// given up otherwise (a primary that cannot commit, a dead network path).
    pub timeouts: u64,
    /// Runs parked by their handler (a durable timer, a wait for a signal or children): their
    /// slot given back until it comes.
    pub parked: u64,
    /// Runs cancelled while their handler ran here.
    pub cancelled: u64,
    /// Claims whose lease was lost while their handler ran (another host took the work over):
    /// the handler's statement was cancelled and its slot freed, its result ignored.
    pub lost_leases: u64,
    /// Looks at the database by the control loop (each a few statements: heartbeat when due,
    /// due firings, run claims).
    pub looks: u64,
    /// Notifications on the runtime's channels that the extension did not send (anyone may
    /// `NOTIFY`), or repeated: ignored, at no cost to the database.
    pub ignored_wakeups: u64,
    /// Slots freed with no run queued here while the database may have held more (the last
    /// claim took all it asked for): a handler waited for a claim's round trip. The local
    /// queue is refilled once half empty so that this stays rare; many mean claims slower
    /// than half the queue's work (`queue_horizon`).
    pub waits_for_claims: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) claimed: AtomicU64,
    pub(super) lost_claims: AtomicU64,
    pub(super) completed: AtomicU64,
    pub(super) stale_completions: AtomicU64,
    pub(super) failed_attempts: AtomicU64,
    pub(super) failed_for_good: AtomicU64,
    pub(super) released: AtomicU64,
    pub(super) reconnects: AtomicU64,
    pub(super) timeouts: AtomicU64,
    pub(super) parked: AtomicU64,
    pub(super) cancelled: AtomicU64,
    pub(super) lost_leases: AtomicU64,
    pub(super) looks: AtomicU64,
    pub(super) ignored_wakeups: AtomicU64,
    pub(super) waits_for_claims: AtomicU64,
}

impl Counters {
    pub(super) fn add(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> WorkerStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkerStats {
            claimed: g(&self.claimed),
            lost_claims: g(&self.lost_claims),
            completed: g(&self.completed),
            stale_completions: g(&self.stale_completions),
            failed_attempts: g(&self.failed_attempts),
            failed_for_good: g(&self.failed_for_good),
            released: g(&self.released),
            reconnects: g(&self.reconnects),
            timeouts: g(&self.timeouts),
            parked: g(&self.parked),
            cancelled: g(&self.cancelled),
            lost_leases: g(&self.lost_leases),
            looks: g(&self.looks),
            ignored_wakeups: g(&self.ignored_wakeups),
            waits_for_claims: g(&self.waits_for_claims),
        }
    }
}
