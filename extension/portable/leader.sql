-- The portable edition's leader.rs: leader claims on a session-level advisory lock, with
-- fencing epochs. The lock is pg_try_advisory_lock's two-key form: key 1 is the OID of
-- rendezvous.leaders (as the native tag's second field), key 2 the group's lock id, so it
-- shows in pg_locks as objsubid 2 and rendezvous.leader_locks finds it. Unlike the native
-- lock space, any role that can connect can take or block it with SQL (docs/operations.md).

-- pg_locks' objsubid of the two-key advisory locks.
CREATE FUNCTION rendezvous._leader_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT 2 $$;

-- Key 1 of every leader lock: the OID of rendezvous.leaders, as an integer (wrapped). No SET
-- clause, so callers inline it: nothing in it goes by the search path (a qualified name, casts).
CREATE FUNCTION rendezvous._leader_lock_key() RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT ('rendezvous.leaders'::regclass::oid::bigint::bit(32))::integer $$;

-- Whether backend holder_pid holds lock lock_id (from pg_locks).
CREATE FUNCTION rendezvous._leader_lock_held(lock_id integer, holder_pid integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN coalesce(holder_pid IS NOT NULL AND EXISTS (
        SELECT 1 FROM rendezvous.leader_locks k
         WHERE k.lock_id = _leader_lock_held.lock_id AND k.pid = holder_pid AND k.granted), false);
END
$$;

-- The entries the server's shared lock table is sized for: max_locks_per_transaction x
-- (max_connections + background processes + max_prepared_transactions), from the settings (the
-- native edition reads the server's own count of backends).
CREATE FUNCTION rendezvous._lock_table_size() RETURNS bigint
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The autovacuum workers' slots and the special workers (the launcher; from 17 the
    -- slot sync worker too), as each major counts its backends.
    SELECT current_setting('max_locks_per_transaction')::bigint
           * (current_setting('max_connections')::bigint
              + CASE WHEN current_setting('server_version_num')::integer >= 180000
                     THEN current_setting('autovacuum_worker_slots')::bigint + 2
                     WHEN current_setting('server_version_num')::integer >= 170000
                     THEN current_setting('autovacuum_max_workers')::bigint + 2
                     ELSE current_setting('autovacuum_max_workers')::bigint + 1 END
              + current_setting('max_worker_processes')::bigint + current_setting('max_wal_senders')::bigint
              + current_setting('max_prepared_transactions')::bigint)
$$;

-- Whether a session that has just taken a group's lock must give it back: the shared lock
-- table is at 3/4 of its size (leader.rs keep_only_under_guard: past it, the table grows into
-- the spare shared memory a new session needs). Raises 53200 then, the lock given back.
CREATE FUNCTION rendezvous._keep_only_under_guard(lock_id integer) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    in_use bigint;
    entries bigint := rendezvous._lock_table_size();
BEGIN
    SELECT count(*) INTO in_use FROM pg_locks k WHERE NOT k.fastpath AND k.mode <> 'SIReadLock';
    IF in_use * 4 < entries * 3 THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_unlock(rendezvous._leader_lock_key(), _keep_only_under_guard.lock_id);
    RAISE EXCEPTION 'no new leader term while the server''s lock table is this full: % of its % entries are in use, and a new session needs some',
        in_use, entries USING ERRCODE = '53200',
        DETAIL = 'Groups led already keep their terms; a group without a leader gets one when entries are freed.',
        HINT = format('The groups led at once (all sessions of the server together), plus the locks other work holds, must stay under 3/4 of max_locks_per_transaction (%s) x (max_connections + background processes + max_prepared_transactions) (%s): raise max_locks_per_transaction (a restart), or lead fewer groups',
                      current_setting('max_locks_per_transaction'), entries);
END
$$;

-- Records a holder's confirmation (and the term's lease), waiting for synchronous replication
-- like any commit (synchronous_commit raised to on for this transaction).
CREATE FUNCTION rendezvous._confirm_term(group_name text, lease interval) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF current_setting('synchronous_commit') IN ('off', 'local') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    INSERT INTO rendezvous.leader_confirmations AS c (group_name, confirmed_at, lease)
    VALUES (_confirm_term.group_name, clock_timestamp(), _confirm_term.lease)
    ON CONFLICT (group_name) DO UPDATE SET confirmed_at = excluded.confirmed_at, lease = excluded.lease;
END
$$;

-- This session's new term: a new epoch (above the timeline's floor), made durable; 40001 (the
-- lock given back) when the group's row went while this session claimed it.
CREATE FUNCTION rendezvous._record_new_term(group_name text, candidate text, lock_id integer) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    floor_ bigint := rendezvous._fence_floor();
    new_epoch bigint;
BEGIN
    PERFORM rendezvous._durable_commit();
    UPDATE rendezvous.leaders l
       SET epoch = greatest(l.epoch + 1, floor_), leader = _record_new_term.candidate, since = clock_timestamp(),
           pid = pg_backend_pid()
     WHERE l.group_name = _record_new_term.group_name
    RETURNING l.epoch INTO new_epoch;
    IF NOT FOUND THEN
        PERFORM pg_advisory_unlock(rendezvous._leader_lock_key(), _record_new_term.lock_id);
        RAISE EXCEPTION 'leader group "%" was deleted while this session claimed it: try again',
            _record_new_term.group_name USING ERRCODE = '40001';
    END IF;
    RETURN new_epoch;
END
$$;

-- Ends the session of the group's holder when it has not confirmed its term for longer than
-- its lease plus a second (database clock), waiting up to a second for it to go; true when it
-- did. Ending another role's session needs pg_signal_backend (or the same role): without it,
-- a warning, and the group stays with its silent holder until its session ends.
CREATE FUNCTION rendezvous._end_silent_holder(group_name text, lock_id integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    silent integer;
BEGIN
    SELECT l.pid INTO silent FROM rendezvous.leaders l
      JOIN rendezvous.leader_confirmations c ON c.group_name = l.group_name
     WHERE l.group_name = _end_silent_holder.group_name AND l.pid IS NOT NULL AND c.lease IS NOT NULL
       AND greatest(c.confirmed_at, l.since) + c.lease + interval '1 second' < clock_timestamp();
    -- That backend holds the lock, by pg_locks: read only for a holder past its lease (every
    -- follower's claim asks this first, #42).
    IF silent IS NULL OR NOT rendezvous._leader_lock_held(_end_silent_holder.lock_id, silent) THEN
        RETURN false;
    END IF;
    RAISE WARNING 'ending the session of group "%"''s leader (pid %): it has not confirmed its term for longer than its lease plus 1 second',
        _end_silent_holder.group_name, silent;
    BEGIN
        RETURN coalesce(pg_terminate_backend(silent, 1000), false);
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE WARNING 'could not end the session of group "%"''s leader (pid %): %', _end_silent_holder.group_name,
            silent, SQLERRM USING HINT = 'GRANT pg_signal_backend to the role that owns the rendezvous schema.';
        RETURN false;
    END;
END
$$;

-- Clears this session as the group's holder, tells followers, and gives the lock back.
CREATE FUNCTION rendezvous._step_down_now(group_name text, lock_id integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    UPDATE rendezvous.leaders l SET pid = NULL
     WHERE l.group_name = _step_down_now.group_name AND l.pid = pg_backend_pid();
    PERFORM rendezvous._announce('rendezvous_leader', _step_down_now.group_name);
    RETURN pg_advisory_unlock(rendezvous._leader_lock_key(), _step_down_now.lock_id);
END
$$;

CREATE FUNCTION rendezvous.try_lead(
    group_name text,
    candidate  text,
    wait       boolean DEFAULT false,
    lease      interval DEFAULT NULL
) RETURNS TABLE (is_leader boolean, leader text, epoch bigint)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- Positional: the OUT columns leader and epoch share names with the tables' columns.
    group_ text := $1;
    candidate_ text := $2;
    lease_ interval := $4;
    lock_id_ integer;
    key_ integer;
    rec record;
    new_epoch bigint;
BEGIN
    IF $3 THEN
        RAISE EXCEPTION 'try_lead(wait => true) is not supported since 0.3.0: a wait inside the call holds a snapshot and a lock on rendezvous.leaders; LISTEN on rendezvous_leader and call try_lead again when it fires (the client does)'
            USING ERRCODE = '0A000';
    END IF;
    PERFORM rendezvous._check_text('group_name', group_, rendezvous._max_id_bytes());
    PERFORM rendezvous._check_text('candidate', candidate_, rendezvous._max_id_bytes());
    IF lease_ IS NOT NULL THEN
        PERFORM rendezvous._check_lease(lease_);
    END IF;
    IF pg_is_in_recovery() THEN
        RAISE EXCEPTION 'this server is a standby (in recovery): leadership and firing claims need the primary'
            USING ERRCODE = '25006';
    END IF;
    lock_id_ := rendezvous._leader_lock_id(group_);
    key_ := rendezvous._leader_lock_key();
    SELECT l.leader AS who, l.pid AS holder, l.epoch AS term,
           CASE WHEN l.step_down_epoch = l.epoch THEN coalesce(l.step_down_reason, '') END AS step_down
      INTO rec FROM rendezvous.leaders l WHERE l.group_name = group_;
    -- The holder's refresh: its record names this session and pg_locks agrees (a lock given back
    -- with pg_advisory_unlock_all leaves the record behind). Only a holder reads pg_locks here:
    -- a follower's claim does not (its cost grows with every lock of the server, #42).
    IF rec.holder = pg_backend_pid() AND rendezvous._leader_lock_held(lock_id_, pg_backend_pid()) THEN
        IF rec.who IS DISTINCT FROM candidate_ THEN
            RAISE EXCEPTION 'this session already holds the lock of group "%" for candidate "%": leader claims need a dedicated session (a transaction-mode pooler such as pgbouncer shares one session between clients)',
                group_, coalesce(rec.who, '') USING ERRCODE = '55000';
        END IF;
        IF rec.step_down IS NOT NULL THEN
            RAISE WARNING 'stepping down from group "%" (epoch %) at an operator''s request%', group_, rec.term,
                CASE WHEN rec.step_down = '' THEN '' ELSE ': ' || rec.step_down END;
            PERFORM rendezvous._step_down_now(group_, lock_id_);
            RETURN QUERY SELECT false, NULL::text, rec.term;
            RETURN;
        END IF;
        PERFORM rendezvous._confirm_term(group_, lease_);
        RETURN QUERY SELECT true, rec.who, rec.term;
        RETURN;
    ELSIF pg_try_advisory_lock(key_, lock_id_)
          -- A holder silent past its lease loses its session, and with it the lock.
          OR (rendezvous._end_silent_holder(group_, lock_id_) AND pg_try_advisory_lock(key_, lock_id_)) THEN
        -- Taken now; or taken again by this session, which held it under a record rolled back
        -- since (a claim's transaction rolled back), and advisory locks stack: held twice then.
        -- Once is given back; when that was the only hold (taken now), it is taken again, unless
        -- another session took it in that instant (then that one leads).
        PERFORM pg_advisory_unlock(key_, lock_id_);
        IF rendezvous._leader_lock_held(lock_id_, pg_backend_pid()) THEN
            NULL;   -- held before this call: no new entry in the lock table
        ELSIF pg_try_advisory_lock(key_, lock_id_) THEN
            -- Taken now: kept only while the lock table has room.
            PERFORM rendezvous._keep_only_under_guard(lock_id_);
        ELSE
            RETURN QUERY SELECT false, c.leader, coalesce(c.epoch, 0::bigint) FROM rendezvous.leader(group_) c;
            RETURN;
        END IF;
    ELSE
        -- Someone holds the lock: the holder the group's record names while that backend lives
        -- (not a read of pg_locks), else the lock manager's view (a term being recorded this
        -- instant, a holder just gone).
        SELECT l.leader AS who, l.pid AS holder, l.epoch AS term INTO rec FROM rendezvous.leaders l
         WHERE l.group_name = group_;
        IF rec.who IS NOT NULL AND rec.holder IS NOT NULL
           AND EXISTS (SELECT 1 FROM pg_stat_get_activity(rec.holder) a WHERE a.pid = rec.holder) THEN
            RETURN QUERY SELECT false, rec.who, rec.term;
            RETURN;
        END IF;
        RETURN QUERY SELECT false, c.leader, coalesce(c.epoch, 0::bigint) FROM rendezvous.leader(group_) c;
        RETURN;
    END IF;
    new_epoch := rendezvous._record_new_term(group_, candidate_, lock_id_);
    IF lease_ IS NOT NULL THEN
        PERFORM rendezvous._confirm_term(group_, lease_);
    END IF;
    RETURN QUERY SELECT true, candidate_, new_epoch;
END
$$;

CREATE FUNCTION rendezvous.resign(group_name text) RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    id integer;
BEGIN
    PERFORM rendezvous._check_text('group_name', resign.group_name, rendezvous._max_id_bytes());
    SELECT l.lock_id INTO id FROM rendezvous.leaders l WHERE l.group_name = resign.group_name;
    IF id IS NULL OR NOT rendezvous._leader_lock_held(id, pg_backend_pid()) THEN
        RETURN false;
    END IF;
    RETURN rendezvous._step_down_now(resign.group_name, id);
END
$$;

-- The helpers that write run only inside try_lead and resign (as the owner): nobody calls them
-- directly, or a term could be recorded without the lock.
REVOKE EXECUTE ON FUNCTION rendezvous._confirm_term(text, interval), rendezvous._record_new_term(text, text, integer),
    rendezvous._end_silent_holder(text, integer), rendezvous._step_down_now(text, integer) FROM PUBLIC;
