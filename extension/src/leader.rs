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

extension_sql!(
    r#"
CREATE SEQUENCE rendezvous.leader_lock_ids AS integer MINVALUE 1 NO CYCLE;
CREATE TABLE rendezvous.leaders (
    group_name text PRIMARY KEY,
    lock_id    integer NOT NULL UNIQUE DEFAULT pg_catalog.nextval('rendezvous.leader_lock_ids'),
    leader     text,
    epoch      bigint NOT NULL DEFAULT 0,
    since      timestamptz,
    pid        integer,
    CONSTRAINT leaders_group_name_valid CHECK (group_name <> '' AND octet_length(group_name) <= 256)
);
ALTER SEQUENCE rendezvous.leader_lock_ids OWNED BY rendezvous.leaders.lock_id;
COMMENT ON TABLE rendezvous.leaders IS 'Per leader group: its advisory lock id, last epoch and last holder. The lock in pg_locks is the truth.';
SELECT pg_catalog.pg_extension_config_dump('rendezvous.leaders', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.leader_lock_ids', '');

-- The group's lock id, allocating it (and the group's row) on first use.
CREATE FUNCTION rendezvous._leader_lock_id(group_name text) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    id integer;
BEGIN
    SELECT l.lock_id INTO id FROM rendezvous.leaders l WHERE l.group_name = _leader_lock_id.group_name;
    IF FOUND THEN
        RETURN id;
    END IF;
    INSERT INTO rendezvous.leaders AS l (group_name) VALUES (_leader_lock_id.group_name)
    ON CONFLICT (group_name) DO NOTHING
    RETURNING l.lock_id INTO id;
    IF FOUND THEN
        RETURN id;
    END IF;
    SELECT l.lock_id INTO STRICT id FROM rendezvous.leaders l WHERE l.group_name = _leader_lock_id.group_name;
    RETURN id;
END
$$;

-- The session holding a group's lock now, from the lock manager.
CREATE FUNCTION rendezvous._lock_holder(lock_id integer) RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT k.pid FROM pg_catalog.pg_locks k
     WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2
       AND k.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
       AND k.classid = 1380211286::oid AND k.objid = lock_id::oid
$$;

CREATE FUNCTION rendezvous.leader(group_name text)
RETURNS TABLE (leader text, epoch bigint, since timestamptz, pid integer)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- $1: the OUT column "leader" shares the function's name, so parameters are positional.
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'group_name must not be NULL' USING ERRCODE = '22004';
    END IF;
    RETURN QUERY
        SELECT CASE WHEN h.holder = l.pid THEN l.leader END,
               coalesce(l.epoch, 0::bigint),
               CASE WHEN h.holder = l.pid THEN l.since END,
               h.holder
          FROM (SELECT $1 AS g) arg
          LEFT JOIN rendezvous.leaders l ON l.group_name = arg.g
          LEFT JOIN LATERAL (SELECT rendezvous._lock_holder(l.lock_id) AS holder) h ON true;
END
$$;
COMMENT ON FUNCTION rendezvous.leader(text) IS
    'Who leads group_name now: the holder of its lock in pg_locks (leader NULL when nobody holds it), the current epoch, since when, and the holder''s backend pid.';

CREATE FUNCTION rendezvous.assert_leader(group_name text, epoch bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    rec rendezvous.leaders%ROWTYPE;
BEGIN
    IF assert_leader.group_name IS NULL THEN
        RAISE EXCEPTION 'group_name must not be NULL' USING ERRCODE = '22004';
    ELSIF assert_leader.epoch IS NULL THEN
        RAISE EXCEPTION 'epoch must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- FOR SHARE orders this check against a takeover: the new leader's epoch bump waits for
    -- this transaction, so a write fenced here commits before the new epoch exists, or fails.
    SELECT * INTO rec FROM rendezvous.leaders l WHERE l.group_name = assert_leader.group_name FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leader group "%" does not exist', assert_leader.group_name USING ERRCODE = 'RZ001';
    ELSIF rec.epoch <> assert_leader.epoch THEN
        RAISE EXCEPTION 'epoch % of group "%" is not current (the current epoch is %)',
            assert_leader.epoch, assert_leader.group_name, rec.epoch
            USING ERRCODE = 'RZ001', HINT = 'This leader was deposed: stop acting as leader.';
    ELSIF rec.pid IS NULL OR rec.pid IS DISTINCT FROM rendezvous._lock_holder(rec.lock_id) THEN
        RAISE EXCEPTION 'epoch % of group "%" is no longer held: its leader resigned or its session ended',
            assert_leader.epoch, assert_leader.group_name
            USING ERRCODE = 'RZ001', HINT = 'This leader was deposed: stop acting as leader.';
    END IF;
END
$$;
COMMENT ON FUNCTION rendezvous.assert_leader(text, bigint) IS
    'Fencing: raises RZ001 unless epoch is the live leadership of group_name now. Call it in the same transaction as a leader''s write.';
"#,
    name = "leader_tables",
);

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

/// Records this session as the holder with a new epoch; returns the epoch.
fn record_new_term(group: &str, candidate: &str) -> i64 {
    Spi::get_one_with_args::<i64>(
        "UPDATE rendezvous.leaders
            SET epoch = epoch + 1, leader = $2, since = pg_catalog.clock_timestamp(),
                pid = pg_catalog.pg_backend_pid()
          WHERE group_name = $1
         RETURNING epoch",
        &[group.into(), candidate.into()],
    )
    .expect("record the new leadership term")
    .expect("the group row exists")
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
        let epoch = record_new_term(&group, &candidate);
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
        let epoch = record_new_term(&group, &candidate);
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
    let Some(lock_id) = Spi::get_one_with_args::<i32>(
        "SELECT lock_id FROM rendezvous.leaders WHERE group_name = $1",
        &[group.as_str().into()],
    )
    .expect("read the group's lock id") else {
        return false;
    };
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
