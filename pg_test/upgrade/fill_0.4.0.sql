-- A database with pg_rendezvous 0.4.0 and data of every kind it keeps, made through its API;
-- public.before_upgrade snapshots the rows so check_0.4.0.sql can compare them after the update.
-- The portable edition's upgrade test runs it without its CREATE EXTENSION line, on the released
-- 0.4.0 portable script. 0.3.0's kinds first (fill_0.3.0.sql), then durable runs: steps,
-- progress, a sleeping run, a run waiting for a signal with another signal pending, a parent
-- waiting for two children of which one has finished.
\set ON_ERROR_STOP 1
CREATE EXTENSION pg_rendezvous VERSION '0.4.0';
SELECT rendezvous.heartbeat('host-a');
SELECT rendezvous.heartbeat('host-b', 2.5);
SELECT * FROM rendezvous.spawn_run('acme', 'reports/nightly', '{"day": "2026-11-29"}', 'decision-42');
-- Runs: one pending, one succeeded, one failed once and waiting for its retry (an hour).
SELECT * FROM rendezvous.spawn_run('acme', 'reports/nightly');
SELECT * FROM rendezvous.spawn_run('acme', 'reports/flaky', '{}', 'flaky-1', 3, '1 hour');
SELECT rendezvous.complete_run(c.run_id, c.token, '{"rows": 7}')
  FROM rendezvous.claim_runs('host-a', 1, '30 seconds', ARRAY['reports/nightly']) c;
SELECT rendezvous.fail_run(c.run_id, c.token, 'flaked')
  FROM rendezvous.claim_runs('host-a', 1, '30 seconds', ARRAY['reports/flaky']) c;
-- Retention: firings kept 30 days, hosts for ever.
SELECT rendezvous.set_retention('firings', '30 days');
SELECT rendezvous.set_retention('hosts', NULL);
-- Leadership: g1 had two terms (epoch 2) and an operator's step-down request on the second.
SELECT * FROM rendezvous.try_lead('g1', 'leader-a');
SELECT rendezvous.resign('g1');
SELECT * FROM rendezvous.try_lead('g1', 'leader-b');
SELECT * FROM rendezvous.request_step_down('g1', 'maintenance');
-- Firings: one completed, one live claim, one failed once and waiting for its retry.
SELECT * FROM rendezvous.claim_firing('nightly', '2026-11-29 00:00+00', 'host-a');
SELECT rendezvous.complete_firing('nightly', '2026-11-29 00:00+00', 1);
SELECT * FROM rendezvous.claim_firing('hourly', '2026-11-29 02:00+00', 'host-a', '1 hour');
-- A scheduled task: one firing made due and not claimed yet (holder NULL, token 0), one that
-- failed once (a retry is due after its backoff).
SELECT rendezvous.schedule_task('every-minute', '* * * * *', 'Europe/Berlin', overlap => 'allow', retry_backoff => '1 hour');
UPDATE rendezvous.tasks SET next_fire_at = date_trunc('minute', now()) WHERE task_id = 'every-minute';
SELECT count(*) FROM rendezvous.due_firings();
SELECT * FROM rendezvous.claim_firing('every-minute', '2026-11-29 03:00+00', 'host-b');
SELECT * FROM rendezvous.fail_firing('every-minute', '2026-11-29 03:00+00',
    (SELECT token FROM rendezvous.firings WHERE task_id = 'every-minute' AND fire_at = '2026-11-29 03:00+00'), 'boom');
SELECT rendezvous.schedule_task('paused-task', '0 6 * * 1-5', 'America/New_York');
SELECT rendezvous.pause_task('paused-task');

-- Durable runs, each claimed at once (grace 0) by host-a.
SELECT * FROM rendezvous.spawn_run('acme', 'agent/sleeper', '{"goal": "wait"}', 'agent-sleeper');
SELECT * FROM rendezvous.spawn_run('acme', 'agent/approval', '{"goal": "ask"}', 'agent-approval');
SELECT * FROM rendezvous.spawn_run('acme', 'agent/parent', '{"goal": "fan out"}', 'agent-parent');
CREATE TEMP TABLE held AS
    SELECT c.* FROM rendezvous.claim_runs('host-a', 3, '5 minutes', ARRAY['agent/sleeper', 'agent/approval', 'agent/parent'], '0 seconds') c;
-- The sleeper: two finished steps and its progress, then asleep for an hour (its slot given back).
SELECT rendezvous.record_step(h.run_id, h.token, 'plan', '{"steps": 2}') FROM held h WHERE h.workflow_ref = 'agent/sleeper';
SELECT rendezvous.record_step(h.run_id, h.token, 'infer', '{"text": "ok"}') FROM held h WHERE h.workflow_ref = 'agent/sleeper';
SELECT rendezvous.set_run_progress(h.run_id, h.token, '{"done": 2, "of": 3}') FROM held h WHERE h.workflow_ref = 'agent/sleeper';
SELECT rendezvous.sleep_run(h.run_id, h.token, pg_catalog.clock_timestamp() + interval '1 hour')
  FROM held h WHERE h.workflow_ref = 'agent/sleeper';
SELECT rendezvous.signal_run(h.run_id, 'note', '{"from": "ops"}') FROM held h WHERE h.workflow_ref = 'agent/sleeper';
-- The approval: one step, then waiting a day for the signal 'approve'.
SELECT rendezvous.record_step(h.run_id, h.token, 'draft', '{"text": "draft"}') FROM held h WHERE h.workflow_ref = 'agent/approval';
SELECT (rendezvous.await_signal(h.run_id, h.token, 'approve', pg_catalog.clock_timestamp() + interval '1 day')).outcome
  FROM held h WHERE h.workflow_ref = 'agent/approval';
-- The parent: two children; one runs and finishes; the parent waits a day for both.
SELECT (rendezvous.spawn_child(h.run_id, h.token, 'left', 'agent/child', '{"side": "left"}')).created
  FROM held h WHERE h.workflow_ref = 'agent/parent';
SELECT (rendezvous.spawn_child(h.run_id, h.token, 'right', 'agent/child', '{"side": "right"}')).created
  FROM held h WHERE h.workflow_ref = 'agent/parent';
SELECT rendezvous.complete_run(c.run_id, c.token, '{"side": "left", "ok": true}')
  FROM rendezvous.claim_runs('host-b', 1, '5 minutes', ARRAY['agent/child'], '0 seconds') c;
SELECT (rendezvous.await_children(h.run_id, h.token, pg_catalog.clock_timestamp() + interval '1 day')).outcome
  FROM held h WHERE h.workflow_ref = 'agent/parent';
DROP TABLE held;

CREATE TABLE public.before_upgrade AS
    SELECT 'runs' AS tbl, to_jsonb(r) AS row FROM rendezvous.runs r
    UNION ALL SELECT 'hosts', to_jsonb(h) FROM rendezvous.hosts h
    UNION ALL SELECT 'leaders', to_jsonb(l) - 'pid' FROM rendezvous.leaders l
    UNION ALL SELECT 'firings', to_jsonb(f) FROM rendezvous.firings f
    UNION ALL SELECT 'tasks', to_jsonb(t) - 'updated_at' FROM rendezvous.tasks t
    UNION ALL SELECT 'retention', to_jsonb(k) FROM rendezvous.retention k
    UNION ALL SELECT 'steps', to_jsonb(s) FROM rendezvous.steps s
    UNION ALL SELECT 'signals', to_jsonb(s) FROM rendezvous.signals s;
