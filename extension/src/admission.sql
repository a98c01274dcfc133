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
    CONSTRAINT runs_dispatch_key_valid CHECK (dispatch_key <> '' AND octet_length(dispatch_key) <= 512)
);
COMMENT ON TABLE rendezvous.runs IS 'Admitted runs; (tenant_id, dispatch_key) is unique where dispatch_key is set.';
CREATE UNIQUE INDEX runs_tenant_dispatch_key ON rendezvous.runs (tenant_id, dispatch_key)
    WHERE dispatch_key IS NOT NULL;
CREATE INDEX runs_finished ON rendezvous.runs (updated_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.runs', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.runs_run_id_seq', '');

-- What spawn_run returns: one value, not a set, so `SELECT rendezvous.spawn_run(…)` is a
-- single function call (the fast path); `SELECT * FROM rendezvous.spawn_run(…)` gives the
-- same three columns.
CREATE TYPE rendezvous.admission AS (run_id bigint, created boolean, same_request boolean);
COMMENT ON TYPE rendezvous.admission IS
    'spawn_run''s result: the run, whether this call created it, and (for a repeat) whether it carried the same workflow_ref and input.';

-- In Rust (admission.rs): the checks, then one kept INSERT … ON CONFLICT DO NOTHING plan, and
-- a kept read of the run it yielded to. Runs as the extension's owner (privileges.sql).
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
