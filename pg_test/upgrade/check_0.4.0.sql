-- After the upgrade of fill_0.4.0.sql's database: every row is still there with every 0.4.0
-- column unchanged, and the API carries on from the data: 0.3.0's kinds as check_0.3.0.sql
-- checks them, then the durable runs (steps replayed, a sleeper still asleep, a signal and a
-- child's completion waking their runs).
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
        UNION ALL SELECT 'tasks', to_jsonb(t) FROM rendezvous.tasks t
        UNION ALL SELECT 'retention', to_jsonb(k) FROM rendezvous.retention k
        UNION ALL SELECT 'steps', to_jsonb(s) FROM rendezvous.steps s
        UNION ALL SELECT 'signals', to_jsonb(s) FROM rendezvous.signals s
    )
    SELECT count(*) INTO lost FROM public.before_upgrade b
     WHERE NOT EXISTS (SELECT 1 FROM after a WHERE a.tbl = b.tbl AND a.row @> b.row);
    IF lost > 0 OR (SELECT count(*) FROM public.before_upgrade) <> 23 THEN
        RAISE EXCEPTION 'upgrade lost or changed % of the % rows snapshotted before it', lost,
            (SELECT count(*) FROM public.before_upgrade);
    END IF;

    -- A redelivered spawn finds its run.
    SELECT * INTO got FROM rendezvous.spawn_run('acme', 'reports/nightly', '{"day": "2026-11-29"}', 'decision-42');
    IF got.created OR NOT got.same_request THEN
        RAISE EXCEPTION 'redelivered spawn after upgrade: %', got;
    END IF;

    -- The run that failed once waits for its retry; the pending one is claimed and completes.
    IF EXISTS (SELECT 1 FROM rendezvous.claim_runs('host-c', 10, '30 seconds', ARRAY['reports/flaky'], '0 seconds')) THEN
        RAISE EXCEPTION 'a run waiting for its retry was claimed after upgrade';
    END IF;
    SELECT * INTO got FROM rendezvous.claim_runs('host-c', 10, '30 seconds', ARRAY['reports/nightly'], '0 seconds');
    -- A run admitted before the upgrade checkpoints steps, and a replay reads them.
    IF got.run_id IS NULL OR NOT rendezvous.record_step(got.run_id, got.token, 'fetch', '{"rows": 3}')
       OR rendezvous.record_step(got.run_id, got.token, 'fetch', '{"rows": 4}') THEN
        RAISE EXCEPTION 'steps of a run admitted before the upgrade: %', got;
    END IF;
    IF (SELECT array_agg(s.step || '=' || s.output::text) FROM rendezvous.run_steps(got.run_id) s) <> ARRAY['fetch={"rows": 3}']
       OR (SELECT steps FROM rendezvous.status_runs WHERE run_id = got.run_id) <> 1 THEN
        RAISE EXCEPTION 'run_steps after upgrade: %', (SELECT array_agg(to_jsonb(s)) FROM rendezvous.run_steps(got.run_id) s);
    END IF;
    IF NOT rendezvous.complete_run(got.run_id, got.token) THEN
        RAISE EXCEPTION 'the pending run after upgrade: %', got;
    END IF;
    -- Retention as it was set.
    IF (SELECT array_agg(kind || '=' || coalesce(keep::text, 'ever') ORDER BY kind) FROM rendezvous.retention)
       <> ARRAY['firings=30 days', 'hosts=ever'] THEN
        RAISE EXCEPTION 'retention after upgrade: %', (SELECT array_agg(to_jsonb(k)) FROM rendezvous.retention k);
    END IF;

    -- Epochs go on from where 0.4.0 left them (g1's holder session is gone).
    SELECT * INTO got FROM rendezvous.try_lead('g1', 'leader-c');
    IF NOT got.is_leader OR got.epoch <> 3 THEN
        RAISE EXCEPTION 'leadership after upgrade: % (expected epoch 3)', got;
    END IF;

    -- A completed firing stays completed; a live claim stays its holder's and completes.
    SELECT * INTO got FROM rendezvous.claim_firing('nightly', '2026-11-29 00:00+00', 'host-c');
    IF got.claimed OR NOT got.completed THEN
        RAISE EXCEPTION 'completed firing after upgrade: %', got;
    END IF;
    IF NOT rendezvous.complete_firing('hourly', '2026-11-29 02:00+00', 1) THEN
        RAISE EXCEPTION 'the holder could not complete its firing after upgrade';
    END IF;

    -- The failed firing waits for its retry, with its error; the paused task stays paused.
    IF (SELECT state || ':' || last_error FROM rendezvous.status_firings
         WHERE task_id = 'every-minute' AND fire_at = '2026-11-29 03:00+00') IS DISTINCT FROM 'retrying:boom' THEN
        RAISE EXCEPTION 'failed firing after upgrade: %',
            (SELECT to_jsonb(f) FROM rendezvous.status_firings f WHERE task_id = 'every-minute');
    END IF;
    IF NOT (SELECT paused FROM rendezvous.tasks WHERE task_id = 'paused-task') THEN
        RAISE EXCEPTION 'a paused task is active after upgrade';
    END IF;
    IF rendezvous.resume_task('paused-task') <= pg_catalog.clock_timestamp() THEN
        RAISE EXCEPTION 'resuming after upgrade';
    END IF;
    -- claim_firings carries on, in a batch with a firing already held.
    IF (SELECT array_agg(claimed ORDER BY ord) FROM rendezvous.claim_firings(
            ARRAY['batch', 'hourly'], ARRAY['2026-11-29 04:00+00', '2026-11-29 02:00+00']::timestamptz[], 'host-c'))
       <> ARRAY[true, false] THEN
        RAISE EXCEPTION 'claim_firings after upgrade';
    END IF;
    -- The live set has a version after the upgrade, and a join bumps it.
    DECLARE
        before bigint := (SELECT version FROM rendezvous.membership_version);
    BEGIN
        IF before IS NULL THEN
            RAISE EXCEPTION 'no membership version after upgrade';
        END IF;
        PERFORM rendezvous.heartbeat('joined-after-upgrade');
        IF (SELECT version FROM rendezvous.membership_version) <> before + 1 THEN
            RAISE EXCEPTION 'a join after upgrade did not bump the membership version';
        END IF;
        IF NOT (SELECT changed FROM rendezvous.live_members_since('10 s', before, pg_catalog.clock_timestamp())) THEN
            RAISE EXCEPTION 'live_members_since after upgrade';
        END IF;
    END;
    -- The firings are in the partitions of their days.
    IF EXISTS (SELECT FROM rendezvous.firings f
                WHERE f.tableoid::regclass::text <> 'rendezvous.firings_' || rendezvous._day_mod_8(f.fire_at)) THEN
        RAISE EXCEPTION 'firings are not in their partitions after upgrade';
    END IF;

    -- The sleeper sleeps on (an hour), its steps and progress kept for its replay.
    IF EXISTS (SELECT 1 FROM rendezvous.claim_runs('host-c', 10, '30 seconds', ARRAY['agent/sleeper'], '0 seconds')) THEN
        RAISE EXCEPTION 'a sleeping run was claimed after upgrade';
    END IF;
    IF (SELECT array_agg(s.step ORDER BY s.recorded_at) FROM rendezvous.run_steps(
            (SELECT r.run_id FROM rendezvous.runs r WHERE r.workflow_ref = 'agent/sleeper')) s) <> ARRAY['plan', 'infer']
       OR (SELECT r.progress FROM rendezvous.runs r WHERE r.workflow_ref = 'agent/sleeper') <> '{"done": 2, "of": 3}'
       OR (SELECT r.waiting_for FROM rendezvous.runs r WHERE r.workflow_ref = 'agent/sleeper') <> 'sleep' THEN
        RAISE EXCEPTION 'the sleeping run after upgrade: %',
            (SELECT to_jsonb(r) FROM rendezvous.runs r WHERE r.workflow_ref = 'agent/sleeper');
    END IF;

    -- The awaited signal wakes its run, whose replay receives it after its recorded step.
    IF NOT rendezvous.signal_run((SELECT r.run_id FROM rendezvous.runs r WHERE r.workflow_ref = 'agent/approval'),
                                 'approve', '{"ok": true}') THEN
        RAISE EXCEPTION 'signal_run after upgrade';
    END IF;
    SELECT * INTO got FROM rendezvous.claim_runs('host-c', 10, '30 seconds', ARRAY['agent/approval'], '0 seconds');
    IF got.run_id IS NULL
       OR (SELECT array_agg(s.step) FROM rendezvous.run_steps(got.run_id) s) <> ARRAY['draft']
       OR (SELECT to_jsonb(w) FROM rendezvous.await_signal(got.run_id, got.token, 'approve',
               pg_catalog.clock_timestamp() + interval '1 day') w) <> '{"outcome": "received", "payload": {"ok": true}}'
       OR NOT rendezvous.complete_run(got.run_id, got.token) THEN
        RAISE EXCEPTION 'the run waiting for a signal after upgrade: %', got;
    END IF;

    -- The last child's completion wakes the parent, which finds both children finished.
    SELECT * INTO got FROM rendezvous.claim_runs('host-c', 10, '30 seconds', ARRAY['agent/child'], '0 seconds');
    IF got.run_id IS NULL OR got.input <> '{"side": "right"}' OR NOT rendezvous.complete_run(got.run_id, got.token, '{"side": "right"}') THEN
        RAISE EXCEPTION 'the waiting child after upgrade: %', got;
    END IF;
    SELECT * INTO got FROM rendezvous.claim_runs('host-c', 10, '30 seconds', ARRAY['agent/parent'], '0 seconds');
    IF got.run_id IS NULL
       OR (SELECT (rendezvous.await_children(got.run_id, got.token, pg_catalog.clock_timestamp() + interval '1 day')).outcome)
          <> 'finished'
       OR (SELECT array_agg(c.child_key || '=' || c.state ORDER BY c.child_key) FROM rendezvous.run_children(got.run_id) c)
          <> ARRAY['left=succeeded', 'right=succeeded']
       OR NOT rendezvous.complete_run(got.run_id, got.token) THEN
        RAISE EXCEPTION 'the parent after upgrade: %', got;
    END IF;
END
$$;
DROP TABLE public.before_upgrade;
