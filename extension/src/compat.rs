//! What this library keeps for databases still on an older version's SQL: a new library is
//! installed first, and each database runs `ALTER EXTENSION … UPDATE` later, so until then the
//! library serves the old declarations and tables (the upgrade test installs every released
//! version with the current library and fills it). Each item names the version it serves; it
//! goes in the first release that no longer supports upgrading from that version (its frozen
//! install script names these symbols, sql/README.md).
//!
//! Elsewhere, version by a column's presence (`holder::has_column`): claims on 0.2.0's and
//! 0.3.0's tables and completions on 0.3.0's in firing.rs, a term's confirmation on 0.1.0's and 0.2.0's in leader.rs.
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::ffi::kept_plan::KeptPlan;

thread_local! {
    /// 0.2.0: spawn_run's INSERT on tables and a declaration without a retry policy.
    pub(crate) static INSERT_0_2: KeptPlan = const { KeptPlan::new(
        "INSERT INTO rendezvous.runs AS r (tenant_id, workflow_ref, input, dispatch_key) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (tenant_id, dispatch_key) WHERE dispatch_key IS NOT NULL DO NOTHING RETURNING r.run_id",
        &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::JSONBOID, pg_sys::TEXTOID],
    ) };
    /// 0.3.0: firing claims on tables that record no holder role.
    pub(crate) static CLAIM_0_3: KeptPlan = const { KeptPlan::new(
        "INSERT INTO rendezvous.firings AS f (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until, \
                                             holder_pid, holder_started) \
         VALUES ($1, $2, $3, $4, $5, $6, $6 OPERATOR(pg_catalog.+) $7, \
                 pg_catalog.pg_backend_pid(), rendezvous._session_started()) \
         ON CONFLICT (firing_key) DO UPDATE \
            SET holder = excluded.holder, token = GREATEST(f.token OPERATOR(pg_catalog.+) 1, excluded.token), \
                claimed_at = excluded.claimed_at, lease_until = excluded.lease_until, \
                attempts = f.attempts OPERATOR(pg_catalog.+) 1, \
                holder_pid = excluded.holder_pid, holder_started = excluded.holder_started \
          WHERE f.completed_at IS NULL \
            AND (f.lease_until OPERATOR(pg_catalog.<=) excluded.claimed_at \
                 OR (f.holder IS NOT NULL AND rendezvous._holder_gone(f.holder_pid, f.holder_started))) \
         RETURNING f.token, f.lease_until",
        &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TIMESTAMPTZOID, pg_sys::TEXTOID, pg_sys::INT8OID,
          pg_sys::TIMESTAMPTZOID, pg_sys::INTERVALOID],
    ) };
    /// 0.3.0 and 0.2.0: completions on tables that record no holder role.
    pub(crate) static COMPLETE_0_3: KeptPlan = const { KeptPlan::new(
        "UPDATE rendezvous.firings f SET completed_at = COALESCE(f.completed_at, pg_catalog.clock_timestamp()) \
          WHERE f.firing_key OPERATOR(pg_catalog.=) $1 AND f.token OPERATOR(pg_catalog.=) $2 \
            AND f.holder IS NOT NULL AND f.failed_at IS NULL",
        &[pg_sys::TEXTOID, pg_sys::INT8OID],
    ) };
    /// 0.2.0: firing claims on tables that record no holder session.
    pub(crate) static CLAIM_0_2: KeptPlan = const { KeptPlan::new(
        "INSERT INTO rendezvous.firings AS f (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until) \
         VALUES ($1, $2, $3, $4, $5, $6, $6 OPERATOR(pg_catalog.+) $7) \
         ON CONFLICT (firing_key) DO UPDATE \
            SET holder = excluded.holder, token = GREATEST(f.token OPERATOR(pg_catalog.+) 1, excluded.token), \
                claimed_at = excluded.claimed_at, lease_until = excluded.lease_until, \
                attempts = f.attempts OPERATOR(pg_catalog.+) 1 \
          WHERE f.completed_at IS NULL AND f.lease_until OPERATOR(pg_catalog.<=) excluded.claimed_at \
         RETURNING f.token, f.lease_until",
        &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TIMESTAMPTZOID, pg_sys::TEXTOID, pg_sys::INT8OID,
          pg_sys::TIMESTAMPTZOID, pg_sys::INTERVALOID],
    ) };
}

/// 0.2.0: what its declaration of `rendezvous.try_lead(group_name, candidate, wait)` calls: a
/// claim without a lease.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn try_lead(
    group_name: Option<&str>,
    candidate: Option<&str>,
    wait: default!(Option<bool>, "false"),
) -> TableIterator<'static, (name!(is_leader, bool), name!(leader, Option<String>), name!(epoch, i64))> {
    crate::leader::lead_or_explain(group_name, candidate, wait, None)
}

/// 0.2.0: what its declaration of `rendezvous._plan_firings` (six arguments) calls, with 0.2.0's
/// 1,000 a task a pass.
#[pg_extern(immutable, parallel_safe, sql = false)]
fn plan_firings(
    schedule: &str,
    time_zone: &str,
    catch_up: &str,
    window: Interval,
    from: TimestampWithTimeZone,
    now: TimestampWithTimeZone,
) -> TableIterator<
    'static,
    (
        name!(run_at, Vec<TimestampWithTimeZone>),
        name!(skipped, i64),
        name!(next_fire_at, Option<TimestampWithTimeZone>),
    ),
> {
    crate::schedule::plan(
        schedule,
        time_zone,
        catch_up,
        window,
        from,
        now,
        crate::schedule::MAX_CATCH_UP as i32,
    )
}
