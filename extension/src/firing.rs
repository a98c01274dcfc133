//! Exactly-once firing claims: HRW decides which host tries first, the database decides who
//! wins.
//!
//! A firing is `firing:<task_id>:<fire_at in canonical UTC>`; one row per firing holds its live
//! claim. `claim_firing` is one `INSERT … ON CONFLICT DO UPDATE … WHERE` statement: a first
//! claim inserts (token 1); a claim on an expired, uncompleted lease takes it over with the
//! next token; anything else changes nothing. Leases run on the database clock, so hosts'
//! clocks and their views of membership never decide anything. The token fences the rest:
//! a stale holder's `complete_firing`, `renew_firing` and `assert_firing` are refused.
use std::io::Write;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::checks::{check_text_datum, finite_interval_vs_zero, raise_sql_check, MAX_ID_BYTES};
use crate::errors::{null_argument, raise};
use crate::ffi::c_function::{arg, composite, v1_info, varlena_bytes};
use crate::ffi::kept_plan::{FirstRow, KeptPlan};
use crate::{compat, fencing, holder};

extension_sql_file!(
    "firing.sql",
    name = "firing",
    requires = ["checks", "holder", durable_commit, fencing::fence_floor]
);

/// Makes the current transaction's commit durable before it is acknowledged, whatever the
/// session's `synchronous_commit`: a token bump or a completion a host was told about must
/// survive a crash, or a firing could be handed out twice under one token, or run again.
/// (Replication waits still follow `synchronous_commit`.)
#[pg_extern(volatile, parallel_unsafe, name = "_durable_commit")]
fn durable_commit() {
    // SAFETY: only sets a flag the current transaction's commit reads.
    unsafe { pg_sys::ForceSyncCommit() }
}

// The hot path of every dispatched firing, in C functions like spawn_run (admission.rs):
// `firing_key`, `claim_firing` and `complete_firing` check their arguments here (raising with
// the SQL helpers' messages), and run one statement each from a plan kept for the backend's
// life. The set-based and rarer functions stay in firing.sql.

/// `'0001-01-01 00:00:00+00'` in PostgreSQL's microseconds since 2000-01-01: the key spells the
/// year without an era, so a BC instant would share an AD firing's key.
const FIRST_AD_INSTANT: i64 = -63_082_281_600_000_000;

thread_local! {
    /// A first claim inserts (token 1, or the timeline's floor); a claim on an uncompleted
    /// firing whose lease ran out or whose holder's session is gone (holder.rs) takes it over
    /// with the next token, unless its task's overlap policy skips it (a firing never claimed,
    /// schedule.sql); anything else changes nothing. The claim records this session and its
    /// login role (only that role acts on the claim).
    static CLAIM: KeptPlan = const { KeptPlan::new(
        "INSERT INTO rendezvous.firings AS f (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until, \
                                             holder_pid, holder_started, holder_role, day_mod_8) \
         VALUES ($1, $2, $3, $4, $5, $6, $6 OPERATOR(pg_catalog.+) $7, \
                 pg_catalog.pg_backend_pid(), rendezvous._session_started(), rendezvous._session_role(), \
                 rendezvous._day_mod_8($3)) \
         ON CONFLICT (firing_key, day_mod_8) DO UPDATE \
            SET holder = excluded.holder, token = GREATEST(f.token OPERATOR(pg_catalog.+) 1, excluded.token), \
                claimed_at = excluded.claimed_at, lease_until = excluded.lease_until, \
                attempts = f.attempts OPERATOR(pg_catalog.+) 1, \
                holder_pid = excluded.holder_pid, holder_started = excluded.holder_started, \
                holder_role = excluded.holder_role \
          WHERE rendezvous._firing_claimable(f.completed_at, f.lease_until, f.holder, f.holder_pid, \
                                             f.holder_started, excluded.claimed_at) \
            AND (f.token OPERATOR(pg_catalog.<>) 0 \
                 OR NOT rendezvous._firing_overlapped(f.task_id, f.fire_at)) \
         RETURNING f.token, f.lease_until",
        &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TIMESTAMPTZOID, pg_sys::TEXTOID, pg_sys::INT8OID,
          pg_sys::TIMESTAMPTZOID, pg_sys::INTERVALOID],
    ) };
    /// A firing nobody can claim now (done, or a live lease), read before the claim: the
    /// claim's `ON CONFLICT DO UPDATE` would lock its row even when its `WHERE` refuses, and a
    /// caller holding that lock (any host, another role's too, in a transaction it keeps open)
    /// would hold up the holder's completion. Losers also write nothing this way. (The fire
    /// time's partition named beside the key: one partition is read.)
    static LIVE: KeptPlan = const { KeptPlan::new(
        "SELECT f.holder, f.completed_at IS NOT NULL, f.lease_until FROM rendezvous.firings f \
          WHERE f.firing_key OPERATOR(pg_catalog.=) $1 AND f.day_mod_8 OPERATOR(pg_catalog.=) rendezvous._day_mod_8($3) \
            AND NOT rendezvous._firing_claimable(f.completed_at, f.lease_until, f.holder, f.holder_pid, \
                                                 f.holder_started, $2)",
        &[pg_sys::TEXTOID, pg_sys::TIMESTAMPTZOID, pg_sys::TIMESTAMPTZOID],
    ) };
    /// Who holds a firing the claim did not get (the row is locked by the claim's insert).
    static HELD: KeptPlan = const { KeptPlan::new(
        "SELECT f.holder, f.completed_at IS NOT NULL, f.lease_until \
           FROM rendezvous.firings f WHERE f.firing_key OPERATOR(pg_catalog.=) $1",
        &[pg_sys::TEXTOID],
    ) };
    /// A firing the claim refused although it could be claimed: skipped by its task's overlap
    /// policy, and finished as skipped here (the row is locked by the claim).
    static SKIP: KeptPlan = const { KeptPlan::new(
        "SELECT rendezvous._skip_overlapped(ARRAY[$1], $2)",
        &[pg_sys::TEXTOID, pg_sys::TIMESTAMPTZOID],
    ) };
    /// A completion by the current claim's token and role (repeating it is harmless).
    static COMPLETE: KeptPlan = const { KeptPlan::new(
        "UPDATE rendezvous.firings f SET completed_at = COALESCE(f.completed_at, pg_catalog.clock_timestamp()) \
          WHERE f.firing_key OPERATOR(pg_catalog.=) $1 AND f.day_mod_8 OPERATOR(pg_catalog.=) rendezvous._day_mod_8($3) \
            AND rendezvous._firing_completable(f.token, f.holder, f.failed_at, f.holder_role, $2)",
        &[pg_sys::TEXTOID, pg_sys::INT8OID, pg_sys::TIMESTAMPTZOID],
    ) };
}

/// The firing key `firing:<task_id>:<fire_at as YYYY-MM-DDTHH:MI:SS.USZ in UTC>` as a `text`
/// value in the current memory context, after checking both arguments (22004 for NULL, 22023
/// for an empty or too long task id, an infinite or BC instant).
///
/// # Safety
/// `task_id` is a `text` datum and `fire_at` a `timestamptz` one, when present.
unsafe fn key(task_id: Option<pg_sys::Datum>, fire_at: Option<pg_sys::Datum>) -> pg_sys::Datum {
    // SAFETY: the caller passes a text and a timestamptz datum (or None); the checks run before
    // either is read, `timestamp2tm` writes into locals, and the key is built in the current memory
    // context.
    unsafe {
        check_text_datum(c"task_id", task_id, MAX_ID_BYTES);
        let at = fire_at.map(|d| d.value() as i64);
        // Infinities are i64::MIN and i64::MAX, so the range check refuses them too.
        if !at.is_some_and(|at| (FIRST_AD_INSTANT..i64::MAX).contains(&at)) {
            raise_sql_check(c"SELECT rendezvous._check_fire_at($1)", &[pg_sys::TIMESTAMPTZOID], &[fire_at]);
        }
        let mut tm = pg_sys::pg_tm::default();
        let mut fsec: pg_sys::fsec_t = 0;
        let no_zone = std::ptr::null_mut();
        if pg_sys::timestamp2tm(
            at.unwrap_or_default(),
            no_zone,
            &mut tm,
            &mut fsec,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        ) != 0
        {
            raise(PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW, "fire_at is out of range");
        }
        let task_id = varlena_bytes(task_id.expect("checked"));
        let mut key = Vec::with_capacity(task_id.len() + 40);
        key.extend_from_slice(b"firing:");
        key.extend_from_slice(task_id);
        write!(
            key,
            ":{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, fsec
        )
        .expect("writing to a Vec");
        pg_sys::Datum::from(pg_sys::cstring_to_text_with_len(key.as_ptr().cast(), key.len() as i32))
    }
}

/// Checks a lease like `_check_lease` (which raises, with its message, when it fails): not
/// NULL, greater than zero, at most a day, compared by PostgreSQL's own interval functions.
///
/// # Safety
/// `lease` is an `interval` datum when present.
unsafe fn check_lease(lease: Option<pg_sys::Datum>) {
    // SAFETY: `d` is an interval datum (the caller's contract); `one_day` outlives the direct call
    // that reads it.
    let ok = lease.is_some_and(|d| unsafe {
        let one_day = pg_sys::Interval { time: 0, day: 1, month: 0 };
        let at_most_a_day = pgrx::direct_function_call::<bool>(
            pg_sys::interval_le,
            &[Some(d), Some(pg_sys::Datum::from(&one_day as *const pg_sys::Interval))],
        );
        finite_interval_vs_zero(d, pg_sys::interval_gt) && at_most_a_day == Some(true)
    });
    if !ok {
        // SAFETY: `lease` is an interval datum or None, the type `_check_lease` declares.
        unsafe { raise_sql_check(c"SELECT rendezvous._check_lease($1)", &[pg_sys::INTERVALOID], &[lease]) }
    }
}

/// `rendezvous.firing_key(task_id, fire_at) → text`.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn rendezvous_firing_key(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL calls this with `rendezvous.firing_key(text, timestamptz)`'s arguments,
    // the types `key` needs.
    unsafe { key(arg(fcinfo, 0), arg(fcinfo, 1)) }
}
v1_info!(pg_finfo_rendezvous_firing_key);

/// `rendezvous.claim_firing(task_id, fire_at, host_id, lease) → rendezvous.firing_claim`:
/// `(claimed, holder, token, completed, lease_until)`.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn rendezvous_claim_firing(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL calls this with `claim_firing(text, timestamptz, text, interval)`'s
    // arguments; each is checked before use, and `claim` and `composite` get datums of the types
    // their statements and the result type declare.
    unsafe {
        let (task_id, fire_at, host_id, lease) =
            (arg(fcinfo, 0), arg(fcinfo, 1), arg(fcinfo, 2), arg(fcinfo, 3));
        let key = key(task_id, fire_at);
        check_text_datum(c"host_id", host_id, MAX_ID_BYTES);
        check_lease(lease);
        // Never before it is due by the database clock, whatever the caller's clock says: not
        // claimed, nobody holds it, and lease_until says when it can be claimed.
        let fire_at = fire_at.expect("checked");
        if fire_at.value() as i64 > pg_sys::GetCurrentTimestamp() {
            return composite(fcinfo, &[Some(false.into()), None, None, Some(false.into()), Some(fire_at)]);
        }
        let Some(answer) = claim(key, [task_id, Some(fire_at), host_id, lease]) else {
            let key = String::from_utf8_lossy(varlena_bytes(key)).into_owned();
            raise(
                PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
                format!("could not claim {key}: it is being purged concurrently"),
            )
        };
        let holder = match answer.holder {
            Holder::Caller => host_id,
            Holder::Other(holder) => holder.into_datum(),
        };
        let values = [
            Some(answer.claimed.into()),
            holder,
            answer.token.and_then(IntoDatum::into_datum),
            answer.completed.and_then(IntoDatum::into_datum),
            answer.lease_until.and_then(IntoDatum::into_datum),
        ];
        composite(fcinfo, &values)
    }
}
v1_info!(pg_finfo_rendezvous_claim_firing);

/// Who holds a firing after a claim: the caller, or the holder a loser is told.
enum Holder {
    Caller,
    Other(Option<String>),
}

/// A claim's answer, read out of SPI's memory.
struct ClaimAnswer {
    claimed: bool,
    holder: Holder,
    token: Option<i64>,
    completed: Option<bool>,
    lease_until: Option<TimestampWithTimeZone>,
}

/// Claims the firing `key` (`[task_id, fire_at, host_id, lease]` checked); `None` when it was
/// purged under every one of five tries.
///
/// # Safety
/// `key` is a text datum and `args` are a text, a timestamptz, a text and an interval.
unsafe fn claim(
    key: pg_sys::Datum,
    [task_id, fire_at, host_id, lease]: [Option<pg_sys::Datum>; 4],
) -> Option<ClaimAnswer> {
    // Tokens stay above any a timeline before this one handed out (fencing.rs).
    let first_token = fencing::floor().max(1);
    let current = holder::has_column(c"firings", c"holder_role");
    let claim = if current {
        &CLAIM
    } else if holder::has_column(c"firings", c"holder_pid") {
        &compat::CLAIM_0_3
    } else {
        &compat::CLAIM_0_2
    };
    // A loser's answer from `(holder, completed, lease_until)`, as LIVE and HELD read them.
    let loser = |row: FirstRow| ClaimAnswer {
        claimed: false,
        holder: Holder::Other(row.get(1)),
        token: None,
        completed: row.get(2),
        lease_until: row.get(3),
    };
    Spi::connect(|client| {
        // A firing the overlap policy refused that could not be skipped yet (its task's row was
        // held: _skip_overlapped never waits for it) is tried again; after the last try, the
        // loser's answer stands (not claimed, nobody holds it).
        let mut undecided = None;
        for _attempt in 0..5 {
            // SAFETY: every argument datum is of its statement's declared type (this function's
            // contract; `now` is a timestamptz, the first token a bigint).
            unsafe {
                let now = pg_sys::Datum::from(pg_sys::GetCurrentTimestamp());
                if current {
                    if let Some(row) =
                        FirstRow::of(LIVE.with(|p| p.run(client, &[Some(key), Some(now), fire_at])))
                    {
                        return Some(loser(row));
                    }
                }
                let args = [Some(key), task_id, fire_at, host_id, Some(first_token.into()), Some(now), lease];
                if let Some(row) = FirstRow::of(claim.with(|p| p.run(client, &args))) {
                    pg_sys::ForceSyncCommit();
                    return Some(ClaimAnswer {
                        claimed: true,
                        holder: Holder::Caller,
                        token: row.get(1),
                        completed: Some(false),
                        lease_until: row.get(2),
                    });
                }
                // Someone holds a live lease, or the firing is done (the row is locked by us now).
                // The holder's token is not told to a loser: a token fences, it does not
                // authenticate, so only its holder should know it (#24).
                if let Some(row) = FirstRow::of(HELD.with(|p| p.run(client, &[Some(key)]))) {
                    // Refused with nobody holding it, not completed: the overlap policy skips
                    // it. Skipped now, the loser's answer is read again (no holder, never
                    // claimable).
                    let unheld = row.get::<String>(1).is_none() && row.get::<bool>(2) == Some(false);
                    if !(current && unheld) {
                        return Some(loser(row));
                    }
                    let skipped = FirstRow::of(SKIP.with(|p| p.run(client, &[Some(key), Some(now)])));
                    if skipped.and_then(|r| r.get::<i32>(1)).unwrap_or(0) > 0 {
                        if let Some(row) = FirstRow::of(HELD.with(|p| p.run(client, &[Some(key)]))) {
                            return Some(loser(row));
                        }
                    }
                    undecided = Some(loser(row));
                    continue;
                }
            }
            // The row was deleted (purged) between the two statements: claim again.
        }
        undecided
    })
}

/// `rendezvous.complete_firing(task_id, fire_at, token) → boolean`: true when `token` is the
/// firing's current claim (the completion is then durable before it is acknowledged).
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn rendezvous_complete_firing(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: PostgreSQL calls this with `complete_firing(text, timestamptz, bigint)`'s arguments;
    // the statement gets the key (a text) and the token (a bigint), as it declares.
    unsafe {
        let fire_at = arg(fcinfo, 1);
        let key = key(arg(fcinfo, 0), fire_at);
        let Some(token) = arg(fcinfo, 2) else { null_argument("token") };
        let completed = Spi::connect(|client| {
            let done = if holder::has_column(c"firings", c"holder_role") {
                COMPLETE.with(|p| p.run(client, &[Some(key), Some(token), fire_at]))
            } else {
                compat::COMPLETE_0_3.with(|p| p.run(client, &[Some(key), Some(token)]))
            };
            !done.is_empty()
        });
        if completed {
            pg_sys::ForceSyncCommit();
        }
        pg_sys::Datum::from(completed)
    }
}
v1_info!(pg_finfo_rendezvous_complete_firing);
