-- pg_rendezvous 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_rendezvous UPDATE TO '0.2.0').
-- Every schema change of 0.2.0, in the order it was made. scripts/test.sh installs 0.1.0 from
-- its frozen script, fills it, runs this, checks the data, and checks that the catalog equals
-- a fresh install of 0.2.0 (pg_test/upgrade/). Frozen once 0.2.0 is released.
\echo Use "ALTER EXTENSION pg_rendezvous UPDATE TO '0.2.0'" to load this file. \quit

-- Refuse databases that are not UTF-8 (keys and host ids are hashed as UTF-8 bytes).
DO $$
BEGIN
    IF pg_catalog.getdatabaseencoding() <> 'UTF8' THEN
        RAISE EXCEPTION 'pg_rendezvous needs a UTF8 database; this one is %', pg_catalog.getdatabaseencoding()
            USING ERRCODE = '0A000',
                  HINT = 'Keys and host ids are hashed as UTF-8 bytes: create the database with ENCODING ''UTF8''.';
    END IF;
END
$$;

-- The id length limit is defined once (the extension's Rust constant); checks and table
-- constraints read it.
CREATE  FUNCTION rendezvous."_max_id_bytes"() RETURNS INT /* i32 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'max_id_bytes_wrapper';

CREATE OR REPLACE FUNCTION rendezvous._check_host_id(host_id text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_text('host_id', host_id, rendezvous._max_id_bytes());
END
$$;

CREATE OR REPLACE FUNCTION rendezvous.spawn_run(
    tenant_id    text,
    workflow_ref text,
    input        jsonb DEFAULT '{}',
    dispatch_key text DEFAULT NULL
) RETURNS TABLE (run_id bigint, created boolean, same_request boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    -- Parameters are referenced as spawn_run.<name>: bare names are the table's columns.
    existing rendezvous.runs%ROWTYPE;
BEGIN
    -- Checks inline (cheap); the helper only runs to raise the error.
    IF spawn_run.tenant_id IS NULL OR spawn_run.tenant_id = '' OR octet_length(spawn_run.tenant_id) > rendezvous._max_id_bytes() THEN
        PERFORM rendezvous._check_text('tenant_id', spawn_run.tenant_id, rendezvous._max_id_bytes());
    END IF;
    IF spawn_run.workflow_ref IS NULL OR spawn_run.workflow_ref = '' OR octet_length(spawn_run.workflow_ref) > 1024 THEN
        PERFORM rendezvous._check_text('workflow_ref', spawn_run.workflow_ref, 1024);
    END IF;
    IF spawn_run.input IS NULL THEN
        RAISE EXCEPTION 'input must not be NULL (use ''{}'' for no input)' USING ERRCODE = '22004';
    END IF;
    IF spawn_run.dispatch_key IS NULL THEN
        -- No key: a new run every call, exactly as without admission control.
        RETURN QUERY
            INSERT INTO rendezvous.runs AS r (tenant_id, workflow_ref, input)
            VALUES (spawn_run.tenant_id, spawn_run.workflow_ref, spawn_run.input)
            RETURNING r.run_id, true, true;
        RETURN;
    END IF;
    IF spawn_run.dispatch_key = '' OR octet_length(spawn_run.dispatch_key) > 512 THEN
        PERFORM rendezvous._check_text('dispatch_key', spawn_run.dispatch_key, 512);
    END IF;
    FOR attempt IN 1..5 LOOP
        RETURN QUERY
            INSERT INTO rendezvous.runs AS r (tenant_id, workflow_ref, input, dispatch_key)
            VALUES (spawn_run.tenant_id, spawn_run.workflow_ref, spawn_run.input, spawn_run.dispatch_key)
            ON CONFLICT (tenant_id, dispatch_key) WHERE dispatch_key IS NOT NULL DO NOTHING
            RETURNING r.run_id, true, true;
        IF FOUND THEN
            RETURN;
        END IF;
        SELECT * INTO existing FROM rendezvous.runs r
         WHERE r.tenant_id = spawn_run.tenant_id AND r.dispatch_key = spawn_run.dispatch_key;
        IF FOUND THEN
            spawn_run.run_id := existing.run_id;
            spawn_run.created := false;
            spawn_run.same_request := existing.workflow_ref = spawn_run.workflow_ref
                                      AND existing.input = spawn_run.input;
            RETURN NEXT;
            RETURN;
        END IF;
        -- The conflicting run was deleted (purged) between the two statements: insert again.
    END LOOP;
    RAISE EXCEPTION 'could not admit run for dispatch_key % of tenant %: it is being purged concurrently',
        spawn_run.dispatch_key, spawn_run.tenant_id
        USING ERRCODE = '40001';
END
$$;

ALTER TABLE rendezvous.hosts DROP CONSTRAINT hosts_host_id_valid,
    ADD CONSTRAINT hosts_host_id_valid CHECK (host_id <> '' AND octet_length(host_id) <= rendezvous._max_id_bytes());
ALTER TABLE rendezvous.leaders DROP CONSTRAINT leaders_group_name_valid,
    ADD CONSTRAINT leaders_group_name_valid CHECK (group_name <> '' AND octet_length(group_name) <= rendezvous._max_id_bytes());
ALTER TABLE rendezvous.runs DROP CONSTRAINT runs_tenant_id_valid,
    ADD CONSTRAINT runs_tenant_id_valid CHECK (tenant_id <> '' AND octet_length(tenant_id) <= rendezvous._max_id_bytes());

-- Token bumps and completions are flushed before they are acknowledged (ForceSyncCommit).
CREATE  FUNCTION rendezvous."_durable_commit"() RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'durable_commit_wrapper';

-- Firing keys refuse BC instants (the key's year has no era).
CREATE OR REPLACE FUNCTION rendezvous.firing_key(task_id text, fire_at timestamptz) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF task_id IS NULL OR task_id = '' OR octet_length(task_id) > rendezvous._max_id_bytes() THEN
        PERFORM rendezvous._check_text('task_id', task_id, rendezvous._max_id_bytes());
    END IF;
    IF fire_at IS NULL THEN
        RAISE EXCEPTION 'fire_at must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT isfinite(fire_at) THEN
        RAISE EXCEPTION 'fire_at must be finite (got %)', fire_at USING ERRCODE = '22023';
    ELSIF fire_at < '0001-01-01 00:00:00+00'::timestamptz THEN
        -- The key spells the year without an era: a BC instant would share an AD firing's key.
        RAISE EXCEPTION 'fire_at must not be before 0001-01-01 00:00:00 UTC (got %)', fire_at USING ERRCODE = '22023';
    END IF;
    RETURN 'firing:' || task_id || ':'
        || to_char(fire_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
END
$$;

-- Claims and completions are durable when acknowledged; nothing is claimed before it is due by the database clock.
CREATE OR REPLACE FUNCTION rendezvous.claim_firing(
    task_id text,
    fire_at timestamptz,
    host_id text,
    lease   interval DEFAULT '5 min'
) RETURNS TABLE (claimed boolean, holder text, token bigint, completed boolean, lease_until timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    -- Parameters are referenced as claim_firing.<name>: bare names are the table's columns.
    fk text := rendezvous.firing_key(claim_firing.task_id, claim_firing.fire_at);
    now_ timestamptz;
BEGIN
    PERFORM rendezvous._check_host_id(claim_firing.host_id);
    IF claim_firing.lease IS NULL OR claim_firing.lease <= interval '0' OR NOT isfinite(claim_firing.lease) THEN
        PERFORM rendezvous._check_lease(claim_firing.lease);
    END IF;
    -- Never before it is due by the database clock, whatever the caller's clock says: not
    -- claimed, nobody holds it, and lease_until says when it can be claimed.
    IF claim_firing.fire_at > pg_catalog.clock_timestamp() THEN
        RETURN QUERY SELECT false, NULL::text, NULL::bigint, false, claim_firing.fire_at;
        RETURN;
    END IF;
    FOR attempt IN 1..5 LOOP
        now_ := pg_catalog.clock_timestamp();
        RETURN QUERY
            INSERT INTO rendezvous.firings AS f
                (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until)
            VALUES (fk, claim_firing.task_id, claim_firing.fire_at, claim_firing.host_id, 1, now_,
                    now_ + claim_firing.lease)
            ON CONFLICT (firing_key) DO UPDATE
               SET holder = excluded.holder, token = f.token + 1, claimed_at = excluded.claimed_at,
                   lease_until = excluded.lease_until, attempts = f.attempts + 1
             WHERE f.completed_at IS NULL AND f.lease_until <= excluded.claimed_at
            RETURNING true, f.holder, f.token, false, f.lease_until;
        IF FOUND THEN
            PERFORM rendezvous._durable_commit();
            RETURN;
        END IF;
        -- Someone holds a live lease, or the firing is done (the row is locked by us now).
        RETURN QUERY
            SELECT false, f.holder, f.token, f.completed_at IS NOT NULL, f.lease_until
              FROM rendezvous.firings f WHERE f.firing_key = fk;
        IF FOUND THEN
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'could not claim %: it is being purged concurrently', fk USING ERRCODE = '40001';
END
$$;

COMMENT ON FUNCTION rendezvous.claim_firing(text, timestamptz, text, interval) IS
    'Claims a firing for host_id for lease (database clock): claimed with a token, or not, with the live holder, its token, whether it completed, and its lease. Before fire_at by the database clock nothing is claimed: holder and token are NULL and lease_until is fire_at.';

CREATE OR REPLACE FUNCTION rendezvous.claim_firings(
    task_ids text[],
    fire_ats timestamptz[],
    host_id  text,
    lease    interval DEFAULT '5 min'
) RETURNS TABLE (ord integer, claimed boolean, holder text, token bigint, completed boolean, lease_until timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
    won text[];
BEGIN
    IF claim_firings.task_ids IS NULL OR claim_firings.fire_ats IS NULL THEN
        RAISE EXCEPTION 'task_ids and fire_ats must not be NULL' USING ERRCODE = '22004';
    ELSIF cardinality(claim_firings.task_ids) <> cardinality(claim_firings.fire_ats) THEN
        RAISE EXCEPTION 'task_ids and fire_ats must have the same length (got % and %)',
            cardinality(claim_firings.task_ids), cardinality(claim_firings.fire_ats) USING ERRCODE = '22023';
    END IF;
    PERFORM rendezvous._check_host_id(claim_firings.host_id);
    PERFORM rendezvous._check_lease(claim_firings.lease);
    WITH input AS (
        SELECT rendezvous.firing_key(u.task_id, u.fire_at) AS fk, u.task_id, u.fire_at
          FROM unnest(claim_firings.task_ids, claim_firings.fire_ats) AS u(task_id, fire_at)
         -- Never before it is due by the database clock, whatever the caller's clock says.
         WHERE u.fire_at <= now_
    ), claimed_now AS (
        INSERT INTO rendezvous.firings AS f (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until)
        SELECT DISTINCT ON (i.fk) i.fk, i.task_id, i.fire_at, claim_firings.host_id, 1, now_, now_ + claim_firings.lease
          FROM input i ORDER BY i.fk
        ON CONFLICT (firing_key) DO UPDATE
           SET holder = excluded.holder, token = f.token + 1, claimed_at = excluded.claimed_at,
               lease_until = excluded.lease_until, attempts = f.attempts + 1
         WHERE f.completed_at IS NULL AND f.lease_until <= excluded.claimed_at
        RETURNING f.firing_key
    )
    SELECT coalesce(array_agg(c.firing_key), '{}') INTO won FROM claimed_now c;
    IF cardinality(won) > 0 THEN
        PERFORM rendezvous._durable_commit();
    END IF;
    -- A new statement, so under READ COMMITTED it sees the rows its INSERT yielded to.
    -- A firing not yet due: not claimed, no holder, and lease_until is when it will be due.
    RETURN QUERY
        SELECT u.ord::integer, coalesce(f.firing_key = ANY (won), false), f.holder, f.token,
               coalesce(f.completed_at IS NOT NULL, false),
               CASE WHEN u.fire_at > now_ THEN u.fire_at ELSE f.lease_until END
          FROM unnest(claim_firings.task_ids, claim_firings.fire_ats) WITH ORDINALITY AS u(task_id, fire_at, ord)
          LEFT JOIN rendezvous.firings f ON f.firing_key = rendezvous.firing_key(u.task_id, u.fire_at)
         WHERE u.fire_at > now_ OR f.firing_key IS NOT NULL
         ORDER BY u.ord;
END
$$;

COMMENT ON FUNCTION rendezvous.claim_firings(text[], timestamptz[], text, interval) IS
    'claim_firing for many firings in one call; results in input order (ord). A firing not yet due by the database clock is not claimed (holder and token NULL, lease_until = fire_at).';

CREATE OR REPLACE FUNCTION rendezvous.complete_firing(task_id text, fire_at timestamptz, token bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    fk text := rendezvous.firing_key(complete_firing.task_id, complete_firing.fire_at);
BEGIN
    IF complete_firing.token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22004';
    END IF;
    UPDATE rendezvous.firings f
       SET completed_at = coalesce(f.completed_at, pg_catalog.clock_timestamp())
     WHERE f.firing_key = fk AND f.token = complete_firing.token;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM rendezvous._durable_commit();
    RETURN true;
END
$$;

-- complete_firings checks its arrays as complete_firing checks its arguments.
CREATE OR REPLACE FUNCTION rendezvous.complete_firings(task_ids text[], fire_ats timestamptz[], tokens bigint[])
RETURNS TABLE (ord integer, completed boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF complete_firings.task_ids IS NULL OR complete_firings.fire_ats IS NULL OR complete_firings.tokens IS NULL THEN
        RAISE EXCEPTION 'task_ids, fire_ats and tokens must not be NULL' USING ERRCODE = '22004';
    ELSIF cardinality(complete_firings.task_ids) <> cardinality(complete_firings.fire_ats)
       OR cardinality(complete_firings.task_ids) <> cardinality(complete_firings.tokens) THEN
        RAISE EXCEPTION 'task_ids, fire_ats and tokens must have the same length (got %, % and %)',
            cardinality(complete_firings.task_ids), cardinality(complete_firings.fire_ats),
            cardinality(complete_firings.tokens) USING ERRCODE = '22023';
    ELSIF array_position(complete_firings.tokens, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'tokens must not contain NULL (element %)', array_position(complete_firings.tokens, NULL)
            USING ERRCODE = '22004';
    END IF;
    PERFORM rendezvous._durable_commit();
    RETURN QUERY
        WITH done AS (
            UPDATE rendezvous.firings f
               SET completed_at = coalesce(f.completed_at, pg_catalog.clock_timestamp())
              FROM (SELECT rendezvous.firing_key(u.t, u.f) AS fk, u.tok
                      FROM unnest(complete_firings.task_ids, complete_firings.fire_ats, complete_firings.tokens) AS u(t, f, tok)
                     ORDER BY 1) x
             WHERE f.firing_key = x.fk AND f.token = x.tok
            RETURNING f.firing_key
        )
        SELECT u.ord::integer, rendezvous.firing_key(u.t, u.f) IN (SELECT d.firing_key FROM done d)
          FROM unnest(complete_firings.task_ids, complete_firings.fire_ats, complete_firings.tokens)
               WITH ORDINALITY AS u(t, f, tok, ord)
         ORDER BY u.ord;
END
$$;

-- Leader locks move to a lock space SQL cannot reach, keyed by this installation's leaders table.
CREATE  FUNCTION rendezvous."_leader_lock_space"() RETURNS INT /* i32 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'leader_lock_space_wrapper';

CREATE VIEW rendezvous.leader_locks AS
    SELECT l.group_name, l.lock_id, k.pid, k.granted, k.waitstart
      FROM pg_catalog.pg_locks k
      JOIN rendezvous.leaders l ON k.objid = l.lock_id::oid
     WHERE k.locktype = 'advisory' AND k.objsubid = rendezvous._leader_lock_space()
       AND k.classid = 'rendezvous.leaders'::regclass::oid
       AND k.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database());
COMMENT ON VIEW rendezvous.leader_locks IS
    'Leader locks in pg_locks: the session (pid) holding or awaiting each group''s lock.';

CREATE OR REPLACE FUNCTION rendezvous._lock_holder(lock_id integer) RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT k.pid FROM rendezvous.leader_locks k WHERE k.lock_id = _lock_holder.lock_id AND k.granted
$$;

-- assert_leader checks the recorded holder's lock itself instead of reading all of pg_locks.
CREATE  FUNCTION rendezvous."_leader_lock_held"(
	"lock_id" INT, /* Option < i32 > */
	"holder_pid" INT /* Option < i32 > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'leader_lock_held_wrapper';

CREATE OR REPLACE FUNCTION rendezvous.assert_leader(group_name text, epoch bigint) RETURNS void
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

-- Untyped array literals work for every ranked form.
CREATE FUNCTION rendezvous.ranked(key text, hosts text) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT rendezvous.ranked(key, hosts::text[]) $$;
COMMENT ON FUNCTION rendezvous.ranked(text, text) IS 'ranked(key, hosts) for an untyped array literal such as ''{a,b}''.';

CREATE FUNCTION rendezvous.ranked(key text, hosts text[], weights text) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT rendezvous.ranked(key, hosts, weights::double precision[]) $$;
COMMENT ON FUNCTION rendezvous.ranked(text, text[], text) IS 'Weighted ranked(key, hosts, weights) for an untyped weights literal such as ''{1,2}''.';

-- The default staleness, defined once; the live-set functions use it.
CREATE FUNCTION rendezvous.default_staleness() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT interval '10 s' $$;
COMMENT ON FUNCTION rendezvous.default_staleness() IS 'The default staleness window of the live host set (10 s).';

CREATE OR REPLACE FUNCTION rendezvous.live_hosts(staleness interval DEFAULT rendezvous.default_staleness()) RETURNS text[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_staleness(staleness);
    RETURN coalesce(
        (SELECT array_agg(h.host_id ORDER BY h.host_id)
           FROM rendezvous.hosts h
          WHERE h.last_seen > pg_catalog.clock_timestamp() - staleness),
        '{}');
END
$$;

CREATE OR REPLACE FUNCTION rendezvous.winner(key text) RETURNS text
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT rendezvous.winner(key, coalesce(array_agg(h.host_id), '{}'), coalesce(array_agg(h.weight), '{}'))
      FROM rendezvous.hosts h
     WHERE h.last_seen > pg_catalog.clock_timestamp() - rendezvous.default_staleness()
$$;

CREATE OR REPLACE FUNCTION rendezvous.ranked(key text, k integer) RETURNS text[]
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT rendezvous.ranked(key, coalesce(array_agg(h.host_id), '{}'), coalesce(array_agg(h.weight), '{}'), k)
      FROM rendezvous.hosts h
     WHERE h.last_seen > pg_catalog.clock_timestamp() - rendezvous.default_staleness()
$$;

COMMENT ON FUNCTION rendezvous.winner(text) IS 'The weighted winner for key among the live hosts (default staleness).';
COMMENT ON FUNCTION rendezvous.ranked(text, integer) IS 'The live hosts in descending weighted score order for key (default staleness).';

-- API for what clients read directly before: the live set with weights, firing states.
CREATE FUNCTION rendezvous.live_members(staleness interval DEFAULT rendezvous.default_staleness())
RETURNS TABLE (host_id text, weight double precision)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_staleness(live_members.staleness);
    RETURN QUERY
        SELECT h.host_id, h.weight FROM rendezvous.hosts h
         WHERE h.last_seen > pg_catalog.clock_timestamp() - live_members.staleness
         ORDER BY h.host_id;
END
$$;
COMMENT ON FUNCTION rendezvous.live_members(interval) IS 'live_hosts with each host''s weight: what a client needs to compute weighted HRW locally.';

CREATE FUNCTION rendezvous.firing_states(task_ids text[], fire_ats timestamptz[])
RETURNS TABLE (ord integer, claimed boolean, completed boolean, lease_remaining interval)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF firing_states.task_ids IS NULL OR firing_states.fire_ats IS NULL THEN
        RAISE EXCEPTION 'task_ids and fire_ats must not be NULL' USING ERRCODE = '22004';
    ELSIF cardinality(firing_states.task_ids) <> cardinality(firing_states.fire_ats) THEN
        RAISE EXCEPTION 'task_ids and fire_ats must have the same length (got % and %)',
            cardinality(firing_states.task_ids), cardinality(firing_states.fire_ats) USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
        SELECT u.i::integer, f.firing_key IS NOT NULL, f.completed_at IS NOT NULL,
               greatest(coalesce(f.lease_until, u.fire_at) - pg_catalog.clock_timestamp(), interval '0')
          FROM unnest(firing_states.task_ids, firing_states.fire_ats) WITH ORDINALITY AS u(task_id, fire_at, i)
          LEFT JOIN rendezvous.firings f ON f.firing_key = rendezvous.firing_key(u.task_id, u.fire_at)
         ORDER BY u.i;
END
$$;
COMMENT ON FUNCTION rendezvous.firing_states(text[], timestamptz[]) IS
    'Per firing, in input order: whether it was ever claimed, whether it completed, and how long until it can be claimed: its lease, or, never claimed, until fire_at (database clock). Claims nothing.';

-- Status views for operators.
CREATE VIEW rendezvous.status_hosts AS
    SELECT h.host_id, h.weight, h.first_seen, h.last_seen,
           h.last_seen > pg_catalog.clock_timestamp() - rendezvous.default_staleness() AS live
      FROM rendezvous.hosts h;
COMMENT ON VIEW rendezvous.status_hosts IS 'Every host that heartbeats, and whether it is live (default staleness, database clock).';

CREATE VIEW rendezvous.status_leaders AS
    SELECT l.group_name, c.leader, l.epoch, c.since, c.pid AS holder_pid,
           c.pid IS NOT NULL AND c.leader IS NULL AS holder_unrecorded
      FROM rendezvous.leaders l
      CROSS JOIN LATERAL rendezvous.leader(l.group_name) c;
COMMENT ON VIEW rendezvous.status_leaders IS
    'Per leader group: who leads (NULL: nobody), the epoch, since when, the lock holder''s pid, and whether a session holds the lock without being the recorded leader (a claim in flight).';

CREATE VIEW rendezvous.status_firings AS
    SELECT f.firing_key, f.task_id, f.fire_at, f.holder, f.token, f.attempts, f.claimed_at, f.lease_until, f.completed_at,
           CASE WHEN f.completed_at IS NOT NULL THEN 'completed'
                WHEN f.lease_until > pg_catalog.clock_timestamp() THEN 'running'
                ELSE 'expired' END AS state
      FROM rendezvous.firings f;
COMMENT ON VIEW rendezvous.status_firings IS
    'Every claimed firing: its holder, token and lease, and whether it completed, is running, or its lease expired uncompleted.';

CREATE VIEW rendezvous.status_runs AS
    SELECT r.run_id, r.tenant_id, r.workflow_ref, r.dispatch_key, r.state, r.created_at, r.updated_at
      FROM rendezvous.runs r;
COMMENT ON VIEW rendezvous.status_runs IS 'Admitted runs, without their input.';

-- Least privilege: roles, SECURITY DEFINER API, grants (the same statements as a fresh install).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'rendezvous_host') THEN
        CREATE ROLE rendezvous_host NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'rendezvous_observer') THEN
        CREATE ROLE rendezvous_observer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'rendezvous_admin') THEN
        CREATE ROLE rendezvous_admin NOLOGIN IN ROLE rendezvous_host, rendezvous_observer;
    END IF;
END
$$;
GRANT USAGE ON SCHEMA rendezvous TO rendezvous_host, rendezvous_observer;

ALTER FUNCTION rendezvous.heartbeat(text, double precision) SECURITY DEFINER;
ALTER FUNCTION rendezvous.leave(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.live_hosts(interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.live_members(interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.winner(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.ranked(text, integer) SECURITY DEFINER;
ALTER FUNCTION rendezvous.spawn_run(text, text, jsonb, text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.set_run_state(bigint, text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.purge_runs(interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.try_lead(text, text, boolean) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION rendezvous.resign(text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION rendezvous.leader(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.assert_leader(text, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.claim_firing(text, timestamptz, text, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.claim_firings(text[], timestamptz[], text, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.complete_firing(text, timestamptz, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.complete_firings(text[], timestamptz[], bigint[]) SECURITY DEFINER;
ALTER FUNCTION rendezvous.renew_firing(text, timestamptz, bigint, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.release_firing(text, timestamptz, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.assert_firing(text, timestamptz, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.firing_states(text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION rendezvous.purge_firings(interval) SECURITY DEFINER;

-- Internal helpers: only the functions above call them (as the owner).
REVOKE EXECUTE ON FUNCTION
    rendezvous._leader_lock_id(text), rendezvous._lock_holder(integer), rendezvous._durable_commit(),
    rendezvous._leader_lock_held(integer, integer)
    FROM PUBLIC;

-- The host API.
REVOKE EXECUTE ON FUNCTION
    rendezvous.heartbeat(text, double precision), rendezvous.leave(text), rendezvous.live_hosts(interval),
    rendezvous.live_members(interval), rendezvous.winner(text), rendezvous.ranked(text, integer),
    rendezvous.spawn_run(text, text, jsonb, text), rendezvous.set_run_state(bigint, text),
    rendezvous.try_lead(text, text, boolean), rendezvous.resign(text), rendezvous.leader(text),
    rendezvous.assert_leader(text, bigint),
    rendezvous.claim_firing(text, timestamptz, text, interval),
    rendezvous.claim_firings(text[], timestamptz[], text, interval),
    rendezvous.complete_firing(text, timestamptz, bigint),
    rendezvous.complete_firings(text[], timestamptz[], bigint[]),
    rendezvous.renew_firing(text, timestamptz, bigint, interval),
    rendezvous.release_firing(text, timestamptz, bigint), rendezvous.assert_firing(text, timestamptz, bigint),
    rendezvous.firing_states(text[], timestamptz[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    rendezvous.heartbeat(text, double precision), rendezvous.leave(text), rendezvous.live_hosts(interval),
    rendezvous.live_members(interval), rendezvous.winner(text), rendezvous.ranked(text, integer),
    rendezvous.spawn_run(text, text, jsonb, text), rendezvous.set_run_state(bigint, text),
    rendezvous.try_lead(text, text, boolean), rendezvous.resign(text), rendezvous.leader(text),
    rendezvous.assert_leader(text, bigint),
    rendezvous.claim_firing(text, timestamptz, text, interval),
    rendezvous.claim_firings(text[], timestamptz[], text, interval),
    rendezvous.complete_firing(text, timestamptz, bigint),
    rendezvous.complete_firings(text[], timestamptz[], bigint[]),
    rendezvous.renew_firing(text, timestamptz, bigint, interval),
    rendezvous.release_firing(text, timestamptz, bigint), rendezvous.assert_firing(text, timestamptz, bigint),
    rendezvous.firing_states(text[], timestamptz[])
    TO rendezvous_host;

-- Observers read the status views (leader() is what status_leaders calls); admins purge.
GRANT EXECUTE ON FUNCTION rendezvous.leader(text) TO rendezvous_observer;
GRANT SELECT ON rendezvous.status_hosts, rendezvous.status_leaders, rendezvous.status_firings,
    rendezvous.status_runs, rendezvous.leader_locks TO rendezvous_observer;
REVOKE EXECUTE ON FUNCTION rendezvous.purge_runs(interval), rendezvous.purge_firings(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous.purge_runs(interval), rendezvous.purge_firings(interval) TO rendezvous_admin;
