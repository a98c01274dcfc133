//! Leader claims: one leader per group, on a session-level lock, with fencing epochs.
//!
//! The lock is the truth: it dies with the holder's session, so there is no pid to probe, no
//! staleness to guess and no recycled-pid wedge. `rendezvous.leaders` records, per group, the
//! allocated lock id, the epoch (bumped on every new holder; it survives restarts) and who
//! holds it; `rendezvous.leader()` trusts that record only while `pg_locks` shows its session
//! still holding the lock.
//!
//! The lock lives in a lock space of its own that no SQL function reaches: an advisory lock tag
//! whose fourth field is `LOCK_SPACE` (`pg_advisory_lock` uses 1 and 2 there), so no role can
//! take or block a group's lock with SQL, and only `try_lead` (which always records a new
//! term) ever holds one. Its second field is the OID of `rendezvous.leaders`, which a DROP and
//! CREATE EXTENSION changes: a lock taken before cannot count for a group made after. Lock ids
//! are allocated from a sequence, not hashed, so groups never collide.
//!
//! The lock is taken with the lock manager directly (not through SPI) so that nothing can
//! interrupt between taking it and registering the callbacks that give it back: a claim whose
//! transaction or savepoint aborts leaves neither a held lock without the record (the callback
//! releases it) nor the record without the lock (the record rolls back). A transaction that
//! records a term cannot be prepared (two-phase commit would let the record and the lock part).
use pgrx::pg_sys;
use pgrx::pg_sys::panic::{CaughtError, ErrorReport};
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::ffi::{c_int, CStr};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;

use crate::announce;
use crate::checks::MAX_ID_BYTES;
use crate::errors::{invalid_argument, null_argument, raise};

/// The fourth field of every leader lock tag ("RZ"): advisory locks taken from SQL use 1 (one
/// `bigint` key) or 2 (two `integer` keys), so SQL can never name ours. `objsubid` in `pg_locks`.
pub(crate) const LOCK_SPACE: u16 = 0x525a;

extension_sql_file!(
    "leader.sql",
    name = "leader_tables",
    requires = ["checks", leader_lock_held, leader_lock_space]
);

/// `LOCK_SPACE` for SQL (`rendezvous.leader_locks` finds leader locks in `pg_locks` by it), so
/// the number is written down once.
#[pg_extern(immutable, parallel_safe, name = "_leader_lock_space")]
fn leader_lock_space() -> i32 {
    i32::from(LOCK_SPACE)
}

/// The OID of `rendezvous.leaders` in this database, as installed now (never cached: a DROP and
/// CREATE EXTENSION in the same session must not let old locks count).
fn leaders_table_oid() -> u32 {
    // SAFETY: catalog lookups by name with valid C strings; missing_ok = false raises if absent.
    unsafe {
        let namespace = pg_sys::get_namespace_oid(c"rendezvous".as_ptr(), false);
        pg_sys::get_relname_relid(c"leaders".as_ptr(), namespace).to_u32()
    }
}

/// The lock tag of a group's lock in the current database (see the module comment).
pub(crate) fn lock_tag(lock_id: i32) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is set for the life of a backend connected to a database.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: leaders_table_oid(),
        locktag_field3: lock_id as u32,
        locktag_field4: LOCK_SPACE,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// The channel a leader's session announces on (data: the group, announce.rs) when it gives a group's
/// lock back, on `resign` and when the session ends: followers LISTEN here instead of waiting
/// inside a statement, which would hold a snapshot (and back VACUUM) for the leader's whole term.
pub(crate) const CHANNEL: &str = "rendezvous_leader";

thread_local! {
    /// The groups whose lock this backend took, with their tags: what `resign` gives back and
    /// what the session announces when it ends, with that announcement signed when the lock was
    /// taken (at exit the session's role may not read the key: announce.rs).
    static TAKEN: RefCell<Vec<(String, pg_sys::LOCKTAG, String)>> = const { RefCell::new(Vec::new()) };
    static EXIT_HOOK_SET: Cell<bool> = const { Cell::new(false) };
}

/// Remembers that this backend took `group`'s lock, and makes sure its end is announced.
fn remember_taken(group: &str, tag: pg_sys::LOCKTAG) {
    let farewell = announce::announcement(CHANNEL, group).unwrap_or_else(|| group.to_owned());
    TAKEN.with(|taken| {
        let mut taken = taken.borrow_mut();
        taken.retain(|(g, _, _)| g != group);
        taken.push((group.to_owned(), tag, farewell));
    });
    if !EXIT_HOOK_SET.replace(true) {
        // SAFETY: registers a plain function for this backend's exit; it runs once.
        unsafe { pg_sys::before_shmem_exit(Some(announce_departure), pg_sys::Datum::from(0)) };
    }
}

/// At backend exit, before the lock manager drops this session's locks: gives back every
/// group lock it holds and announces each in a last transaction, so a waiting follower takes
/// over within milliseconds of a leader's session ending (killed client, terminated backend).
/// An error here ends the backend as it was ending anyway (errors in exit callbacks are FATAL).
#[pg_guard]
unsafe extern "C-unwind" fn announce_departure(_code: c_int, _arg: pg_sys::Datum) {
    let taken = TAKEN.with(|taken| std::mem::take(&mut *taken.borrow_mut()));
    if taken.is_empty() {
        return;
    }
    // SAFETY: the pattern PostgreSQL's own exit callbacks use (temp tables): leave any
    // transaction in progress, then run a short one of our own.
    unsafe {
        pg_sys::AbortOutOfAnyTransaction();
        let freed: Vec<String> = taken
            .into_iter()
            .filter(|(_, tag, _)| held_by_me(tag) && release(tag))
            .map(|(_, _, f)| f)
            .collect();
        if freed.is_empty() {
            return;
        }
        pg_sys::StartTransactionCommand();
        for farewell in &freed {
            announce::notify(CHANNEL, farewell);
        }
        pg_sys::CommitTransactionCommand();
    }
}

pub(crate) fn held_by_me(tag: &pg_sys::LOCKTAG) -> bool {
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    // SAFETY: a valid lock tag; LockHeldByMe only reads this backend's local lock table.
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    unsafe {
        pg_sys::LockHeldByMe(tag, mode)
    }
    // PostgreSQL 17 gave LockHeldByMe a third argument, `orstronger`: false asks for exactly
    // this mode, as before.
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    unsafe {
        pg_sys::LockHeldByMe(tag, mode, false)
    }
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

/// Whether backend `holder_pid`, the recorded holder of lock `lock_id`, still holds it: the
/// liveness half of `assert_leader`. For another backend it answers whether that pid lives and
/// the lock is held, not by whom (a pid can be reused): what acts on the answer against that
/// backend checks the holder itself (`end_silent_holder`). It never reads the whole lock table (`pg_locks` costs
/// grow with every lock any session holds): the caller's own lock is a local lookup; another
/// session's is a no-wait probe of that one lock in a mode only the leader's lock conflicts
/// with (so concurrent probes never disturb each other), plus a check that the backend lives.
/// Only `try_lead` can take the lock (its lock space is out of SQL's reach), and it records
/// its term before anything else can see it, under the row lock `assert_leader` holds.
#[pg_extern(volatile, parallel_unsafe, name = "_leader_lock_held")]
fn leader_lock_held(lock_id: Option<i32>, holder_pid: Option<i32>) -> bool {
    let (Some(lock_id), Some(holder_pid)) = (lock_id, holder_pid) else { return false };
    let tag = lock_tag(lock_id);
    // SAFETY: MyProcPid is set for the life of the backend.
    if holder_pid == unsafe { pg_sys::MyProcPid } {
        return held_by_me(&tag);
    }
    // SAFETY: reads the proc array under its lock.
    if unsafe { pg_sys::BackendPidGetProc(holder_pid) }.is_null() {
        return false;
    }
    let probe = pg_sys::RowShareLock as pg_sys::LOCKMODE;
    // SAFETY: a valid tag; a transaction-level, no-wait request never blocks.
    match unsafe { pg_sys::LockAcquire(&tag, probe, false, true) } {
        pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL => true,
        _ => {
            // SAFETY: we just took it; give it straight back.
            unsafe { pg_sys::LockRelease(&tag, probe, false) };
            false
        }
    }
}

fn check_name(what: &str, value: Option<&str>) -> String {
    match value {
        None => null_argument(what),
        Some("") => invalid_argument(format!("{what} must not be empty")),
        Some(v) if v.len() > MAX_ID_BYTES as usize => {
            invalid_argument(format!("{what} is {} bytes long; the limit is {MAX_ID_BYTES}", v.len()))
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
    // Above anything a timeline before this one handed out (fencing.rs).
    let floor = crate::fencing::floor();
    Spi::connect_mut(|client| {
        let updated = client.update(
            "UPDATE rendezvous.leaders
                SET epoch = greatest(epoch + 1, $3), leader = $2, since = pg_catalog.clock_timestamp(),
                    pid = pg_catalog.pg_backend_pid()
              WHERE group_name = $1
             RETURNING epoch",
            None,
            &[group.into(), candidate.into(), floor.into()],
        )?;
        if updated.is_empty() {
            Ok(None)
        } else {
            updated.first().get_one::<i64>()
        }
    })
    .expect("record the new leadership term")
}

/// Gives the lock back if the transaction, or the savepoint it was taken in, aborts: the
/// record of the term rolls back with it, so the lock must too.
fn release_on_abort(tag: pg_sys::LOCKTAG) {
    // SAFETY: plain reads of the current subtransaction id.
    let taken_in = Rc::new(Cell::new(unsafe { pg_sys::GetCurrentSubTransactionId() }));
    pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::Abort, move || {
        if held_by_me(&tag) {
            release(&tag);
        }
    });
    // A savepoint that commits hands the lock to its parent; one that aborts takes it along.
    let owner = AssertUnwindSafe(Rc::clone(&taken_in));
    pgrx::register_subxact_callback(pgrx::PgSubXactCallbackEvent::CommitSub, move |mine, parent| {
        if owner.get() == mine {
            owner.set(parent);
        }
    });
    let owner = AssertUnwindSafe(taken_in);
    pgrx::register_subxact_callback(pgrx::PgSubXactCallbackEvent::AbortSub, move |mine, _| {
        if owner.get() == mine && held_by_me(&tag) {
            release(&tag);
        }
    });
}

/// Refuses PREPARE TRANSACTION for a transaction that records a term: ROLLBACK PREPARED would
/// undo the record while this session keeps the lock.
fn refuse_prepare() {
    pgrx::register_xact_callback(pgrx::PgXactCallbackEvent::PrePrepare, || {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "cannot PREPARE a transaction that claimed leadership: claim it in a transaction of its own",
        )
    });
}

/// `record_new_term`, or, when the group vanished, gives the lock back and raises 40001 so the
/// caller retries (its next claim creates the group afresh).
fn record_new_term_or_retry(group: &str, candidate: &str, tag: &pg_sys::LOCKTAG) -> i64 {
    refuse_prepare();
    // The epoch bump must survive a crash once acknowledged, whatever the session's
    // synchronous_commit: a lost bump would hand the same epoch to the next leader.
    // SAFETY: only sets a flag this transaction's commit reads.
    unsafe { pg_sys::ForceSyncCommit() };
    record_new_term(group, candidate).unwrap_or_else(|| {
        release(tag);
        raise(
            PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            format!("leader group \"{group}\" was deleted while this session claimed it: try again"),
        )
    })
}

/// How long past a term's lease (from its last confirmation, database clock) the next
/// candidate's claim waits before it ends the silent holder's session: room for the holder's
/// own clock to run a little slower than the server's. The holder stops acting at its lease,
/// counted from when it sent the confirming claim, which is never after the server recorded it.
const LEASE_GRACE: &str = "1 second";

/// Claims leadership of `group_name` for `candidate`: true with the epoch when this session
/// holds the group's lock (repeated calls by the holder are idempotent and never stack the
/// lock); otherwise false with the current leader. `wait => true` is refused (0A000): waiting
/// inside the call held a snapshot (holding back VACUUM) and a lock on `leaders` for as long
/// as the leader lived; followers LISTEN on `rendezvous_leader` and claim again when told.
///
/// With a `lease`, the term lasts that long past each confirmation (each call by the holder):
/// a holder that stops confirming for longer than its lease plus a second (stopped, cut off,
/// its runtime blocked) has its session ended by the next candidate's claim, which then takes
/// the group. Without one (NULL), only the holder's session ending frees the group.
#[pg_extern(volatile, parallel_unsafe, name = "try_lead")]
fn try_lead_with_lease(
    group_name: Option<&str>,
    candidate: Option<&str>,
    wait: default!(Option<bool>, "false"),
    lease: default!(Option<Interval>, "NULL"),
) -> TableIterator<'static, (name!(is_leader, bool), name!(leader, Option<String>), name!(epoch, i64))> {
    if wait == Some(true) {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "try_lead(wait => true) is not supported since 0.3.0: a wait inside the call holds a snapshot and a lock \
             on rendezvous.leaders; LISTEN on rendezvous_leader and call try_lead again when it fires (the client does)",
        );
    }
    lead_or_explain(group_name, candidate, wait, lease)
}

/// `lead`, with a full lock table explained: each group a session leads keeps one entry of the
/// server's shared lock table for as long as it leads, so a server leading many groups runs out
/// of entries (SQLSTATE 53200); the error then says how many the server has and what to raise.
pub(crate) fn lead_or_explain(
    group_name: Option<&str>,
    candidate: Option<&str>,
    wait: Option<bool>,
    lease: Option<Interval>,
) -> TableIterator<'static, (name!(is_leader, bool), name!(leader, Option<String>), name!(epoch, i64))> {
    PgTryBuilder::new(|| lead(group_name, candidate, wait, lease))
        .catch_when(PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY, |caught| match &caught {
            CaughtError::PostgresError(report) if report.message().contains("shared memory") => {
                lock_table_full()
            }
            _ => caught.rethrow(),
        })
        .execute()
}

/// The server's shared lock table: `max_locks_per_transaction` and the entries it is sized
/// for, `max_locks_per_transaction x (max_connections + background processes +
/// max_prepared_transactions)`, all the locks every session together can surely hold. Past
/// that it grows into the server's spare shared memory, which a new session also needs: when
/// that runs out, every new connection fails (`FATAL: out of shared memory`).
fn lock_table() -> (i32, i64) {
    // SAFETY: plain integers set at server start; reading them does not touch the database
    // (nothing may in lock_table_full, until its aborted statement is rolled back).
    let (per_transaction, backends) = unsafe { (pg_sys::max_locks_per_xact, pg_sys::MaxBackends) };
    // SAFETY: a GUC lookup by a NUL-terminated name; the value is copied before anything else runs.
    let prepared = unsafe {
        let value = pg_sys::GetConfigOption(c"max_prepared_transactions".as_ptr(), true, false);
        if value.is_null() {
            0
        } else {
            CStr::from_ptr(value).to_str().ok().and_then(|v| v.parse::<i32>().ok()).unwrap_or(0)
        }
    };
    (per_transaction, i64::from(per_transaction) * (i64::from(backends) + i64::from(prepared)))
}

/// The entries the server's shared lock table is sized for (`lock_table`): what the leader
/// guard and its test measure against.
#[pg_extern(stable, parallel_safe, name = "_lock_table_size")]
fn lock_table_size() -> i64 {
    lock_table().1
}

/// The sizing rule, for the hints of both refusals.
fn sizing_rule(per_transaction: i32, entries: i64) -> String {
    format!(
        "The groups led at once (all sessions of the server together), plus the locks other work holds, must \
         stay under 3/4 of max_locks_per_transaction ({per_transaction}) x (max_connections + background \
         processes + max_prepared_transactions) ({entries}): raise max_locks_per_transaction (a restart), or lead \
         fewer groups"
    )
}

/// Raises 53200 for a full shared lock table, with its size and the sizing rule.
fn lock_table_full() -> ! {
    let (per_transaction, entries) = lock_table();
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
        format!("the server's lock table is full: it has about {entries} entries, and each leader group held takes one"),
        "pg_rendezvous",
    )
    .set_hint(sizing_rule(per_transaction, entries))
    .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// A claim that has just taken a group's lock keeps it only while the shared lock table is
/// under 3/4 of its size (#42): a server leading groups until its lock table overflowed into
/// the spare shared memory refused every new connection, the operator's included, until the
/// holders' sessions ended. Refused, the lock is given back and the claim fails with 53200
/// (terms already held are confirmed as before; only taking a lock is refused). The count is
/// of the shared table's entries in use, every session's, leader or not (fast-path locks live
/// in their backends, not in it), read from the lock manager on this path only: a claim that
/// wins, once a term.
fn keep_only_under_guard(tag: &pg_sys::LOCKTAG) {
    // SAFETY: GetLockStatusData takes the lock manager's partition locks in shared mode and
    // copies every lock into an array palloc'd in the current memory context; `nelements` says
    // how many were written, the array is read only here, and both allocations are freed once
    // counted.
    let in_use = unsafe {
        let data = pg_sys::GetLockStatusData();
        let n = usize::try_from((*data).nelements).unwrap_or(0);
        let locks = (*data).locks;
        let shared = if n == 0 {
            0
        } else {
            std::slice::from_raw_parts(locks, n).iter().filter(|l| !l.fastpath).count()
        };
        if !locks.is_null() {
            pg_sys::pfree(locks.cast());
        }
        pg_sys::pfree(data.cast());
        shared as i64
    };
    let (per_transaction, entries) = lock_table();
    if in_use * 4 < entries * 3 {
        return;
    }
    release(tag);
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
        format!(
            "no new leader term while the server's lock table is this full: {in_use} of its {entries} entries are in \
             use, and a new session needs some"
        ),
        "pg_rendezvous",
    )
    .set_detail("Groups led already keep their terms; a group without a leader gets one when entries are freed.")
    .set_hint(sizing_rule(per_transaction, entries))
    .report(PgLogLevel::ERROR);
}

fn lead(
    group_name: Option<&str>,
    candidate: Option<&str>,
    wait: Option<bool>,
    lease: Option<Interval>,
) -> TableIterator<'static, (name!(is_leader, bool), name!(leader, Option<String>), name!(epoch, i64))> {
    let group = check_name("group_name", group_name);
    let candidate = check_name("candidate", candidate);
    if let Some(lease) = lease {
        Spi::run_with_args("SELECT rendezvous._check_lease($1)", &[lease.into()]).expect("check the lease");
    }
    crate::fencing::refuse_on_standby();
    let lock_id = group_lock_id(&group);
    let tag = lock_tag(lock_id);
    // SAFETY: MyProcPid is set for the life of the backend.
    let my_pid = unsafe { pg_sys::MyProcPid };

    if held_by_me(&tag) {
        let (leader, pid, epoch, step_down) = Spi::connect(|client| {
            let row = client
                .select(
                    "SELECT leader, pid, epoch, CASE WHEN step_down_epoch = epoch THEN coalesce(step_down_reason, '') END
                       FROM rendezvous.leaders WHERE group_name = $1",
                    None,
                    &[group.as_str().into()],
                )?
                .first();
            Ok::<_, pgrx::spi::Error>((
                row.get::<String>(1)?,
                row.get::<i32>(2)?,
                row.get::<i64>(3)?,
                row.get::<String>(4)?,
            ))
        })
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
            if let Some(reason) = step_down {
                // An operator asked this term to end (request_step_down): resign, and say why
                // on the session, where the elector's log shows it.
                let why = if reason.is_empty() { String::new() } else { format!(": {reason}") };
                pgrx::warning!(
                    "stepping down from group \"{group}\" (epoch {}) at an operator's request{why}",
                    epoch.unwrap_or_default()
                );
                step_down_now(&group, &tag);
                return TableIterator::once((false, None, epoch.unwrap_or_default()));
            }
            confirm_term(&group, lease);
            return TableIterator::once((true, leader, epoch.unwrap_or_default()));
        }
        // We hold the lock but the record was rolled back (a savepoint): write it again.
        let epoch = record_new_term_or_retry(&group, &candidate, &tag);
        start_lease(&group, lease);
        return TableIterator::once((true, Some(candidate), epoch));
    }

    // A holder silent past its lease loses its session, and with it the lock.
    let won =
        acquire(&tag, wait.unwrap_or(false)) || (end_silent_holder(&group, lock_id) && acquire(&tag, false));
    if won {
        // Nothing between acquire() and this line can raise: if this transaction or the
        // savepoint we are in aborts from here on, the lock is given back with the record.
        release_on_abort(tag);
        keep_only_under_guard(&tag);
        remember_taken(&group, tag);
        let epoch = record_new_term_or_retry(&group, &candidate, &tag);
        start_lease(&group, lease);
        return TableIterator::once((true, Some(candidate), epoch));
    }

    let (leader, epoch) = current_leader(&group, lock_id);
    TableIterator::once((false, leader, epoch))
}

/// Who leads a group whose lock this session could not take: the holder its record names,
/// while that backend lives and the lock is held (`_leader_lock_held`'s probe of this one lock,
/// not a read of the whole lock table: a follower asks at every refresh, and `pg_locks` costs
/// grow with every lock the server holds, 5.6-9 ms of CPU a call at 1,000 groups, #42). Where
/// the record names no such holder (a term being recorded this instant, a holder just gone),
/// the lock manager's view answers, as `rendezvous.leader()` gives it.
fn current_leader(group: &str, lock_id: i32) -> (Option<String>, i64) {
    let (leader, pid, epoch) = Spi::get_three_with_args::<String, i32, i64>(
        "SELECT leader, pid, epoch FROM rendezvous.leaders WHERE group_name = $1",
        &[group.into()],
    )
    .expect("read the group's record");
    if leader.is_some() && leader_lock_held(Some(lock_id), pid) {
        return (leader, epoch.unwrap_or_default());
    }
    let (leader, epoch) = Spi::get_two_with_args::<String, i64>(
        "SELECT leader, epoch FROM rendezvous.leader($1)",
        &[group.into()],
    )
    .expect("read the current leader");
    (leader, epoch.unwrap_or_default())
}

/// Gives up leadership of `group_name` if this session holds it; true if it did. Followers
/// listening on the `rendezvous_leader` channel hear of it when this transaction commits.
#[pg_extern(volatile, parallel_unsafe)]
fn resign(group_name: Option<&str>) -> bool {
    let group = check_name("group_name", group_name);
    // Only try_lead takes group locks, and it remembers them: a group this session never took
    // (or whose row was deleted since) needs no table read.
    let tag = TAKEN.with(|taken| taken.borrow().iter().find(|(g, _, _)| *g == group).map(|(_, tag, _)| *tag));
    let Some(tag) = tag.filter(held_by_me) else { return false };
    step_down_now(&group, &tag)
}

/// A holder's confirmation is a write (in `leader_confirmations`, never the leaders row its
/// own fenced writes hold FOR SHARE) that waits for synchronous replication like any commit
/// (raised to `synchronous_commit = on` for this transaction if the session had it off or
/// local): a primary cut off from its synchronous standby cannot acknowledge it, so the
/// leader's refresh times out there and it stops confirming its term within its lease.
/// The confirmation records the term's lease too (NULL: none), which the next candidate reads;
/// a database still on 0.2.0's tables (this library installed, `ALTER EXTENSION … UPDATE` not
/// yet run) records the confirmation alone, and one on 0.1.0's, which kept none, nothing.
fn confirm_term(group: &str, lease: Option<Interval>) {
    Spi::run_with_args(
        "SELECT pg_catalog.set_config('synchronous_commit', 'on', true)
          WHERE pg_catalog.current_setting('synchronous_commit') IN ('off', 'local')",
        &[],
    )
    .expect("raise synchronous_commit");
    if crate::holder::has_column(c"leader_confirmations", c"lease") {
        Spi::run_with_args(
            "INSERT INTO rendezvous.leader_confirmations AS c (group_name, confirmed_at, lease)
             VALUES ($1, pg_catalog.clock_timestamp(), $2)
             ON CONFLICT (group_name) DO UPDATE SET confirmed_at = excluded.confirmed_at, lease = excluded.lease",
            &[group.into(), lease.into()],
        )
        .expect("confirm the term");
    } else if crate::holder::has_column(c"leader_confirmations", c"confirmed_at") {
        Spi::run_with_args(
            "INSERT INTO rendezvous.leader_confirmations AS c (group_name, confirmed_at)
             VALUES ($1, pg_catalog.clock_timestamp())
             ON CONFLICT (group_name) DO UPDATE SET confirmed_at = excluded.confirmed_at",
            &[group.into()],
        )
        .expect("confirm the term");
    }
}

/// Records a new term's lease from its start (a claim with a lease comes from 0.3.0's
/// declaration, so its tables have the column).
fn start_lease(group: &str, lease: Option<Interval>) {
    if lease.is_some() {
        confirm_term(group, lease);
    }
}

/// Ends the session of the group's holder when it has not confirmed its term for longer than
/// its lease plus `LEASE_GRACE` (database clock), waiting up to a second for it to go; true when
/// it did. The holder (the recorded one, which must still hold the lock) is then told nothing:
/// its connection is gone, so its elector steps down, and its fenced writes fail on the epoch.
/// Only the very holder is ended: the recorded pid must be the one the lock table shows holding
/// the group's lock (`_lock_holder`, read here only, on this rare path), not merely a live
/// backend while someone holds it (`_leader_lock_held`'s fast probe): a recorded pid reused by
/// another backend, a superuser's or a walsender, is never terminated (#39).
fn end_silent_holder(group: &str, lock_id: i32) -> bool {
    if !crate::holder::has_column(c"leader_confirmations", c"lease") {
        return false; // older tables: no term has a lease
    }
    let pid = Spi::get_one_with_args::<i32>(
        &format!(
            "SELECT (SELECT l.pid FROM rendezvous.leaders l
                       JOIN rendezvous.leader_confirmations c ON c.group_name = l.group_name
                      WHERE l.group_name = $1 AND l.pid IS NOT NULL AND c.lease IS NOT NULL
                        AND greatest(c.confirmed_at, l.since) + c.lease + interval '{LEASE_GRACE}'
                            < pg_catalog.clock_timestamp()
                        AND rendezvous._leader_lock_held($2, l.pid))"
        ),
        &[group.into(), lock_id.into()],
    )
    .expect("read the holder's last confirmation");
    let Some(pid) = pid else { return false };
    // That backend holds the lock, by pg_locks (a pid can be reused): read only now, for a
    // holder past its lease. In the statement above the planner checked it first, on every
    // follower's claim (pg_locks costs grow with every lock the server holds, #42).
    let holds = Spi::get_one_with_args::<bool>(
        "SELECT rendezvous._lock_holder($1) IS NOT DISTINCT FROM $2",
        &[lock_id.into(), pid.into()],
    )
    .expect("check the holder in pg_locks");
    if holds != Some(true) {
        return false;
    }
    pgrx::warning!(
        "ending the session of group \"{group}\"'s leader (pid {pid}): it has not confirmed its term for longer than its lease plus {LEASE_GRACE}"
    );
    Spi::get_one_with_args::<bool>("SELECT pg_catalog.pg_terminate_backend($1, 1000)", &[pid.into()])
        .expect("end the silent holder's session")
        .unwrap_or(false)
}

/// Clears this session as the group's holder, tells followers, and gives the lock back.
fn step_down_now(group: &str, tag: &pg_sys::LOCKTAG) -> bool {
    Spi::run_with_args(
        "UPDATE rendezvous.leaders SET pid = NULL WHERE group_name = $1 AND pid = pg_catalog.pg_backend_pid()",
        &[group.into()],
    )
    .expect("clear the holder");
    TAKEN.with(|taken| taken.borrow_mut().retain(|(g, _, _)| *g != group));
    announce::announce(CHANNEL, group);
    release(tag)
}
