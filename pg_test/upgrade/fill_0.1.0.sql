-- A database with pg_rendezvous 0.1.0 and data of every kind it keeps, made through its API;
-- public.before_upgrade snapshots the rows so check_0.1.0.sql can compare them after the update.
\set ON_ERROR_STOP 1
CREATE EXTENSION pg_rendezvous VERSION '0.1.0';
SELECT rendezvous.heartbeat('host-a');
SELECT rendezvous.heartbeat('host-b', 2.5);
SELECT * FROM rendezvous.spawn_run('acme', 'reports/nightly', '{"day": "2026-11-29"}', 'decision-42');
SELECT * FROM rendezvous.spawn_run('acme', 'reports/nightly');
SELECT rendezvous.set_run_state(run_id, 'succeeded') FROM rendezvous.runs WHERE dispatch_key IS NULL;
-- Leadership: group g1 had two terms (epoch 2), g2's lock dies with this session.
SELECT * FROM rendezvous.try_lead('g1', 'leader-a');
SELECT rendezvous.resign('g1');
SELECT * FROM rendezvous.try_lead('g1', 'leader-b');
SELECT * FROM rendezvous.try_lead('g2', 'leader-c');
-- Firings: one completed, one taken over (token 2) after its lease ran out, one live.
SELECT * FROM rendezvous.claim_firing('nightly', '2026-11-29 00:00+00', 'host-a');
SELECT rendezvous.complete_firing('nightly', '2026-11-29 00:00+00', 1);
SELECT * FROM rendezvous.claim_firing('hourly', '2026-11-29 01:00+00', 'host-a', '1 ms');
SELECT pg_sleep(0.01);
SELECT * FROM rendezvous.claim_firing('hourly', '2026-11-29 01:00+00', 'host-b', '1 hour');
SELECT * FROM rendezvous.claim_firing('hourly', '2026-11-29 02:00+00', 'host-a', '1 hour');

CREATE TABLE public.before_upgrade AS
    SELECT 'runs' AS tbl, to_jsonb(r) AS row FROM rendezvous.runs r
    UNION ALL SELECT 'hosts', to_jsonb(h) FROM rendezvous.hosts h
    UNION ALL SELECT 'leaders', to_jsonb(l) - 'pid' FROM rendezvous.leaders l
    UNION ALL SELECT 'firings', to_jsonb(f) FROM rendezvous.firings f;
