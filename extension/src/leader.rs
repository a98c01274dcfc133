//! Leader claims: one leader per group, on a session-level advisory lock, with fencing epochs.
//!
//! The lock is the truth: it dies with the holder's session, so there is no pid to probe, no
//! staleness to guess and no recycled-pid wedge. `rendezvous.leaders` records, per group, the
//! allocated lock id, the epoch (bumped on every new holder; it survives restarts) and who
//! holds it; `rendezvous.leader()` trusts that record only while `pg_locks` shows its session
//! still holding the lock.
//!
//! Lock ids are allocated from a sequence, not hashed, and taken in the two-key form
//! `(LOCK_CLASS, lock_id)`: PostgreSQL keeps that keyspace apart from the one-`bigint` form
//! most applications use, so they cannot collide with ours, nor groups with each other.
//!
//! The lock is taken with the lock manager directly (not `pg_try_advisory_lock` through SPI)
//! so that nothing can interrupt between taking it and registering the abort callback that
//! gives it back: a claim whose transaction aborts leaves neither a held lock without the
//! record (the callback releases it) nor the record without the lock (the record rolls back).
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::errors::{invalid_argument, null_argument, raise};

/// The first key of every lock we take: "RDZV" in ASCII. Shown as `classid` in `pg_locks`.
pub(crate) const LOCK_CLASS: u32 = 0x5244_5a56;

extension_sql_file!("leader.sql", name = "leader_tables");

/// The lock tag of a group's lock: advisory, two-key form, in the current database.
fn lock_tag(lock_id: i32) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is set for the life of a backend connected to a database.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: LOCK_CLASS,
        locktag_field3: lock_id as u32,
        locktag_field4: 2, // the (int4, int4) form of pg_advisory_lock
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

fn held_by_me(tag: &pg_sys::LOCKTAG) -> bool {
    // SAFETY: a valid lock tag; LockHeldByMe only reads this backend's local lock table.
    unsafe { pg_sys::LockHeldByMe(tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE) }
}

/// Takes the session-level lock; waits for it when `wait`. Returns whether it is now held.
fn acquire(tag: &pg_sys::LOCKTAG, wait: bool) -> bool {
    // SAFETY: a valid lock tag; a wait is interruptible (cancel, terminate) like any lock wait.
    let result = unsafe { pg_sys::LockAcquire(tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, true, !wait) };
    match result {
        pg_sys::LockAcquireResult::LOCKACQUIRE_OK => true,
        pg_sys::LockAcquireResult::LOCKACQUIRE_ALREADY_HELD => {
            // Callers check held_by_me first; never leave the lock stacked.
            release(tag);
            true
        }
        _ => false,
    }
}

fn release(tag: &pg_sys::LOCKTAG) -> bool {
    // SAFETY: a valid lock tag; releasing a lock we do not hold only returns false.
    unsafe { pg_sys::LockRelease(tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, true) }
}

fn check_name(what: &str, value: Option<&str>) -> String {
    match value {
        None => null_argument(what),
        Some("") => invalid_argument(format!("{what} must not be empty")),
        Some(v) if v.len() > 256 => {
            invalid_argument(format!("{what} is {} bytes long; the limit is 256", v.len()))
        }
        Some(v) => v.to_owned(),
    }
}

fn group_lock_id(group: &str) -> i32 {
    Spi::get_one_with_args::<i32>("SELECT rendezvous._leader_lock_id($1)", &[group.into()])
        .expect("_leader_lock_id")
        .expect("_leader_lock_id returns an id")
}

/// Records this session as the holder with a new epoch; returns the epoch, or `None` when the
/// group's row is gone (deleted while this session waited for its lock).
fn record_new_term(group: &str, candidate: &str) -> Option<i64> {
    Spi::connect_mut(|client| {
        let updated = client.update(
            "UPDATE rendezvous.leaders
                SET epoch = epoch + 1, leader = $2, since = pg_catalog.clock_timestamp(),
                    pid = pg_catalog.pg_backend_pid()
              WHERE group_name = $1
             RETURNING epoch",
            None,
            &[group.into(), candidate.into()],
        )?;
        if updated.is_empty() {
            Ok(None)
        } else {
            updated.first().get_one::<i64>()
        }
    })
    .expect("record the new leadership term")
}

/// `record_new_term`, or, when the group vanished, gives the lock back and raises 40001 so the
/// caller retries (its next claim creates the group afresh).
fn record_new_term_or_retry(group: &str, candidate: &str, tag: &pg_sys::LOCKTAG) -> i64 {
    record_new_term(group, candidate).unwrap_or_else(|| {
        release(tag);
        raise(
            PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            format!("leader group \"{group}\" was deleted while this session claimed it: try again"),
        )
    })
}

/// Claims leadership of `group_name` for `candidate`: true with the epoch when this session
/// holds the group's lock (repeated calls by the holder are idempotent and never stack the
/// lock); otherwise false with the current leader. With `wait`, blocks until the lock is free
/// (cancel the query to stop waiting).
#[pg_extern(volatile, parallel_unsafe)]
fn try_lead(
    group_name: Option<&str>,
    candidate: Option<&str>,
    wait: default!(Option<bool>, "false"),
) -> TableIterator<'static, (name!(is_leader, bool), name!(leader, Option<String>), name!(epoch, i64))> {
    let group = check_name("group_name", group_name);
    let candidate = check_name("candidate", candidate);
    let lock_id = group_lock_id(&group);
    let tag = lock_tag(lock_id);
    // SAFETY: MyProcPid is set for the life of the backend.
    let my_pid = unsafe { pg_sys::MyProcPid };

    if held_by_me(&tag) {
        let (leader, pid, epoch) = Spi::get_three_with_args::<String, i32, i64>(
            "SELECT leader, pid, epoch FROM rendezvous.leaders WHERE group_name = $1",
            &[group.as_str().into()],
        )
        .expect("read the group's record");
        if pid == Some(my_pid) {
            if leader.as_deref() != Some(candidate.as_str()) {
                // Two candidates on one server session: that is a transaction-mode pooler
                // handing one backend to several clients, where session locks mean nothing.
                raise(
                    PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!(
                        "this session already holds the lock of group \"{group}\" for candidate \"{}\": \
                         leader claims need a dedicated session (a transaction-mode pooler such as \
                         pgbouncer shares one session between clients)",
                        leader.unwrap_or_default()
                    ),
                );
            }
            return TableIterator::once((true, leader, epoch.unwrap_or_default()));
        }
        // We hold the lock but the record was rolled back (a savepoint): write it again.
        let epoch = record_new_term_or_retry(&group, &candidate, &tag);
        return TableIterator::once((true, Some(candidate), epoch));
    }

    if acquire(&tag, wait.unwrap_or(false)) {
        // Nothing between acquire() and this line can raise: if this transaction aborts from
        // here on, the callback gives the lock back so no lock outlives its record.
        pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::Abort, move || {
            if held_by_me(&tag) {
                release(&tag);
            }
        });
        let epoch = record_new_term_or_retry(&group, &candidate, &tag);
        return TableIterator::once((true, Some(candidate), epoch));
    }

    let (leader, epoch) = Spi::get_two_with_args::<String, i64>(
        "SELECT leader, epoch FROM rendezvous.leader($1)",
        &[group.as_str().into()],
    )
    .expect("read the current leader");
    TableIterator::once((false, leader, epoch.unwrap_or_default()))
}

/// Gives up leadership of `group_name` if this session holds it; true if it did.
#[pg_extern(volatile, parallel_unsafe)]
fn resign(group_name: Option<&str>) -> bool {
    let group = check_name("group_name", group_name);
    let lock_id = Spi::connect(|client| {
        let rows = client.select(
            "SELECT lock_id FROM rendezvous.leaders WHERE group_name = $1",
            None,
            &[group.as_str().into()],
        )?;
        if rows.is_empty() {
            Ok(None)
        } else {
            rows.first().get_one::<i32>()
        }
    })
    .expect("read the group's lock id");
    // A group nobody ever claimed has no row, and nothing to give up.
    let Some(lock_id) = lock_id else { return false };
    let tag = lock_tag(lock_id);
    if !held_by_me(&tag) {
        return false;
    }
    Spi::run_with_args(
        "UPDATE rendezvous.leaders SET pid = NULL WHERE group_name = $1 AND pid = pg_catalog.pg_backend_pid()",
        &[group.as_str().into()],
    )
    .expect("clear the holder");
    release(&tag)
}
