-- The portable edition's admission.rs: spawn_run, one INSERT … ON CONFLICT DO NOTHING, and
-- a read of the run it yielded to.
CREATE FUNCTION rendezvous.spawn_run(
    tenant_id     text,
    workflow_ref  text,
    input         jsonb DEFAULT '{}',
    dispatch_key  text DEFAULT NULL,
    max_attempts  integer DEFAULT 3,
    retry_backoff interval DEFAULT '10 seconds'
) RETURNS rendezvous.admission
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    result rendezvous.admission;
BEGIN
    PERFORM rendezvous._check_text('tenant_id', spawn_run.tenant_id, rendezvous._max_id_bytes());
    PERFORM rendezvous._check_text('workflow_ref', spawn_run.workflow_ref, 1024);
    IF spawn_run.input IS NULL THEN
        RAISE EXCEPTION 'input must not be NULL (use ''{}'' for no input)' USING ERRCODE = '22004';
    END IF;
    IF spawn_run.dispatch_key IS NOT NULL THEN
        PERFORM rendezvous._check_text('dispatch_key', spawn_run.dispatch_key, 512);
    END IF;
    PERFORM rendezvous._check_retry_policy(spawn_run.max_attempts, spawn_run.retry_backoff);
    -- Run ids stay above any a timeline before this one handed out (fencing.rs).
    PERFORM rendezvous._floor_run_ids();
    FOR attempt IN 1 .. 5 LOOP
        INSERT INTO rendezvous.runs AS r (tenant_id, workflow_ref, input, dispatch_key, max_attempts, retry_backoff)
        VALUES (spawn_run.tenant_id, spawn_run.workflow_ref, spawn_run.input, spawn_run.dispatch_key,
                spawn_run.max_attempts, spawn_run.retry_backoff)
        ON CONFLICT (tenant_id, dispatch_key) WHERE dispatch_key IS NOT NULL DO NOTHING
        RETURNING r.run_id, true, true INTO result;
        IF FOUND THEN
            PERFORM rendezvous._announce('rendezvous_runs', '');
            RETURN result;
        END IF;
        SELECT r.run_id, false, r.workflow_ref = spawn_run.workflow_ref AND r.input = spawn_run.input INTO result
          FROM rendezvous.runs r
         WHERE r.tenant_id = spawn_run.tenant_id AND r.dispatch_key = spawn_run.dispatch_key;
        IF FOUND THEN
            RETURN result;
        END IF;
        -- The conflicting run was deleted (purged) between the two statements: insert again.
    END LOOP;
    RAISE EXCEPTION 'could not admit run for dispatch_key % of tenant %: it is being purged concurrently',
        spawn_run.dispatch_key, spawn_run.tenant_id USING ERRCODE = '40001';
END
$$;
