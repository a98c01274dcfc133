//! How a [`Worker`](super::Worker) is set up: its [`WorkerOptions`] and the [`Clock`] its rank
//! delays are timed by.
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::membership::DEFAULT_STALENESS;

/// How a host reads "now" to time its rank delays. Correctness never depends on it (leases
/// and claims use the database clock); only who tries first does.
#[derive(Clone, Default)]
pub enum Clock {
    /// The local clock corrected by its offset from the database's, measured at each look.
    #[default]
    Database,
    /// A clock of the caller's (for instance a deliberately skewed one, to test that skew
    /// changes nothing but timing).
    Local(Arc<dyn Fn() -> SystemTime + Send + Sync>),
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Clock::Database => "Clock::Database",
            Clock::Local(_) => "Clock::Local",
        })
    }
}

/// Settings for a [`Worker`].
///
/// Non-exhaustive (later versions may add settings): start from [`Default`] and change what
/// you need with the `with_*` methods.
///
/// ```
/// use std::time::Duration;
/// use rendezvous_client::WorkerOptions;
///
/// let options = WorkerOptions::default().with_max_concurrent(4).with_rank_delay(Duration::from_millis(200));
/// assert_eq!(options.max_concurrent, 4);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// Longest sleep between two looks at the database. The worker also wakes when the
    /// database says the next firing is due. Default 1 s.
    pub poll: Duration,
    /// The host ranked r for a firing tries it r × `rank_delay` after it became claimable.
    /// Default 500 ms.
    pub rank_delay: Duration,
    /// Firings run at once (one pooled connection each). Default 16.
    pub max_concurrent: usize,
    /// Time between membership heartbeats. Default 2 s.
    pub heartbeat: Duration,
    /// Staleness of the live set the ranks are computed over. Default 10 s.
    pub staleness: Duration,
    /// This host's weight in the live set. Default 1.
    pub weight: f64,
    /// Longest wait between two reconnection attempts (they start at 100 ms and double, with
    /// jitter). Default 5 s.
    pub max_backoff: Duration,
    /// How this host reads "now" for its rank delays (correctness never depends on it).
    pub clock: Clock,
    /// The lease of a claimed run (renewed every third of it while its handler runs; the claim
    /// also ends with this host's session). Default 30 s.
    pub run_lease: Duration,
    /// The longest the worker waits for one look at the database or one call on its side
    /// connection (a renewal, a batch of completions): a primary that cannot commit (cut off
    /// from its synchronous standby) or a dead network path would otherwise hold it forever.
    /// Past it, the call's statement is cancelled. A server that answers the cancel is only
    /// slow: the call gets as long again to end (with its answer or the cancellation), and the
    /// connection is kept. Otherwise, or still without an answer, the connection is given up
    /// (closed, so its server session ends too) and made again (through a multi-host URL, to
    /// whichever server accepts writes). Default 10 s.
    pub call_timeout: Duration,
    /// The most runs claimed ahead of free slots into a local queue, so a handler that
    /// finishes starts the next run without a look at the database (a claim then fetches many).
    /// How many are queued adapts ([`queue_horizon`](Self::queue_horizon)). Queued runs are
    /// held by this host, their leases running from the claim: one queued for more than half
    /// its lease is released instead of run, and shutdown releases the queue. 0: none, each
    /// look claims only what the free slots take. Default 500.
    pub prefetch: usize,
    /// How much work the local queue holds: about this long of runs at the pace this host has
    /// been starting them (up to [`prefetch`](Self::prefetch)), so short handlers get claims of
    /// hundreds and a slow host holds little that idle hosts could run. `None`: the queue is
    /// kept full to `prefetch` (the 0.3.0 behaviour of a set `prefetch`). Default 100 ms.
    pub queue_horizon: Option<Duration>,
    /// How often a retention pass runs ([`retention`](crate::retention): finished firings and
    /// runs and dead hosts older than their settings are deleted, in bounded batches with
    /// pauses). Only the host ranking first for it among the live hosts runs it, on a
    /// connection of its own. `None`: this host never does. Default 60 s.
    pub retention: Option<Duration>,
    /// How long a cancelled run's handler may take to return once it is told
    /// ([`Job::cancelled`](crate::Job::cancelled)) before the worker drops it. Default 1 s.
    pub cancel_grace: Duration,
    /// How long [`start`](crate::worker::WorkerBuilder::start) keeps trying a database that
    /// does not answer yet (busy, starting, restarting, not reachable): each try is bounded by
    /// `call_timeout`, with the reconnect backoff between tries. What trying again cannot fix
    /// (a bad URL or schedule, a missing extension, a role without rights, a pooler) fails at
    /// once. Default 30 s.
    pub start_timeout: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            poll: Duration::from_secs(1),
            rank_delay: Duration::from_millis(500),
            max_concurrent: 16,
            heartbeat: Duration::from_secs(2),
            staleness: DEFAULT_STALENESS,
            weight: 1.0,
            max_backoff: Duration::from_secs(5),
            clock: Clock::Database,
            run_lease: Duration::from_secs(30),
            call_timeout: Duration::from_secs(10),
            prefetch: 500,
            queue_horizon: Some(Duration::from_millis(100)),
            retention: Some(Duration::from_secs(60)),
            cancel_grace: Duration::from_secs(1),
            start_timeout: Duration::from_secs(30),
        }
    }
}

impl WorkerOptions {
    /// Sets [`poll`](Self::poll).
    #[must_use]
    pub fn with_poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// Sets [`rank_delay`](Self::rank_delay).
    #[must_use]
    pub fn with_rank_delay(mut self, rank_delay: Duration) -> Self {
        self.rank_delay = rank_delay;
        self
    }

    /// Sets [`max_concurrent`](Self::max_concurrent).
    #[must_use]
    pub fn with_max_concurrent(mut self, max_concurrent: usize) -> Self {
        self.max_concurrent = max_concurrent;
        self
    }

    /// Sets [`heartbeat`](Self::heartbeat).
    #[must_use]
    pub fn with_heartbeat(mut self, heartbeat: Duration) -> Self {
        self.heartbeat = heartbeat;
        self
    }

    /// Sets [`staleness`](Self::staleness).
    #[must_use]
    pub fn with_staleness(mut self, staleness: Duration) -> Self {
        self.staleness = staleness;
        self
    }

    /// Sets [`weight`](Self::weight).
    #[must_use]
    pub fn with_weight(mut self, weight: f64) -> Self {
        self.weight = weight;
        self
    }

    /// Sets [`max_backoff`](Self::max_backoff).
    #[must_use]
    pub fn with_max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }

    /// Sets [`clock`](Self::clock).
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Sets [`prefetch`](Self::prefetch).
    #[must_use]
    pub fn with_prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Sets [`queue_horizon`](Self::queue_horizon).
    #[must_use]
    pub fn with_queue_horizon(mut self, queue_horizon: Option<Duration>) -> Self {
        self.queue_horizon = queue_horizon;
        self
    }

    /// Sets [`retention`](Self#structfield.retention).
    #[must_use]
    pub fn with_retention(mut self, retention: Option<Duration>) -> Self {
        self.retention = retention;
        self
    }

    /// Sets [`run_lease`](Self::run_lease).
    #[must_use]
    pub fn with_run_lease(mut self, run_lease: Duration) -> Self {
        self.run_lease = run_lease;
        self
    }

    /// Sets [`cancel_grace`](Self::cancel_grace).
    #[must_use]
    pub fn with_cancel_grace(mut self, cancel_grace: Duration) -> Self {
        self.cancel_grace = cancel_grace;
        self
    }

    /// Sets [`start_timeout`](Self::start_timeout).
    #[must_use]
    pub fn with_start_timeout(mut self, start_timeout: Duration) -> Self {
        self.start_timeout = start_timeout;
        self
    }

    /// Sets [`call_timeout`](Self::call_timeout).
    #[must_use]
    pub fn with_call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }
}
