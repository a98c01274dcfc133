-- Runs that run: the lifecycle a host drives with EXECUTE only (claim, renew, complete, fail,
-- fence), retries with backoff then failure for good, illegal transitions refused, the claim
-- ending with its session, HRW placement, and cancel as an admin's.
CREATE ROLE rendezvous_regress_worker LOGIN;
GRANT rendezvous_host TO rendezvous_regress_worker;
CREATE ROLE rendezvous_regress_ops LOGIN;
GRANT rendezvous_admin TO rendezvous_regress_ops;
CREATE TABLE public.deliveries (run_id bigint PRIMARY KEY, body text);
GRANT SELECT, INSERT ON public.deliveries TO rendezvous_regress_worker;
SET ROLE rendezvous_regress_worker;
SELECT rendezvous.heartbeat('worker-a') IS NOT NULL AS live;

-- Admitted with a retry policy: 2 attempts, no backoff.
SELECT run_id AS first_run FROM rendezvous.spawn_run('acme', 'deliver', '{"n": 1}', 'msg-1', 2, '0 s') \gset
SELECT run_id AS second_run FROM rendezvous.spawn_run('acme', 'deliver', '{"n": 2}', 'msg-2', 1) \gset
SELECT run_id AS other_run FROM rendezvous.spawn_run('acme', 'other') \gset

-- Claims: oldest first, only the workflows asked for, at most max; attempt 1, token 1.
SELECT run_id = :first_run AS first, token, tenant_id, workflow_ref, input, attempt
  FROM rendezvous.claim_runs('worker-a', 1, '30 s', ARRAY['deliver'], '0 s');
SELECT count(*) AS nothing_else_of_other_workflows FROM rendezvous.claim_runs('worker-a', 10, '30 s', ARRAY['nope'], '0 s');
-- A running run is not claimed again while its holder's session lives and its lease runs.
SELECT run_id = :second_run AS only_the_second FROM rendezvous.claim_runs('worker-a', 10, '30 s', ARRAY['deliver'], '0 s');

-- Fencing in the caller's transaction: a current token passes, a stale one raises RZ001.
BEGIN;
SELECT rendezvous.assert_run(:first_run, 1);
INSERT INTO public.deliveries VALUES (:first_run, 'sent');
SELECT rendezvous.complete_run(:first_run, 1, '{"delivered": true}');
COMMIT;
SELECT rendezvous.complete_run(:first_run, 1) AS repeating_is_harmless;
SELECT rendezvous.complete_run(:first_run, 2) AS stale_token;
SELECT regress.err(format('SELECT rendezvous.assert_run(%s, 1)', :first_run)) AS finished_run_fences;
SELECT regress.err(format('SELECT rendezvous.assert_run(%s, 7)', :second_run)) AS stale_token_fences;
SELECT regress.err('SELECT rendezvous.assert_run(999999, 1)') AS no_such_run;
-- A finished run never runs again: fail, renew and complete of it change nothing.
SELECT rendezvous.fail_run(:first_run, 1, 'too late') AS fail_after_success;
SELECT rendezvous.renew_run(:first_run, 1) AS renew_after_success;

-- Failures: retried while attempts are left (pending again at its backoff), then failed for good.
SELECT rendezvous.fail_run(:second_run, 1, 'smtp 451') AS left_in;
SELECT rendezvous.fail_run(:second_run, 1, 'again') AS stale_fail;
RESET ROLE;
SELECT state, attempts, max_attempts, last_error, holder IS NULL AS no_holder
  FROM rendezvous.runs WHERE run_id IN (:first_run, :second_run) ORDER BY run_id;
SET ROLE rendezvous_regress_worker;

-- A run with two attempts: failed once, retried (attempt 2, a higher token), failed for good.
SELECT run_id AS retried FROM rendezvous.spawn_run('acme', 'deliver', '{"n": 3}', 'msg-3', 2, '0 s') \gset
SELECT token AS t1 FROM rendezvous.claim_runs('worker-a', 1, '30 s', ARRAY['deliver'], '0 s') \gset
SELECT rendezvous.fail_run(:retried, :t1, 'first failure') AS after_first;
SELECT token > :t1 AS higher_token, attempt FROM rendezvous.claim_runs('worker-a', 1, '30 s', ARRAY['deliver'], '0 s') \gset
SELECT :'higher_token' AS higher_token, :attempt AS attempt;
SELECT rendezvous.fail_run(:retried, :t1 + 1, 'second failure') AS after_second;
SELECT count(*) AS failed_for_good_is_never_claimed FROM rendezvous.claim_runs('worker-a', 10, '30 s', ARRAY['deliver'], '0 s');

-- A batch that names one claim twice completes it once and answers true for both, and the
-- same batch again answers true for both (repeats); a stale token beside it answers false.
SELECT run_id AS twice FROM rendezvous.spawn_run('acme', 'deliver', '{"n": 6}', 'msg-6') \gset
SELECT token AS twice_token FROM rendezvous.claim_runs('worker-a', 1, '30 s', ARRAY['deliver'], '0 s') \gset
SELECT ord, completed FROM rendezvous.complete_runs(ARRAY[:twice, :twice, :twice]::bigint[], ARRAY[:twice_token, :twice_token, :twice_token - 1]::bigint[]);
SELECT ord, completed FROM rendezvous.complete_runs(ARRAY[:twice, :twice]::bigint[], ARRAY[:twice_token, :twice_token]::bigint[]);

-- A backoff: the retry is not claimable before it, by the database clock.
SELECT run_id AS backed_off FROM rendezvous.spawn_run('acme', 'deliver', '{"n": 4}', 'msg-4', 3, '1 hour') \gset
SELECT token AS t4 FROM rendezvous.claim_runs('worker-a', 1, '30 s', ARRAY['deliver'], '0 s') \gset
SELECT rendezvous.fail_run(:backed_off, :t4, 'busy') AS left_in;
SELECT count(*) AS not_before_its_backoff FROM rendezvous.claim_runs('worker-a', 10, '30 s', ARRAY['deliver'], '0 s');
SELECT rendezvous.next_runnable_at(ARRAY['deliver']) > now() + interval '59 minutes' AS next_runnable_in_an_hour;

-- The claim ends with its session: a run claimed here is taken over at once from a new session,
-- with a higher token, and the old token completes nothing.
SELECT run_id AS orphan FROM rendezvous.spawn_run('acme', 'deliver', '{"n": 5}', 'msg-5') \gset
SELECT token AS orphan_token FROM rendezvous.claim_runs('worker-a', 1, '1 hour', ARRAY['deliver'], '0 s') \gset
RESET ROLE;
SELECT pg_backend_pid() AS old_pid, rendezvous._session_started() AS old_started \gset
\c -
-- A backend's exit is asynchronous: wait until the old session is gone (on a busy machine the
-- next statement could otherwise still see it).
SELECT set_config('regress.old_session', :'old_pid' || '|' || :'old_started', false) AS noted \gset
DO $$
DECLARE
    s text[] := string_to_array(current_setting('regress.old_session'), '|');
BEGIN
    FOR i IN 1 .. 1000 LOOP
        PERFORM pg_catalog.pg_stat_clear_snapshot();
        EXIT WHEN rendezvous._holder_gone(s[1]::integer, s[2]::timestamptz);
        PERFORM pg_catalog.pg_sleep(0.01);
    END LOOP;
END
$$;
SET ROLE rendezvous_regress_worker;
SELECT run_id = :orphan AS taken_over, token > :orphan_token AS higher_token, attempt
  FROM rendezvous.claim_runs('worker-b', 1, '1 hour', ARRAY['deliver'], '0 s');
SELECT rendezvous.complete_run(:orphan, :orphan_token) AS old_holder_refused;

-- HRW placement: with two live hosts, a run waits grace for a host that does not rank first.
SELECT rendezvous.heartbeat('worker-a') IS NOT NULL AND rendezvous.heartbeat('worker-b') IS NOT NULL AS both_live;
SELECT run_id AS placed FROM rendezvous.spawn_run('acme', 'placed') \gset
SELECT (rendezvous.ranked('run:' || :placed, ARRAY['worker-a', 'worker-b']))[2] AS second_host \gset
SELECT count(*) AS second_in_rank_waits FROM rendezvous.claim_runs(:'second_host', 1, '30 s', ARRAY['placed'], '1 hour');
SELECT count(*) AS first_in_rank_claims
  FROM rendezvous.claim_runs((rendezvous.ranked('run:' || :placed, ARRAY['worker-a', 'worker-b']))[1], 1, '30 s', ARRAY['placed'], '1 hour');

-- A host that ranks late reads the runs its claim walks (4 × max + 1,000 at most, each then
-- found by id), not the backlog, and takes the walked runs it ranks first for, in queue order:
-- 20,000 pending runs, 50 live hosts, a grace that keeps each host to its rank-0 runs. Rows read
-- from the runs table and its indexes are counted by the transaction's own statistics, with
-- PL/pgSQL's plans custom and generic (a generic plan of the lock cursor once filtered every
-- pending run). Each claim is rolled back to a savepoint, so all see the same queue.
SELECT count(*) AS backlog FROM generate_series(1, 2) g,
       rendezvous.spawn_runs('acme', (SELECT array_agg('bulk'::text) FROM generate_series(1, 10000)));
RESET ROLE;
ANALYZE rendezvous.runs;
SET ROLE rendezvous_regress_worker;
\set runs_reads 'SELECT sum(pg_catalog.pg_stat_get_xact_tuples_returned(o)) FROM (SELECT \'rendezvous.runs\'::regclass::oid UNION ALL SELECT indexrelid FROM pg_catalog.pg_index WHERE indrelid = \'rendezvous.runs\'::regclass) r(o)'
BEGIN;
SELECT count(rendezvous.heartbeat('late-' || i)) AS late_hosts FROM generate_series(1, 50) i;
RESET ROLE;
-- Just these 50, live for the whole case, however slow the machine.
DELETE FROM rendezvous.hosts WHERE host_id NOT LIKE 'late-%';
UPDATE rendezvous.hosts SET last_seen = now() + interval '1 hour';
SELECT coalesce(array_agg(w.run_id ORDER BY w.runnable_at, w.run_id) FILTER (WHERE w.n <= 4 * 1 + 1000), '{}') AS may_take_1,
       coalesce(array_agg(w.run_id ORDER BY w.runnable_at, w.run_id), '{}') AS may_take_100
  FROM (SELECT q.*, row_number() OVER (ORDER BY q.runnable_at, q.run_id) AS n
          FROM (SELECT r.run_id, r.runnable_at FROM rendezvous.runs r
                 WHERE r.state = 'pending' AND r.workflow_ref = 'bulk'
                 ORDER BY r.runnable_at, r.run_id LIMIT 4 * 100 + 1000) q) w,
       (SELECT array_agg(m.host_id) AS hosts, array_agg(m.weight) AS weights FROM rendezvous.live_members() m) live
 WHERE (rendezvous.ranked('run:' || w.run_id, live.hosts, live.weights))[1] = 'late-1' \gset
SET ROLE rendezvous_regress_worker;
SELECT cardinality(:'may_take_100'::bigint[]) BETWEEN 2 AND 100 AS late_1_ranks_first_for_a_few;
SET LOCAL plan_cache_mode = force_custom_plan;
SAVEPOINT claim;
:runs_reads \gset before_
SELECT coalesce(array_agg(run_id), '{}') = (:'may_take_1'::bigint[])[1:1] AS custom_max_1_takes_its_first
  FROM rendezvous.claim_runs('late-1', 1, '30 s', ARRAY['bulk'], '1 hour');
SELECT sum - :before_sum <= 2 * (4 * 1 + 1000) + 100 AS custom_max_1_reads_its_walk FROM (:runs_reads) r(sum);
ROLLBACK TO claim;
:runs_reads \gset before_
SELECT coalesce(array_agg(run_id), '{}') = :'may_take_100'::bigint[] AS custom_max_100_takes_its_own
  FROM rendezvous.claim_runs('late-1', 100, '30 s', ARRAY['bulk'], '1 hour');
SELECT sum - :before_sum <= 2 * (4 * 100 + 1000) + 100 AS custom_max_100_reads_its_walk FROM (:runs_reads) r(sum);
ROLLBACK TO claim;
SET LOCAL plan_cache_mode = force_generic_plan;
:runs_reads \gset before_
SELECT coalesce(array_agg(run_id), '{}') = (:'may_take_1'::bigint[])[1:1] AS generic_max_1_takes_its_first
  FROM rendezvous.claim_runs('late-1', 1, '30 s', ARRAY['bulk'], '1 hour');
SELECT sum - :before_sum <= 2 * (4 * 1 + 1000) + 100 AS generic_max_1_reads_its_walk FROM (:runs_reads) r(sum);
ROLLBACK TO claim;
:runs_reads \gset before_
SELECT coalesce(array_agg(run_id), '{}') = :'may_take_100'::bigint[] AS generic_max_100_takes_its_own
  FROM rendezvous.claim_runs('late-1', 100, '30 s', ARRAY['bulk'], '1 hour');
SELECT sum - :before_sum <= 2 * (4 * 100 + 1000) + 100 AS generic_max_100_reads_its_walk FROM (:runs_reads) r(sum);
ROLLBACK;
RESET ROLE;
DELETE FROM rendezvous.runs WHERE workflow_ref = 'bulk';
SET ROLE rendezvous_regress_worker;

-- Claims and completions find each run by its key, also when the statistics say no run is
-- pending or running (a burst admitted to an idle system since the last ANALYZE): 9,000
-- finished runs of history, then 5,000 admitted. Index entries read (the transaction's own
-- statistics), with PL/pgSQL's plans custom and generic. A claim of 100 reads its walk (4 ×
-- 100 + 1,000) and one probe a walked run; a plan that joined the walk to every pending run
-- read them all. Then, held by one host, 100 are completed, and the same 100 again (repeats
-- answer true): 3 probes an element a call, each meeting 2 or 3 row versions; a plan that
-- scanned the running runs for each batch and looked for repeats among the finished ones read
-- over 10,000. (Where the planner reads the table once for a batch's keys instead, by its
-- costs at this size, each row is read once: that is not counted.)
SELECT count(*) AS history FROM rendezvous.spawn_runs('acme', (SELECT array_agg('history'::text) FROM generate_series(1, 9000)));
RESET ROLE;
UPDATE rendezvous.runs SET state = 'succeeded' WHERE workflow_ref = 'history';
VACUUM (ANALYZE) rendezvous.runs;
SET ROLE rendezvous_regress_worker;
\set index_reads 'SELECT sum(pg_catalog.pg_stat_get_xact_tuples_returned(indexrelid)) FROM pg_catalog.pg_index WHERE indrelid = \'rendezvous.runs\'::regclass'
SELECT count(*) AS burst FROM rendezvous.spawn_runs('acme', (SELECT array_agg('burst'::text) FROM generate_series(1, 5000)));
BEGIN;
SET LOCAL plan_cache_mode = force_custom_plan;
SAVEPOINT claim;
:index_reads \gset before_
SELECT count(*) = 100 AS custom_claim_takes_100 FROM rendezvous.claim_runs('worker-a', 100, '30 s', ARRAY['burst'], '0 s');
SELECT sum - :before_sum <= 2 * (4 * 100 + 1000) + 100 AS custom_claim_reads_its_walk FROM (:index_reads) r(sum);
ROLLBACK TO claim;
SET LOCAL plan_cache_mode = force_generic_plan;
:index_reads \gset before_
SELECT count(*) = 100 AS generic_claim_takes_100 FROM rendezvous.claim_runs('worker-a', 100, '30 s', ARRAY['burst'], '0 s');
SELECT sum - :before_sum <= 2 * (4 * 100 + 1000) + 100 AS generic_claim_reads_its_walk FROM (:index_reads) r(sum);
ROLLBACK;
BEGIN;
CREATE TEMP TABLE burst_claims AS
SELECT run_id, token FROM rendezvous.claim_runs('worker-a', 5000, '30 s', ARRAY['burst'], '0 s');
SELECT count(*) AS held_by_one_host FROM burst_claims;
SELECT array_agg(run_id ORDER BY run_id DESC) AS ids, array_agg(token ORDER BY run_id DESC) AS tokens
  FROM (SELECT * FROM burst_claims ORDER BY run_id LIMIT 100) b \gset burst_
SET LOCAL plan_cache_mode = force_custom_plan;
SAVEPOINT batch;
:index_reads \gset before_
SELECT bool_and(completed) AND count(*) = 100 AS custom_batch_completes
  FROM rendezvous.complete_runs(:'burst_ids', :'burst_tokens');
SELECT bool_and(completed) AND count(*) = 100 AS custom_repeat_answers_true
  FROM rendezvous.complete_runs(:'burst_ids', :'burst_tokens');
SELECT sum - :before_sum <= 24 * 100 AS custom_batch_reads_its_runs FROM (:index_reads) r(sum);
ROLLBACK TO batch;
SET LOCAL plan_cache_mode = force_generic_plan;
:index_reads \gset before_
SELECT bool_and(completed) AND count(*) = 100 AS generic_batch_completes
  FROM rendezvous.complete_runs(:'burst_ids', :'burst_tokens');
SELECT bool_and(completed) AND count(*) = 100 AS generic_repeat_answers_true
  FROM rendezvous.complete_runs(:'burst_ids', :'burst_tokens');
SELECT sum - :before_sum <= 24 * 100 AS generic_batch_reads_its_runs FROM (:index_reads) r(sum);
ROLLBACK;
-- Batch admission reads only what its repeats yielded to, each by its key: with 5,000 keyed
-- runs admitted since the last ANALYZE (the statistics say the tenant has none), a batch of
-- 100 new keys and 100 repeats reads a few index entries an element. A plan that joined the
-- batch to the tenant's keyed runs read all 5,000 on every call (21 of a call's 28 ms with
-- 50,000 runs).
SELECT count(*) AS keyed_history
  FROM rendezvous.spawn_runs('acme', (SELECT array_agg('keyed'::text) FROM generate_series(1, 5000)), NULL,
                             (SELECT array_agg('keyed/' || i) FROM generate_series(1, 5000) i));
BEGIN;
SET LOCAL plan_cache_mode = force_custom_plan;
SAVEPOINT admit;
:index_reads \gset before_
SELECT count(*) FILTER (WHERE created) = 100 AND count(*) FILTER (WHERE NOT created AND same_request) = 100 AS custom_batch_admits
  FROM rendezvous.spawn_runs('acme', (SELECT array_agg('keyed'::text) FROM generate_series(4901, 5100)), NULL,
                             (SELECT array_agg('keyed/' || i) FROM generate_series(4901, 5100) i));
SELECT sum - :before_sum <= 5 * 200 AS custom_admission_reads_its_keys FROM (:index_reads) r(sum);
ROLLBACK TO admit;
SET LOCAL plan_cache_mode = force_generic_plan;
:index_reads \gset before_
SELECT count(*) FILTER (WHERE created) = 100 AND count(*) FILTER (WHERE NOT created AND same_request) = 100 AS generic_batch_admits
  FROM rendezvous.spawn_runs('acme', (SELECT array_agg('keyed'::text) FROM generate_series(4901, 5100)), NULL,
                             (SELECT array_agg('keyed/' || i) FROM generate_series(4901, 5100) i));
SELECT sum - :before_sum <= 5 * 200 AS generic_admission_reads_its_keys FROM (:index_reads) r(sum);
ROLLBACK;
RESET ROLE;
DELETE FROM rendezvous.runs WHERE workflow_ref IN ('burst', 'history', 'keyed');
SET ROLE rendezvous_regress_worker;

-- Cancelling is an admin's; a cancelled run never runs, and its holder's token is refused.
SELECT run_id AS doomed FROM rendezvous.spawn_run('acme', 'doomed') \gset
SELECT token AS doomed_token FROM rendezvous.claim_runs('worker-a', 1, '30 s', ARRAY['doomed'], '0 s') \gset
SELECT regress.err(format('SELECT rendezvous.cancel_run(%s)', :doomed)) AS host_may_not_cancel;
RESET ROLE;
SET ROLE rendezvous_regress_ops;
SELECT rendezvous.cancel_run(:doomed) AS cancelled;
SELECT rendezvous.cancel_run(:doomed) AS already_finished;
SELECT rendezvous.cancel_run(:first_run) AS succeeded_stays;
SELECT workflow_ref, pending, runnable, running FROM rendezvous.status_run_queue ORDER BY 1;
RESET ROLE;
SET ROLE rendezvous_regress_worker;
SELECT rendezvous.complete_run(:doomed, :doomed_token) AS cancelled_refuses_completion;
SELECT rendezvous.renew_run(:doomed, :doomed_token) AS cancelled_refuses_renewal;

-- Bad input: a clear error with a SQLSTATE.
SELECT regress.err($$SELECT * FROM rendezvous.claim_runs(NULL)$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_runs('')$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_runs('h', 0)$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_runs('h', 10001)$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_runs('h', 1, '0 s')$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_runs('h', 1, '30 s', ARRAY[NULL::text])$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_runs('h', 1, '30 s', NULL, '-1 s')$$);
SELECT regress.err($$SELECT rendezvous.complete_run(NULL, 1)$$);
SELECT regress.err($$SELECT rendezvous.fail_run(1, NULL, 'x')$$);
SELECT regress.err($$SELECT rendezvous.renew_run(1, 1, NULL)$$);
SELECT regress.err($$SELECT rendezvous.assert_run(NULL, 1)$$);
-- And no table access for hosts.
SELECT regress.err($$UPDATE rendezvous.runs SET state = 'succeeded'$$);
RESET ROLE;
DROP TABLE public.deliveries;
DROP OWNED BY rendezvous_regress_worker, rendezvous_regress_ops;
DROP ROLE rendezvous_regress_worker, rendezvous_regress_ops;
