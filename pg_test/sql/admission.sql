-- Idempotent spawn admission as a psql user calls it.

-- As a host role: a member of rendezvous_host, with no table privileges.
CREATE ROLE rendezvous_regress_admit LOGIN;
GRANT rendezvous_host TO rendezvous_regress_admit;
SET ROLE rendezvous_regress_admit;

-- The first delivery creates the run; a redelivery returns it.
SELECT created, same_request FROM rendezvous.spawn_run('acme', 'reports/nightly', '{"day": "2026-11-29"}', 'decision-42');
SELECT created, same_request FROM rendezvous.spawn_run('acme', 'reports/nightly', '{"day": "2026-11-29"}', 'decision-42');
-- A repeated admission writes nothing, not even a transaction id.
BEGIN;
SELECT created, same_request FROM rendezvous.spawn_run('acme', 'reports/nightly', '{"day": "2026-11-29"}', 'decision-42');
SELECT pg_catalog.pg_current_xact_id_if_assigned() IS NULL AS repeat_writes_nothing;
ROLLBACK;
-- A redelivery that carries another input is still the same run, and says it differed.
SELECT created, same_request FROM rendezvous.spawn_run('acme', 'reports/nightly', '{"day": "2026-11-30"}', 'decision-42');
RESET ROLE; -- reading the table is not a host's business: checked as the superuser
SELECT count(*) AS runs, count(DISTINCT run_id) AS distinct_ids FROM rendezvous.runs WHERE dispatch_key = 'decision-42';
SET ROLE rendezvous_regress_admit;
-- Named arguments; another tenant with the same key is another run.
SELECT created FROM rendezvous.spawn_run(tenant_id => 'globex', workflow_ref => 'reports/nightly', dispatch_key => 'decision-42');
-- No key: every call is a run, identical requests included.
SELECT created FROM rendezvous.spawn_run('acme', 'reports/nightly');
SELECT created FROM rendezvous.spawn_run('acme', 'reports/nightly');
RESET ROLE;
SELECT count(*) AS runs_without_key FROM rendezvous.runs WHERE tenant_id = 'acme' AND dispatch_key IS NULL;
SELECT tenant_id, workflow_ref, input, dispatch_key, state FROM rendezvous.runs ORDER BY run_id;
SET ROLE rendezvous_regress_admit;

-- A host runs what was admitted: claims it, then completes it with its token (runs.sql has
-- the whole lifecycle).
SELECT rendezvous.complete_run(c.run_id, c.token, '{"ok": true}')
  FROM rendezvous.claim_runs('host-a', 100, '30 s', ARRAY['reports/nightly'], '0 s') c
 WHERE c.run_id = (SELECT run_id FROM rendezvous.spawn_run('acme', 'reports/nightly', '{}', 'decision-42'));

-- Retention is an admin's: finished runs older than the bound are purged; the key is then free.
SELECT regress.err($$SELECT rendezvous.purge_runs('0 s')$$) AS host_may_not_purge;
RESET ROLE;
CREATE ROLE rendezvous_regress_admin LOGIN;
GRANT rendezvous_admin TO rendezvous_regress_admin;
SET ROLE rendezvous_regress_admin;
SELECT rendezvous.purge_runs('1 hour') AS purged_recent;
SELECT rendezvous.purge_runs('0 s') AS purged_all_finished;
SELECT regress.err($$SELECT rendezvous.purge_runs(NULL)$$);
SELECT regress.err($$SELECT rendezvous.purge_runs('-1 day')$$);
SELECT count(*) AS finished_runs_left FROM rendezvous.status_runs WHERE state = 'succeeded';
RESET ROLE;
DROP ROLE rendezvous_regress_admin;
SET ROLE rendezvous_regress_admit;
SELECT created FROM rendezvous.spawn_run('acme', 'reports/nightly', '{}', 'decision-42');

-- Bad input: a clear error with a SQLSTATE, and nothing admitted.
SELECT regress.err($$SELECT rendezvous.spawn_run(NULL, 'wf')$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('', 'wf')$$);
SELECT regress.err($$SELECT rendezvous.spawn_run(repeat('t', 257), 'wf')$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('t', NULL)$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('t', '')$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('t', 'wf', NULL)$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('t', 'wf', '{}', '')$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('t', 'wf', '{}', repeat('k', 513))$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('t', 'wf', 'not json')$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('t', 'wf', '{}', NULL, 0)$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('t', 'wf', '{}', NULL, 1001)$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('t', 'wf', '{}', NULL, NULL)$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('t', 'wf', '{}', NULL, 3, '-1 s')$$);
SELECT regress.err($$SELECT rendezvous.spawn_run('t', 'wf', '{}', NULL, 3, NULL)$$);
-- Any state following any other is gone (0.3.0): runs move only through their lifecycle.
SELECT regress.err($$SELECT rendezvous.set_run_state(1, 'succeeded')$$);
-- No table access: a host cannot read other tenants' runs or their input, nor change them.
SELECT regress.err($$SELECT * FROM rendezvous.runs$$);
SELECT regress.err($$DELETE FROM rendezvous.runs$$);
SELECT regress.err($$SELECT * FROM rendezvous.status_runs$$);
RESET ROLE;
SELECT count(*) AS runs_of_tenant_t FROM rendezvous.runs WHERE tenant_id = 't';

-- spawn_run returns one value (not a set): in the select list it is that composite value, and
-- a subquery kept whole opens it into columns with one call.
SELECT pg_typeof(rendezvous.spawn_run('acme', 'reports/nightly', '{}', 'form-1'));
SELECT (a).created, (a).same_request
  FROM (SELECT rendezvous.spawn_run('acme', 'reports/nightly', '{}', 'form-1') AS a OFFSET 0) s;
SELECT count(*) AS runs_with_key_form_1 FROM rendezvous.runs WHERE dispatch_key = 'form-1';

-- In a new session, as a host, under a hostile search_path (a text = that matches everything,
-- a temporary table named runs): spawn_run's statements name everything schema-qualified, so
-- a different request is still told apart and the run goes into rendezvous.runs.
CREATE SCHEMA evil;
CREATE FUNCTION evil.always(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always);
GRANT USAGE ON SCHEMA evil TO PUBLIC;
\c
SET ROLE rendezvous_regress_admit;
CREATE TEMPORARY TABLE runs (run_id bigint, tenant_id text, workflow_ref text, input jsonb, dispatch_key text);
SET search_path = evil, pg_temp, pg_catalog;
SELECT 'a'::text = 'b'::text AS evil_operator_active;
SELECT created, same_request FROM rendezvous.spawn_run('acme', 'reports/nightly', '{}', 'hostile-1');
SELECT created, same_request FROM rendezvous.spawn_run('acme', 'reports/weekly', '{}', 'hostile-1');
SELECT count(*) AS temporary_runs FROM pg_temp.runs;
DROP TABLE pg_temp.runs;
RESET search_path;
RESET ROLE;
SELECT workflow_ref FROM rendezvous.runs WHERE dispatch_key = 'hostile-1';
DROP SCHEMA evil CASCADE;

RESET ROLE;
DELETE FROM rendezvous.runs;
DROP ROLE rendezvous_regress_admit;

-- runs and its identity sequence are kept by pg_dump.
SELECT c.relname FROM pg_extension e, unnest(e.extconfig) AS cfg(oid) JOIN pg_class c ON c.oid = cfg.oid
 WHERE e.extname = 'pg_rendezvous' AND c.relname IN ('runs', 'runs_run_id_seq') ORDER BY 1;
