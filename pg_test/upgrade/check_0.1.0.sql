-- After ALTER EXTENSION pg_rendezvous UPDATE on fill_0.1.0.sql's database: every row is still
-- there with every 0.1.0 column unchanged, and the API carries on from the data.
\set ON_ERROR_STOP 1
DO $$
DECLARE
    lost bigint;
    got record;
BEGIN
    WITH after AS (
        SELECT 'runs' AS tbl, to_jsonb(r) AS row FROM rendezvous.runs r
        UNION ALL SELECT 'hosts', to_jsonb(h) FROM rendezvous.hosts h
        UNION ALL SELECT 'leaders', to_jsonb(l) FROM rendezvous.leaders l
        UNION ALL SELECT 'firings', to_jsonb(f) FROM rendezvous.firings f
    )
    SELECT count(*) INTO lost FROM public.before_upgrade b
     WHERE NOT EXISTS (SELECT 1 FROM after a WHERE a.tbl = b.tbl AND a.row @> b.row);
    IF lost > 0 OR (SELECT count(*) FROM public.before_upgrade) <> 9 THEN
        RAISE EXCEPTION 'upgrade lost or changed % of the rows snapshotted before it', lost;
    END IF;

    -- A redelivered spawn finds its run; a new one gets a fresh id.
    SELECT * INTO got FROM rendezvous.spawn_run('acme', 'reports/nightly', '{"day": "2026-11-29"}', 'decision-42');
    IF got.created OR NOT got.same_request
       OR got.run_id <> (SELECT (row->>'run_id')::bigint FROM public.before_upgrade WHERE row->>'dispatch_key' = 'decision-42') THEN
        RAISE EXCEPTION 'redelivered spawn after upgrade: %', got;
    END IF;
    SELECT * INTO got FROM rendezvous.spawn_run('acme', 'reports/nightly', '{}', 'decision-43');
    IF NOT got.created OR got.run_id <= 2 THEN
        RAISE EXCEPTION 'new spawn after upgrade: %', got;
    END IF;

    -- Epochs go on from where 0.1.0 left them.
    SELECT * INTO got FROM rendezvous.try_lead('g1', 'leader-d');
    IF NOT got.is_leader OR got.epoch <> 3 THEN
        RAISE EXCEPTION 'leadership after upgrade: % (expected epoch 3)', got;
    END IF;
    SELECT * INTO got FROM rendezvous.try_lead('g3', 'leader-e');
    IF NOT got.is_leader OR got.epoch <> 1 THEN
        RAISE EXCEPTION 'a new group after upgrade: %', got;
    END IF;

    -- A completed firing stays completed; a live claim stays its holder's.
    SELECT * INTO got FROM rendezvous.claim_firing('nightly', '2026-11-29 00:00+00', 'host-c');
    IF got.claimed OR NOT got.completed OR got.holder <> 'host-a' THEN
        RAISE EXCEPTION 'completed firing after upgrade: %', got;
    END IF;
    SELECT * INTO got FROM rendezvous.claim_firing('hourly', '2026-11-29 01:00+00', 'host-c');
    IF got.claimed OR got.holder <> 'host-b' OR got.token <> 2 THEN
        RAISE EXCEPTION 'live firing claim after upgrade: %', got;
    END IF;
    IF NOT rendezvous.complete_firing('hourly', '2026-11-29 01:00+00', 2) THEN
        RAISE EXCEPTION 'the holder could not complete its firing after upgrade';
    END IF;
    IF rendezvous.live_hosts('1 day') <> ARRAY['host-a', 'host-b'] THEN
        RAISE EXCEPTION 'live hosts after upgrade: %', rendezvous.live_hosts('1 day');
    END IF;

    -- 0.1.0's firings read as 0.2.0 states; the scheduler works on the upgraded schema, and a
    -- 0.1.0 firing of a task scheduled after the upgrade is that task's.
    IF (SELECT array_agg(state ORDER BY fire_at) FROM rendezvous.status_firings WHERE task_id IN ('nightly', 'hourly'))
       <> ARRAY['completed', 'completed', 'running'] THEN
        RAISE EXCEPTION 'firing states after upgrade: %', (SELECT array_agg(state) FROM rendezvous.status_firings);
    END IF;
    -- (Overlap allowed: host-a's 0.1.0 claim on 02:00 still runs.)
    IF rendezvous.schedule_task('hourly', '0 * * * *', overlap => 'allow') <= pg_catalog.clock_timestamp() THEN
        RAISE EXCEPTION 'scheduling after upgrade';
    END IF;
    UPDATE rendezvous.tasks SET next_fire_at = date_trunc('hour', pg_catalog.clock_timestamp()) WHERE task_id = 'hourly';
    IF (SELECT count(*) FROM rendezvous.due_firings() WHERE task_id = 'hourly') <> 1 THEN
        RAISE EXCEPTION 'due firings after upgrade';
    END IF;
    IF (SELECT last_completed_at IS NULL FROM rendezvous.status_tasks WHERE task_id = 'hourly' AND last_completed_fire_at = '2026-11-29 01:00+00'::timestamptz) IS NOT false THEN
        RAISE EXCEPTION 'the task does not see its 0.1.0 firing: %', (SELECT to_jsonb(t) FROM rendezvous.status_tasks t);
    END IF;
END
$$;
DROP TABLE public.before_upgrade;
