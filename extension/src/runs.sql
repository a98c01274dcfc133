-- Runs that run: the lifecycle of an admitted run (see runs.rs). Loaded by extension_sql_file!
-- in runs.rs; every name is schema-qualified. Functions reach upgrades from here by themselves
-- (sqlgen); a table or type change after a release also goes into sql/migrations/.
--
-- Legal transitions only:
--   pending  -> running                       claim_runs (a token, a lease, the claiming session)
--   running  -> succeeded                     complete_run with the current token
--   running  -> pending (retry at a backoff)  fail_run with attempts left
--   running  -> failed                        fail_run on the last attempt
--   running  -> pending (at once)             the holder's session is gone or its lease ran out
--                                             (failed instead when that was the last attempt)
--   pending | running -> cancelled            cancel_run (an admin's)
-- A finished run (succeeded, failed, cancelled) never runs again.

-- What claim_runs returns per run claimed.
CREATE TYPE rendezvous.run_claim AS (run_id bigint, token bigint, tenant_id text, workflow_ref text, input jsonb, attempt integer);
COMMENT ON TYPE rendezvous.run_claim IS
    'A run claimed by claim_runs: its token (for renew_run, complete_run, fail_run and assert_run), what to run, and which attempt this is (1 for the first).';

-- Running runs whose holder is gone (its session ended, or its lease ran out) go back to
-- pending, runnable at once, or fail for good when that was their last attempt. Rows another
-- session holds a lock on are skipped: they are being changed right now. Returns how many
-- runs became runnable. Every claim calls it, so it costs the holders, not the running runs:
-- the distinct holder sessions are read by skipping through runs_holders (one probe each) and
-- checked once each, the earliest lease is one probe of runs_running, and only when a holder
-- is gone or a lease has ended are the running runs walked.
CREATE FUNCTION rendezvous._recover_runs(now_ timestamptz) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    gone_pids integer[];
    gone_started timestamptz[];
    runnable integer;
    parents bigint[];
BEGIN
    -- The backends are read afresh, after the runs below: a holder whose claim this statement
    -- sees had connected before it (the transaction's snapshot of them may be older).
    PERFORM pg_catalog.pg_stat_clear_snapshot();
    WITH RECURSIVE holders AS (
        (SELECT r.holder_pid AS pid, r.holder_started AS started FROM rendezvous.runs r
          WHERE r.state = 'running' AND r.holder_pid IS NOT NULL AND r.holder_started IS NOT NULL
          ORDER BY r.holder_pid, r.holder_started LIMIT 1)
        UNION ALL
        SELECT n.pid, n.started FROM holders h, LATERAL (
            SELECT r.holder_pid AS pid, r.holder_started AS started FROM rendezvous.runs r
             WHERE r.state = 'running' AND r.holder_pid IS NOT NULL AND r.holder_started IS NOT NULL
               AND (r.holder_pid, r.holder_started) > (h.pid, h.started)
             ORDER BY r.holder_pid, r.holder_started LIMIT 1) n
    )
    SELECT array_agg(h.pid), array_agg(h.started) INTO gone_pids, gone_started
      FROM holders h WHERE rendezvous._holder_gone(h.pid, h.started);
    IF gone_pids IS NULL AND NOT EXISTS (SELECT 1 FROM rendezvous.runs r
                                          WHERE r.state = 'running' AND r.lease_until <= now_) THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        SELECT r.run_id FROM rendezvous.runs r
         WHERE r.state = 'running'
           AND (r.lease_until <= now_
                OR (r.holder_pid, r.holder_started) IN (SELECT * FROM unnest(gone_pids, gone_started)))
         ORDER BY r.run_id
           FOR UPDATE SKIP LOCKED
    ), moved AS (
        UPDATE rendezvous.runs r
           SET state = CASE WHEN r.attempts >= r.max_attempts THEN 'failed' ELSE 'pending' END,
               last_error = 'the holder (' || r.holder || ') was lost during attempt ' || r.attempts,
               holder = NULL, lease_until = NULL, holder_pid = NULL, holder_started = NULL,
               runnable_at = now_, updated_at = now_
          FROM gone WHERE r.run_id = gone.run_id
        RETURNING r.state, r.parent_run_id
    )
    SELECT (count(*) FILTER (WHERE m.state = 'pending'))::integer,
           array_agg(DISTINCT m.parent_run_id) FILTER (WHERE m.state = 'failed' AND m.parent_run_id IS NOT NULL)
      INTO runnable, parents FROM moved m;
    IF runnable > 0 THEN
        PERFORM rendezvous._announce('rendezvous_runs', '');
    END IF;
    IF parents IS NOT NULL THEN
        PERFORM rendezvous._wake_parents(parents);
    END IF;
    RETURN runnable;
END
$$;

-- The walk of a claim: the oldest runnable runs of these workflows (all without a list), at
-- most n, their ids and runnable times, read in runs_runnable's order and nothing else. The
-- planner may not scan and sort the table instead: with statistics taken before a burst was
-- admitted or a workflow first used, it expects one such run and judges the scan cheaper, and
-- then every claim reads every run, history included.
CREATE FUNCTION rendezvous._runs_walk(now_ timestamptz, workflow_refs text[], n integer)
RETURNS TABLE (run_ids bigint[], runnable_ats timestamptz[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_sort = off
AS $$
BEGIN
    RETURN QUERY
    SELECT coalesce(array_agg(h.run_id), '{}'), coalesce(array_agg(h.runnable_at), '{}')
      FROM (SELECT h.run_id, h.runnable_at FROM rendezvous.runs h
             WHERE h.state = 'pending' AND h.runnable_at <= _runs_walk.now_
               AND (_runs_walk.workflow_refs IS NULL OR h.workflow_ref = ANY (_runs_walk.workflow_refs))
             ORDER BY h.runnable_at, h.run_id
             LIMIT _runs_walk.n) h;
END
$$;

-- Claims up to max runnable runs for host_id, oldest first, FOR UPDATE SKIP LOCKED (never
-- waits for another claimer). HRW places them: a run's rank-r host over the live set (key
-- 'run:<run_id>') may claim it only grace × r after it became runnable, so each run goes to
-- its rank-0 host at once and hosts do not fight over the head of the queue; a host that is
-- not live ranks last; with no live host, anyone claims at once. Runs whose holder is gone
-- are made runnable first. Tokens never repeat (the same floor as epochs, fencing.rs).
CREATE FUNCTION rendezvous.claim_runs(
    host_id       text,
    max           integer DEFAULT 1,
    lease         interval DEFAULT '30 seconds',
    workflow_refs text[] DEFAULT NULL,
    grace         interval DEFAULT '1 second'
) RETURNS SETOF rendezvous.run_claim
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
    floor_ bigint := rendezvous._fence_floor();
    started timestamptz := rendezvous._session_started();
    hosts text[];
    weights double precision[];
    walk bigint[];
    walk_at timestamptz[];
    picked bigint[];
    claimed integer;
BEGIN
    PERFORM rendezvous._check_host_id(claim_runs.host_id);
    PERFORM rendezvous._check_lease(claim_runs.lease);
    IF claim_runs.max IS NULL OR claim_runs.grace IS NULL THEN
        RAISE EXCEPTION 'max and grace must not be NULL' USING ERRCODE = '22004';
    ELSIF claim_runs.max NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'max must be between 1 and 10000 (got %)', claim_runs.max USING ERRCODE = '22023';
    ELSIF claim_runs.grace < interval '0' OR NOT isfinite(claim_runs.grace) THEN
        RAISE EXCEPTION 'grace must be finite and not negative (got %)', claim_runs.grace USING ERRCODE = '22023';
    ELSIF array_position(claim_runs.workflow_refs, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'workflow_refs must not contain NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rendezvous._recover_runs(now_);
    -- The walk is bounded: at most 4 × max + 1,000 of the oldest runnable runs (their ids and
    -- runnable times read first, by themselves: in one statement the planner may test every
    -- pending run before it applies the bound), so a host that ranks late for the whole backlog
    -- pays for that many, not for the backlog. What it passes over now it may take later: a
    -- run's window opens to a further rank every grace, so the head of the queue reaches every
    -- host. Each run's test stops as soon as more hosts outrank this one than the run's age
    -- allows (_rank_within), instead of ranking the whole live set.
    SELECT w.run_ids, w.runnable_ats INTO walk, walk_at
      FROM rendezvous._runs_walk(now_, claim_runs.workflow_refs, 4 * claim_runs.max + 1000) w;
    -- Nothing runnable (an idle host's look): the live set is not read. Otherwise it is read
    -- once (in any order: the ranking orders hosts itself; both aggregates see the rows in the
    -- same order), and not at all without a grace, where every host may take any run.
    IF cardinality(walk) = 0 THEN
        RETURN;
    ELSIF claim_runs.grace > interval '0' THEN
        SELECT coalesce(array_agg(m.host_id), '{}'), coalesce(array_agg(m.weight), '{}')
          INTO hosts, weights FROM rendezvous.live_members() m;
    ELSE
        hosts := '{}';
        weights := '{}';
    END IF;
    -- The walked runs this host may take now (by rank and the age the walk read), locked in the
    -- walk's order until max are locked (FOR UPDATE SKIP LOCKED: never waiting for a claimer;
    -- the limit stops the walk, and each walked run is probed and locked only when reached).
    -- The rank test reads only the walk's columns, so it runs once per walked run and never on
    -- other rows, and each run is then found by its id and runnable time, one probe per walked
    -- run: a lateral subquery, so that no plan joins the walk to every pending run (with
    -- statistics taken before a burst was admitted, the planner expected one pending run, and
    -- a claim materialized and compared 100,000 of them: 477 ms). One statement, not a cursor
    -- fetched row by row. A run whose runnable time changed since the walk (claimed, failed and
    -- queued again meanwhile) waits for the next claim's walk, which judges it by its new age.
    SELECT coalesce(array_agg(c.run_id ORDER BY c.ord), '{}') INTO picked
      FROM (SELECT t.run_id, w.ord FROM unnest(walk, walk_at) WITH ORDINALITY AS w(run_id, runnable_at, ord)
             CROSS JOIN LATERAL (SELECT r.run_id FROM rendezvous.runs r
                                  WHERE r.run_id = w.run_id AND r.runnable_at = w.runnable_at AND r.state = 'pending'
                                    FOR UPDATE SKIP LOCKED) t
             WHERE cardinality(hosts) = 0 OR claim_runs.grace = interval '0'
                OR w.runnable_at <= now_ - claim_runs.grace * cardinality(hosts)
                OR rendezvous._rank_within('run:' || w.run_id, hosts, weights, claim_runs.host_id,
                       least(floor(extract(epoch FROM now_ - w.runnable_at) / extract(epoch FROM claim_runs.grace)),
                             1e15)::bigint)
             ORDER BY w.ord
             LIMIT claim_runs.max) c;
    RETURN QUERY
        WITH claimed AS (
            UPDATE rendezvous.runs r
               SET state = 'running', holder = claim_runs.host_id, token = greatest(r.token + 1, floor_),
                   attempts = r.attempts + 1, lease_until = now_ + claim_runs.lease,
                   holder_pid = pg_catalog.pg_backend_pid(), holder_started = started, updated_at = now_,
                   waiting_for = NULL, holder_role = rendezvous._session_role()
             WHERE r.run_id = ANY (picked)
            RETURNING r.run_id, r.token, r.tenant_id, r.workflow_ref, r.input, r.attempts
        )
        SELECT c.* FROM claimed c ORDER BY array_position(picked, c.run_id);
    GET DIAGNOSTICS claimed = ROW_COUNT;
    IF claimed > 0 THEN
        PERFORM rendezvous._durable_commit();
    END IF;
END
$$;
COMMENT ON FUNCTION rendezvous.claim_runs(text, integer, interval, text[], interval) IS
    'Claims up to max runnable runs (oldest first, HRW-placed over the live set: others than a run''s rank-0 host wait grace per rank) for lease; the claim ends with this session or the lease, whichever is first.';

-- The checks every call with a run's token makes.
CREATE FUNCTION rendezvous._check_run_token(run_id bigint, token bigint) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF run_id IS NULL OR token IS NULL THEN
        RAISE EXCEPTION 'run_id and token must not be NULL' USING ERRCODE = '22004';
    END IF;
END
$$;

-- Extends a running run's lease from now, and binds the claim to this session (the session
-- that renews is the one the claim ends with). NULL when the token is not the run's current
-- claim: stop working on it.
CREATE FUNCTION rendezvous.renew_run(run_id bigint, token bigint, lease interval DEFAULT '30 seconds')
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    until timestamptz;
BEGIN
    PERFORM rendezvous._check_run_token(renew_run.run_id, renew_run.token);
    PERFORM rendezvous._check_lease(renew_run.lease);
    UPDATE rendezvous.runs r
       SET lease_until = pg_catalog.clock_timestamp() + renew_run.lease,
           holder_pid = pg_catalog.pg_backend_pid(), holder_started = rendezvous._session_started()
     WHERE r.run_id = renew_run.run_id AND r.token = renew_run.token AND r.state = 'running'
       AND rendezvous._is_holder_role(r.holder_role)
    RETURNING r.lease_until INTO until;
    RETURN until;
END
$$;
COMMENT ON FUNCTION rendezvous.renew_run(bigint, bigint, interval) IS
    'Extends a running run''s lease from now and binds its claim to this session; NULL when token is stale or the run is no longer running (stop working on it).';

-- Runs succeeded, in one statement and one commit (what a worker's batch of completions
-- sends): per element, in input order, true when its token was the run's current claim
-- (repeating a completion is harmless), with its output (NULL outputs, or none at all). Rows
-- are locked in run_id order first, so overlapping batches cannot deadlock. Made durable
-- before it is acknowledged.
--
-- Each element's run is found by its primary key (a lateral probe, kept apart by OFFSET 0), never
-- through a partial index on state: a generic plan's guess of how many runs are running or
-- finished can be off by thousands (a burst admitted after the last ANALYZE), and a plan that
-- scanned the running runs once per element took 146 ms for a batch of 496.
CREATE FUNCTION rendezvous.complete_runs(run_ids bigint[], tokens bigint[], outputs jsonb[] DEFAULT NULL)
RETURNS TABLE (ord integer, completed boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
    finished bigint;
    parents bigint[];
    held_ords integer[];
    answer boolean[];
    i integer;
BEGIN
    IF complete_runs.run_ids IS NULL OR complete_runs.tokens IS NULL THEN
        RAISE EXCEPTION 'run_ids and tokens must not be NULL' USING ERRCODE = '22004';
    ELSIF cardinality(complete_runs.run_ids) <> cardinality(complete_runs.tokens)
       OR cardinality(complete_runs.run_ids) <> coalesce(cardinality(complete_runs.outputs), cardinality(complete_runs.run_ids)) THEN
        RAISE EXCEPTION 'run_ids, tokens and outputs must have the same length' USING ERRCODE = '22023';
    ELSIF array_position(complete_runs.run_ids, NULL) IS NOT NULL OR array_position(complete_runs.tokens, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'run_ids and tokens must not contain NULL' USING ERRCODE = '22004';
    END IF;
    -- The claims (run, token) whose token holds their run: those running succeed now; those
    -- already succeeded with it are repeats. Each run is probed once and locked there, in
    -- run_id order (the claims sorted, each probed in turn: two batches never wait for each
    -- other in a cycle), and only when the caller's role holds it with that token (a stale or
    -- another role's completion locks nothing, so it never holds up the run's holder). A claim
    -- given twice is probed once (its first element's output is kept) and answers for both.
    WITH held AS MATERIALIZED (
        SELECT u.run_id, u.token, u.output, r.state
          FROM (SELECT DISTINCT ON (e.run_id, e.token) e.*
                  FROM unnest(complete_runs.run_ids, complete_runs.tokens,
                              coalesce(complete_runs.outputs, array_fill(NULL::jsonb, ARRAY[cardinality(complete_runs.run_ids)])))
                       WITH ORDINALITY AS e(run_id, token, output, ord)
                 ORDER BY e.run_id, e.token, e.ord) u
         CROSS JOIN LATERAL (SELECT x.state FROM rendezvous.runs x
                              WHERE x.run_id = u.run_id AND x.token = u.token AND x.state IN ('running', 'succeeded')
                                AND rendezvous._is_holder_role(x.holder_role)
                                FOR NO KEY UPDATE) r
    ), done AS (
        UPDATE rendezvous.runs r
           SET state = 'succeeded', output = h.output, updated_at = now_, lease_until = NULL,
               holder_pid = NULL, holder_started = NULL
          FROM held h
         WHERE r.run_id = h.run_id AND h.state = 'running'
        RETURNING r.parent_run_id
    )
    SELECT (SELECT count(*) FROM done),
           (SELECT array_agg(DISTINCT d.parent_run_id) FILTER (WHERE d.parent_run_id IS NOT NULL) FROM done d),
           (SELECT coalesce(array_agg(e.ord::integer), '{}')
              FROM unnest(complete_runs.run_ids, complete_runs.tokens) WITH ORDINALITY AS e(run_id, token, ord)
              JOIN held h ON h.run_id = e.run_id AND h.token = e.token)
      INTO finished, parents, held_ords;
    IF finished > 0 THEN
        PERFORM rendezvous._durable_commit();
    END IF;
    IF parents IS NOT NULL THEN
        PERFORM rendezvous._wake_parents(parents);
    END IF;
    answer := array_fill(false, ARRAY[cardinality(complete_runs.run_ids)]);
    FOREACH i IN ARRAY held_ords LOOP
        answer[i] := true;
    END LOOP;
    RETURN QUERY SELECT g.ord, answer[g.ord] FROM generate_series(1, cardinality(complete_runs.run_ids)) AS g(ord);
END
$$;
COMMENT ON FUNCTION rendezvous.complete_runs(bigint[], bigint[], jsonb[]) IS
    'complete_run for many runs in one call and one commit; results in input order (ord).';

-- The run succeeded: true when token was its current claim (repeating it is harmless), made
-- durable before it is acknowledged. Call it in the same transaction as the run's effects
-- (with assert_run first) for effects exactly once. One home for the rule: complete_runs.
CREATE FUNCTION rendezvous.complete_run(run_id bigint, token bigint, output jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_run_token(complete_run.run_id, complete_run.token);
    RETURN (SELECT c.completed FROM rendezvous.complete_runs(ARRAY[complete_run.run_id], ARRAY[complete_run.token],
                                                            ARRAY[complete_run.output]) c);
END
$$;
COMMENT ON FUNCTION rendezvous.complete_run(bigint, bigint, jsonb) IS
    'Marks a running run succeeded, with its output, if token is its current claim (repeating it is harmless); false for a stale token.';

-- A failed attempt: the run is retried after its backoff (retry_backoff × 2^(attempt − 1), at
-- most an hour) while it has attempts left, else it fails for good. Returns the state it left
-- the run in ('pending' or 'failed'), or NULL when token is not its current claim.
CREATE FUNCTION rendezvous.fail_run(run_id bigint, token bigint, error text) RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
    left_in text;
    parent bigint;
BEGIN
    PERFORM rendezvous._check_run_token(fail_run.run_id, fail_run.token);
    UPDATE rendezvous.runs r
       SET state = CASE WHEN r.attempts >= r.max_attempts THEN 'failed' ELSE 'pending' END,
           runnable_at = now_ + least(r.retry_backoff * power(2, least(r.attempts - 1, 20)), interval '1 hour'),
           last_error = left(coalesce(fail_run.error, 'failed'), 2000),
           holder = NULL, lease_until = NULL, holder_pid = NULL, holder_started = NULL, updated_at = now_
     WHERE r.run_id = fail_run.run_id AND r.token = fail_run.token AND r.state = 'running'
       AND rendezvous._is_holder_role(r.holder_role)
    RETURNING r.state, r.parent_run_id INTO left_in, parent;
    IF FOUND THEN
        PERFORM rendezvous._durable_commit();
        IF left_in = 'pending' THEN
            PERFORM rendezvous._announce('rendezvous_runs', '');
        ELSIF parent IS NOT NULL THEN
            PERFORM rendezvous._wake_parents(ARRAY[parent]);
        END IF;
    END IF;
    RETURN left_in;
END
$$;
COMMENT ON FUNCTION rendezvous.fail_run(bigint, bigint, text) IS
    'Records a failed attempt of a running run: pending again after its backoff (doubling, at most 1 hour) while attempts are left, else failed for good. Returns the state it left the run in, or NULL for a stale token.';

-- Gives a running run back, unfinished, so another host claims it at once (a host shutting
-- down with work still running): pending, runnable now, and the attempt is not counted.
-- False when token is not its current claim.
CREATE FUNCTION rendezvous.release_run(run_id bigint, token bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM rendezvous._check_run_token(release_run.run_id, release_run.token);
    UPDATE rendezvous.runs r
       SET state = 'pending', runnable_at = now_, attempts = greatest(r.attempts - 1, 0),
           holder = NULL, lease_until = NULL, holder_pid = NULL, holder_started = NULL, updated_at = now_
     WHERE r.run_id = release_run.run_id AND r.token = release_run.token AND r.state = 'running'
       AND rendezvous._is_holder_role(r.holder_role);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM rendezvous._announce('rendezvous_runs', '');
    RETURN true;
END
$$;
COMMENT ON FUNCTION rendezvous.release_run(bigint, bigint) IS
    'Gives a running run back unfinished (its attempt not counted), so another host claims it at once; false for a stale token.';

-- The RZ001 a stale token gets, given the run's state and token as read (a NULL state: no
-- such run). One home for the messages of assert_run and of every fenced call of a holder.
CREATE FUNCTION rendezvous._refuse_stale_run(run_id bigint, token bigint, state text, current_token bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF state IS NULL THEN
        RAISE EXCEPTION 'run % does not exist', run_id USING ERRCODE = 'RZ001';
    ELSIF current_token <> token THEN
        RAISE EXCEPTION 'token % of run % is stale (the current token is %)', token, run_id, current_token
            USING ERRCODE = 'RZ001', HINT = 'Another host took this run over: stop working on it.';
    ELSIF state <> 'running' THEN
        RAISE EXCEPTION 'run % is % (token % no longer holds it)', run_id, state, token USING ERRCODE = 'RZ001';
    END IF;
END
$$;

-- The RZ001 of a call on a run another login role claimed (holder.sql), before the run's row is
-- locked (no role holds up another's runs) and without its state or token: to that role the
-- run is someone else's. Called again once the row is locked, for a claim another role took
-- over in between.
CREATE FUNCTION rendezvous._refuse_other_role(run_id bigint, token bigint) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM rendezvous.runs r
                WHERE r.run_id = _refuse_other_role.run_id AND NOT rendezvous._is_holder_role(r.holder_role)) THEN
        RAISE EXCEPTION 'token % does not hold run %: another role claimed it', token, run_id
            USING ERRCODE = 'RZ001', HINT = 'Only sessions of the role that claimed a run act on it.';
    END IF;
END
$$;

-- The holder's lock on its run: the row, locked FOR NO KEY UPDATE (checkpoints of one run are
-- made one at a time, and a takeover, cancel or signal waits for this transaction), or RZ001.
CREATE FUNCTION rendezvous._hold_run(run_id bigint, token bigint) RETURNS rendezvous.runs
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r rendezvous.runs%ROWTYPE;
BEGIN
    PERFORM rendezvous._check_run_token(_hold_run.run_id, _hold_run.token);
    PERFORM rendezvous._refuse_other_role(_hold_run.run_id, _hold_run.token);
    SELECT * INTO r FROM rendezvous.runs x WHERE x.run_id = _hold_run.run_id FOR NO KEY UPDATE;
    IF FOUND AND NOT rendezvous._is_holder_role(r.holder_role) THEN
        PERFORM rendezvous._refuse_other_role(_hold_run.run_id, _hold_run.token);
    ELSIF NOT FOUND OR r.token <> _hold_run.token OR r.state <> 'running' THEN
        PERFORM rendezvous._refuse_stale_run(_hold_run.run_id, _hold_run.token, r.state, r.token);
    END IF;
    RETURN r;
END
$$;

-- Fencing inside the caller's transaction, like assert_firing: raises RZ001 unless token is
-- the run's current, running claim. FOR SHARE: a takeover, completion or cancel waits for this
-- transaction, so a write fenced here commits before another claim exists, or fails.
CREATE FUNCTION rendezvous.assert_run(run_id bigint, token bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r rendezvous.runs%ROWTYPE;
BEGIN
    PERFORM rendezvous._check_run_token(assert_run.run_id, assert_run.token);
    PERFORM rendezvous._refuse_other_role(assert_run.run_id, assert_run.token);
    SELECT * INTO r FROM rendezvous.runs x WHERE x.run_id = assert_run.run_id FOR SHARE;
    IF FOUND AND NOT rendezvous._is_holder_role(r.holder_role) THEN
        PERFORM rendezvous._refuse_other_role(assert_run.run_id, assert_run.token);
    ELSIF NOT FOUND OR r.token <> assert_run.token OR r.state <> 'running' THEN
        PERFORM rendezvous._refuse_stale_run(assert_run.run_id, assert_run.token, r.state, r.token);
    END IF;
END
$$;
COMMENT ON FUNCTION rendezvous.assert_run(bigint, bigint) IS
    'Fencing: raises RZ001 unless token is the run''s current claim and the run is running. Call it in the same transaction as the run''s writes.';

-- An admin's cancel: a pending or running run and its children's runs, transitively, are
-- cancelled and never run again (a running holder's completion and fenced writes are refused
-- from now on). Each holder of one that was running is told on channel rendezvous_cancel (an
-- announcement of the run id: announce.rs), so its work stops at once; a parent parked on its children may
-- resume. False when the run does not exist or already finished.
CREATE FUNCTION rendezvous.cancel_run(run_id bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
    cancelled_root boolean;
    parent bigint;
    told bigint[];
    holder_told bigint;
BEGIN
    IF cancel_run.run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- Parents before children (ids grow from parent to child), all at once.
    WITH RECURSIVE tree AS (
        SELECT r.run_id FROM rendezvous.runs r WHERE r.run_id = cancel_run.run_id
        UNION
        SELECT c.run_id FROM rendezvous.runs c JOIN tree t ON c.parent_run_id = t.run_id
    ), locked AS (
        SELECT r.run_id, r.state FROM rendezvous.runs r
         WHERE r.run_id IN (SELECT t.run_id FROM tree t) AND r.state IN ('pending', 'running')
         ORDER BY r.run_id FOR NO KEY UPDATE
    ), cancelled AS (
        UPDATE rendezvous.runs r
           SET state = 'cancelled', holder = NULL, lease_until = NULL, holder_pid = NULL, holder_started = NULL,
               waiting_for = NULL, updated_at = now_
          FROM locked l WHERE r.run_id = l.run_id
        RETURNING r.run_id, l.state AS was, r.parent_run_id
    )
    SELECT coalesce(array_agg(c.run_id ORDER BY c.run_id) FILTER (WHERE c.was = 'running'), '{}'),
           coalesce(bool_or(c.run_id = cancel_run.run_id), false),
           max(c.parent_run_id) FILTER (WHERE c.run_id = cancel_run.run_id)
      INTO told, cancelled_root, parent FROM cancelled c;
    FOREACH holder_told IN ARRAY told LOOP
        PERFORM rendezvous._announce('rendezvous_cancel', holder_told::text);
    END LOOP;
    IF parent IS NOT NULL THEN
        PERFORM rendezvous._wake_parents(ARRAY[parent]);
    END IF;
    RETURN cancelled_root;
END
$$;
COMMENT ON FUNCTION rendezvous.cancel_run(bigint) IS
    'Cancels a pending or running run and its children (they never run again; a holder''s token completes and fences nothing, and the holder is told on channel rendezvous_cancel); false when it does not exist or already finished.';

-- A host starting under host_id ends what an earlier process under that id still holds (a
-- process hung or cut off, whose session lives on): its firings' claims end now, its runs go
-- back to pending (their attempt not counted), so they run again at once. Claims this session
-- holds are kept, and so are claims another login role made (holder.sql). Returns how many
-- claims it ended. Hosts sharing a role trust each other (guarantees.md): any of them may call
-- it for any host id of that role.
CREATE FUNCTION rendezvous.release_host_claims(host_id text) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
    me integer := pg_catalog.pg_backend_pid();
    firings bigint;
    runs bigint;
BEGIN
    PERFORM rendezvous._check_host_id(release_host_claims.host_id);
    UPDATE rendezvous.firings f SET lease_until = now_
     WHERE f.holder = release_host_claims.host_id AND f.completed_at IS NULL AND f.failed_at IS NULL
       AND f.lease_until > now_ AND f.holder_pid IS DISTINCT FROM me AND rendezvous._is_holder_role(f.holder_role);
    GET DIAGNOSTICS firings = ROW_COUNT;
    UPDATE rendezvous.runs r
       SET state = 'pending', runnable_at = now_, attempts = greatest(r.attempts - 1, 0), holder = NULL,
           lease_until = NULL, holder_pid = NULL, holder_started = NULL, updated_at = now_
     WHERE r.holder = release_host_claims.host_id AND r.state = 'running' AND r.holder_pid IS DISTINCT FROM me
       AND rendezvous._is_holder_role(r.holder_role);
    GET DIAGNOSTICS runs = ROW_COUNT;
    IF runs > 0 THEN
        PERFORM rendezvous._announce('rendezvous_runs', '');
    END IF;
    RETURN firings + runs;
END
$$;
COMMENT ON FUNCTION rendezvous.release_host_claims(text) IS
    'Ends the claims host_id holds from other sessions of this login role (an earlier process of this host): firings claimable at once, runs pending again; returns how many.';

-- When the next run becomes runnable that is not runnable now (a retry backoff's end), or
-- NULL: a worker with nothing to claim sleeps until then, or until notified.
CREATE FUNCTION rendezvous.next_runnable_at(workflow_refs text[] DEFAULT NULL) RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT min(x.at) FROM (
        (SELECT r.runnable_at AS at FROM rendezvous.runs r
          WHERE r.state = 'pending' AND (next_runnable_at.workflow_refs IS NULL OR r.workflow_ref = ANY (next_runnable_at.workflow_refs))
          ORDER BY r.runnable_at LIMIT 1)
        UNION ALL
        (SELECT r.lease_until FROM rendezvous.runs r WHERE r.state = 'running' ORDER BY r.lease_until LIMIT 1)
    ) x
$$;
COMMENT ON FUNCTION rendezvous.next_runnable_at(text[]) IS
    'The earliest instant a pending run (of these workflows, or any) becomes runnable, or a running run''s lease ends; NULL when there is none. New runs and runs whose holder is gone are announced on channel rendezvous_runs.';
