-- Durable runs (see steps.rs): a run's finished steps, its timers, signals and children.
-- Loaded by extension_sql_file! in steps.rs; every name is schema-qualified. Functions reach
-- upgrades from here by themselves (sqlgen); tables and types also go into sql/migrations/.
--
-- A holder checkpoints each finished step (record_step, fenced by its token, in the step's
-- own transaction when the step writes to this database). A later attempt, on this host or
-- another, reads them back (run_steps) and skips what is recorded. A run can also give its
-- slot back until something happens: an instant (sleep_run), a signal (await_signal), its
-- children's ends (await_children). Meanwhile it is pending with runnable_at at its deadline
-- and waiting_for saying why; what it waits for makes it runnable at once. Parking counts no
-- attempt. The protocol in plain SQL is in docs/sql.md ("Durable runs").

-- A run's finished steps, in the order recorded (position 1, 2, …). Deleted with the run.
CREATE TABLE rendezvous.steps (
    run_id      bigint NOT NULL REFERENCES rendezvous.runs ON DELETE CASCADE,
    position    integer NOT NULL,
    step        text NOT NULL,
    output      jsonb,
    attempt     integer NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (run_id, position),
    CONSTRAINT steps_step_unique UNIQUE (run_id, step),
    CONSTRAINT steps_step_valid CHECK (step <> '' AND octet_length(step) <= 512)
);
COMMENT ON TABLE rendezvous.steps IS
    'Finished steps of runs (record_step), in the order recorded; the first record of a step wins.';
SELECT pg_catalog.pg_extension_config_dump('rendezvous.steps', '');

-- Signals sent to runs (signal_run): one per run and name, kept until the run is deleted, so a
-- signal sent before the run waits for it is not lost, and a second delivery counts nothing.
CREATE TABLE rendezvous.signals (
    run_id  bigint NOT NULL REFERENCES rendezvous.runs ON DELETE CASCADE,
    name    text NOT NULL,
    payload jsonb,
    sent_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (run_id, name),
    CONSTRAINT signals_name_valid CHECK (name <> '' AND octet_length(name) <= 512)
);
COMMENT ON TABLE rendezvous.signals IS 'Signals sent to runs (signal_run); the first of a name counts.';
SELECT pg_catalog.pg_extension_config_dump('rendezvous.signals', '');

-- What await_signal and await_children answer.
CREATE TYPE rendezvous.run_wait AS (outcome text, payload jsonb);
COMMENT ON TYPE rendezvous.run_wait IS
    'outcome: received (a signal: its payload), finished (every child ended), timed_out (until passed first) or parked (the run gave its slot back: stop working on it).';

-- A parked run's deadline: not NULL, finite.
CREATE FUNCTION rendezvous._check_until(until timestamptz) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF until IS NULL THEN
        RAISE EXCEPTION 'until must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT isfinite(until) THEN
        RAISE EXCEPTION 'until must be a finite instant (got %)', until USING ERRCODE = '22023';
    END IF;
END
$$;

-- The holder gives its slot back until `until`, waiting for what `waiting_for` names: pending,
-- no holder, the attempt not counted, made durable; true. False, changing nothing, when
-- `until` has passed already. One home for the parking of sleep_run, await_signal and
-- await_children.
CREATE FUNCTION rendezvous._park_run(run_id bigint, until timestamptz, waiting_for text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF _park_run.until <= pg_catalog.clock_timestamp() THEN
        RETURN false;
    END IF;
    UPDATE rendezvous.runs r
       SET state = 'pending', runnable_at = _park_run.until, waiting_for = _park_run.waiting_for,
           attempts = greatest(r.attempts - 1, 0), holder = NULL, lease_until = NULL, holder_pid = NULL,
           holder_started = NULL, updated_at = pg_catalog.clock_timestamp()
     WHERE r.run_id = _park_run.run_id;
    PERFORM rendezvous._durable_commit();
    RETURN true;
END
$$;

-- Records a finished step of a run the caller holds: true, or false when the step was
-- recorded before (the first record wins; nothing changes). RZ001 when token is not the run's
-- current claim, raised in the caller's transaction: a step's database effects and its
-- checkpoint commit together or not at all. Made durable before it is acknowledged.
CREATE FUNCTION rendezvous.record_step(run_id bigint, token bigint, step text, output jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r rendezvous.runs%ROWTYPE;
BEGIN
    PERFORM rendezvous._check_text('step', record_step.step, 512);
    r := rendezvous._hold_run(record_step.run_id, record_step.token);
    INSERT INTO rendezvous.steps AS s (run_id, position, step, output, attempt)
    SELECT record_step.run_id, coalesce(max(x.position), 0) + 1, record_step.step, record_step.output, r.attempts
      FROM rendezvous.steps x WHERE x.run_id = record_step.run_id
    ON CONFLICT (run_id, step) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM rendezvous._durable_commit();
    RETURN true;
END
$$;
COMMENT ON FUNCTION rendezvous.record_step(bigint, bigint, text, jsonb) IS
    'Records a finished step of a run this token holds (RZ001 otherwise, in the caller''s transaction); false when the step was recorded before (the first record wins).';

-- A run's recorded steps, in the order recorded: what a replay skips, and what observers see.
CREATE FUNCTION rendezvous.run_steps(run_id bigint)
RETURNS TABLE (step text, output jsonb, attempt integer, recorded_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF run_steps.run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    RETURN QUERY
        SELECT s.step, s.output, s.attempt, s.recorded_at FROM rendezvous.steps s
         WHERE s.run_id = run_steps.run_id ORDER BY s.position;
END
$$;
COMMENT ON FUNCTION rendezvous.run_steps(bigint) IS
    'The recorded steps of a run, in the order recorded: name, output, the attempt that recorded it, when.';

-- A durable timer: the holder gives its slot back until `until` (database clock), without
-- counting an attempt; the run then resumes on any host. True: parked (stop working on it);
-- false: until has passed already (nothing changed: carry on). RZ001 for a stale token.
CREATE FUNCTION rendezvous.sleep_run(run_id bigint, token bigint, until timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_until(sleep_run.until);
    PERFORM rendezvous._hold_run(sleep_run.run_id, sleep_run.token);
    RETURN rendezvous._park_run(sleep_run.run_id, sleep_run.until, 'sleep');
END
$$;
COMMENT ON FUNCTION rendezvous.sleep_run(bigint, bigint, timestamptz) IS
    'A durable timer: gives the slot back until `until` (no attempt counted), true; false when until has passed (carry on). RZ001 for a stale token.';

-- Sends a signal to a run: true when this call delivered it, false when a signal of that
-- name was delivered before (it counts once), or the run does not exist or has finished. A
-- run parked waiting for it becomes runnable at once (announced on rendezvous_runs).
CREATE FUNCTION rendezvous.signal_run(run_id bigint, name text, payload jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF signal_run.run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rendezvous._check_text('name', signal_run.name, 512);
    -- The run's row first, whatever its state: a holder parking on this signal right now
    -- (await_signal holds the row) either sees it once we commit, or is seen parked by us.
    PERFORM 1 FROM rendezvous.runs r
      WHERE r.run_id = signal_run.run_id AND r.state IN ('pending', 'running') FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO rendezvous.signals (run_id, name, payload) VALUES (signal_run.run_id, signal_run.name, signal_run.payload)
    ON CONFLICT (run_id, name) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE rendezvous.runs r SET runnable_at = now_, waiting_for = NULL, updated_at = now_
     WHERE r.run_id = signal_run.run_id AND r.state = 'pending' AND r.waiting_for = 'signal:' || signal_run.name;
    IF FOUND THEN
        PERFORM rendezvous._announce('rendezvous_runs', '');
    END IF;
    PERFORM rendezvous._durable_commit();
    RETURN true;
END
$$;
COMMENT ON FUNCTION rendezvous.signal_run(bigint, text, jsonb) IS
    'Sends a named signal to a pending or running run: true when delivered now, false when delivered before (it counts once) or the run is gone or finished. A run waiting for it resumes at once.';

-- The holder waits for a signal: received (with its payload) when it was sent, before or
-- after this run began to wait; timed_out once until has passed; else parked (the slot given
-- back until the signal or until, no attempt counted: stop working on it). RZ001 for a stale
-- token.
CREATE FUNCTION rendezvous.await_signal(run_id bigint, token bigint, name text, until timestamptz)
RETURNS rendezvous.run_wait
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    got jsonb;
BEGIN
    PERFORM rendezvous._check_text('name', await_signal.name, 512);
    PERFORM rendezvous._check_until(await_signal.until);
    PERFORM rendezvous._hold_run(await_signal.run_id, await_signal.token);
    -- A new statement after the lock: a signal committed meanwhile is seen.
    SELECT s.payload INTO got FROM rendezvous.signals s WHERE s.run_id = await_signal.run_id AND s.name = await_signal.name;
    IF FOUND THEN
        RETURN ROW('received', got)::rendezvous.run_wait;
    ELSIF rendezvous._park_run(await_signal.run_id, await_signal.until, 'signal:' || await_signal.name) THEN
        RETURN ROW('parked', NULL)::rendezvous.run_wait;
    END IF;
    RETURN ROW('timed_out', NULL)::rendezvous.run_wait;
END
$$;
COMMENT ON FUNCTION rendezvous.await_signal(bigint, bigint, text, timestamptz) IS
    'Waits for a named signal: received (payload), timed_out (until passed), or parked (slot given back until the signal or until: stop working). RZ001 for a stale token.';

-- Admits a child run of a run the caller holds, once per child_key however often the parent
-- is replayed (the child's dispatch key is child:<parent>:<child_key>, in the parent's tenant).
-- RZ001 for a stale token; 23505 when that dispatch key belongs to a run that is not this
-- run's child.
CREATE FUNCTION rendezvous.spawn_child(
    run_id        bigint,
    token         bigint,
    child_key     text,
    workflow_ref  text,
    input         jsonb DEFAULT '{}',
    max_attempts  integer DEFAULT 3,
    retry_backoff interval DEFAULT '10 seconds'
) RETURNS rendezvous.admission
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    parent rendezvous.runs%ROWTYPE;
    admitted rendezvous.admission;
    child_parent bigint;
BEGIN
    PERFORM rendezvous._check_text('child_key', spawn_child.child_key, 256);
    parent := rendezvous._hold_run(spawn_child.run_id, spawn_child.token);
    admitted := rendezvous.spawn_run(parent.tenant_id, spawn_child.workflow_ref, spawn_child.input,
                                     'child:' || spawn_child.run_id || ':' || spawn_child.child_key,
                                     spawn_child.max_attempts, spawn_child.retry_backoff);
    UPDATE rendezvous.runs c SET parent_run_id = spawn_child.run_id
     WHERE c.run_id = admitted.run_id AND c.parent_run_id IS NULL AND admitted.created;
    SELECT c.parent_run_id INTO child_parent FROM rendezvous.runs c WHERE c.run_id = admitted.run_id;
    IF child_parent IS DISTINCT FROM spawn_child.run_id THEN
        RAISE EXCEPTION 'dispatch key child:%:% belongs to run %, which is not a child of run %',
            spawn_child.run_id, spawn_child.child_key, admitted.run_id, spawn_child.run_id USING ERRCODE = '23505';
    END IF;
    RETURN admitted;
END
$$;
COMMENT ON FUNCTION rendezvous.spawn_child(bigint, bigint, text, text, jsonb, integer, interval) IS
    'Admits a child run of a run this token holds, once per child_key (a replay gets the same child); as spawn_run otherwise. RZ001 for a stale token.';

-- A run's children: their keys, states and outputs (what a parent reads after await_children).
CREATE FUNCTION rendezvous.run_children(run_id bigint)
RETURNS TABLE (child_key text, child_run_id bigint, state text, output jsonb, last_error text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF run_children.run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    RETURN QUERY
        SELECT substr(c.dispatch_key, length('child:' || run_children.run_id || ':') + 1), c.run_id, c.state, c.output,
               c.last_error
          FROM rendezvous.runs c WHERE c.parent_run_id = run_children.run_id ORDER BY c.run_id;
END
$$;
COMMENT ON FUNCTION rendezvous.run_children(bigint) IS
    'The child runs of a run (spawn_child), oldest first: child key, run id, state, output, last error.';

-- The holder waits for its children to end (succeeded, failed or cancelled): finished when
-- none is pending or running; timed_out once until has passed; else parked (the slot given
-- back until the last child ends or until, no attempt counted: stop working on it). RZ001 for
-- a stale token.
CREATE FUNCTION rendezvous.await_children(run_id bigint, token bigint, until timestamptz) RETURNS rendezvous.run_wait
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_until(await_children.until);
    PERFORM rendezvous._hold_run(await_children.run_id, await_children.token);
    -- A new statement after the lock: a child that ended meanwhile is seen (a child's end
    -- locks this row before it looks for a parked parent: _wake_parents).
    IF NOT EXISTS (SELECT 1 FROM rendezvous.runs c
                    WHERE c.parent_run_id = await_children.run_id AND c.state IN ('pending', 'running')) THEN
        RETURN ROW('finished', NULL)::rendezvous.run_wait;
    ELSIF rendezvous._park_run(await_children.run_id, await_children.until, 'children') THEN
        RETURN ROW('parked', NULL)::rendezvous.run_wait;
    END IF;
    RETURN ROW('timed_out', NULL)::rendezvous.run_wait;
END
$$;
COMMENT ON FUNCTION rendezvous.await_children(bigint, bigint, timestamptz) IS
    'Waits for a run''s children to end: finished, timed_out (until passed), or parked (slot given back until the last child ends or until: stop working). RZ001 for a stale token.';

-- Runs whose children just ended: those parked on their children with none left unfinished
-- become runnable at once. Each parent's row is locked before its children are looked at, so
-- a parent parking right now either sees this child ended or is seen parked.
CREATE FUNCTION rendezvous._wake_parents(parents bigint[]) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM 1 FROM rendezvous.runs p WHERE p.run_id = ANY (parents) ORDER BY p.run_id FOR NO KEY UPDATE;
    UPDATE rendezvous.runs p SET runnable_at = now_, waiting_for = NULL, updated_at = now_
     WHERE p.run_id = ANY (parents) AND p.state = 'pending' AND p.waiting_for = 'children'
       AND NOT EXISTS (SELECT 1 FROM rendezvous.runs c WHERE c.parent_run_id = p.run_id AND c.state IN ('pending', 'running'));
    IF FOUND THEN
        PERFORM rendezvous._announce('rendezvous_runs', '');
    END IF;
END
$$;

-- What the holder says it is doing, shown in status_runs (not a checkpoint: not made durable
-- before it is acknowledged). False for a stale token.
CREATE FUNCTION rendezvous.set_run_progress(run_id bigint, token bigint, progress jsonb) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM rendezvous._check_run_token(set_run_progress.run_id, set_run_progress.token);
    IF pg_catalog.octet_length(set_run_progress.progress::text) > 65536 THEN
        RAISE EXCEPTION 'progress is % bytes long; the limit is 65536', pg_catalog.octet_length(set_run_progress.progress::text)
            USING ERRCODE = '22023';
    END IF;
    UPDATE rendezvous.runs r SET progress = set_run_progress.progress
     WHERE r.run_id = set_run_progress.run_id AND r.token = set_run_progress.token AND r.state = 'running'
       AND rendezvous._is_holder_role(r.holder_role);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION rendezvous.set_run_progress(bigint, bigint, jsonb) IS
    'Sets what a running run says it is doing (status_runs.progress, at most 64 KiB); false for a stale token.';
