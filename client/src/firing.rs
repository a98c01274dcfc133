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
use crate::{sql, Error, Result};

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
    /// `rendezvous.firing_key` computes it.
    pub fn key(&self) -> String {
        firing_key(&self.task_id, self.fire_at)
    }
}

/// The canonical firing key (microsecond precision, UTC), the same string the SQL function
/// `rendezvous.firing_key` returns for the same instant.
pub fn firing_key(task_id: &str, fire_at: SystemTime) -> String {
    // The microseconds PostgreSQL receives for this SystemTime: tokio-postgres sends the
    // distance from 2000-01-01 in whole microseconds, truncated toward 2000-01-01.
    const PG_EPOCH_UNIX_SECS: u64 = 946_684_800;
    let pg_epoch = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS);
    let since_pg_epoch: i64 = match fire_at.duration_since(pg_epoch) {
        Ok(d) => d.as_micros() as i64,
        Err(e) => -(e.duration().as_micros() as i64),
    };
    let micros = since_pg_epoch + PG_EPOCH_UNIX_SECS as i64 * 1_000_000;
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "firing:{task_id}:{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z",
        tod / 3600,
        tod % 3600 / 60,
        tod % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiringClaim {
    /// True when this call won the claim.
    pub claimed: bool,
    /// The live holder (this host when claimed).
    pub holder: String,
    /// The holder's token: the fencing token for `assert_firing` and the completion.
    pub token: i64,
    /// True when the firing is already done.
    pub completed: bool,
    /// The holder's lease end, on the database clock.
    pub lease_until: SystemTime,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Claims a firing for `host_id` for `lease` (database clock).
pub async fn claim_firing(
    client: &impl GenericClient,
    firing: &Firing,
    host_id: &str,
    lease: Duration,
) -> Result<FiringClaim> {
    let row = client
        .query_one(sql::CLAIM_FIRING, &[&firing.task_id, &firing.fire_at, &host_id, &secs(lease)])
        .await
        .map_err(Error::from_db)?;
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
pub async fn claim_firings(
    client: &impl GenericClient,
    firings: &[&Firing],
    host_id: &str,
    lease: Duration,
) -> Result<Vec<Option<FiringClaim>>> {
    let tasks: Vec<&str> = firings.iter().map(|f| f.task_id.as_str()).collect();
    let times: Vec<SystemTime> = firings.iter().map(|f| f.fire_at).collect();
    let rows = client
        .query(sql::CLAIM_FIRINGS, &[&tasks, &times, &host_id, &secs(lease)])
        .await
        .map_err(Error::from_db)?;
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
pub async fn complete_firings(client: &impl GenericClient, firings: &[(&Firing, i64)]) -> Result<Vec<bool>> {
    let tasks: Vec<&str> = firings.iter().map(|(f, _)| f.task_id.as_str()).collect();
    let times: Vec<SystemTime> = firings.iter().map(|(f, _)| f.fire_at).collect();
    let tokens: Vec<i64> = firings.iter().map(|(_, t)| *t).collect();
    let rows =
        client.query(sql::COMPLETE_FIRINGS, &[&tasks, &times, &tokens]).await.map_err(Error::from_db)?;
    Ok(rows.iter().map(|r| r.get(1)).collect())
}

/// Marks the firing done; false when `token` is stale (another host took it over).
pub async fn complete_firing(client: &impl GenericClient, firing: &Firing, token: i64) -> Result<bool> {
    let row = client
        .query_one(sql::COMPLETE_FIRING, &[&firing.task_id, &firing.fire_at, &token])
        .await
        .map_err(Error::from_db)?;
    Ok(row.get(0))
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
        .await
        .map_err(Error::from_db)?;
    Ok(row.get(0))
}

/// Gives a claim up early, uncompleted, so another host can take it at once.
pub async fn release_firing(client: &impl GenericClient, firing: &Firing, token: i64) -> Result<bool> {
    let row = client
        .query_one(sql::RELEASE_FIRING, &[&firing.task_id, &firing.fire_at, &token])
        .await
        .map_err(Error::from_db)?;
    Ok(row.get(0))
}

/// Fencing: fails with SQLSTATE `RZ001` unless `token` is the firing's current claim. Call it
/// in the same transaction as the firing's writes.
pub async fn assert_firing(client: &impl GenericClient, firing: &Firing, token: i64) -> Result<()> {
    client
        .execute(sql::ASSERT_FIRING, &[&firing.task_id, &firing.fire_at, &token])
        .await
        .map_err(Error::from_db)?;
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
#[derive(Debug, Clone)]
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

/// What one [`Dispatcher::dispatch`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
pub struct Dispatcher {
    client: Client,
    host_id: String,
    options: DispatcherOptions,
}

impl Dispatcher {
    /// Connects and checks the extension.
    pub async fn connect(
        database_url: &str,
        host_id: &str,
        options: DispatcherOptions,
    ) -> Result<Dispatcher> {
        if host_id.is_empty() || host_id.len() > 256 {
            return Err(Error::InvalidArgument("host_id must be 1 to 256 bytes".into()));
        }
        if options.lease.is_zero() || options.max_in_flight == 0 || options.poll.is_zero() {
            return Err(Error::InvalidArgument("lease, poll and max_in_flight must be > 0".into()));
        }
        let client = crate::connect_as(database_url, &format!("rendezvous dispatcher {host_id}")).await?;
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
                let db: SystemTime = self
                    .client
                    .query_one("SELECT pg_catalog.clock_timestamp()", &[])
                    .await
                    .map_err(Error::from_db)?
                    .get(0);
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
    pub async fn dispatch<W, Fut>(&self, due: &[Firing], view: &HostSet, work: W) -> Result<DispatchReport>
    where
        W: Fn(FiringContext) -> Fut,
        Fut: Future<Output = std::result::Result<(), String>>,
    {
        let now = self.now_fn().await?;
        let keys: Vec<String> = due.iter().map(Firing::key).collect();
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
                    Some(c) if c.claimed => won.push((p, c.token)),
                    Some(c) => {
                        report.lost_attempts += 1;
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
        let tasks: Vec<&str> = pending.iter().map(|p| due[p.index].task_id.as_str()).collect();
        let times: Vec<SystemTime> = pending.iter().map(|p| due[p.index].fire_at).collect();
        let rows = self.client.query(sql::FIRING_STATUS, &[&tasks, &times]).await.map_err(Error::from_db)?;
        Ok(rows
            .iter()
            .map(|r| {
                let exists: bool = r.get(0);
                let completed: bool = r.get(1);
                let remaining: f64 = r.get(2);
                match (exists, completed) {
                    (false, _) => Status::Free,
                    (true, true) => Status::Done,
                    (true, false) if remaining <= 0.0 => Status::Free,
                    (true, false) => Status::Held { remaining: Duration::from_secs_f64(remaining) },
                }
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

    #[test]
    fn keys_are_canonical_utc_microseconds() {
        assert_eq!(firing_key("t", UNIX_EPOCH), "firing:t:1970-01-01T00:00:00.000000Z");
        assert_eq!(firing_key("t", at(951_782_400, 5)), "firing:t:2000-02-29T00:00:00.000005Z");
        assert_eq!(firing_key("nightly", at(1_795_910_400, 0)), "firing:nightly:2026-11-29T00:00:00.000000Z");
        assert_eq!(firing_key("t", at(4_102_444_799, 999_999)), "firing:t:2099-12-31T23:59:59.999999Z");
        assert_eq!(
            firing_key("t", UNIX_EPOCH - Duration::from_micros(1)),
            "firing:t:1969-12-31T23:59:59.999999Z"
        );
        // Sub-microsecond parts are cut the way the driver sends them (toward 2000-01-01).
        assert_eq!(
            firing_key("t", at(1_795_910_400, 0) + Duration::from_nanos(999)),
            firing_key("t", at(1_795_910_400, 0))
        );
    }

    #[test]
    fn civil_dates_round_trip_across_leap_years() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(47_481), (2099, 12, 31));
    }
}
