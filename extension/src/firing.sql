-- Exactly-once firing claims: the firings table and its functions (see firing.rs).
-- Loaded by extension_sql_file! in firing.rs; every name is schema-qualified. Functions and views
-- reach upgrades from here by themselves (sqlgen); a table or type change after a release also
-- goes into sql/migrations/ (the upgrade test checks they agree).

-- Which of the firings table's eight partitions holds a firing: its fire time's UTC day,
-- modulo 8 (0.4.0, #42). A partition holds one day at a time while the firings' retention is
-- under seven days: retention empties it whole once that day is past keeping
-- (_empty_firing_days, retention.sql), before the same partition takes the day eight after.
-- Inlined where it is called (a call of a SQL function planned its body every time: ten a
-- firing): so no search_path of its own, every name in it qualified, and only immutable parts.
-- Days counted as dates, exactly (an epoch in seconds divided by 86,400 as a numeric rounded
-- the last microsecond of a day into the next in far years: 294,276, say).
CREATE FUNCTION rendezvous._day_mod_8(fire_at timestamptz) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (((pg_catalog.timezone('UTC', fire_at)::pg_catalog.date OPERATOR(pg_catalog.-) '1970-01-01'::pg_catalog.date)
             OPERATOR(pg_catalog.%) 8 OPERATOR(pg_catalog.+) 8) OPERATOR(pg_catalog.%) 8)::smallint
$$;

-- The calls on one firing (claim_firing, renew_firing, assert_firing, complete_firing,
-- release_firing, fail_firing) keep one plan a statement for the session (plan_cache_mode =
-- force_generic_plan; made again only when what it reads changes). Left to choose, the plan
-- cache found a generic plan, which keeps all eight partitions and prunes them when it runs,
-- dearer than a custom plan, which prunes them when it is made, and planned every statement
-- again on every call: most of what the partitions had added to a firing's server CPU (#42;
-- firings claimed, then renewed, asserted and completed, or released, or failed: 1.17 ms a
-- firing, 0.64-0.68 ms with kept plans and _day_mod_8 inlined, 0.3.0's 0.82 ms;
-- docs/benchmarks.md, "The calls on one firing").

CREATE TABLE rendezvous.firings (
    firing_key   text NOT NULL,
    task_id      text NOT NULL,
    fire_at      timestamptz NOT NULL,
    holder       text,
    token        bigint NOT NULL,
    claimed_at   timestamptz,
    lease_until  timestamptz NOT NULL,
    completed_at timestamptz,
    attempts     integer NOT NULL DEFAULT 1,
    failures     integer NOT NULL DEFAULT 0,
    failed_at    timestamptz,
    last_error   text,
    -- The holder's session (holder.rs): the claim ends with it (0.3.0, added last).
    holder_pid     integer,
    holder_started timestamptz,
    -- The claim's login role (0.4.0, holder.sql; added last): only its sessions act on the claim.
    holder_role    oid,
    -- Its partition (0.4.0, added last): _day_mod_8(fire_at), which every insert writes and the
    -- claims, completions, renewals and releases name beside the key: they read one partition.
    day_mod_8    smallint NOT NULL,
    -- One row a key: the key spells its fire time, so with its day it is as unique as alone (a
    -- key of a partitioned table holds the partition column).
    PRIMARY KEY (firing_key, day_mod_8),
    CONSTRAINT firings_day_mod_8_valid CHECK (day_mod_8 = rendezvous._day_mod_8(fire_at))
) PARTITION BY LIST (day_mod_8);
COMMENT ON TABLE rendezvous.firings IS 'One row per firing: its live claim (holder, token, lease on the database clock) and its completion. In eight partitions by fire time (firings_0 to firings_7: the UTC day modulo 8), each emptied whole by retention.';
COMMENT ON COLUMN rendezvous.firings.holder IS
    'The host holding the claim; NULL while nobody does: a scheduled firing not claimed yet (token 0), or one waiting to be retried after a failure.';
COMMENT ON COLUMN rendezvous.firings.day_mod_8 IS 'The partition: the fire time''s UTC day modulo 8 (rendezvous._day_mod_8).';
CREATE INDEX firings_completed_at ON rendezvous.firings (completed_at) WHERE completed_at IS NOT NULL;
-- Unfinished firings (few: pending, running, waiting for a retry): what due_firings and the
-- overlap policy read.
CREATE INDEX firings_open ON rendezvous.firings (task_id) WHERE completed_at IS NULL AND failed_at IS NULL;
-- A task's history, newest last: the task status view reads it.
CREATE INDEX firings_task ON rendezvous.firings (task_id, fire_at);
-- Unfinished firings in order (0.3.0): due_firings reads the oldest first, next_due_at the
-- next made ahead and the leases of those past their fire time, each in time independent of
-- the backlog. No index names lease_until (0.4.0): every claim changes it, and an indexed
-- column would make every claim write every index.
CREATE INDEX firings_open_fire_at ON rendezvous.firings (fire_at) WHERE completed_at IS NULL AND failed_at IS NULL;
-- Failed firings and firings with errors, per task (0.3.0): the task status view counts and
-- shows them without reading a task's whole history; retention deletes failed ones. Failed for
-- good only (0.4.0): a firing skipped by its task's overlap policy is finished the same way
-- with no failure (schedule.sql), and has an index of its own, for retention. (Failures, not
-- attempts: a claim changes attempts, and a column in an index keeps its update from being HOT.)
CREATE INDEX firings_failed ON rendezvous.firings (task_id, failed_at) WHERE failed_at IS NOT NULL AND failures > 0;
CREATE INDEX firings_skipped ON rendezvous.firings (failed_at) WHERE failed_at IS NOT NULL AND failures = 0;
CREATE INDEX firings_errors ON rendezvous.firings (task_id, fire_at) WHERE failures > 0;
-- The functions that find firings by key (claim_firings, complete_firings, renew_firing, ...)
-- plan with enable_seqscan off: each day's partition starts empty (emptied by retention), and a
-- plan made then with its statistics (a scan of a table of no rows is cheapest) would read the
-- whole partition on every call as the day fills it, until the next ANALYZE.
--
-- The partitions, made here (extension members, their rows dumped by pg_dump like every other
-- table's). Each leaves 60 % of each page free (0.4.0, #42): a firing is made, then claimed,
-- then finished, and a claim touches no indexed column, so its new row version can stay on its
-- page (a HOT update: no index written). Claims come in batches of one transaction, whose old
-- versions cannot be pruned before it ends, and a claimed row is larger than a made one: a page
-- needs room for a claim of each of its rows (at 50 %, a fifth of the claims found none).
-- Pruning gives the room back: the table is about as large as with full pages
-- (docs/benchmarks.md, "What a firing writes").
CREATE TABLE rendezvous.firings_0 PARTITION OF rendezvous.firings FOR VALUES IN (0) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_1 PARTITION OF rendezvous.firings FOR VALUES IN (1) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_2 PARTITION OF rendezvous.firings FOR VALUES IN (2) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_3 PARTITION OF rendezvous.firings FOR VALUES IN (3) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_4 PARTITION OF rendezvous.firings FOR VALUES IN (4) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_5 PARTITION OF rendezvous.firings FOR VALUES IN (5) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_6 PARTITION OF rendezvous.firings FOR VALUES IN (6) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_7 PARTITION OF rendezvous.firings FOR VALUES IN (7) WITH (fillfactor = 40);
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_0', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_1', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_2', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_3', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_4', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_5', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_6', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_7', '');

-- Validates a firing's instant: not NULL, finite, not before 0001-01-01 UTC (the key spells the
-- year without an era: a BC instant would share an AD firing's key).
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

-- The firing key, firing:<task_id>:<fire_at as YYYY-MM-DDTHH:MI:SS.USZ in UTC>: the same instant
-- in any time zone or precision is the same firing. In Rust (firing.rs), like claim_firing and
-- complete_firing below: the hot path of every firing.
CREATE FUNCTION rendezvous.firing_key(task_id text, fire_at timestamptz) RETURNS text
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'rendezvous_firing_key';

-- The two rules every firing claim and completion applies, each written once (#40): the
-- native kept plans (firing.rs), their portable twins and the batch calls all call these,
-- and the planner inlines them into each statement (plain SQL, no SET clause, every name
-- qualified), so they cost what their comparisons cost.
-- A claim may take the firing at `at`: it is not completed, and its lease has run out or
-- its holder's session is gone (holder.sql). Its negation is what answers a loser.
CREATE FUNCTION rendezvous._firing_claimable(completed_at timestamptz, lease_until timestamptz, holder text,
                                             holder_pid integer, holder_started timestamptz, at timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT _firing_claimable.completed_at IS NULL
       AND (_firing_claimable.lease_until OPERATOR(pg_catalog.<=) _firing_claimable.at
            OR (_firing_claimable.holder IS NOT NULL
                AND rendezvous._holder_gone(_firing_claimable.holder_pid, _firing_claimable.holder_started)))
$$;
COMMENT ON FUNCTION rendezvous._firing_claimable(timestamptz, timestamptz, text, integer, timestamptz, timestamptz) IS
    'Whether a claim may take a firing at the given instant: not completed, and its lease over or its holder''s session gone.';

-- A completion with `given` completes the firing: `given` is the current claim's token, the
-- claim was not failed, and this session's login role made it (holder.sql). Renewals and
-- releases act on the same claims, while not completed.
CREATE FUNCTION rendezvous._firing_completable(token bigint, holder text, failed_at timestamptz, holder_role oid,
                                               given bigint)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT _firing_completable.token OPERATOR(pg_catalog.=) _firing_completable.given
       AND _firing_completable.holder IS NOT NULL AND _firing_completable.failed_at IS NULL
       AND rendezvous._is_holder_role(_firing_completable.holder_role)
$$;
COMMENT ON FUNCTION rendezvous._firing_completable(bigint, text, timestamptz, oid, bigint) IS
    'Whether a completion with the given token completes a firing: the current claim''s token, not failed, claimed by this login role.';

-- What claim_firing returns: one value, not a set (`SELECT rendezvous.claim_firing(…)` is one
-- call; `SELECT * FROM` it gives the same five columns).
CREATE TYPE rendezvous.firing_claim AS (claimed boolean, holder text, token bigint, completed boolean, lease_until timestamptz);
COMMENT ON TYPE rendezvous.firing_claim IS
    'claim_firing''s result: whether this call claimed the firing, the live holder and its token, whether the firing completed, and the lease.';

-- One INSERT … ON CONFLICT DO UPDATE … WHERE from a kept plan (firing.rs); its token is made
-- durable before it is acknowledged. Runs as the extension's owner (privileges.sql).
CREATE FUNCTION rendezvous.claim_firing(
    task_id text,
    fire_at timestamptz,
    host_id text,
    lease   interval DEFAULT '30 seconds'
) RETURNS rendezvous.firing_claim
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS 'MODULE_PATHNAME', 'rendezvous_claim_firing';
COMMENT ON FUNCTION rendezvous.claim_firing(text, timestamptz, text, interval) IS
    'Claims a firing for host_id for lease (database clock): claimed with a token, or not, with the live holder, its token, whether it completed, and its lease. Before fire_at by the database clock nothing is claimed: holder and token are NULL and lease_until is fire_at.';

-- Many claims in one call (one transaction, one commit): what a dispatcher uses for a batch
-- of due firings. Same rules as claim_firing, per element; the result is in input order
-- (a firing given twice reports its one claim twice).
-- Never fails for contention, whatever the overlap and order of concurrent batches (#28): it
-- waits only where a wait cannot close a cycle. First the firings nobody has made yet are
-- inserted as this host's, in key order (an insert waits only for another session's insert
-- or update of the same key; inserters go in the same order, and updaters of existing rows
-- hold nothing this call holds). Then free existing firings (unfinished; lease over, or the
-- holder's session gone) are
-- locked without waiting (SKIP LOCKED: one another session holds a lock on is reported as not
-- claimed, with the holder it shows) and taken over with the next token; or, never claimed and
-- skipped by its task's overlap policy, finished as skipped (_skip_overlapped, schedule.sql):
-- reported not claimed, with no holder, never claimable (lease_until infinity).
CREATE FUNCTION rendezvous.claim_firings(
    task_ids text[],
    fire_ats timestamptz[],
    host_id  text,
    lease    interval DEFAULT '30 seconds'
) RETURNS TABLE (ord integer, claimed boolean, holder text, token bigint, completed boolean, lease_until timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
    due_keys text[];
    -- Their partitions (firings.day_mod_8): each statement reads those only.
    due_days smallint[];
    made text[];
    taken text[];
    overlapped text[];
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
    -- Never before it is due by the database clock, whatever the caller's clock says.
    SELECT coalesce(array_agg(DISTINCT rendezvous.firing_key(u.task_id, u.fire_at)), '{}'),
           coalesce(array_agg(DISTINCT rendezvous._day_mod_8(u.fire_at)), '{}') INTO due_keys, due_days
      FROM unnest(claim_firings.task_ids, claim_firings.fire_ats) AS u(task_id, fire_at)
     WHERE u.fire_at <= now_;
    WITH input AS (
        SELECT DISTINCT ON (rendezvous.firing_key(u.task_id, u.fire_at))
               rendezvous.firing_key(u.task_id, u.fire_at) AS fk, u.task_id, u.fire_at
          FROM unnest(claim_firings.task_ids, claim_firings.fire_ats) AS u(task_id, fire_at)
         WHERE u.fire_at <= now_
         ORDER BY 1
    ), inserted AS (
        INSERT INTO rendezvous.firings AS f (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until,
                                             holder_pid, holder_started, holder_role, day_mod_8)
        SELECT i.fk, i.task_id, i.fire_at, claim_firings.host_id, greatest(1, floor_), now_, now_ + claim_firings.lease,
               pg_catalog.pg_backend_pid(), rendezvous._session_started(), rendezvous._session_role(),
               rendezvous._day_mod_8(i.fire_at)
          FROM input i ORDER BY i.fk
        ON CONFLICT (firing_key, day_mod_8) DO NOTHING
        RETURNING f.firing_key
    )
    SELECT coalesce(array_agg(n.firing_key), '{}') INTO made FROM inserted n;
    WITH free AS (
        SELECT f.firing_key,
               -- The overlap policy, for a firing never claimed (schedule.sql): skipped, not claimed.
               f.token = 0 AND rendezvous._firing_overlapped(f.task_id, f.fire_at) AS overlapped
          FROM rendezvous.firings f
         WHERE f.firing_key = ANY (due_keys) AND f.day_mod_8 = ANY (due_days) AND NOT f.firing_key = ANY (made)
           AND rendezvous._firing_claimable(f.completed_at, f.lease_until, f.holder, f.holder_pid, f.holder_started, now_)
         ORDER BY f.firing_key
           FOR UPDATE SKIP LOCKED
    ), updated AS (
        UPDATE rendezvous.firings f
           SET holder = claim_firings.host_id, token = greatest(f.token + 1, floor_), claimed_at = now_,
               lease_until = now_ + claim_firings.lease, attempts = f.attempts + 1,
               holder_pid = pg_catalog.pg_backend_pid(), holder_started = rendezvous._session_started(),
               holder_role = rendezvous._session_role()
          FROM free
         WHERE f.firing_key = free.firing_key AND f.day_mod_8 = ANY (due_days) AND NOT free.overlapped
        RETURNING f.firing_key
    )
    SELECT coalesce((SELECT array_agg(u.firing_key) FROM updated u), '{}'),
           coalesce((SELECT array_agg(fr.firing_key) FROM free fr WHERE fr.overlapped), '{}')
      INTO taken, overlapped;
    IF cardinality(overlapped) > 0 THEN
        PERFORM rendezvous._skip_overlapped(overlapped, now_);
    END IF;
    IF cardinality(made) + cardinality(taken) > 0 THEN
        PERFORM rendezvous._durable_commit();
    END IF;
    -- A new statement, so under READ COMMITTED it sees the rows its INSERT yielded to.
    -- A firing not yet due: not claimed, no holder, and lease_until is when it will be due.
    RETURN QUERY
        -- A loser is told who holds it and until when, not the holder's token (#24).
        SELECT u.ord::integer, coalesce(f.firing_key = ANY (made) OR f.firing_key = ANY (taken), false), f.holder,
               CASE WHEN f.firing_key = ANY (made) OR f.firing_key = ANY (taken) THEN f.token END,
               coalesce(f.completed_at IS NOT NULL, false),
               CASE WHEN u.fire_at > now_ THEN u.fire_at ELSE f.lease_until END
          FROM unnest(claim_firings.task_ids, claim_firings.fire_ats) WITH ORDINALITY AS u(task_id, fire_at, ord)
          LEFT JOIN rendezvous.firings f ON f.firing_key = rendezvous.firing_key(u.task_id, u.fire_at)
                                        AND f.day_mod_8 = rendezvous._day_mod_8(u.fire_at)
         WHERE u.fire_at > now_ OR f.firing_key IS NOT NULL
         ORDER BY u.ord;
END
$$;
COMMENT ON FUNCTION rendezvous.claim_firings(text[], timestamptz[], text, interval) IS
    'claim_firing for many firings in one call; results in input order (ord). A firing not yet due by the database clock is not claimed (holder and token NULL, lease_until = fire_at).';

-- Many completions in one call; per element, true when the token was current. Waits for a
-- row another session holds, never in an order that could close a cycle (#28).
CREATE FUNCTION rendezvous.complete_firings(task_ids text[], fire_ats timestamptz[], tokens bigint[])
RETURNS TABLE (ord integer, completed boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    keys text[];
    locked text[];
    days smallint[];
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
    -- The keys and their partitions as arrays: each row is then found through the key's index,
    -- whatever the statistics of a partition a day is filling say.
    keys := ARRAY(SELECT rendezvous.firing_key(u.t, u.f) FROM unnest(complete_firings.task_ids, complete_firings.fire_ats) AS u(t, f));
    days := ARRAY(SELECT DISTINCT rendezvous._day_mod_8(u.f) FROM unnest(complete_firings.fire_ats) AS u(f));
    -- Rows are locked in key order first: an UPDATE joined to a list takes its rows in the
    -- join's order, and two overlapping calls taking them in different orders could deadlock.
    -- The UPDATE then touches only the rows locked here: its own snapshot also sees a row a
    -- claim inserted since, which it would wait for out of order (the last 40P01 of #39: B
    -- locks b, a claim makes a, C locks a and waits for b, B's UPDATE waits for a). Such a
    -- row's token cannot be the caller's yet: it is reported not completed. Another login role's
    -- claims are not locked at all (holder.sql): they are never the caller's to complete.
    SELECT coalesce(array_agg(l.firing_key), '{}') INTO locked FROM (
        SELECT f.firing_key
          FROM rendezvous.firings f
         WHERE f.firing_key = ANY (keys) AND f.day_mod_8 = ANY (days) AND rendezvous._is_holder_role(f.holder_role)
         ORDER BY f.firing_key
           FOR NO KEY UPDATE) l;
    RETURN QUERY
        WITH done AS (
            UPDATE rendezvous.firings f
               SET completed_at = coalesce(f.completed_at, pg_catalog.clock_timestamp())
              FROM (SELECT rendezvous.firing_key(u.t, u.f) AS fk, u.tok
                      FROM unnest(complete_firings.task_ids, complete_firings.fire_ats, complete_firings.tokens) AS u(t, f, tok)
                     ORDER BY 1) x
             WHERE f.firing_key = x.fk AND f.firing_key = ANY (locked) AND f.day_mod_8 = ANY (days)
               AND rendezvous._firing_completable(f.token, f.holder, f.failed_at, f.holder_role, x.tok)
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

-- One UPDATE from a kept plan (firing.rs); a completion is made durable before it is
-- acknowledged.
CREATE FUNCTION rendezvous.complete_firing(task_id text, fire_at timestamptz, token bigint) RETURNS boolean
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS 'MODULE_PATHNAME', 'rendezvous_complete_firing';
COMMENT ON FUNCTION rendezvous.complete_firing(text, timestamptz, bigint) IS
    'Marks the firing done if token is its current claim (repeating it is harmless); false for a stale token.';

CREATE FUNCTION rendezvous.renew_firing(task_id text, fire_at timestamptz, token bigint, lease interval DEFAULT '30 seconds')
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
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
       SET lease_until = pg_catalog.clock_timestamp() + renew_firing.lease,
           holder_pid = pg_catalog.pg_backend_pid(), holder_started = rendezvous._session_started()
     WHERE f.firing_key = fk AND f.day_mod_8 = rendezvous._day_mod_8(renew_firing.fire_at) AND f.completed_at IS NULL
       AND rendezvous._firing_completable(f.token, f.holder, f.failed_at, f.holder_role, renew_firing.token)
    RETURNING f.lease_until INTO until;
    RETURN until;
END
$$;
COMMENT ON FUNCTION rendezvous.renew_firing(text, timestamptz, bigint, interval) IS
    'Extends a live claim''s lease from now and binds the claim to this session (it ends with it); NULL when token is stale or the firing is done (stop working on it).';

CREATE FUNCTION rendezvous.release_firing(task_id text, fire_at timestamptz, token bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    fk text := rendezvous.firing_key(release_firing.task_id, release_firing.fire_at);
BEGIN
    IF release_firing.token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22004';
    END IF;
    UPDATE rendezvous.firings f SET lease_until = pg_catalog.clock_timestamp()
     WHERE f.firing_key = fk AND f.day_mod_8 = rendezvous._day_mod_8(release_firing.fire_at) AND f.completed_at IS NULL
       AND rendezvous._firing_completable(f.token, f.holder, f.failed_at, f.holder_role, release_firing.token);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION rendezvous.release_firing(text, timestamptz, bigint) IS
    'Gives a claim up early, uncompleted, so another host can take it at once.';

CREATE FUNCTION rendezvous.assert_firing(task_id text, fire_at timestamptz, token bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    fk text := rendezvous.firing_key(assert_firing.task_id, assert_firing.fire_at);
    current_token bigint;
    current_holder text;
    mine boolean;
BEGIN
    IF assert_firing.token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- Another login role's claim is refused before its row is locked (and again after, for a
    -- claim another role took over in between), without its token.
    SELECT rendezvous._is_holder_role(f.holder_role) INTO mine FROM rendezvous.firings f WHERE f.firing_key = fk AND f.day_mod_8 = rendezvous._day_mod_8(assert_firing.fire_at);
    -- FOR SHARE: a takeover (which updates the row) waits for this transaction, so a write
    -- fenced here commits before a new token exists, or fails.
    IF mine IS DISTINCT FROM false THEN
        SELECT f.token, f.holder, rendezvous._is_holder_role(f.holder_role) INTO current_token, current_holder, mine
          FROM rendezvous.firings f WHERE f.firing_key = fk AND f.day_mod_8 = rendezvous._day_mod_8(assert_firing.fire_at) FOR SHARE;
    END IF;
    IF mine = false THEN
        RAISE EXCEPTION 'token % does not hold %: another role claimed it', assert_firing.token, fk
            USING ERRCODE = 'RZ001', HINT = 'Only sessions of the role that claimed a firing act on it.';
    ELSIF current_token IS NULL OR current_token = 0 THEN
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

CREATE FUNCTION rendezvous.purge_firings(older_than interval) RETURNS bigint
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

-- Where many firings stand, without claiming them (a read): a dispatcher's view of firings it
-- will not try first. Per input, in input order.
CREATE FUNCTION rendezvous.firing_states(task_ids text[], fire_ats timestamptz[])
RETURNS TABLE (ord integer, claimed boolean, completed boolean, lease_remaining interval)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
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
               -- Never again (failed for good, or skipped by the overlap policy: its lease
               -- never ends): NULL.
               CASE WHEN f.failed_at IS NOT NULL THEN NULL
                    WHEN f.holder IS NOT NULL AND f.completed_at IS NULL
                         AND rendezvous._holder_gone(f.holder_pid, f.holder_started) THEN interval '0'
                    ELSE greatest(coalesce(f.lease_until, u.fire_at) - pg_catalog.clock_timestamp(), interval '0') END
          FROM unnest(firing_states.task_ids, firing_states.fire_ats) WITH ORDINALITY AS u(task_id, fire_at, i)
          LEFT JOIN rendezvous.firings f ON f.firing_key = rendezvous.firing_key(u.task_id, u.fire_at)
                                        AND f.day_mod_8 = rendezvous._day_mod_8(u.fire_at)
         ORDER BY u.i;
END
$$;
COMMENT ON FUNCTION rendezvous.firing_states(text[], timestamptz[]) IS
    'Per firing, in input order: whether it was ever claimed, whether it completed, and how long until it can be claimed: its lease (none once the holder''s session is gone), or, never claimed, until fire_at (database clock); NULL when never again (failed for good, or skipped by the overlap policy). Claims nothing.';

-- An operator's way out of a stuck claim (a holder hung past reason with a long lease): ends
-- the live lease now, so the next host takes the firing over with a new token, and the stuck
-- holder's token completes, renews and fences nothing from then on. No token needed: for
-- rendezvous_admin only.
CREATE FUNCTION rendezvous.release_firing_claim(task_id text, fire_at timestamptz)
RETURNS TABLE (released boolean, holder text, token bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
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
