//! A reference caller of the low-level firing claim API, for the tests and the firing bench:
//! every host is handed the same due firings and its own view of the live set; the HRW rank
//! decides who tries first (at `fire_at + rank × grace`), the database decides who wins, and
//! each firing runs once per claim. It drives `claim_firings`, `firing_states`,
//! `renew_firing`, `release_firing` and `complete_firings` from many hosts under skewed clocks
//! and divergent views, which is what the tests check. (Applications use the `Worker`.)
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::future::join_all;
use rendezvous_client::firing::{
    claim_firings, complete_firings, firing_states, release_firing, renew_firing, FiringClaim,
};
use rendezvous_client::{Clock, Database, Error, Firing, HostSet, Result};
use tokio_postgres::Client;

/// What the work of a claimed firing gets.
#[derive(Debug, Clone)]
pub struct FiringContext {
    /// The firing.
    pub firing: Firing,
    /// Its canonical key.
    pub key: String,
    /// This claim's token: fence database writes with [`assert_firing`].
    pub token: i64,
    /// The host running it.
    pub host_id: String,
}

impl FiringContext {
    /// A key for external calls that must not repeat: `<firing key>#<token>`. A takeover
    /// gets a new token, so pair it with a check of the firing's own effects where needed.
    pub fn idempotency_key(&self) -> String {
        format!("{}#{}", self.key, self.token)
    }
}

/// Settings for a [`Dispatcher`].
///
/// Non-exhaustive (later versions may add settings): start from [`Default`] and change what
/// you need with the `with_*` methods, or assign the public fields.
///
/// ```
/// use std::time::Duration;
/// use rendezvous_tests::dispatch::DispatcherOptions;
///
/// let options = DispatcherOptions::default().with_grace(Duration::from_millis(500)).with_max_in_flight(16);
/// assert_eq!(options.lease, Duration::from_secs(60));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DispatcherOptions {
    /// Rank r first tries a firing at `fire_at + r × grace`. Default 2 s.
    pub grace: Duration,
    /// Lease of a claim (database clock). Default 60 s.
    pub lease: Duration,
    /// How often a running firing's lease is renewed. Default lease / 3.
    pub renew_every: Option<Duration>,
    /// Longest wait before looking at a firing another host holds again. Default 1 s.
    pub poll: Duration,
    /// Firings worked on at once. Default 64.
    pub max_in_flight: usize,
    /// How this host reads the time for rank delays.
    pub clock: Clock,
}

impl Default for DispatcherOptions {
    fn default() -> Self {
        DispatcherOptions {
            grace: Duration::from_secs(2),
            lease: Duration::from_secs(60),
            renew_every: None,
            poll: Duration::from_secs(1),
            max_in_flight: 64,
            clock: Clock::Database,
        }
    }
}

impl DispatcherOptions {
    /// Sets [`grace`](Self::grace).
    #[must_use]
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Sets [`lease`](Self::lease).
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets [`renew_every`](Self::renew_every) (`None`: lease / 3).
    #[must_use]
    pub fn with_renew_every(mut self, renew_every: Option<Duration>) -> Self {
        self.renew_every = renew_every;
        self
    }

    /// Sets [`poll`](Self::poll).
    #[must_use]
    pub fn with_poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// Sets [`max_in_flight`](Self::max_in_flight).
    #[must_use]
    pub fn with_max_in_flight(mut self, max_in_flight: usize) -> Self {
        self.max_in_flight = max_in_flight;
        self
    }

    /// Sets [`clock`](Self::clock).
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }
}

/// What one [`Dispatcher::dispatch`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DispatchReport {
    /// Firings this host executed and completed with its token.
    pub executed: u64,
    /// Firings found done by another host.
    pub done_by_others: u64,
    /// Claims this host attempted.
    pub claim_attempts: u64,
    /// Claim attempts that lost (another host held a live claim, or it was done): wasted work.
    pub lost_attempts: u64,
    /// Claim attempts made before the firing was due by the database clock (no holder, not
    /// done): this host's estimate of the database clock ran a little ahead. Claimed again
    /// once due; not counted as lost.
    pub early_attempts: u64,
    /// Claims won by taking over an expired lease.
    pub takeovers: u64,
    /// Executions whose completion was refused: the lease had expired and another host took over.
    pub stale_completions: u64,
    /// Executions whose work returned an error (the claim was released for a retry).
    pub failed: u64,
}

/// A firing waiting for its next look, ordered by when.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    at: SystemTime,
    index: usize,
    /// True once it has been claimed by someone, so the next look starts with a status read.
    seen_held: bool,
}

/// A host's firing dispatcher, on its own connection.
///
/// Every host is handed the same due firings and its own view of the live set; the HRW rank
/// decides who tries first, the database decides who wins, and each firing runs once per claim.
pub struct Dispatcher {
    client: Client,
    host_id: String,
    options: DispatcherOptions,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("host_id", &self.host_id)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// Connects and checks the extension.
    pub async fn connect(
        database: impl Into<Database>,
        host_id: &str,
        options: DispatcherOptions,
    ) -> Result<Dispatcher> {
        if host_id.is_empty() {
            return Err(Error::InvalidArgument("host_id must not be empty".into()));
        }
        if options.lease.is_zero() || options.max_in_flight == 0 || options.poll.is_zero() {
            return Err(Error::InvalidArgument("lease, poll and max_in_flight must be > 0".into()));
        }
        let client =
            rendezvous_client::connect_as(database, &format!("rendezvous dispatcher {host_id}")).await?;
        rendezvous_client::check_extension(&client).await?;
        Ok(Dispatcher { client, host_id: host_id.to_owned(), options })
    }

    /// This host's id.
    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// The dispatcher's connection (for the work's fenced writes, if it likes).
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn now_fn(&self) -> Result<Arc<dyn Fn() -> SystemTime + Send + Sync>> {
        Ok(match &self.options.clock {
            Clock::Local(f) => f.clone(),
            Clock::Database => {
                let before = SystemTime::now();
                let db: SystemTime =
                    self.client.query_one("SELECT pg_catalog.clock_timestamp()", &[]).await?.get(0);
                let rtt = before.elapsed().unwrap_or_default();
                let local_mid = before + rtt / 2;
                match db.duration_since(local_mid) {
                    Ok(ahead) => Arc::new(move || SystemTime::now() + ahead),
                    Err(e) => {
                        let behind = e.duration();
                        Arc::new(move || SystemTime::now() - behind)
                    }
                }
            }
        })
    }

    /// Sees every firing in `due` through to completion, by this host or another: claims those
    /// this host should run — at `fire_at + rank × grace`, rank being this host's HRW rank for
    /// the firing's key in `view` (its view of the live set; a host missing from its own view
    /// ranks last) — runs `work` for each claim it wins while renewing the lease, and
    /// completes it with its token. Returns when all are completed.
    ///
    /// A firing [`firing_key`] refuses (a bad task id, a `fire_at` before 1 AD) fails the call
    /// with [`Error::InvalidArgument`] before anything is claimed.
    pub async fn dispatch<W, Fut>(&self, due: &[Firing], view: &HostSet, work: W) -> Result<DispatchReport>
    where
        W: Fn(FiringContext) -> Fut,
        Fut: Future<Output = std::result::Result<(), String>>,
    {
        let keys: Vec<String> = due.iter().map(Firing::key).collect::<Result<_>>()?;
        let now = self.now_fn().await?;
        // This host's rank per firing in its view; a host missing from its own view ranks last.
        let ranks: Vec<usize> =
            keys.iter().map(|k| view.rank_of(k, &self.host_id).unwrap_or(view.len())).collect();
        let mut queue: BinaryHeap<Reverse<Pending>> = BinaryHeap::new();
        for (index, firing) in due.iter().enumerate() {
            let at = firing.fire_at + self.options.grace * ranks[index] as u32;
            queue.push(Reverse(Pending { at, index, seen_held: ranks[index] > 0 }));
        }
        let mut report = DispatchReport::default();
        while let Some(Reverse(first)) = queue.peek().cloned() {
            let wait = first.at.duration_since(now()).unwrap_or_default();
            if !wait.is_zero() {
                tokio::time::sleep(wait.min(self.options.poll)).await;
                continue;
            }
            // Everything due now, up to max_in_flight, as one batch.
            let t = now();
            let mut batch = Vec::new();
            while let Some(Reverse(p)) = queue.peek() {
                if p.at > t || batch.len() >= self.options.max_in_flight {
                    break;
                }
                batch.push(queue.pop().unwrap().0);
            }
            // Firings someone else held get a status read first (a read, not a claim attempt):
            // done ones are dropped, live leases rescheduled for when they run out.
            let (recheck, fresh): (Vec<Pending>, Vec<Pending>) = batch.into_iter().partition(|p| p.seen_held);
            let mut to_claim = fresh;
            if !recheck.is_empty() {
                let statuses = self.statuses(due, &recheck).await?;
                for (p, status) in recheck.into_iter().zip(statuses) {
                    match status {
                        Status::Done => report.done_by_others += 1,
                        Status::Held { remaining } => {
                            let at = now() + self.next_look(remaining, ranks[p.index]);
                            queue.push(Reverse(Pending { at, ..p }));
                        }
                        Status::Free => to_claim.push(p),
                    }
                }
            }
            if to_claim.is_empty() {
                continue;
            }
            // One call claims the batch; the claims won run concurrently; one call completes them.
            let firings: Vec<&Firing> = to_claim.iter().map(|p| &due[p.index]).collect();
            let claims = claim_firings(&self.client, &firings, &self.host_id, self.options.lease).await?;
            report.claim_attempts += to_claim.len() as u64;
            let mut won = Vec::new();
            for (p, claim) in to_claim.into_iter().zip(claims) {
                match claim {
                    Some(FiringClaim { claimed: true, token: Some(token), .. }) => won.push((p, token)),
                    Some(c) => {
                        // Lost to a live holder, already done, or not yet due by the database
                        // clock (no holder; a host whose clock runs fast asked early).
                        if c.holder.is_none() && !c.completed {
                            report.early_attempts += 1;
                        } else {
                            report.lost_attempts += 1;
                        }
                        if c.completed {
                            report.done_by_others += 1;
                        } else {
                            let remaining =
                                c.lease_until.duration_since(SystemTime::now()).unwrap_or_default();
                            queue.push(Reverse(Pending {
                                at: now() + self.next_look(remaining, ranks[p.index]),
                                seen_held: true,
                                ..p
                            }));
                        }
                    }
                    None => queue.push(Reverse(Pending { at: now(), seen_held: true, ..p })),
                }
            }
            let results = join_all(
                won.iter().map(|(p, token)| self.run_claimed(&due[p.index], &keys[p.index], *token, &work)),
            )
            .await;
            let mut succeeded = Vec::new();
            for ((p, token), result) in won.into_iter().zip(results) {
                if result? {
                    succeeded.push((p, token));
                } else {
                    report.failed += 1;
                    queue.push(Reverse(Pending { at: now() + self.options.poll, seen_held: true, ..p }));
                }
            }
            if succeeded.is_empty() {
                continue;
            }
            let pairs: Vec<(&Firing, i64)> = succeeded.iter().map(|(p, t)| (&due[p.index], *t)).collect();
            let completed = complete_firings(&self.client, &pairs).await?;
            for ((p, token), ok) in succeeded.into_iter().zip(completed) {
                if ok {
                    report.executed += 1;
                    report.takeovers += u64::from(token > 1);
                } else {
                    // Our lease expired and another host took over; watch until it is done.
                    report.stale_completions += 1;
                    queue.push(Reverse(Pending { at: now() + self.options.poll, seen_held: true, ..p }));
                }
            }
        }
        Ok(report)
    }

    /// When to look again at a firing another host holds with `remaining` lease: just after the
    /// lease runs out plus `rank × grace` (so the next in rank takes over first, without a
    /// herd), or after `poll` if that is sooner.
    fn next_look(&self, remaining: Duration, rank: usize) -> Duration {
        if remaining <= self.options.poll {
            remaining + self.options.grace * rank as u32
        } else {
            self.options.poll
        }
    }

    async fn statuses(&self, due: &[Firing], pending: &[Pending]) -> Result<Vec<Status>> {
        let firings: Vec<&Firing> = pending.iter().map(|p| &due[p.index]).collect();
        Ok(firing_states(&self.client, &firings)
            .await?
            .into_iter()
            .map(|s| match (s.claimed, s.completed) {
                (true, true) => Status::Done,
                // Never claimable again (failed for good, or skipped by an overlap policy).
                _ if s.claimable_in == Duration::MAX => Status::Done,
                (_, false) if s.claimable_in.is_zero() => Status::Free,
                (_, _) => Status::Held { remaining: s.claimable_in },
            })
            .collect())
    }

    /// Runs the work of a claim won, renewing its lease meanwhile; true when the work
    /// succeeded. A failed work's claim is released at once, so the next host in rank can retry
    /// it without waiting for the lease.
    async fn run_claimed<W, Fut>(&self, firing: &Firing, key: &str, token: i64, work: &W) -> Result<bool>
    where
        W: Fn(FiringContext) -> Fut,
        Fut: Future<Output = std::result::Result<(), String>>,
    {
        let ctx = FiringContext {
            firing: firing.clone(),
            key: key.to_owned(),
            token,
            host_id: self.host_id.clone(),
        };
        let renew_every =
            self.options.renew_every.unwrap_or(self.options.lease / 3).max(Duration::from_millis(10));
        let run = work(ctx);
        // Renewals run beside the work, never in its way: a renewal waits for the work's own
        // fenced write (which holds the firing's row FOR SHARE), so it must not stop the work
        // from being polled to its commit.
        let renew = async {
            let mut ticker = tokio::time::interval(renew_every);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                match renew_firing(&self.client, firing, token, self.options.lease).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        eprintln!("{key} (token {token}): lease lost while running: another host took over")
                    }
                    Err(e) => return e,
                }
            }
        };
        tokio::pin!(run, renew);
        let result = tokio::select! {
            r = &mut run => r,
            e = &mut renew => return Err(e),
        };
        if let Err(why) = result {
            eprintln!("{key} (token {token}) failed: {why}; releasing it");
            release_firing(&self.client, firing, token).await?;
            return Ok(false);
        }
        Ok(true)
    }
}

enum Status {
    Free,
    Held { remaining: Duration },
    Done,
}
