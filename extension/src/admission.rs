//! Idempotent spawn admission: `rendezvous.spawn_run` turns a redelivered spawn request into
//! a no-op that returns the run it already created.
//!
//! Dedup is by the caller's `dispatch_key` only, unique per tenant through a partial unique
//! index, decided by `INSERT … ON CONFLICT DO NOTHING`: never check-then-insert, never an
//! advisory lock, never a hash of the request. When the insert yields to an existing row, a
//! fresh read returns it. Under READ COMMITTED that read always sees it (ON CONFLICT waited
//! for its inserter to commit); under REPEATABLE READ or SERIALIZABLE, a row committed after
//! the caller's snapshot makes the INSERT itself raise 40001, which the client retries. If the
//! row vanished in between (purged), the insert is tried again.
//!
//! It is the hot path of every dispatch, so it costs what the insert costs and little more: a
//! C function (not set-returning: `SELECT rendezvous.spawn_run(…)` is one call) that checks
//! its arguments once, here, and runs the insert from a plan kept for the backend's life.
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::checks::{check_text_datum, finite_interval_vs_zero, raise_sql_check, MAX_ID_BYTES};
use crate::compat;
use crate::errors::raise;
use crate::ffi::c_function::{arg, composite, v1_info, varlena_bytes};
use crate::ffi::kept_plan::{FirstRow, KeptPlan};

extension_sql_file!("admission.sql", name = "admission", requires = ["checks"]);

/// The most bytes a `workflow_ref` and a `dispatch_key` may have (the runs table's checks
/// say the same).
const MAX_WORKFLOW_REF_BYTES: i32 = 1024;
const MAX_DISPATCH_KEY_BYTES: i32 = 512;

thread_local! {
    /// The admission itself: a new run, or nothing when the key is taken.
    static INSERT: KeptPlan = const { KeptPlan::new(
        "INSERT INTO rendezvous.runs AS r (tenant_id, workflow_ref, input, dispatch_key, max_attempts, retry_backoff) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (tenant_id, dispatch_key) WHERE dispatch_key IS NOT NULL DO NOTHING RETURNING r.run_id",
        &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::JSONBOID, pg_sys::TEXTOID, pg_sys::INT4OID, pg_sys::INTERVALOID],
    ) };
    /// The run a yielded insert yielded to, and whether it was the same request.
    static EXISTING: KeptPlan = const { KeptPlan::new(
        "SELECT r.run_id, r.workflow_ref OPERATOR(pg_catalog.=) $2 AND r.input OPERATOR(pg_catalog.=) $3 \
           FROM rendezvous.runs r \
          WHERE r.tenant_id OPERATOR(pg_catalog.=) $1 AND r.dispatch_key OPERATOR(pg_catalog.=) $4",
        &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::JSONBOID, pg_sys::TEXTOID],
    ) };
}

/// `rendezvous.spawn_run(tenant_id, workflow_ref, input, dispatch_key, max_attempts, retry_backoff)
/// → rendezvous.admission`.
///
/// A plain C-language function, not set-returning, so `SELECT rendezvous.spawn_run(…)` costs
/// one function call: the admission's hot path runs at the speed of the insert it makes.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn rendezvous_spawn_run(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL calls this with `spawn_run`'s arguments (text, text, jsonb, text, and from
    // 0.3.0 integer and interval), each checked before use; `admit` connects SPI itself, and
    // `composite` forms the declared result from by-value datums.
    unsafe {
        let (tenant_id, workflow_ref, input, dispatch_key) =
            (arg(fcinfo, 0), arg(fcinfo, 1), arg(fcinfo, 2), arg(fcinfo, 3));
        check_text_datum(c"tenant_id", tenant_id, MAX_ID_BYTES);
        check_text_datum(c"workflow_ref", workflow_ref, MAX_WORKFLOW_REF_BYTES);
        if input.is_none() {
            raise(
                PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                "input must not be NULL (use '{}' for no input)",
            );
        }
        if dispatch_key.is_some() {
            check_text_datum(c"dispatch_key", dispatch_key, MAX_DISPATCH_KEY_BYTES);
        }
        // 0.2.0's declaration has four arguments and its tables no retry policy.
        let current = (*fcinfo).nargs >= 6;
        let (max_attempts, retry_backoff) = (arg(fcinfo, 4), arg(fcinfo, 5));
        if current {
            check_retry_policy(max_attempts, retry_backoff);
        }
        let args = [tenant_id, workflow_ref, input, dispatch_key, max_attempts, retry_backoff];
        let (run_id, created, same_request) = admit(&args, current);
        composite(fcinfo, &[Some(run_id.into()), Some(created.into()), Some(same_request.into())])
    }
}

/// Checks a retry policy as `_check_retry_policy` does (which raises, with its messages, when
/// it fails): max_attempts 1 to 1000, retry_backoff finite and not negative.
///
/// # Safety
/// `max_attempts` is an `integer` datum and `retry_backoff` an `interval` one, when present.
unsafe fn check_retry_policy(max_attempts: Option<pg_sys::Datum>, retry_backoff: Option<pg_sys::Datum>) {
    let attempts_ok = max_attempts.is_some_and(|d| (1..=1000).contains(&(d.value() as i32)));
    // SAFETY: `retry_backoff` is an interval datum (this function's contract).
    let backoff_ok =
        retry_backoff.is_some_and(|d| unsafe { finite_interval_vs_zero(d, pg_sys::interval_ge) });
    if !(attempts_ok && backoff_ok) {
        // SAFETY: the datums are an integer and an interval, the types `_check_retry_policy`
        // declares.
        unsafe {
            raise_sql_check(
                c"SELECT rendezvous._check_retry_policy($1, $2)",
                &[pg_sys::INT4OID, pg_sys::INTERVALOID],
                &[max_attempts, retry_backoff],
            )
        }
    }
}

/// `(run_id, created, same_request)`: the insert's, or the run it yielded to.
///
/// # Safety
/// `args` are `spawn_run`'s checked arguments: text, text, jsonb, text (or None), and, when
/// `current`, an integer and an interval.
unsafe fn admit(args: &[Option<pg_sys::Datum>; 6], current: bool) -> (i64, bool, bool) {
    // Run ids stay above any a timeline before this one handed out (fencing.rs).
    crate::fencing::floor_run_ids();
    let key_args = [args[0], args[1], args[2], args[3]];
    let admitted = Spi::connect(|client| {
        (0..5).find_map(|_attempt| {
            // SAFETY: each argument datum is of the plan's declared type (this function's
            // contract).
            unsafe {
                let inserted = if current {
                    INSERT.with(|p| p.run(client, args))
                } else {
                    compat::INSERT_0_2.with(|p| p.run(client, &key_args))
                };
                if let Some(row) = FirstRow::of(inserted) {
                    let run_id = row.get::<i64>(1).expect("run_id is NOT NULL");
                    // Announced, so an idle worker starts it without waiting for its next poll
                    // (one announcement per transaction, whatever it admits).
                    crate::announce::announce("rendezvous_runs", "");
                    return Some((run_id, true, true));
                }
                // Without a key nothing can conflict; with one, read the run it yielded to.
                if let Some(row) = FirstRow::of(EXISTING.with(|p| p.run(client, &key_args))) {
                    let run_id = row.get::<i64>(1).expect("run_id is NOT NULL");
                    return Some((run_id, false, row.get::<bool>(2) == Some(true)));
                }
            }
            // The conflicting run was deleted (purged) between the two statements: insert again.
            None
        })
    });
    // SAFETY: the datums are `spawn_run`'s text arguments (this function's contract).
    unsafe {
        admitted.unwrap_or_else(|| {
            let text = |d: Option<pg_sys::Datum>| {
                d.map_or("NULL".into(), |d| String::from_utf8_lossy(varlena_bytes(d)))
            };
            raise(
                PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
                format!(
                    "could not admit run for dispatch_key {} of tenant {}: it is being purged concurrently",
                    text(args[3]),
                    text(args[0])
                ),
            )
        })
    }
}

v1_info!(pg_finfo_rendezvous_spawn_run);
