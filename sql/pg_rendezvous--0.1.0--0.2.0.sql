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

-- spawn_run is a C function returning one value of rendezvous.admission, no longer a set
-- (the fast path is `SELECT rendezvous.spawn_run(…)`; `SELECT * FROM` it gives the same three
-- columns). A new return type means DROP and CREATE; its grants are made again below.
DROP FUNCTION rendezvous.spawn_run(text, text, jsonb, text);
CREATE TYPE rendezvous.admission AS (run_id bigint, created boolean, same_request boolean);
COMMENT ON TYPE rendezvous.admission IS
    'spawn_run''s result: the run, whether this call created it, and (for a repeat) whether it carried the same workflow_ref and input.';
CREATE FUNCTION rendezvous.spawn_run(
    tenant_id    text,
    workflow_ref text,
    input        jsonb DEFAULT '{}',
    dispatch_key text DEFAULT NULL
) RETURNS rendezvous.admission
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'rendezvous_spawn_run';
COMMENT ON FUNCTION rendezvous.spawn_run(text, text, jsonb, text) IS
    'Admits a run; with a dispatch_key, a repeat returns the first run (created = false, same_request tells whether workflow_ref and input matched).';

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

-- Firing keys refuse BC instants (the key's year has no era): the checks of fire_at are
-- _check_fire_at, which raises their errors. firing_key, claim_firing and complete_firing are
-- C functions (firing.rs), each running one statement from a plan kept per connection.
CREATE FUNCTION rendezvous._check_fire_at(fire_at timestamptz) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF fire_at IS NULL THEN
        RAISE EXCEPTION 'fire_at must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT isfinite(fire_at) THEN
        RAISE EXCEPTION 'fire_at must be finite (got %)', fire_at USING ERRCODE = '22023';
    ELSIF fire_at < '0001-01-01 00:00:00+00'::timestamptz THEN
        RAISE EXCEPTION 'fire_at must not be before 0001-01-01 00:00:00 UTC (got %)', fire_at USING ERRCODE = '22023';
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION rendezvous.firing_key(task_id text, fire_at timestamptz) RETURNS text
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'rendezvous_firing_key';

-- Claims and completions are durable when acknowledged; nothing is claimed before it is due by the database clock.
-- claim_firing returns one rendezvous.firing_claim value, no longer a set: a new return type
-- means DROP and CREATE; its grants are made again below.
DROP FUNCTION rendezvous.claim_firing(text, timestamptz, text, interval);
CREATE TYPE rendezvous.firing_claim AS (claimed boolean, holder text, token bigint, completed boolean, lease_until timestamptz);
COMMENT ON TYPE rendezvous.firing_claim IS
    'claim_firing''s result: whether this call claimed the firing, the live holder and its token, whether the firing completed, and the lease.';
CREATE FUNCTION rendezvous.claim_firing(
    task_id text,
    fire_at timestamptz,
    host_id text,
    lease   interval DEFAULT '5 min'
) RETURNS rendezvous.firing_claim
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'rendezvous_claim_firing';
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
    -- Tokens stay above any a timeline before this one handed out (fencing.rs).
    floor_ bigint := rendezvous._fence_floor();
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
        SELECT DISTINCT ON (i.fk) i.fk, i.task_id, i.fire_at, claim_firings.host_id, greatest(1, floor_), now_,
               now_ + claim_firings.lease
          FROM input i ORDER BY i.fk
        ON CONFLICT (firing_key) DO UPDATE
           SET holder = excluded.holder, token = greatest(f.token + 1, excluded.token), claimed_at = excluded.claimed_at,
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

COMMENT ON FUNCTION rendezvous.claim_firings(text[], timestamptz[], text, interval) IS
    'claim_firing for many firings in one call; results in input order (ord). A firing not yet due by the database clock is not claimed (holder and token NULL, lease_until = fire_at).';

CREATE OR REPLACE FUNCTION rendezvous.complete_firing(task_id text, fire_at timestamptz, token bigint) RETURNS boolean
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'rendezvous_complete_firing';
COMMENT ON FUNCTION rendezvous.complete_firing(text, timestamptz, bigint) IS
    'Marks the firing done if token is its current claim (repeating it is harmless); false for a stale token.';

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
             WHERE f.firing_key = x.fk AND f.token = x.tok AND f.holder IS NOT NULL AND f.failed_at IS NULL
            RETURNING f.firing_key
        )
        SELECT u.ord::integer, rendezvous.firing_key(u.t, u.f) IN (SELECT d.firing_key FROM done d)
          FROM unnest(complete_firings.task_ids, complete_firings.fire_ats, complete_firings.tokens)
               WITH ORDINALITY AS u(t, f, tok, ord)
         ORDER BY u.ord;
END
$$;
COMMENT ON FUNCTION rendezvous.complete_firings(text[], timestamptz[], bigint[]) IS
    'complete_firing for many firings in one call; results in input order (ord).';

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
        SELECT u.i::integer, coalesce(f.token > 0, false), f.completed_at IS NOT NULL,
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


-- The scheduler. Firings can exist before anyone claims them (holder NULL, token 0) and record
-- failed attempts; a stale or failed holder's token completes, renews and releases nothing.
ALTER TABLE rendezvous.firings ALTER COLUMN holder DROP NOT NULL,
    ALTER COLUMN claimed_at DROP NOT NULL,
    ADD COLUMN failures integer NOT NULL DEFAULT 0,
    ADD COLUMN failed_at timestamptz,
    ADD COLUMN last_error text;

COMMENT ON COLUMN rendezvous.firings.holder IS
    'The host holding the claim; NULL while nobody does: a scheduled firing not claimed yet (token 0), or one waiting to be retried after a failure.';
-- Unfinished firings (few: pending, running, waiting for a retry): what due_firings and the
-- overlap policy read.
CREATE INDEX firings_open ON rendezvous.firings (task_id) WHERE completed_at IS NULL AND failed_at IS NULL;
-- A task's history, newest last: the task status view reads it.
CREATE INDEX firings_task ON rendezvous.firings (task_id, fire_at);

CREATE OR REPLACE FUNCTION rendezvous.renew_firing(task_id text, fire_at timestamptz, token bigint, lease interval DEFAULT '5 min')
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    fk text := rendezvous.firing_key(renew_firing.task_id, renew_firing.fire_at);
    until timestamptz;
BEGIN
    IF renew_firing.token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rendezvous._check_lease(renew_firing.lease);
    UPDATE rendezvous.firings f
       SET lease_until = pg_catalog.clock_timestamp() + renew_firing.lease
     WHERE f.firing_key = fk AND f.token = renew_firing.token AND f.holder IS NOT NULL AND f.completed_at IS NULL
       AND f.failed_at IS NULL
    RETURNING f.lease_until INTO until;
    RETURN until;
END
$$;
COMMENT ON FUNCTION rendezvous.renew_firing(text, timestamptz, bigint, interval) IS
    'Extends a live claim''s lease from now; NULL when token is stale or the firing is done (stop working on it).';

CREATE OR REPLACE FUNCTION rendezvous.release_firing(task_id text, fire_at timestamptz, token bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    fk text := rendezvous.firing_key(release_firing.task_id, release_firing.fire_at);
BEGIN
    IF release_firing.token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22004';
    END IF;
    UPDATE rendezvous.firings f SET lease_until = pg_catalog.clock_timestamp()
     WHERE f.firing_key = fk AND f.token = release_firing.token AND f.holder IS NOT NULL AND f.completed_at IS NULL
       AND f.failed_at IS NULL;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION rendezvous.release_firing(text, timestamptz, bigint) IS
    'Gives a claim up early, uncompleted, so another host can take it at once.';

CREATE OR REPLACE FUNCTION rendezvous.assert_firing(task_id text, fire_at timestamptz, token bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    fk text := rendezvous.firing_key(assert_firing.task_id, assert_firing.fire_at);
    current_token bigint;
    current_holder text;
BEGIN
    IF assert_firing.token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- FOR SHARE: a takeover (which updates the row) waits for this transaction, so a write
    -- fenced here commits before a new token exists, or fails.
    SELECT f.token, f.holder INTO current_token, current_holder FROM rendezvous.firings f WHERE f.firing_key = fk FOR SHARE;
    IF NOT FOUND OR current_token = 0 THEN
        RAISE EXCEPTION '% was never claimed', fk USING ERRCODE = 'RZ001';
    ELSIF current_holder IS NULL AND current_token = assert_firing.token THEN
        RAISE EXCEPTION 'token % of % no longer holds it: the attempt failed and the firing waits to be retried', assert_firing.token, fk
            USING ERRCODE = 'RZ001';
    ELSIF current_token <> assert_firing.token THEN
        RAISE EXCEPTION 'token % of % is stale (the current token is %)', assert_firing.token, fk, current_token
            USING ERRCODE = 'RZ001', HINT = 'Another host took this firing over after the lease expired: stop working on it.';
    END IF;
END
$$;
COMMENT ON FUNCTION rendezvous.assert_firing(text, timestamptz, bigint) IS
    'Fencing: raises RZ001 unless token is the firing''s current claim. Call it in the same transaction as the firing''s writes.';

CREATE OR REPLACE FUNCTION rendezvous.purge_firings(older_than interval) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    purged bigint;
BEGIN
    PERFORM rendezvous._check_older_than(older_than);
    DELETE FROM rendezvous.firings f
     WHERE f.completed_at < pg_catalog.clock_timestamp() - older_than
        OR f.failed_at < pg_catalog.clock_timestamp() - older_than;
    GET DIAGNOSTICS purged = ROW_COUNT;
    RETURN purged;
END
$$;
COMMENT ON FUNCTION rendezvous.purge_firings(interval) IS
    'Deletes firings completed (or failed for good) longer than older_than ago; a purged firing could be claimed again, so keep them longer than any host could still see it as due.';

-- CREATE OR REPLACE resets SECURITY DEFINER: set it again, as privileges.sql does.
ALTER FUNCTION rendezvous.renew_firing(text, timestamptz, bigint, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.release_firing(text, timestamptz, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.assert_firing(text, timestamptz, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.purge_firings(interval) SECURITY DEFINER;

-- Schedules are evaluated by the extension (croner, jiff).

CREATE  FUNCTION rendezvous."fire_times"(
	"schedule" TEXT, /* Option < & str > */
	"time_zone" TEXT, /* Option < & str > */
	"after" timestamp with time zone, /* Option < TimestampWithTimeZone > */
	"until" timestamp with time zone /* Option < TimestampWithTimeZone > */
) RETURNS SETOF timestamp with time zone /* TimestampWithTimeZone */
IMMUTABLE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'fire_times_wrapper';

CREATE  FUNCTION rendezvous."_check_schedule"(
	"schedule" TEXT, /* Option < & str > */
	"time_zone" TEXT, /* Option < & str > */
	"after" timestamp with time zone /* Option < TimestampWithTimeZone > */
) RETURNS timestamp with time zone /* TimestampWithTimeZone */
IMMUTABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'check_schedule_wrapper';

CREATE  FUNCTION rendezvous."_next_fire_time"(
	"schedule" TEXT, /* Option < & str > */
	"time_zone" TEXT, /* Option < & str > */
	"after" timestamp with time zone /* Option < TimestampWithTimeZone > */
) RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
IMMUTABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'next_fire_time_wrapper';

CREATE  FUNCTION rendezvous."_plan_firings"(
	"schedule" TEXT, /* & str */
	"time_zone" TEXT, /* & str */
	"catch_up" TEXT, /* & str */
	"window" interval, /* Interval */
	"from" timestamp with time zone, /* TimestampWithTimeZone */
	"now" timestamp with time zone /* TimestampWithTimeZone */
) RETURNS TABLE (
	"run_at" timestamp with time zone[],  /* Vec < TimestampWithTimeZone > */
	"skipped" bigint,  /* i64 */
	"next_fire_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'plan_firings_wrapper';

CREATE  FUNCTION rendezvous."every"(
	"interval" interval /* Option < Interval > */
) RETURNS TEXT /* String */
IMMUTABLE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'every_wrapper';

-- Admin: release a stuck firing claim.
CREATE FUNCTION rendezvous.release_firing_claim(task_id text, fire_at timestamptz)
RETURNS TABLE (released boolean, holder text, token bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    fk text := rendezvous.firing_key(release_firing_claim.task_id, release_firing_claim.fire_at);
    f rendezvous.firings%ROWTYPE;
BEGIN
    SELECT * INTO f FROM rendezvous.firings fr WHERE fr.firing_key = fk FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'there is no firing %', fk USING ERRCODE = 'P0002';
    END IF;
    IF f.holder IS NULL OR f.completed_at IS NOT NULL OR f.failed_at IS NOT NULL
       OR f.lease_until <= pg_catalog.clock_timestamp() THEN
        RETURN QUERY SELECT false, f.holder, f.token;
        RETURN;
    END IF;
    -- A new token for whoever claims next makes the stuck holder's stale: bump it here, as a
    -- takeover would, and leave the firing claimable at once.
    UPDATE rendezvous.firings fr
       SET holder = NULL, token = greatest(fr.token + 1, rendezvous._fence_floor()),
           lease_until = pg_catalog.clock_timestamp()
     WHERE fr.firing_key = fk;
    PERFORM rendezvous._durable_commit();
    RETURN QUERY SELECT true, f.holder, f.token;
END
$$;
COMMENT ON FUNCTION rendezvous.release_firing_claim(text, timestamptz) IS
    'Admin: ends a firing''s live claim now (its holder''s token goes stale at once) so another host takes it over; released is false when nobody held it live. P0002 when there is no such firing.';

-- Admin: ask a leader to step down.
ALTER TABLE rendezvous.leaders ADD COLUMN step_down_epoch bigint, ADD COLUMN step_down_reason text;
COMMENT ON COLUMN rendezvous.leaders.step_down_epoch IS
    'The term an operator asked to end (request_step_down): its leader resigns at its next refresh.';

-- A holder's confirmations, apart from the leaders row: a write on every refresh, which a
-- primary cut off from its synchronous standby cannot acknowledge. Its own table, so that the
-- write never waits for the leader's own fenced writes (they hold the leaders row FOR SHARE).
CREATE TABLE rendezvous.leader_confirmations (
    group_name   text PRIMARY KEY,
    confirmed_at timestamptz NOT NULL
);
COMMENT ON TABLE rendezvous.leader_confirmations IS
    'When each group''s leader last confirmed its term (try_lead by the holding session).';

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

-- Epochs and tokens stay above any a timeline before the current one handed out.

CREATE  FUNCTION rendezvous."_fence_floor"() RETURNS bigint /* i64 */
STRICT VOLATILE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'fence_floor_wrapper';

CREATE TABLE rendezvous.tasks (
    task_id          text PRIMARY KEY,
    schedule         text NOT NULL,
    time_zone        text NOT NULL,
    paused           boolean NOT NULL DEFAULT false,
    overlap          text NOT NULL,
    catch_up         text NOT NULL,
    catch_up_window  interval NOT NULL,
    lease            interval NOT NULL,
    max_attempts     integer NOT NULL,
    retry_backoff    interval NOT NULL,
    next_fire_at     timestamptz,
    skipped          bigint NOT NULL DEFAULT 0,
    last_skipped_at  timestamptz,
    last_skip_reason text,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT tasks_task_id_valid CHECK (task_id <> '' AND octet_length(task_id) <= rendezvous._max_id_bytes()),
    CONSTRAINT tasks_overlap_valid CHECK (overlap IN ('allow', 'skip')),
    CONSTRAINT tasks_catch_up_valid CHECK (catch_up IN ('latest', 'all', 'skip')),
    CONSTRAINT tasks_catch_up_window_valid CHECK (catch_up_window > interval '0' AND isfinite(catch_up_window)),
    CONSTRAINT tasks_lease_valid CHECK (lease > interval '0' AND isfinite(lease)),
    CONSTRAINT tasks_max_attempts_valid CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT tasks_retry_backoff_valid CHECK (retry_backoff >= interval '0' AND isfinite(retry_backoff)),
    CONSTRAINT tasks_last_skip_reason_valid CHECK (last_skip_reason IN ('catch_up', 'overlap'))
);
COMMENT ON TABLE rendezvous.tasks IS
    'Recurring tasks: schedule, time zone and policies; next_fire_at is the first fire time not yet made a firing (NULL: never again).';
COMMENT ON COLUMN rendezvous.tasks.skipped IS
    'Fire times that never became firings (catch-up or overlap policy), counted up to 100,000 a pass.';
-- What due_firings reads each poll: only tasks whose time has come, never all of them.
CREATE INDEX tasks_due ON rendezvous.tasks (next_fire_at) WHERE NOT paused;
SELECT pg_catalog.pg_extension_config_dump('rendezvous.tasks', '');

-- Validates the policy arguments of schedule_task (22004 / 22023).
CREATE FUNCTION rendezvous._check_task_policy(
    overlap text, catch_up text, catch_up_window interval, lease interval, max_attempts integer,
    retry_backoff interval
) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF overlap IS NULL OR catch_up IS NULL OR catch_up_window IS NULL OR max_attempts IS NULL
       OR retry_backoff IS NULL THEN
        RAISE EXCEPTION 'overlap, catch_up, catch_up_window, max_attempts and retry_backoff must not be NULL'
            USING ERRCODE = '22004';
    ELSIF overlap NOT IN ('allow', 'skip') THEN
        RAISE EXCEPTION 'overlap must be allow or skip (got "%")', overlap USING ERRCODE = '22023';
    ELSIF catch_up NOT IN ('latest', 'all', 'skip') THEN
        RAISE EXCEPTION 'catch_up must be latest, all or skip (got "%")', catch_up USING ERRCODE = '22023';
    ELSIF catch_up_window <= interval '0' OR NOT isfinite(catch_up_window) THEN
        RAISE EXCEPTION 'catch_up_window must be a positive, finite interval (got %)', catch_up_window
            USING ERRCODE = '22023';
    ELSIF max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 1000 (got %)', max_attempts USING ERRCODE = '22023';
    ELSIF retry_backoff < interval '0' OR NOT isfinite(retry_backoff) THEN
        RAISE EXCEPTION 'retry_backoff must be a finite interval, zero or more (got %)', retry_backoff
            USING ERRCODE = '22023';
    END IF;
    PERFORM rendezvous._check_lease(lease);
END
$$;

-- Creates or updates a task; returns its next fire time. Idempotent: the same call again
-- changes nothing. A changed schedule or time zone starts over from the next fire time after
-- now; changed policies apply from the next firing. A paused task stays paused.
CREATE FUNCTION rendezvous.schedule_task(
    task_id         text,
    schedule        text,
    time_zone       text DEFAULT 'UTC',
    overlap         text DEFAULT 'skip',
    catch_up        text DEFAULT 'latest',
    catch_up_window interval DEFAULT '1 hour',
    lease           interval DEFAULT '5 min',
    max_attempts    integer DEFAULT 3,
    retry_backoff   interval DEFAULT '10 seconds'
) RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
    next_ timestamptz;
    sched text := btrim(schedule_task.schedule);
    t rendezvous.tasks%ROWTYPE;
BEGIN
    PERFORM rendezvous._check_text('task_id', schedule_task.task_id, rendezvous._max_id_bytes());
    PERFORM rendezvous._check_task_policy(schedule_task.overlap, schedule_task.catch_up,
        schedule_task.catch_up_window, schedule_task.lease, schedule_task.max_attempts, schedule_task.retry_backoff);
    next_ := rendezvous._check_schedule(sched, schedule_task.time_zone, now_);
    SELECT * INTO t FROM rendezvous.tasks tk WHERE tk.task_id = schedule_task.task_id FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO rendezvous.tasks AS tk (task_id, schedule, time_zone, overlap, catch_up, catch_up_window, lease,
                                            max_attempts, retry_backoff, next_fire_at)
        VALUES (schedule_task.task_id, sched, schedule_task.time_zone, schedule_task.overlap, schedule_task.catch_up,
                schedule_task.catch_up_window, schedule_task.lease, schedule_task.max_attempts,
                schedule_task.retry_backoff, next_)
        ON CONFLICT (task_id) DO NOTHING;
        IF FOUND THEN
            RETURN next_;
        END IF;
        -- Created concurrently by the same call from another host: update it as below.
        SELECT * INTO t FROM rendezvous.tasks tk WHERE tk.task_id = schedule_task.task_id FOR UPDATE;
    END IF;
    IF (t.schedule, t.time_zone, t.overlap, t.catch_up, t.catch_up_window, t.lease, t.max_attempts, t.retry_backoff)
       IS NOT DISTINCT FROM (sched, schedule_task.time_zone, schedule_task.overlap, schedule_task.catch_up,
                             schedule_task.catch_up_window, schedule_task.lease, schedule_task.max_attempts,
                             schedule_task.retry_backoff) THEN
        RETURN t.next_fire_at;
    END IF;
    UPDATE rendezvous.tasks tk
       SET schedule = sched, time_zone = schedule_task.time_zone, overlap = schedule_task.overlap,
           catch_up = schedule_task.catch_up, catch_up_window = schedule_task.catch_up_window,
           lease = schedule_task.lease, max_attempts = schedule_task.max_attempts,
           retry_backoff = schedule_task.retry_backoff, updated_at = now_,
           next_fire_at = CASE WHEN (t.schedule, t.time_zone) = (sched, schedule_task.time_zone) THEN tk.next_fire_at
                               ELSE next_ END
     WHERE tk.task_id = schedule_task.task_id
    RETURNING tk.next_fire_at INTO next_;
    RETURN next_;
END
$$;
COMMENT ON FUNCTION rendezvous.schedule_task(text, text, text, text, text, interval, interval, integer, interval) IS
    'Creates or updates a recurring task (idempotent) and returns its next fire time. schedule: 5- or 6-field cron, a macro (@hourly, @daily, …) or every <n> seconds|minutes|hours|days; time_zone: an IANA name.';

-- Removes a task; true when it existed. Its pending (never claimed) firings go with it;
-- claimed ones finish or expire as usual and stay in the history.
CREATE FUNCTION rendezvous.unschedule_task(task_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_text('task_id', unschedule_task.task_id, rendezvous._max_id_bytes());
    DELETE FROM rendezvous.tasks t WHERE t.task_id = unschedule_task.task_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM rendezvous.firings f
     WHERE f.task_id = unschedule_task.task_id AND f.holder IS NULL AND f.completed_at IS NULL;
    RETURN true;
END
$$;
COMMENT ON FUNCTION rendezvous.unschedule_task(text) IS
    'Removes a task and its pending firings; true when it existed. Firings already claimed finish as usual.';

-- Pausing stops new firings; a firing already claimed finishes. Idempotent.
CREATE FUNCTION rendezvous.pause_task(task_id text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_text('task_id', pause_task.task_id, rendezvous._max_id_bytes());
    UPDATE rendezvous.tasks t SET paused = true, updated_at = pg_catalog.clock_timestamp()
     WHERE t.task_id = pause_task.task_id AND NOT t.paused;
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM rendezvous.tasks t WHERE t.task_id = pause_task.task_id) THEN
        RAISE EXCEPTION 'there is no task "%"', pause_task.task_id USING ERRCODE = 'P0002';
    END IF;
END
$$;
COMMENT ON FUNCTION rendezvous.pause_task(text) IS
    'Stops new firings of a task (idempotent); firings already claimed finish. P0002 when there is no such task.';

-- Resuming starts from the next fire time after now: what fell due while paused never runs.
CREATE FUNCTION rendezvous.resume_task(task_id text) RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t rendezvous.tasks%ROWTYPE;
    now_ timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM rendezvous._check_text('task_id', resume_task.task_id, rendezvous._max_id_bytes());
    SELECT * INTO t FROM rendezvous.tasks tk WHERE tk.task_id = resume_task.task_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'there is no task "%"', resume_task.task_id USING ERRCODE = 'P0002';
    ELSIF NOT t.paused THEN
        RETURN t.next_fire_at;
    END IF;
    UPDATE rendezvous.tasks tk
       SET paused = false, updated_at = now_,
           next_fire_at = rendezvous._next_fire_time(tk.schedule, tk.time_zone, now_)
     WHERE tk.task_id = resume_task.task_id
    RETURNING tk.next_fire_at INTO t.next_fire_at;
    RETURN t.next_fire_at;
END
$$;
COMMENT ON FUNCTION rendezvous.resume_task(text) IS
    'Resumes a paused task from its next fire time after now (idempotent) and returns it; P0002 when there is no such task.';

-- One row per call: without this the planner assumes 1,000 and, over a pass of many tasks,
-- costs the statement high enough to JIT-compile it (a quarter of a second, every pass).
ALTER FUNCTION rendezvous._plan_firings(text, text, text, interval, timestamptz, timestamptz) ROWS 1;

-- Turns the fire times that have come into firings, for at most max_tasks tasks (those
-- another session is doing are skipped, not waited for). Per task: the catch-up policy picks
-- which due fire times run (_plan_firings); with overlap = 'skip', none does while an earlier
-- firing of the task is unfinished, and one pass makes at most one. One statement for all the
-- tasks of a pass.
CREATE FUNCTION rendezvous._make_due_firings(now_ timestamptz, max_tasks integer) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    WITH due AS (
        SELECT t.task_id, t.schedule, t.time_zone, t.overlap, t.catch_up, t.catch_up_window, t.next_fire_at
          FROM rendezvous.tasks t
         WHERE t.next_fire_at <= now_ AND NOT t.paused
         ORDER BY t.next_fire_at
         LIMIT max_tasks
           FOR UPDATE SKIP LOCKED
    ), planned AS (
        SELECT d.task_id, d.overlap, p.run_at, p.skipped, p.next_fire_at,
               EXISTS (SELECT 1 FROM rendezvous.firings f
                        WHERE f.task_id = d.task_id AND f.completed_at IS NULL AND f.failed_at IS NULL) AS busy
          FROM due d
          CROSS JOIN LATERAL rendezvous._plan_firings(d.schedule, d.time_zone, d.catch_up, d.catch_up_window,
                                                      d.next_fire_at, now_) p
    ), decided AS (
        SELECT pl.task_id, pl.next_fire_at, pl.skipped AS catch_up_skipped,
               CASE WHEN pl.overlap = 'allow' OR cardinality(pl.run_at) = 0 THEN pl.run_at
                    WHEN pl.busy THEN '{}'::timestamptz[]
                    ELSE pl.run_at[1:1] END AS run_at,
               CASE WHEN pl.overlap = 'allow' OR cardinality(pl.run_at) = 0 THEN 0
                    WHEN pl.busy THEN cardinality(pl.run_at)
                    ELSE cardinality(pl.run_at) - 1 END AS overlap_skipped
          FROM planned pl
    ), made AS (
        INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until, attempts)
        SELECT rendezvous.firing_key(d.task_id, r.at), d.task_id, r.at, NULL, 0, NULL, r.at, 0
          FROM decided d CROSS JOIN LATERAL unnest(d.run_at) AS r(at)
        ON CONFLICT (firing_key) DO NOTHING
    )
    UPDATE rendezvous.tasks tk
       SET next_fire_at = d.next_fire_at,
           skipped = tk.skipped + d.catch_up_skipped + d.overlap_skipped,
           last_skipped_at = CASE WHEN d.catch_up_skipped + d.overlap_skipped > 0 THEN now_ ELSE tk.last_skipped_at END,
           last_skip_reason = CASE WHEN d.overlap_skipped > 0 THEN 'overlap'
                                   WHEN d.catch_up_skipped > 0 THEN 'catch_up'
                                   ELSE tk.last_skip_reason END
      FROM decided d
     WHERE tk.task_id = d.task_id;
END
$$;

-- The firings that can be claimed now, by the database clock: due, unfinished, not held
-- under a live lease, not waiting out a retry backoff, of tasks that are not paused. Makes the
-- firings that have come due first. Oldest first, at most max_firings.
CREATE FUNCTION rendezvous.due_firings(max_firings integer DEFAULT 1000)
RETURNS TABLE (task_id text, fire_at timestamptz, claimable_since timestamptz, attempts integer, failures integer,
               lease interval)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF due_firings.max_firings IS NULL THEN
        RAISE EXCEPTION 'max_firings must not be NULL' USING ERRCODE = '22004';
    ELSIF due_firings.max_firings NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'max_firings must be between 1 and 100000 (got %)', due_firings.max_firings
            USING ERRCODE = '22023';
    END IF;
    -- Every task that came due, not just max_firings of them: one poller makes a burst of
    -- firings at once (the others skip the tasks it holds), so every host then sees the same
    -- due firings and claims its own.
    PERFORM rendezvous._make_due_firings(now_, 10000);
    RETURN QUERY
        SELECT f.task_id, f.fire_at, f.lease_until, f.attempts, f.failures, t.lease
          FROM rendezvous.firings f
          JOIN rendezvous.tasks t ON t.task_id = f.task_id
         WHERE f.completed_at IS NULL AND f.failed_at IS NULL AND f.lease_until <= now_ AND NOT t.paused
         ORDER BY f.fire_at
         LIMIT due_firings.max_firings;
END
$$;
COMMENT ON FUNCTION rendezvous.due_firings(integer) IS
    'The firings of scheduled tasks that can be claimed now by the database clock (due, unfinished, no live lease, no retry pending, task not paused), oldest first, after the catch-up and overlap policies: with when each became claimable (its fire time, or the end of the last lease or retry backoff), the attempts and failures so far, and its task''s lease.';

-- When something may next become claimable that is not claimable now: the earliest next fire
-- time of an active task (it may be past: firings still to be made), or the end of a live
-- lease or retry backoff. A scheduler sleeps until then (firings already claimable are in
-- due_firings, and their ranks tell each host when to try).
CREATE FUNCTION rendezvous.next_due_at() RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT min(x.at) FROM (
        (SELECT t.next_fire_at AS at FROM rendezvous.tasks t
          WHERE NOT t.paused AND t.next_fire_at IS NOT NULL ORDER BY t.next_fire_at LIMIT 1)
        UNION ALL
        (SELECT f.lease_until FROM rendezvous.firings f JOIN rendezvous.tasks t ON t.task_id = f.task_id
          WHERE f.completed_at IS NULL AND f.failed_at IS NULL AND NOT t.paused
            AND f.lease_until > pg_catalog.clock_timestamp())
    ) x
$$;
COMMENT ON FUNCTION rendezvous.next_due_at() IS
    'The earliest instant something scheduled may become claimable that is not claimable now: a task''s next fire time (past while its firings are being made), or the end of a live lease or retry backoff; NULL when nothing is scheduled.';

-- A failed attempt: retried after the task's backoff (doubling each time, at most an hour)
-- until max_attempts failures, then failed for good (failed_at set, never claimed again). A
-- firing of no scheduled task fails for good at once. recorded is false for a stale token or a
-- finished firing; retry_at is NULL when the failure is final.
CREATE FUNCTION rendezvous.fail_firing(task_id text, fire_at timestamptz, token bigint, error text DEFAULT NULL)
RETURNS TABLE (recorded boolean, retry_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    fk text := rendezvous.firing_key(fail_firing.task_id, fail_firing.fire_at);
    max_ integer := 1;
    backoff interval := interval '0';
    now_ timestamptz := pg_catalog.clock_timestamp();
    f rendezvous.firings%ROWTYPE;
BEGIN
    IF fail_firing.token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT t.max_attempts, t.retry_backoff INTO max_, backoff
      FROM rendezvous.tasks t WHERE t.task_id = fail_firing.task_id;
    IF NOT FOUND THEN
        max_ := 1;
    END IF;
    UPDATE rendezvous.firings fr
       SET failures = fr.failures + 1,
           holder = NULL,
           last_error = left(fail_firing.error, 2000),
           failed_at = CASE WHEN fr.failures + 1 >= max_ THEN now_ END,
           -- A failed firing's lease never ends: no claim takes it again.
           lease_until = CASE WHEN fr.failures + 1 >= max_ THEN 'infinity'::timestamptz
                              ELSE now_ + least(backoff * power(2, least(fr.failures, 20)), interval '1 hour') END
     WHERE fr.firing_key = fk AND fr.token = fail_firing.token AND fr.holder IS NOT NULL
       AND fr.completed_at IS NULL AND fr.failed_at IS NULL
    RETURNING fr.* INTO f;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, NULL::timestamptz;
        RETURN;
    END IF;
    PERFORM rendezvous._durable_commit();
    RETURN QUERY SELECT true, CASE WHEN f.failed_at IS NULL THEN f.lease_until END;
END
$$;
COMMENT ON FUNCTION rendezvous.fail_firing(text, timestamptz, bigint, text) IS
    'Records a failed attempt of a claimed firing: retried after the task''s backoff (doubling, at most 1 hour) until max_attempts failures, then failed for good. recorded is false for a stale token or a finished firing; retry_at is NULL when the failure is final.';

-- Status views show pending, retrying and failed firings, and tasks.
CREATE OR REPLACE VIEW rendezvous.status_firings AS
    SELECT f.firing_key, f.task_id, f.fire_at, f.holder, f.token, f.attempts, f.claimed_at, f.lease_until, f.completed_at,
           CASE WHEN f.completed_at IS NOT NULL THEN 'completed'
                WHEN f.failed_at IS NOT NULL THEN 'failed'
                WHEN f.holder IS NULL AND f.failures > 0 THEN 'retrying'
                WHEN f.holder IS NULL THEN 'pending'
                WHEN f.lease_until > pg_catalog.clock_timestamp() THEN 'running'
                ELSE 'expired' END AS state,
           f.failures, f.failed_at, f.last_error
      FROM rendezvous.firings f;
COMMENT ON VIEW rendezvous.status_firings IS
    'Every firing: its holder, token and lease, and its state: pending (due, not claimed yet), running, expired (lease over, uncompleted), retrying (an attempt failed; claimable again at lease_until), failed (for good), completed.';

CREATE VIEW rendezvous.status_tasks AS
    SELECT t.task_id, t.schedule, t.time_zone, t.paused, t.overlap, t.catch_up, t.next_fire_at,
           done.fire_at AS last_completed_fire_at, done.completed_at AS last_completed_at,
           coalesce(open.running, 0) AS running, open.holders, coalesce(open.pending, 0) AS pending,
           coalesce(open.retrying, 0) AS retrying, coalesce(bad.failed, 0) AS failed,
           err.fire_at AS last_error_fire_at, err.last_error,
           t.skipped, t.last_skipped_at, t.last_skip_reason
      FROM rendezvous.tasks t
      LEFT JOIN LATERAL (
          SELECT f.fire_at, f.completed_at FROM rendezvous.firings f
           WHERE f.task_id = t.task_id AND f.completed_at IS NOT NULL
           ORDER BY f.fire_at DESC LIMIT 1) done ON true
      LEFT JOIN LATERAL (
          SELECT count(*) FILTER (WHERE f.holder IS NOT NULL AND f.lease_until > pg_catalog.clock_timestamp()) AS running,
                 array_agg(DISTINCT f.holder)
                     FILTER (WHERE f.holder IS NOT NULL AND f.lease_until > pg_catalog.clock_timestamp()) AS holders,
                 count(*) FILTER (WHERE f.holder IS NULL AND f.failures = 0) AS pending,
                 count(*) FILTER (WHERE f.holder IS NULL AND f.failures > 0) AS retrying
            FROM rendezvous.firings f
           WHERE f.task_id = t.task_id AND f.completed_at IS NULL AND f.failed_at IS NULL) open ON true
      LEFT JOIN LATERAL (
          SELECT count(*) AS failed FROM rendezvous.firings f
           WHERE f.task_id = t.task_id AND f.failed_at IS NOT NULL) bad ON true
      LEFT JOIN LATERAL (
          SELECT f.fire_at, f.last_error FROM rendezvous.firings f
           WHERE f.task_id = t.task_id AND f.failures > 0
           ORDER BY f.fire_at DESC LIMIT 1) err ON true;
COMMENT ON VIEW rendezvous.status_tasks IS
    'Per scheduled task: its schedule and next fire time, its last completed firing, firings running (and their holders), pending and waiting to be retried, failed for good, the latest error, and fire times skipped by policy.';

-- Whether failover can lose what was acknowledged: standbys streaming from this server, how
-- many of them are synchronous, and a warning when some are but none is (docs/guarantees.md).
CREATE FUNCTION rendezvous.replication_status()
RETURNS TABLE (in_recovery boolean, standbys integer, synchronous integer, synchronous_standby_names text,
               synchronous_commit text, warning text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.in_recovery, r.standbys, r.synchronous, r.names, r.commit_mode,
           CASE WHEN r.in_recovery THEN
                    'this server is a standby: leadership and firing claims need the primary'
                WHEN r.standbys > 0 AND r.synchronous = 0 THEN
                    'standbys exist but none is synchronous: after a failover to one, acknowledged runs and completions can be lost'
                WHEN r.synchronous > 0 AND r.commit_mode IN ('off', 'local') THEN
                    'synchronous_commit is ' || r.commit_mode || ': commits do not wait for the synchronous standby'
           END
      FROM (SELECT pg_catalog.pg_is_in_recovery() AS in_recovery,
                   (SELECT count(*)::integer FROM pg_catalog.pg_stat_replication) AS standbys,
                   (SELECT count(*)::integer FROM pg_catalog.pg_stat_replication
                     WHERE sync_state IN ('sync', 'quorum')) AS synchronous,
                   pg_catalog.current_setting('synchronous_standby_names') AS names,
                   pg_catalog.current_setting('synchronous_commit') AS commit_mode) r
$$;
COMMENT ON FUNCTION rendezvous.replication_status() IS
    'Standbys streaming from this server, how many are synchronous, the synchronous settings, and a warning when a failover could lose acknowledged runs and completions (standbys, none synchronous) or this server is a standby.';

-- The scheduler (0.2.0). Hosts register their tasks' schedules at startup and run them;
-- pausing, resuming and removing a task is an admin's; observers read status_tasks.
ALTER FUNCTION rendezvous.schedule_task(text, text, text, text, text, interval, interval, integer, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.unschedule_task(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.pause_task(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.resume_task(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.due_firings(integer) SECURITY DEFINER;
ALTER FUNCTION rendezvous.next_due_at() SECURITY DEFINER;
ALTER FUNCTION rendezvous.fail_firing(text, timestamptz, bigint, text) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous._make_due_firings(timestamptz, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
    rendezvous.schedule_task(text, text, text, text, text, interval, interval, integer, interval),
    rendezvous.unschedule_task(text), rendezvous.pause_task(text), rendezvous.resume_task(text),
    rendezvous.due_firings(integer), rendezvous.next_due_at(), rendezvous.fail_firing(text, timestamptz, bigint, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    rendezvous.schedule_task(text, text, text, text, text, interval, interval, integer, interval),
    rendezvous.due_firings(integer), rendezvous.next_due_at(), rendezvous.fail_firing(text, timestamptz, bigint, text)
    TO rendezvous_host;
GRANT EXECUTE ON FUNCTION rendezvous.unschedule_task(text), rendezvous.pause_task(text), rendezvous.resume_task(text)
    TO rendezvous_admin;
GRANT SELECT ON rendezvous.status_tasks TO rendezvous_observer;

-- Replication status (0.2.0): pg_stat_replication shows its standbys' states only to
-- privileged roles, so it runs as the owner; observers and hosts may read it.
ALTER FUNCTION rendezvous.replication_status() SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous.replication_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous.replication_status() TO rendezvous_observer, rendezvous_host;

-- Admin actions (0.2.0): release a stuck firing claim.
ALTER FUNCTION rendezvous.release_firing_claim(text, timestamptz) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous.release_firing_claim(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous.release_firing_claim(text, timestamptz) TO rendezvous_admin;
ALTER FUNCTION rendezvous.request_step_down(text, text) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous.request_step_down(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous.request_step_down(text, text) TO rendezvous_admin;
