//! Fencing numbers (leader epochs, firing and run tokens) and run ids that never repeat across
//! a promotion.
//!
//! A standby promoted after its primary died may lack the primary's last commits
//! (asynchronous replication, or a synchronous wait that was cancelled): counting on from what
//! it has would hand out an epoch or a token the old primary already acknowledged. Each
//! promotion starts a new WAL timeline, so every new epoch and token is at least
//! `(timeline - 1) << 32`: on timeline 1 nothing changes, and on each later timeline the
//! numbers start above anything a timeline before it could have handed out (fewer than 2^32
//! each). The timeline is the running server's (the one WAL is inserted on), not the last
//! checkpoint's, which still names the old one until the next checkpoint.
//!
//! Run ids are floored alike (#43): an acknowledged run id must never name another dispatch
//! key, and the promoted node's id sequence is only as far as it had replicated. Before a
//! backend admits its first run on a timeline after the first, the sequence is raised to the
//! floor (`_raise_run_ids`, admission.sql); on timeline 1 nothing is read.
use std::cell::Cell;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::errors::raise;

/// Refuses with 25006 on a standby (in recovery): it must not hand out fencing numbers, nor
/// lead (fail closed), and its writes would fail deeper down with a less clear error.
pub(crate) fn refuse_on_standby() {
    // SAFETY: a read of shared state the server keeps for exactly this question.
    if unsafe { pg_sys::RecoveryInProgress() } {
        raise(
            PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            "this server is a standby (in recovery): leadership and firing claims need the primary",
        );
    }
}

/// The floor of every new epoch and token on this server now: `(timeline - 1) << 32`.
/// Refuses with 25006 on a standby.
pub(crate) fn floor() -> i64 {
    refuse_on_standby();
    // SAFETY: as above; outside recovery the insertion timeline is set.
    let timeline = unsafe { pg_sys::GetWALInsertionTimeLine() };
    (i64::from(timeline) - 1).max(0) << 32
}

thread_local! {
    /// The timeline on which this backend last made sure run ids start above its floor.
    static RUN_IDS_FLOORED_ON: Cell<u32> = const { Cell::new(1) };
}

/// Makes sure the run id sequence is at or above this timeline's floor before an admission:
/// once per backend and timeline (the sequence never goes down by itself). Nothing on a
/// standby (the admission's insert refuses there), nor on a database still on an older
/// version's SQL (no `_raise_run_ids`).
pub(crate) fn floor_run_ids() {
    // SAFETY: reads of shared state the server keeps for exactly these questions.
    if unsafe { pg_sys::RecoveryInProgress() } {
        return;
    }
    // SAFETY: as above; outside recovery the insertion timeline is set.
    let timeline = unsafe { pg_sys::GetWALInsertionTimeLine() };
    if RUN_IDS_FLOORED_ON.get() >= timeline || !crate::holder::has_column(c"runs", c"holder_role") {
        return;
    }
    let floor = (i64::from(timeline) - 1) << 32;
    Spi::run_with_args("SELECT rendezvous._raise_run_ids($1)", &[floor.into()]).expect("raise the run ids");
    RUN_IDS_FLOORED_ON.set(timeline);
}

/// `floor_run_ids()` for SQL: what `spawn_runs` calls before it takes ids.
#[pg_extern(volatile, parallel_unsafe, name = "_floor_run_ids")]
fn floor_run_ids_sql() {
    floor_run_ids()
}

/// `floor()` for SQL: what `claim_firing` and `claim_firings` raise tokens to.
#[pg_extern(volatile, parallel_safe, name = "_fence_floor")]
pub(crate) fn fence_floor() -> i64 {
    floor()
}
