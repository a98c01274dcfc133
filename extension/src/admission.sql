-- Idempotent spawn admission: the runs table and spawn_run (see admission.rs).
-- Loaded by extension_sql_file! in admission.rs; every name is schema-qualified. Functions and views
-- reach upgrades from here by themselves (sqlgen); a table or type change after a release also
-- goes into sql/migrations/ (the upgrade test checks they agree).

CREATE TABLE rendezvous.runs (
    run_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    text NOT NULL,
    workflow_ref text NOT NULL,
    input        jsonb NOT NULL DEFAULT '{}',
    dispatch_key text,
    state        text NOT NULL DEFAULT 'pending',
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT runs_state_valid CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    CONSTRAINT runs_tenant_id_valid CHECK (tenant_id <> '' AND octet_length(tenant_id) <= rendezvous._max_id_bytes()),
    CONSTRAINT runs_workflow_ref_valid CHECK (workflow_ref <> '' AND octet_length(workflow_ref) <= 1024),
    CONSTRAINT runs_dispatch_key_valid CHECK (dispatch_key <> '' AND octet_length(dispatch_key) <= 512),
    -- Execution (0.3.0; the upgrade adds these columns last, so a fresh install does too).
    holder         text,
    token          bigint NOT NULL DEFAULT 0,
    attempts       integer NOT NULL DEFAULT 0,
    max_attempts   integer NOT NULL DEFAULT 3,
    retry_backoff  interval NOT NULL DEFAULT '10 seconds',
    runnable_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    lease_until    timestamptz,
    holder_pid     integer,
    holder_started timestamptz,
    output         jsonb,
    last_error     text,
    CONSTRAINT runs_max_attempts_valid CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT runs_retry_backoff_valid CHECK (retry_backoff >= interval '0' AND isfinite(retry_backoff)),
    -- Durable runs (0.4.0, steps.sql; added last by the upgrade too).
    waiting_for    text,
    progress       jsonb,
    parent_run_id  bigint,
    -- The claim's role (0.4.0, holder.sql; added last by the upgrade too).
    holder_role    oid
);
COMMENT ON TABLE rendezvous.runs IS 'Admitted runs; (tenant_id, dispatch_key) is unique where dispatch_key is set.';
COMMENT ON COLUMN rendezvous.runs.runnable_at IS
    'A pending run''s first claimable instant (admission, or the end of a retry backoff), database clock.';
COMMENT ON COLUMN rendezvous.runs.holder IS
    'The host running it (state running), with its token, lease and session (holder_pid, holder_started); the claim ends with that session.';
CREATE UNIQUE INDEX runs_tenant_dispatch_key ON rendezvous.runs (tenant_id, dispatch_key)
    WHERE dispatch_key IS NOT NULL;
CREATE INDEX runs_finished ON rendezvous.runs (updated_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
-- What claim_runs reads: pending runs, oldest first; and running ones, for holders gone.
CREATE INDEX runs_runnable ON rendezvous.runs (runnable_at, run_id) WHERE state = 'pending';
CREATE INDEX runs_running ON rendezvous.runs (lease_until) WHERE state = 'running';
-- The sessions holding running runs, for a recovery that costs the holders (runs.sql).
CREATE INDEX runs_holders ON rendezvous.runs (holder_pid, holder_started) WHERE state = 'running';
-- A run's children (spawn_child), for await_children and cancel_run.
CREATE INDEX runs_parent ON rendezvous.runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
COMMENT ON COLUMN rendezvous.runs.waiting_for IS
    'What a parked run waits for (sleep, signal:<name>, children) until runnable_at; NULL otherwise.';
COMMENT ON COLUMN rendezvous.runs.progress IS 'What the holder last said it is doing (set_run_progress).';
COMMENT ON COLUMN rendezvous.runs.parent_run_id IS 'The run that admitted this one as its child (spawn_child).';
COMMENT ON COLUMN rendezvous.runs.holder_role IS
    'The login role of the session that claimed the run: only sessions of that role act on the claim (NULL: claimed before 0.4.0).';
SELECT pg_catalog.pg_extension_config_dump('rendezvous.runs', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.runs_run_id_seq', '');

-- What spawn_run returns: one value, not a set, so `SELECT rendezvous.spawn_run(…)` is a
-- single function call (the fast path); `SELECT * FROM rendezvous.spawn_run(…)` gives the
-- same three columns.
CREATE TYPE rendezvous.admission AS (run_id bigint, created boolean, same_request boolean);
COMMENT ON TYPE rendezvous.admission IS
    'spawn_run''s result: the run, whether this call created it, and (for a repeat) whether it carried the same workflow_ref and input.';

-- In Rust (admission.rs): the checks, then one kept INSERT … ON CONFLICT DO NOTHING plan, and
-- a kept read of the run it yielded to. Runs as the extension's owner (privileges.sql). A new
-- run is announced on channel rendezvous_runs (runs.sql), so an idle worker starts it at once.
CREATE FUNCTION rendezvous.spawn_run(
    tenant_id     text,
    workflow_ref  text,
    input         jsonb DEFAULT '{}',
    dispatch_key  text DEFAULT NULL,
    max_attempts  integer DEFAULT 3,
    retry_backoff interval DEFAULT '10 seconds'
) RETURNS rendezvous.admission
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'rendezvous_spawn_run';
COMMENT ON FUNCTION rendezvous.spawn_run(text, text, jsonb, text, integer, interval) IS
    'Admits a run; with a dispatch_key, a repeat returns the first run (created = false, same_request tells whether workflow_ref and input matched). A failed attempt is retried after retry_backoff (doubling, at most 1 hour) until max_attempts attempts.';

-- Many runs admitted in one call (a consumer's batch of messages): each element as spawn_run
-- would admit it, with its own input, dispatch_key and retry policy, for one tenant, in one
-- INSERT. Answers every element in input order (ord, from 1): its run, whether this call
-- created it, and for a repeat whether workflow_ref and input matched. A key repeated within
-- the batch is admitted once, at its first element; the later ones answer as repeats. Keyed
-- rows are inserted in key order, so overlapping batches wait for each other instead of
-- deadlocking; run ids are drawn before the insert, so each created row is known by its id.
-- NULL arrays take spawn_run's defaults ('{}', no key, 3 attempts, 10 seconds); NULL elements
-- are refused, except a NULL dispatch_key (no key). At most 10,000 elements a call.
CREATE FUNCTION rendezvous.spawn_runs(
    tenant_id      text,
    workflow_refs  text[],
    inputs         jsonb[] DEFAULT NULL,
    dispatch_keys  text[] DEFAULT NULL,
    max_attempts   integer[] DEFAULT NULL,
    retry_backoffs interval[] DEFAULT NULL
) RETURNS TABLE (ord integer, run_id bigint, created boolean, same_request boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer := coalesce(cardinality(spawn_runs.workflow_refs), 0);
    bad record;
    ids bigint[];
    made bigint[];
    answer_runs bigint[];
    answer_created boolean[];
    answer_same boolean[];
BEGIN
    PERFORM rendezvous._check_text('tenant_id', spawn_runs.tenant_id, rendezvous._max_id_bytes());
    IF spawn_runs.workflow_refs IS NULL THEN
        RAISE EXCEPTION 'workflow_refs must not be NULL' USING ERRCODE = '22004';
    ELSIF n > 10000 THEN
        RAISE EXCEPTION 'at most 10000 runs a call (got %)', n USING ERRCODE = '22023';
    ELSIF coalesce(cardinality(spawn_runs.inputs), n) <> n OR coalesce(cardinality(spawn_runs.dispatch_keys), n) <> n
       OR coalesce(cardinality(spawn_runs.max_attempts), n) <> n OR coalesce(cardinality(spawn_runs.retry_backoffs), n) <> n THEN
        RAISE EXCEPTION 'inputs, dispatch_keys, max_attempts and retry_backoffs must each be NULL or as long as workflow_refs (%)', n
            USING ERRCODE = '22023';
    ELSIF n = 0 THEN
        RETURN;
    END IF;
    -- One pass finds the first bad element; the per-value checks then say what is wrong with it.
    SELECT u.i, u.wf, u.input, u.dk, u.att, u.backoff INTO bad
      FROM unnest(spawn_runs.workflow_refs, spawn_runs.inputs, spawn_runs.dispatch_keys,
                  spawn_runs.max_attempts, spawn_runs.retry_backoffs) WITH ORDINALITY AS u(wf, input, dk, att, backoff, i)
     WHERE u.wf IS NULL OR u.wf = '' OR octet_length(u.wf) > 1024
        OR (spawn_runs.inputs IS NOT NULL AND u.input IS NULL)
        OR u.dk = '' OR octet_length(u.dk) > 512
        OR (spawn_runs.max_attempts IS NOT NULL AND (u.att IS NULL OR u.att NOT BETWEEN 1 AND 1000))
        OR (spawn_runs.retry_backoffs IS NOT NULL AND (u.backoff IS NULL OR u.backoff < interval '0' OR NOT isfinite(u.backoff)))
     ORDER BY u.i LIMIT 1;
    IF FOUND THEN
        PERFORM rendezvous._check_text('workflow_refs[' || bad.i || ']', bad.wf, 1024);
        IF bad.input IS NULL AND spawn_runs.inputs IS NOT NULL THEN
            RAISE EXCEPTION 'inputs[%] must not be NULL (use ''{}'' for no input)', bad.i USING ERRCODE = '22004';
        ELSIF bad.dk IS NOT NULL THEN
            PERFORM rendezvous._check_text('dispatch_keys[' || bad.i || ']', bad.dk, 512);
        END IF;
        IF bad.att IS NULL AND spawn_runs.max_attempts IS NOT NULL THEN
            RAISE EXCEPTION 'max_attempts[%] must not be NULL', bad.i USING ERRCODE = '22004';
        ELSIF bad.att NOT BETWEEN 1 AND 1000 THEN
            RAISE EXCEPTION 'max_attempts[%] must be between 1 and 1000 (got %)', bad.i, bad.att USING ERRCODE = '22023';
        ELSIF bad.backoff IS NULL AND spawn_runs.retry_backoffs IS NOT NULL THEN
            RAISE EXCEPTION 'retry_backoffs[%] must not be NULL', bad.i USING ERRCODE = '22004';
        END IF;
        RAISE EXCEPTION 'retry_backoffs[%] must be finite and not negative (got %)', bad.i, bad.backoff USING ERRCODE = '22023';
    END IF;
    -- Run ids stay above any a timeline before this one handed out (fencing.rs).
    PERFORM rendezvous._floor_run_ids();
    SELECT array_agg(pg_catalog.nextval('rendezvous.runs_run_id_seq')) INTO ids FROM generate_series(1, n);
    WITH batch AS (
        SELECT u.i, u.wf, u.input, u.dk, u.att, u.backoff,
               u.dk IS NULL OR u.i = min(u.i) OVER (PARTITION BY u.dk) AS first
          FROM unnest(spawn_runs.workflow_refs, spawn_runs.inputs, spawn_runs.dispatch_keys,
                      spawn_runs.max_attempts, spawn_runs.retry_backoffs) WITH ORDINALITY AS u(wf, input, dk, att, backoff, i)
    ), inserted AS (
        INSERT INTO rendezvous.runs AS r (run_id, tenant_id, workflow_ref, input, dispatch_key, max_attempts, retry_backoff)
        OVERRIDING SYSTEM VALUE
        SELECT ids[b.i], spawn_runs.tenant_id, b.wf, coalesce(b.input, '{}'), b.dk, coalesce(b.att, 3),
               coalesce(b.backoff, interval '10 seconds')
          FROM batch b WHERE b.first ORDER BY b.dk, b.i
        ON CONFLICT (tenant_id, dispatch_key) WHERE dispatch_key IS NOT NULL DO NOTHING
        RETURNING r.run_id
    )
    SELECT array_agg(i.run_id) INTO made FROM inserted i;
    IF made IS NOT NULL THEN
        PERFORM rendezvous._announce('rendezvous_runs', '');
    END IF;
    -- The repeats read the runs they yielded to (this statement sees what the insert waited for),
    -- each by its key, and only the repeats: a lateral probe, so that no plan joins the batch
    -- to the whole table (statistics taken when it was small make a hash join over every run
    -- look cheap).
    SELECT array_agg(coalesce(m.run_id, e.run_id) ORDER BY u.i), array_agg(m.run_id IS NOT NULL ORDER BY u.i),
           array_agg(m.run_id IS NOT NULL OR (e.workflow_ref = u.wf AND e.input = coalesce(u.input, '{}')) ORDER BY u.i)
      INTO answer_runs, answer_created, answer_same
      FROM unnest(spawn_runs.workflow_refs, spawn_runs.inputs, spawn_runs.dispatch_keys) WITH ORDINALITY AS u(wf, input, dk, i)
      LEFT JOIN unnest(made) AS m(run_id) ON m.run_id = ids[u.i]
      LEFT JOIN LATERAL (SELECT x.run_id, x.workflow_ref, x.input FROM rendezvous.runs x
                          WHERE m.run_id IS NULL AND x.tenant_id = spawn_runs.tenant_id AND x.dispatch_key = u.dk
                         OFFSET 0) e ON true;
    -- A run yielded to can be gone by now only if it was purged in between (finished, past its
    -- retention), or, under REPEATABLE READ, if it was admitted after this transaction began:
    -- refuse the batch, as a serialization failure a caller retries.
    IF array_position(answer_runs, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'could not admit the batch for tenant %: the run of dispatch_keys[%] is not visible (purged concurrently, or admitted after this transaction''s snapshot)',
            spawn_runs.tenant_id, array_position(answer_runs, NULL) USING ERRCODE = '40001';
    END IF;
    RETURN QUERY SELECT u.i::integer, u.run_id, u.created, u.same FROM unnest(answer_runs, answer_created, answer_same) WITH ORDINALITY AS u(run_id, created, same, i);
END
$$;
COMMENT ON FUNCTION rendezvous.spawn_runs(text, text[], jsonb[], text[], integer[], interval[]) IS
    'Admits many runs of one tenant in one call, each as spawn_run would (its own input, dispatch_key and retry policy); one row per element in input order (ord): the run, whether this call created it, and for a repeat whether workflow_ref and input matched. At most 10,000 a call.';

-- Raises the run id sequence to floor_ (a timeline's, fencing.rs) if it is below: after a
-- promotion, so that no run id the old primary acknowledged names another key here. Two
-- sessions raising at once take turns (a transaction-scoped advisory lock, only on this rare
-- path), so one's setval never moves the sequence back under an id the other handed out.
CREATE FUNCTION rendezvous._raise_run_ids(floor_ bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF _raise_run_ids.floor_ > 0 AND (SELECT s.last_value FROM rendezvous.runs_run_id_seq s) < _raise_run_ids.floor_ THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('rendezvous._raise_run_ids'), 0);
        IF (SELECT s.last_value FROM rendezvous.runs_run_id_seq s) < _raise_run_ids.floor_ THEN
            PERFORM pg_catalog.setval('rendezvous.runs_run_id_seq', _raise_run_ids.floor_);
        END IF;
    END IF;
END
$$;

-- Validates a run's retry policy (spawn_run raises through it, with these messages).
CREATE FUNCTION rendezvous._check_retry_policy(max_attempts integer, retry_backoff interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF max_attempts IS NULL OR retry_backoff IS NULL THEN
        RAISE EXCEPTION 'max_attempts and retry_backoff must not be NULL' USING ERRCODE = '22004';
    ELSIF max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 1000 (got %)', max_attempts USING ERRCODE = '22023';
    ELSIF retry_backoff < interval '0' OR NOT isfinite(retry_backoff) THEN
        RAISE EXCEPTION 'retry_backoff must be finite and not negative (got %)', retry_backoff USING ERRCODE = '22023';
    END IF;
END
$$;

CREATE FUNCTION rendezvous.purge_runs(older_than interval) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    purged bigint;
BEGIN
    PERFORM rendezvous._check_older_than(older_than);
    DELETE FROM rendezvous.runs r
     WHERE r.state IN ('succeeded', 'failed', 'cancelled')
       AND r.updated_at < pg_catalog.clock_timestamp() - older_than;
    GET DIAGNOSTICS purged = ROW_COUNT;
    RETURN purged;
END
$$;
COMMENT ON FUNCTION rendezvous.purge_runs(interval) IS
    'Deletes finished runs (succeeded, failed, cancelled) last updated more than older_than ago; a redelivered dispatch_key of a purged run admits a new run.';
