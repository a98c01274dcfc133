//! Exactly-once firing claims: HRW decides which host tries first, the database decides who
//! wins.
//!
//! A firing is `firing:<task_id>:<fire_at in canonical UTC>`; one row per firing holds its live
//! claim. `claim_firing` is one `INSERT … ON CONFLICT DO UPDATE … WHERE` statement: a first
//! claim inserts (token 1); a claim on an expired, uncompleted lease takes it over with the
//! next token; anything else changes nothing. Leases run on the database clock, so hosts'
//! clocks and their views of membership never decide anything. The token fences the rest:
//! a stale holder's `complete_firing`, `renew_firing` and `assert_firing` are refused.
use pgrx::pg_sys;
use pgrx::prelude::*;

extension_sql_file!(
    "firing.sql",
    name = "firing",
    requires = ["checks", durable_commit, fencing::fence_floor]
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
