//! Exactly-once firing claims: the calls on firing rows under the [`Worker`](crate::Worker) (which
//! firings are due, claims, renewals, completions, failures), for callers who decide themselves
//! which firings to try and when.
//!
//! What is exactly-once is the **claim**: one live claim per firing, whatever each host
//! believes about membership or time. Execution is at-least-once across a holder's death: an
//! uncompleted claim whose lease expired is taken over with a higher token, and the stale
//! holder's completion and fenced writes are then refused. Hand the token to the work:
//! `assert_firing` in the same transaction as a database write, and `<key>#<token>` as the
//! idempotency key of external calls.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_postgres::GenericClient;

use crate::{replication, sql, Error, Result};

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
pub const MAX_TASK_ID_BYTES: usize = crate::error::MAX_ID_BYTES;

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
    crate::error::check_id("task_id", task_id)?;
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
    /// This claim's token, when it was won: the fencing token for `assert_firing` and the
    /// completion. `None` for a claim that lost (the holder's token is told only to the holder).
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
        let row = sql::query_one(
            client,
            sql::CLAIM_FIRING,
            &[&firing.task_id, &firing.fire_at, &host_id, &secs(lease)],
        )
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
        let rows = sql::query(client, sql::CLAIM_FIRINGS, &[&tasks, &times, &host_id, &secs(lease)]).await?;
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
        let rows = sql::query(client, sql::COMPLETE_FIRINGS, &[&tasks, &times, &tokens]).await?;
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
    let row =
        sql::query_one(client, sql::COMPLETE_FIRING, &[&firing.task_id, &firing.fire_at, &token]).await?;
    Ok((row.get(0), row.get(1)))
}

/// Extends a live claim's lease from now; `None` when the token is stale or the firing done.
pub async fn renew_firing(
    client: &impl GenericClient,
    firing: &Firing,
    token: i64,
    lease: Duration,
) -> Result<Option<SystemTime>> {
    let row =
        sql::query_one(client, sql::RENEW_FIRING, &[&firing.task_id, &firing.fire_at, &token, &secs(lease)])
            .await?;
    Ok(row.get(0))
}

/// Gives a claim up early, uncompleted, so another host can take it at once.
pub async fn release_firing(client: &impl GenericClient, firing: &Firing, token: i64) -> Result<bool> {
    let row =
        sql::query_one(client, sql::RELEASE_FIRING, &[&firing.task_id, &firing.fire_at, &token]).await?;
    Ok(row.get(0))
}

/// Fencing: fails with SQLSTATE `RZ001` unless `token` is the firing's current claim. Call it
/// in the same transaction as the firing's writes.
#[tracing::instrument(level = "debug", skip_all, fields(task_id = %firing.task_id, fire_at = ?firing.fire_at, token = token))]
pub async fn assert_firing(client: &impl GenericClient, firing: &Firing, token: i64) -> Result<()> {
    sql::execute(client, sql::ASSERT_FIRING, &[&firing.task_id, &firing.fire_at, &token]).await?;
    Ok(())
}

/// A firing's state, as [`firing_states`] reads it (a read, not a claim).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FiringState {
    /// Claimed at least once.
    pub claimed: bool,
    /// Completed: it never runs again.
    pub completed: bool,
    /// How long until it can be claimed: the live holder's lease left, or, never claimed, the
    /// time until it is due by the database clock. Zero when it can be claimed now (also when
    /// its holder's session is gone); `Duration::MAX` when never again (failed for good, or
    /// skipped by its task's overlap policy).
    pub claimable_in: Duration,
}

/// The states of `firings`, in input order: for a host that is not first in rank, to look
/// before it claims (done ones are dropped, held ones looked at again when the lease ends).
pub async fn firing_states(client: &impl GenericClient, firings: &[&Firing]) -> Result<Vec<FiringState>> {
    let tasks: Vec<&str> = firings.iter().map(|f| f.task_id.as_str()).collect();
    let times: Vec<SystemTime> = firings.iter().map(|f| f.fire_at).collect();
    let rows = sql::query(client, sql::FIRING_STATUS, &[&tasks, &times]).await?;
    Ok(rows
        .iter()
        .map(|r| FiringState {
            claimed: r.get(0),
            completed: r.get(1),
            claimable_in: match r.get::<_, Option<f64>>(2) {
                Some(secs) => Duration::try_from_secs_f64(secs).unwrap_or_default(),
                None => Duration::MAX,
            },
        })
        .collect())
}

/// A firing that can be claimed now, as `rendezvous.due_firings` reports it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DueFiring {
    /// The firing.
    pub firing: Firing,
    /// Since when it can be claimed (database clock): its fire time, or the end of the last
    /// lease or retry backoff.
    pub claimable_since: SystemTime,
    /// Claims so far.
    pub attempts: i32,
    /// Failed attempts so far.
    pub failures: i32,
    /// Its task's lease.
    pub lease: Duration,
}

/// The firings claimable now by the database clock (after it made the ones that came due), and
/// the database's clock reading.
pub async fn due_firings(client: &impl GenericClient, max: i32) -> Result<(Vec<DueFiring>, SystemTime)> {
    let (due, db_now) = due_list(client, max).await?;
    let db_now = match db_now {
        Some(t) => t,
        None => sql::query_one(client, sql::CLOCK, &[]).await?.get(0),
    };
    Ok((due, db_now))
}

/// The due firings, and the database clock when there was at least one (a row carries it).
pub(crate) async fn due_list(
    client: &impl GenericClient,
    max: i32,
) -> Result<(Vec<DueFiring>, Option<SystemTime>)> {
    let rows = sql::query(client, sql::DUE_FIRINGS, &[&max]).await?;
    let db_now = rows.first().map(|r| r.get::<_, SystemTime>(6));
    let due = rows
        .iter()
        .map(|r| DueFiring {
            firing: Firing::new(r.get::<_, String>(0), r.get(1)),
            claimable_since: r.get(2),
            attempts: r.get(3),
            failures: r.get(4),
            lease: Duration::from_secs_f64(r.get::<_, f64>(5).max(0.001)),
        })
        .collect();
    Ok((due, db_now))
}

/// The database clock, and when a scheduled firing may next become claimable (`None`: nothing
/// scheduled).
pub async fn next_due_at(client: &impl GenericClient) -> Result<(SystemTime, Option<SystemTime>)> {
    let row = sql::query_one(client, sql::NEXT_DUE, &[]).await?;
    Ok((row.get(0), row.get(1)))
}

/// What [`fail_firing`] recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// It will be claimable again at this instant (database clock).
    RetryAt(SystemTime),
    /// It failed for good: max attempts reached (or a firing of no scheduled task).
    Failed,
    /// Nothing recorded: the token was stale or the firing finished.
    Stale,
}

/// Records a failed attempt of a claimed firing (retried with backoff up to the task's max
/// attempts, then failed for good). `error` is kept (its first 2,000 characters) for operators.
pub async fn fail_firing(
    client: &impl GenericClient,
    firing: &Firing,
    token: i64,
    error: &str,
) -> Result<FailOutcome> {
    let row =
        sql::query_one(client, sql::FAIL_FIRING, &[&firing.task_id, &firing.fire_at, &token, &error]).await?;
    let recorded: bool = row.get(0);
    let retry_at: Option<SystemTime> = row.get(1);
    Ok(match (recorded, retry_at) {
        (false, _) => FailOutcome::Stale,
        (true, Some(at)) => FailOutcome::RetryAt(at),
        (true, None) => FailOutcome::Failed,
    })
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
