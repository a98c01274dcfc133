-- The shapes through which a caller could reach the owner's rights, checked on every function
-- of the schema, in both editions (#39): a SECURITY DEFINER function runs as the owner, so it
-- must pin its search_path, must not be a trigger function (a caller attaches a trigger
-- function to a table of its own, whose column types, casts and operators are the caller's),
-- and must take no argument of a pseudo-type (anyelement, record, …: the caller's own types
-- would reach its body).
SELECT p.oid::regprocedure AS function,
       concat_ws('; ',
           CASE WHEN NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')
                THEN 'search_path not pinned' END,
           CASE WHEN p.prorettype = 'pg_catalog.trigger'::pg_catalog.regtype THEN 'a trigger function' END,
           CASE WHEN EXISTS (SELECT 1 FROM unnest(p.proargtypes::oid[]) a JOIN pg_catalog.pg_type t ON t.oid = a
                              WHERE t.typtype = 'p') THEN 'an argument of a pseudo-type' END) AS unsafe
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'rendezvous'::regnamespace AND p.prosecdef
   AND (NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')
        OR p.prorettype = 'pg_catalog.trigger'::pg_catalog.regtype
        OR EXISTS (SELECT 1 FROM unnest(p.proargtypes::oid[]) a JOIN pg_catalog.pg_type t ON t.oid = a WHERE t.typtype = 'p'))
 ORDER BY 1;
-- And every trigger function of the schema (the portable edition has some) is beyond PUBLIC's
-- reach: CREATE TRIGGER needs EXECUTE on it.
SELECT p.oid::regprocedure AS trigger_function_public_may_attach
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'rendezvous'::regnamespace AND p.prorettype = 'pg_catalog.trigger'::pg_catalog.regtype
   AND pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY 1;

-- A claim is acted on only by sessions of the login role that made it (#39 item 3): a host of
-- another role holding the very token completes, fails, renews, releases, fences, checkpoints
-- and reports nothing, and ends nothing by the holder's host id; the holder's calls still work.
-- Each role in a session of its own (\c), as hosts are.
SELECT current_user AS regress_user \gset
CREATE ROLE rendezvous_regress_tenant_a LOGIN IN ROLE rendezvous_host;
CREATE ROLE rendezvous_regress_tenant_b LOGIN IN ROLE rendezvous_host;
\c - rendezvous_regress_tenant_a
SELECT run_id AS a_run FROM rendezvous.spawn_run('tenant-a', 'forgery', '{}') \gset
SELECT run_id AS a_second_run FROM rendezvous.spawn_run('tenant-a', 'forgery', '{}') \gset
SELECT token AS a_token FROM rendezvous.claim_runs('host-a', 1, '30 s', ARRAY['forgery'], '0 s') \gset
SELECT token AS a_second_token FROM rendezvous.claim_runs('host-a', 1, '30 s', ARRAY['forgery'], '0 s') \gset
SELECT '2026-01-01 00:00:00+00' AS a_fire_at \gset
SELECT token AS a_firing_token FROM rendezvous.claim_firing('forgery', :'a_fire_at', 'host-a') \gset
SELECT claimed, token AS a_batch_token FROM rendezvous.claim_firings(ARRAY['forgery-batch'], ARRAY[:'a_fire_at'::timestamptz], 'host-a') \gset

\c - rendezvous_regress_tenant_b
SELECT rendezvous.complete_run(:a_run, :a_token, '{"forged": true}') AS completed;
SELECT completed FROM rendezvous.complete_runs(ARRAY[:a_run]::bigint[], ARRAY[:a_token]::bigint[]);
SELECT rendezvous.fail_run(:a_run, :a_token, 'forged') AS failed_into;
SELECT rendezvous.renew_run(:a_run, :a_token, '1 day') AS renewed_until;
SELECT rendezvous.release_run(:a_second_run, :a_second_token) AS released;
SELECT rendezvous.set_run_progress(:a_run, :a_token, '{"forged": true}') AS progress_set;
SELECT replace(regress.err(format('SELECT rendezvous.assert_run(%s, %s)', :a_run, :a_token)), :'a_run', 'N') AS fenced;
SELECT replace(regress.err(format('SELECT rendezvous.record_step(%s, %s, %L)', :a_run, :a_token, 'forged')), :'a_run', 'N') AS step;
SELECT replace(regress.err(format('SELECT rendezvous.sleep_run(%s, %s, now() + interval %L)', :a_run, :a_token, '1 day')), :'a_run', 'N') AS parked;
SELECT rendezvous.complete_firing('forgery', :'a_fire_at', :a_firing_token) AS firing_completed;
SELECT completed FROM rendezvous.complete_firings(ARRAY['forgery-batch'], ARRAY[:'a_fire_at'::timestamptz], ARRAY[:a_batch_token]::bigint[]);
SELECT recorded FROM rendezvous.fail_firing('forgery', :'a_fire_at', :a_firing_token, 'forged');
SELECT rendezvous.renew_firing('forgery', :'a_fire_at', :a_firing_token, '1 day') AS firing_renewed_until;
SELECT rendezvous.release_firing('forgery', :'a_fire_at', :a_firing_token) AS firing_released;
SELECT regress.err(format('SELECT rendezvous.assert_firing(%L, %L, %s)', 'forgery', :'a_fire_at', :a_firing_token)) AS firing_fenced;
SELECT rendezvous.release_host_claims('host-a') AS claims_ended;

-- The holder, untouched: its claims still hold, and its calls do what they say.
\c - rendezvous_regress_tenant_a
SELECT rendezvous.renew_run(:a_run, :a_token) IS NOT NULL AS renewed;
SELECT rendezvous.assert_run(:a_run, :a_token) AS fenced;
SELECT rendezvous.complete_run(:a_run, :a_token, '{"by": "a"}') AS completed;
SELECT rendezvous.release_run(:a_second_run, :a_second_token) AS released;
SELECT rendezvous.assert_firing('forgery', :'a_fire_at', :a_firing_token) AS firing_fenced;
SELECT rendezvous.complete_firing('forgery', :'a_fire_at', :a_firing_token) AS firing_completed;
SELECT completed FROM rendezvous.complete_firings(ARRAY['forgery-batch'], ARRAY[:'a_fire_at'::timestamptz], ARRAY[:a_batch_token]::bigint[]);
\c - :regress_user
SELECT state, output, progress, attempts, holder_role = 'rendezvous_regress_tenant_a'::regrole AS bound_to_a
  FROM rendezvous.runs WHERE run_id = :a_run;
SELECT state, attempts, holder IS NULL AS no_holder FROM rendezvous.runs WHERE run_id = :a_second_run;
SELECT firing_key, completed_at IS NOT NULL AS completed, failures, lease_until < now() + interval '1 hour' AS lease_not_stretched
  FROM rendezvous.firings WHERE task_id IN ('forgery', 'forgery-batch') ORDER BY 1;
DELETE FROM rendezvous.runs WHERE workflow_ref = 'forgery';
DELETE FROM rendezvous.firings WHERE task_id IN ('forgery', 'forgery-batch');
DROP ROLE rendezvous_regress_tenant_a, rendezvous_regress_tenant_b;
