-- Idempotent spawn admission: the runs table and spawn_run (see admission.rs).
-- Loaded by extension_sql_file! in admission.rs; every name is schema-qualified. A change after a
-- release goes into the next upgrade script under sql/ too (the upgrade test checks they agree).

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
    CONSTRAINT runs_dispatch_key_valid CHECK (dispatch_key <> '' AND octet_length(dispatch_key) <= 512)
);
COMMENT ON TABLE rendezvous.runs IS 'Admitted runs; (tenant_id, dispatch_key) is unique where dispatch_key is set.';
CREATE UNIQUE INDEX runs_tenant_dispatch_key ON rendezvous.runs (tenant_id, dispatch_key)
    WHERE dispatch_key IS NOT NULL;
CREATE INDEX runs_finished ON rendezvous.runs (updated_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.runs', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.runs_run_id_seq', '');

CREATE FUNCTION rendezvous.spawn_run(
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
COMMENT ON FUNCTION rendezvous.spawn_run(text, text, jsonb, text) IS
    'Admits a run; with a dispatch_key, a repeat returns the first run (created = false, same_request tells whether workflow_ref and input matched).';

CREATE FUNCTION rendezvous.set_run_state(run_id bigint, state text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be NULL' USING ERRCODE = '22004';
    ELSIF state IS NULL THEN
        RAISE EXCEPTION 'state must not be NULL' USING ERRCODE = '22004';
    ELSIF state NOT IN ('pending', 'running', 'succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'state must be one of pending, running, succeeded, failed, cancelled (got %)', state
            USING ERRCODE = '22023';
    END IF;
    UPDATE rendezvous.runs r SET state = state, updated_at = pg_catalog.clock_timestamp()
     WHERE r.run_id = run_id;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION rendezvous.set_run_state(bigint, text) IS 'Moves a run to a state; false if there is no such run.';

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
