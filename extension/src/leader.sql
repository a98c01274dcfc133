-- Leader claims: the leaders table, leader() and assert_leader() (see leader.rs; try_lead and resign are Rust).
-- Loaded by extension_sql_file! in leader.rs; every name is schema-qualified. Functions and views
-- reach upgrades from here by themselves (sqlgen); a table or type change after a release also
-- goes into sql/migrations/ (the upgrade test checks they agree).

CREATE SEQUENCE rendezvous.leader_lock_ids AS integer MINVALUE 1 NO CYCLE;
CREATE TABLE rendezvous.leaders (
    group_name text PRIMARY KEY,
    lock_id    integer NOT NULL UNIQUE DEFAULT pg_catalog.nextval('rendezvous.leader_lock_ids'),
    leader     text,
    epoch      bigint NOT NULL DEFAULT 0,
    since      timestamptz,
    pid        integer,
    CONSTRAINT leaders_group_name_valid CHECK (group_name <> '' AND octet_length(group_name) <= rendezvous._max_id_bytes()),
    step_down_epoch  bigint,
    step_down_reason text
);
COMMENT ON COLUMN rendezvous.leaders.step_down_epoch IS
    'The term an operator asked to end (request_step_down): its leader resigns at its next refresh.';
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

-- Every leader lock in pg_locks, held or awaited, with its group: the one place that knows how
-- they appear there (advisory, classid = this table's OID, objsubid = the lock space, objid =
-- lock_id).
CREATE VIEW rendezvous.leader_locks AS
    SELECT l.group_name, l.lock_id, k.pid, k.granted, k.waitstart
      FROM pg_catalog.pg_locks k
      JOIN rendezvous.leaders l ON k.objid = l.lock_id::oid
     WHERE k.locktype = 'advisory' AND k.objsubid = rendezvous._leader_lock_space()
       AND k.classid = 'rendezvous.leaders'::regclass::oid
       AND k.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database());
COMMENT ON VIEW rendezvous.leader_locks IS
    'Leader locks in pg_locks: the session (pid) holding or awaiting each group''s lock.';

-- The session holding a group's lock now, from the lock manager.
CREATE FUNCTION rendezvous._lock_holder(lock_id integer) RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT k.pid FROM rendezvous.leader_locks k WHERE k.lock_id = _lock_holder.lock_id AND k.granted
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
    ELSIF NOT rendezvous._leader_lock_held(rec.lock_id, rec.pid) THEN
        RAISE EXCEPTION 'epoch % of group "%" is no longer held: its leader resigned or its session ended',
            assert_leader.epoch, assert_leader.group_name
            USING ERRCODE = 'RZ001', HINT = 'This leader was deposed: stop acting as leader.';
    END IF;
END
$$;
COMMENT ON FUNCTION rendezvous.assert_leader(text, bigint) IS
    'Fencing: raises RZ001 unless epoch is the live leadership of group_name now. Call it in the same transaction as a leader''s write.';

-- An operator asks the current leader to step down: its elector resigns at its next refresh
-- (and logs why); followers, told at once, claim. Only that term is asked: a later one,
-- even the same candidate's, is not. For rendezvous_admin only.
CREATE FUNCTION rendezvous.request_step_down(group_name text, reason text DEFAULT NULL)
RETURNS TABLE (requested boolean, leader text, epoch bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    current record;
BEGIN
    PERFORM rendezvous._check_text('group_name', request_step_down.group_name, rendezvous._max_id_bytes());
    IF NOT EXISTS (SELECT 1 FROM rendezvous.leaders l WHERE l.group_name = request_step_down.group_name) THEN
        RAISE EXCEPTION 'there is no leader group "%"', request_step_down.group_name USING ERRCODE = 'P0002';
    END IF;
    SELECT * INTO current FROM rendezvous.leader(request_step_down.group_name);
    IF current.leader IS NULL THEN
        RETURN QUERY SELECT false, NULL::text, current.epoch;
        RETURN;
    END IF;
    UPDATE rendezvous.leaders l
       SET step_down_epoch = current.epoch, step_down_reason = left(request_step_down.reason, 500)
     WHERE l.group_name = request_step_down.group_name;
    RETURN QUERY SELECT true, current.leader, current.epoch;
END
$$;
COMMENT ON FUNCTION rendezvous.request_step_down(text, text) IS
    'Admin: asks the group''s current leader to step down; its elector resigns at its next refresh and logs the reason. requested is false when nobody leads. P0002 for an unknown group.';

-- A holder's confirmations, apart from the leaders row: a write on every refresh, which a
-- primary cut off from its synchronous standby cannot acknowledge. Its own table, so that the
-- write never waits for the leader's own fenced writes (they hold the leaders row FOR SHARE).
CREATE TABLE rendezvous.leader_confirmations (
    group_name   text PRIMARY KEY,
    confirmed_at timestamptz NOT NULL,
    -- 0.3.0 (added last): how long the term lasts past each confirmation; NULL: no lease.
    lease        interval
);
COMMENT ON TABLE rendezvous.leader_confirmations IS
    'When each group''s leader last confirmed its term (try_lead by the holding session), and the term''s lease: a holder silent past it plus a second loses its session to the next candidate.';
