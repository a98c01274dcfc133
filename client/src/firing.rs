//! Exactly-once firing claims, and the [`Dispatcher`] that uses HRW rank to decide who tries
//! first while the database decides who wins.
//!
//! What is exactly-once is the **claim**: one live claim per firing, whatever each host
//! believes about membership or time. Execution is at-least-once across a holder's death: an
//! uncompleted claim whose lease expired is taken over with a higher token, and the stale
//! holder's completion and fenced writes are then refused. Hand the token to the work:
//! `assert_firing` in the same transaction as a database write, and
//! [`FiringContext::idempotency_key`] for external calls.
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use tokio_postgres::{Client, GenericClient};

use crate::hrw::HostSet;
use crate::{replication, signals, sql, Database, Error, Result};

/// One due firing of a recurring task.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Firing {
    /// The task.
    pub task_id: String,
    /// When it is due (any time zone: the instant is what counts).
    pub fire_at: SystemTime,
}

impl Firing {
    /// A firing of `task_id` at `fire_at`.
    pub fn new(task_id: impl Into<String>, fire_at: SystemTime) -> Firing {
        Firing { task_id: task_id.into(), fire_at }
    }

    /// `firing:<task_id>:<fire_at as YYYY-MM-DDTHH:MM:SS.ffffffZ>`, exactly as
    /// `rendezvous.firing_key` computes it; see [`firing_key`] for what is refused.
    pub fn key(&self) -> Result<String> {
        firing_key(&self.task_id, self.fire_at)
    }
}

/// The longest task id the extension takes, in bytes.
pub const MAX_TASK_ID_BYTES: usize = crate::MAX_ID_BYTES;

/// Seconds from 1970-01-01 to 2000-01-01, PostgreSQL's epoch.
const PG_EPOCH_UNIX_SECS: u64 = 946_684_800;
/// 0001-01-01T00:00:00Z in microseconds since 2000-01-01: the earliest `fire_at` the extension
/// takes (a key spells the year without an era, so a BC instant would share an AD key).
const MIN_FIRE_AT_PG_MICROS: i128 = -63_082_281_600_000_000;
/// 294277-01-01T00:00:00Z in microseconds since 2000-01-01: PostgreSQL's `END_TIMESTAMP`,
/// the first instant past the end of `timestamptz`'s range.
const END_TIMESTAMP_PG_MICROS: i128 = 9_223_371_331_200_000_000;

/// The microseconds since 2000-01-01 UTC that PostgreSQL receives for `t`: tokio-postgres sends
/// whole microseconds, truncated toward 2000-01-01.
fn pg_micros(t: SystemTime) -> i128 {
    let pg_epoch = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS);
    match t.duration_since(pg_epoch) {
        Ok(d) => d.as_micros() as i128,
        Err(e) => -(e.duration().as_micros() as i128),
    }
}

/// The canonical firing key, `firing:<task_id>:<YYYY-MM-DDTHH:MM:SS.ffffffZ>` (UTC,
/// microsecond precision): the same string the SQL function `rendezvous.firing_key` returns for
/// the same task and instant. Sub-microsecond parts are cut as the driver sends them, toward
/// 2000-01-01.
///
/// Refuses, with [`Error::InvalidArgument`], what `rendezvous.firing_key` refuses (with
/// SQLSTATE 22023): an empty `task_id` or one longer than [`MAX_TASK_ID_BYTES`], and a
/// `fire_at` before 0001-01-01T00:00:00Z (the key has no era, so a BC instant would share an
/// AD firing's key). Also refused: a `task_id` with a NUL byte, and a `fire_at` past
/// 294276-12-31T23:59:59.999999Z, neither of which PostgreSQL can store.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use rendezvous_client::firing::firing_key;
///
/// let at = UNIX_EPOCH + Duration::from_micros(1_795_910_400_000_005);
/// assert_eq!(firing_key("nightly", at)?, "firing:nightly:2026-11-29T00:00:00.000005Z");
/// assert!(firing_key("nightly", UNIX_EPOCH - Duration::from_secs(62_135_596_801)).is_err()); // 1 BC
/// # Ok::<(), rendezvous_client::Error>(())
/// ```
pub fn firing_key(task_id: &str, fire_at: SystemTime) -> Result<String> {
    crate::check_id("task_id", task_id)?;
    if task_id.contains('\0') {
        return Err(Error::InvalidArgument("task_id must not contain a NUL byte".into()));
    }
    let micros = pg_micros(fire_at);
    if micros < MIN_FIRE_AT_PG_MICROS {
        return Err(Error::InvalidArgument(format!(
            "fire_at must not be before 0001-01-01T00:00:00Z (got {:?} before 1970-01-01)",
            UNIX_EPOCH.duration_since(fire_at).unwrap_or_default()
        )));
    }
    if micros >= END_TIMESTAMP_PG_MICROS {
        return Err(Error::InvalidArgument(
            "fire_at must not be after 294276-12-31T23:59:59.999999Z, the end of PostgreSQL's timestamptz range"
                .into(),
        ));
    }
    let unix_micros = micros + i128::from(PG_EPOCH_UNIX_SECS) * 1_000_000;
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(unix_micros * 1_000)
        .map_err(|e| Error::InvalidArgument(format!("fire_at: {e}")))?;
    Ok(format!(
        "firing:{task_id}:{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.microsecond()
    ))
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FiringClaim {
    /// True when this call won the claim.
    pub claimed: bool,
    /// The live holder (this host when claimed); `None` when the firing is not yet due by the
    /// database clock, which claims nothing before `fire_at` whatever this host's clock says.
    pub holder: Option<String>,
    /// The holder's token: the fencing token for `assert_firing` and the completion (`None`
    /// with no holder).
    pub token: Option<i64>,
    /// True when the firing is already done.
    pub completed: bool,
    /// The holder's lease end, on the database clock; for a firing not yet due, its `fire_at`
    /// (when a claim can first succeed).
    pub lease_until: SystemTime,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Claims a firing for `host_id` for `lease` (database clock).
#[tracing::instrument(level = "debug", skip_all, fields(task_id = %firing.task_id, fire_at = ?firing.fire_at, host_id = host_id))]
pub async fn claim_firing(
    client: &impl GenericClient,
    firing: &Firing,
    host_id: &str,
    lease: Duration,
) -> Result<FiringClaim> {
    let call = async {
        let row = client
            .query_one(sql::CLAIM_FIRING, &[&firing.task_id, &firing.fire_at, &host_id, &secs(lease)])
            .await?;
        let pid = row.get(5);
        Ok((row, Some(pid)))
    };
    let row = replication::acknowledged("claim_firing", call).await?;
    Ok(FiringClaim {
        claimed: row.get(0),
        holder: row.get(1),
        token: row.get(2),
        completed: row.get(3),
        lease_until: row.get(4),
    })
}

/// Claims many firings in one call (one transaction); per input, its claim (`None` if its row
/// vanished meanwhile, i.e. it was purged).
#[tracing::instrument(level = "debug", skip_all, fields(host_id = host_id, firings = firings.len()))]
pub async fn claim_firings(
    client: &impl GenericClient,
    firings: &[&Firing],
    host_id: &str,
    lease: Duration,
) -> Result<Vec<Option<FiringClaim>>> {
    let tasks: Vec<&str> = firings.iter().map(|f| f.task_id.as_str()).collect();
    let times: Vec<SystemTime> = firings.iter().map(|f| f.fire_at).collect();
    let call = async {
        let rows = client.query(sql::CLAIM_FIRINGS, &[&tasks, &times, &host_id, &secs(lease)]).await?;
        let pid = rows.first().map(|r| r.get(6));
        Ok((rows, pid))
    };
    let rows = replication::acknowledged("claim_firings", call).await?;
    let mut out = vec![None; firings.len()];
    for r in rows {
        let ord: i32 = r.get(0);
        out[(ord - 1) as usize] = Some(FiringClaim {
            claimed: r.get(1),
            holder: r.get(2),
            token: r.get(3),
            completed: r.get(4),
            lease_until: r.get(5),
        });
    }
    Ok(out)
}

/// Completes many firings in one call; per input, false when its token was stale.
#[tracing::instrument(level = "debug", skip_all, fields(firings = firings.len()))]
pub async fn complete_firings(client: &impl GenericClient, firings: &[(&Firing, i64)]) -> Result<Vec<bool>> {
    let tasks: Vec<&str> = firings.iter().map(|(f, _)| f.task_id.as_str()).collect();
    let times: Vec<SystemTime> = firings.iter().map(|(f, _)| f.fire_at).collect();
    let tokens: Vec<i64> = firings.iter().map(|(_, t)| *t).collect();
    let call = async {
        let rows = client.query(sql::COMPLETE_FIRINGS, &[&tasks, &times, &tokens]).await?;
        let pid = rows.first().map(|r| r.get(2));
        Ok((rows, pid))
    };
    let rows = replication::acknowledged("complete_firings", call).await?;
    Ok(rows.iter().map(|r| r.get(1)).collect())
}

/// Marks the firing done; false when `token` is stale (another host took it over).
pub async fn complete_firing(client: &impl GenericClient, firing: &Firing, token: i64) -> Result<bool> {
    let call = async {
        let (completed, pid) = complete_firing_on_backend(client, firing, token).await?;
        Ok((completed, Some(pid)))
    };
    replication::acknowledged("complete_firing", call).await
}

/// [`complete_firing`] without the replication check (for a caller that commits later and
/// checks its commit), with the backend pid that answered.
pub(crate) async fn complete_firing_on_backend(
    client: &impl GenericClient,
    firing: &Firing,
    token: i64,
) -> Result<(bool, i32)> {
    let row = client.query_one(sql::COMPLETE_FIRING, &[&firing.task_id, &firing.fire_at, &token]).await?;
    Ok((row.get(0), row.get(1)))
}

/// Extends a live claim's lease from now; `None` when the token is stale or the firing done.
pub async fn renew_firing(
    client: &impl GenericClient,
    firing: &Firing,
    token: i64,
    lease: Duration,
) -> Result<Option<SystemTime>> {
    let row = client
        .query_one(sql::RENEW_FIRING, &[&firing.task_id, &firing.fire_at, &token, &secs(lease)])
        .await?;
    Ok(row.get(0))
}

/// Gives a claim up early, uncompleted, so another host can take it at once.
pub async fn release_firing(client: &impl GenericClient, firing: &Firing, token: i64) -> Result<bool> {
    let row = client.query_one(sql::RELEASE_FIRING, &[&firing.task_id, &firing.fire_at, &token]).await?;
    Ok(row.get(0))
}

/// Fencing: fails with SQLSTATE `RZ001` unless `token` is the firing's current claim. Call it
/// in the same transaction as the firing's writes.
#[tracing::instrument(level = "debug", skip_all, fields(task_id = %firing.task_id, fire_at = ?firing.fire_at, token = token))]
pub async fn assert_firing(client: &impl GenericClient, firing: &Firing, token: i64) -> Result<()> {
    client.execute(sql::ASSERT_FIRING, &[&firing.task_id, &firing.fire_at, &token]).await?;
    Ok(())
}

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

/// How a host reads "now" to time its rank delays. Correctness never depends on it (leases
/// and claims use the database clock); only who tries first does.
#[derive(Clone, Default)]
pub enum Clock {
    /// The local clock corrected by its offset from the database's, measured at each dispatch.
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

/// Settings for a [`Dispatcher`].
///
/// Non-exhaustive (later versions may add settings): start from [`Default`] and change what
/// you need with the `with_*` methods, or assign the public fields.
///
/// ```
/// use std::time::Duration;
/// use rendezvous_client::DispatcherOptions;
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
    /// Claim attempts that lost (another host held a live claim): wasted work.
    pub lost_attempts: u64,
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
///
/// ```no_run
/// use std::time::{Duration, SystemTime};
/// use rendezvous_client::{firing, hrw, Dispatcher, DispatcherOptions, Firing};
///
/// # async fn run() -> rendezvous_client::Result<()> {
/// let url = "postgres://app@db.internal/app";
/// let dispatcher = Dispatcher::connect(url, "host-1", DispatcherOptions::default()).await?;
/// let view = hrw::live_host_set(dispatcher.client(), Duration::from_secs(10)).await?;
/// let due = vec![Firing::new("nightly-report", SystemTime::now())];
/// let report = dispatcher
///     .dispatch(&due, &view, |ctx| async move {
///         // Fence database writes with the token; use ctx.idempotency_key() for external calls.
///         let client = rendezvous_client::connect(url).await.map_err(|e| e.to_string())?;
///         firing::assert_firing(&client, &ctx.firing, ctx.token).await.map_err(|e| e.to_string())?;
///         println!("running {}", ctx.key);
///         Ok(())
///     })
///     .await?;
/// println!("{} executed here, {} by others", report.executed, report.done_by_others);
/// # Ok(())
/// # }
/// ```
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
        crate::check_id("host_id", host_id)?;
        if options.lease.is_zero() || options.max_in_flight == 0 || options.poll.is_zero() {
            return Err(Error::InvalidArgument("lease, poll and max_in_flight must be > 0".into()));
        }
        let client = crate::connect_as(database, &format!("rendezvous dispatcher {host_id}")).await?;
        crate::check_extension(&client).await?;
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
                let db: SystemTime = self.client.query_one(sql::CLOCK, &[]).await?.get(0);
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
    #[tracing::instrument(level = "debug", skip_all, fields(host_id = %self.host_id, firings = due.len()))]
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
            let claiming = std::time::Instant::now();
            let claims = claim_firings(&self.client, &firings, &self.host_id, self.options.lease).await?;
            signals::seconds(signals::FIRING_CLAIM_DURATION, claiming.elapsed());
            report.claim_attempts += to_claim.len() as u64;
            let mut won = Vec::new();
            for (p, claim) in to_claim.into_iter().zip(claims) {
                match claim {
                    Some(FiringClaim { claimed: true, token: Some(token), .. }) => {
                        metrics::counter!(signals::FIRINGS_CLAIMED).increment(1);
                        won.push((p, token))
                    }
                    Some(c) => {
                        // Lost to a live holder, already done, or not yet due by the database
                        // clock (no holder; a host whose clock runs fast asked early).
                        report.lost_attempts += 1;
                        metrics::counter!(signals::FIRING_CLAIMS_LOST).increment(1);
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
            let started = now();
            for (p, _) in &won {
                let late = started.duration_since(due[p.index].fire_at).unwrap_or_default();
                signals::seconds(signals::FIRING_START_LATENESS, late);
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
                    metrics::counter!(signals::FIRINGS_FAILED).increment(1);
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
                    metrics::counter!(signals::FIRINGS_COMPLETED).increment(1);
                    if token > 1 {
                        metrics::counter!(signals::FIRINGS_TAKEN_OVER).increment(1);
                    }
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
        let tasks: Vec<&str> = pending.iter().map(|p| due[p.index].task_id.as_str()).collect();
        let times: Vec<SystemTime> = pending.iter().map(|p| due[p.index].fire_at).collect();
        let rows = self.client.query(sql::FIRING_STATUS, &[&tasks, &times]).await?;
        Ok(rows
            .iter()
            .map(|r| {
                let exists: bool = r.get(0);
                let completed: bool = r.get(1);
                let remaining: f64 = r.get(2);
                // `remaining`: the lease left, or, never claimed, the time until it is due.
                match (exists, completed) {
                    (true, true) => Status::Done,
                    (_, false) if remaining <= 0.0 => Status::Free,
                    (_, _) => Status::Held { remaining: Duration::from_secs_f64(remaining) },
                }
            })
            .collect())
    }

    /// Runs the work of a claim won, renewing its lease meanwhile; true when the work
    /// succeeded. A failed work's claim is released at once, so the next host in rank can retry
    /// it without waiting for the lease.
    #[tracing::instrument(level = "debug", skip_all, fields(key = key, token = token, task_id = %firing.task_id))]
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
                        tracing::warn!(key, token, "lease lost while running: another host took over")
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
            tracing::warn!(key, error = %why, "firing failed; releasing it");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, micros: u32) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
    }

    fn key(task_id: &str, fire_at: SystemTime) -> String {
        firing_key(task_id, fire_at).unwrap()
    }

    #[test]
    fn keys_are_canonical_utc_microseconds() {
        assert_eq!(key("t", UNIX_EPOCH), "firing:t:1970-01-01T00:00:00.000000Z");
        assert_eq!(key("t", at(951_782_400, 5)), "firing:t:2000-02-29T00:00:00.000005Z");
        assert_eq!(key("nightly", at(1_795_910_400, 0)), "firing:nightly:2026-11-29T00:00:00.000000Z");
        assert_eq!(key("t", at(4_102_444_799, 999_999)), "firing:t:2099-12-31T23:59:59.999999Z");
        assert_eq!(key("t", UNIX_EPOCH - Duration::from_micros(1)), "firing:t:1969-12-31T23:59:59.999999Z");
        // Sub-microsecond parts are cut the way the driver sends them (toward 2000-01-01).
        assert_eq!(
            key("t", at(1_795_910_400, 0) + Duration::from_nanos(999)),
            key("t", at(1_795_910_400, 0))
        );
        assert_eq!(
            key("t", UNIX_EPOCH - Duration::from_nanos(1_500)),
            "firing:t:1969-12-31T23:59:59.999999Z"
        );
        assert_eq!(Firing::new("t", UNIX_EPOCH).key().unwrap(), key("t", UNIX_EPOCH));
    }

    #[test]
    fn civil_dates_across_leap_years() {
        let day = |d: i64| {
            let t = if d >= 0 {
                UNIX_EPOCH + Duration::from_secs(d as u64 * 86_400)
            } else {
                UNIX_EPOCH - Duration::from_secs(d.unsigned_abs() * 86_400)
            };
            key("t", t)["firing:t:".len()..].split('T').next().unwrap().to_owned()
        };
        assert_eq!(day(0), "1970-01-01");
        assert_eq!(day(-1), "1969-12-31");
        assert_eq!(day(11_016), "2000-02-29");
        assert_eq!(day(47_481), "2099-12-31");
        assert_eq!(day(-141_427), "1582-10-15"); // proleptic Gregorian throughout
        assert_eq!(day(-719_162), "0001-01-01");
        assert_eq!(day(2_932_896), "9999-12-31");
        assert_eq!(day(2_932_897), "10000-01-01"); // to_char's YYYY widens past 9999
    }

    #[test]
    fn range_ends_are_postgres_ones() {
        let first_ad = UNIX_EPOCH - Duration::from_secs(62_135_596_800);
        assert_eq!(key("t", first_ad), "firing:t:0001-01-01T00:00:00.000000Z");
        // Up to 999 ns before the first AD instant is still sent as 0001-01-01T00:00:00Z.
        assert_eq!(key("t", first_ad - Duration::from_nanos(999)), "firing:t:0001-01-01T00:00:00.000000Z");
        let bc = first_ad - Duration::from_micros(1);
        assert!(matches!(firing_key("t", bc), Err(Error::InvalidArgument(m)) if m.contains("0001-01-01")));
        assert!(firing_key("t", first_ad - Duration::from_secs(86_400 * 400 * 366)).is_err());
        let end = UNIX_EPOCH + Duration::from_secs(9_224_318_016_000); // 294277-01-01T00:00:00Z
        assert_eq!(key("t", end - Duration::from_micros(1)), "firing:t:294276-12-31T23:59:59.999999Z");
        assert!(matches!(firing_key("t", end), Err(Error::InvalidArgument(m)) if m.contains("294276")));
        // The bounds agree with the calendar.
        let micros = |t: SystemTime| pg_micros(t);
        assert_eq!(micros(first_ad), MIN_FIRE_AT_PG_MICROS);
        assert_eq!(micros(end), END_TIMESTAMP_PG_MICROS);
        let date = |y, m| time::Date::from_calendar_date(y, m, 1).unwrap().midnight().assume_utc();
        assert_eq!(date(1, time::Month::January).unix_timestamp(), -62_135_596_800);
        assert_eq!(date(294_277, time::Month::January).unix_timestamp(), 9_224_318_016_000);
    }

    #[test]
    fn task_ids_are_checked_as_the_extension_does() {
        let ok = "x".repeat(MAX_TASK_ID_BYTES);
        assert!(firing_key(&ok, UNIX_EPOCH).is_ok());
        for bad in ["", &"x".repeat(MAX_TASK_ID_BYTES + 1), "a\0b"] {
            assert!(matches!(firing_key(bad, UNIX_EPOCH), Err(Error::InvalidArgument(_))), "{bad:?}");
        }
        // Any other text is kept as is, as the SQL function keeps it.
        assert_eq!(key("a:b 🦀", UNIX_EPOCH), "firing:a:b 🦀:1970-01-01T00:00:00.000000Z");
    }
}
