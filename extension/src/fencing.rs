//! Fencing numbers (leader epochs, firing tokens) that never repeat across a promotion.
//!
//! A standby promoted after its primary died may lack the primary's last commits
//! (asynchronous replication, or a synchronous wait that was cancelled): counting on from what
//! it has would hand out an epoch or a token the old primary already acknowledged. Each
//! promotion starts a new WAL timeline, so every new epoch and token is at least
//! `(timeline - 1) << 32`: on timeline 1 nothing changes, and on each later timeline the
//! numbers start above anything a timeline before it could have handed out (fewer than 2^32
//! each). The timeline is the running server's (the one WAL is inserted on), not the last
//! checkpoint's, which still names the old one until the next checkpoint.
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

/// `floor()` for SQL: what `claim_firing` and `claim_firings` raise tokens to.
#[pg_extern(volatile, parallel_safe, name = "_fence_floor")]
pub(crate) fn fence_floor() -> i64 {
    floor()
}
