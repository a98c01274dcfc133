-- Durable runs, as a host with EXECUTE only drives them (docs/sql.md, "Durable runs"):
-- checkpointed steps (the first record wins, a stale holder refused in its own transaction),
-- durable timers, signals before and after the wait, children once per key, cancellation of a
-- tree, and observers reading steps.
CREATE ROLE rendezvous_regress_agent LOGIN;
GRANT rendezvous_host TO rendezvous_regress_agent;
CREATE ROLE rendezvous_regress_watcher LOGIN;
GRANT rendezvous_observer TO rendezvous_regress_watcher;
CREATE ROLE rendezvous_regress_boss LOGIN;
GRANT rendezvous_admin TO rendezvous_regress_boss;
CREATE TABLE public.answers (run_id bigint PRIMARY KEY, answer text);
GRANT SELECT, INSERT ON public.answers TO rendezvous_regress_agent;
-- Errors without the run ids in them (which depend on the suites before this one).
CREATE FUNCTION regress.err_no_ids(stmt text) RETURNS text LANGUAGE sql AS $$
    SELECT regexp_replace(regexp_replace(regress.err(stmt), 'run \d+', 'run N', 'g'), 'child:\d+:', 'child:N:', 'g')
$$;
SET ROLE rendezvous_regress_agent;

-- Steps: recorded in order; recording one again returns false and changes nothing.
SELECT run_id AS agent FROM rendezvous.spawn_run('durable', 'agent', '{"q": "why"}', 'ask-1') \gset
SELECT token AS t1, attempt FROM rendezvous.claim_runs('host-a', 1, '30 s', ARRAY['agent'], '0 s') \gset
SELECT :attempt AS first_attempt;
SELECT rendezvous.record_step(:agent, :t1, 'plan', '{"tools": ["search"]}') AS plan_recorded;
SELECT rendezvous.record_step(:agent, :t1, 'inference', '"42"') AS inference_recorded;
SELECT rendezvous.record_step(:agent, :t1, 'plan', '{"tools": []}') AS plan_again;
SELECT rendezvous.record_step(:agent, :t1, 'no-output') AS without_output;
SELECT step, output, attempt FROM rendezvous.run_steps(:agent);

-- A step's effects and its checkpoint commit together: a stale token refuses both (RZ001).
BEGIN;
INSERT INTO public.answers VALUES (:agent, 'forty-two');
SELECT regress.err_no_ids(format('SELECT rendezvous.record_step(%s, %s, %L)', :agent, :t1 + 100, 'write')) AS stale_holder;
ROLLBACK;
BEGIN;
INSERT INTO public.answers VALUES (:agent, 'forty-two');
SELECT rendezvous.record_step(:agent, :t1, 'write', '{"rows": 1}') AS write_recorded;
COMMIT;
SELECT answer FROM public.answers WHERE run_id = :agent;

-- The holder dies (its claim handed back): the next attempt reads the steps back.
SELECT rendezvous.release_run(:agent, :t1) AS released;
SELECT token AS t2 FROM rendezvous.claim_runs('host-b', 1, '30 s', ARRAY['agent'], '0 s') \gset
SELECT regress.err_no_ids(format('SELECT rendezvous.record_step(%s, %s, %L)', :agent, :t1, 'zombie')) AS zombie_refused;
SELECT string_agg(step, ', ') AS replayed FROM rendezvous.run_steps(:agent);
SELECT rendezvous.record_step(:agent, :t2, 'answer', '"done"') AS answer_recorded;

-- A durable timer: the slot given back, no attempt counted, not claimable before its end.
RESET ROLE;
SELECT attempts AS attempts_before FROM rendezvous.runs WHERE run_id = :agent \gset
SET ROLE rendezvous_regress_agent;
SELECT rendezvous.sleep_run(:agent, :t2, clock_timestamp() + interval '1 hour') AS parked;
RESET ROLE;
SELECT state, waiting_for, attempts = :attempts_before - 1 AS attempt_given_back, holder IS NULL AS no_holder,
       runnable_at > now() + interval '59 minutes' AS until_its_end
  FROM rendezvous.runs WHERE run_id = :agent;
SET ROLE rendezvous_regress_agent;
SELECT count(*) AS not_claimable_while_asleep FROM rendezvous.claim_runs('host-a', 10, '30 s', ARRAY['agent'], '0 s');
RESET ROLE;
UPDATE rendezvous.runs SET runnable_at = now() - interval '1 s' WHERE run_id = :agent; -- the hour passes
SET ROLE rendezvous_regress_agent;
SELECT token AS t3, attempt AS attempt_after_sleep FROM rendezvous.claim_runs('host-a', 1, '30 s', ARRAY['agent'], '0 s') \gset
SELECT :attempt_after_sleep = :attempts_before AS same_attempt;
SELECT rendezvous.sleep_run(:agent, :t3, clock_timestamp() - interval '1 s') AS until_passed_carry_on;

-- Signals: one sent before the wait is received at once; twice counts once.
SELECT rendezvous.signal_run(:agent, 'approval', '{"by": "ann"}') AS delivered;
SELECT rendezvous.signal_run(:agent, 'approval', '{"by": "bob"}') AS counted_once;
SELECT outcome, payload FROM rendezvous.await_signal(:agent, :t3, 'approval', clock_timestamp() + interval '1 hour');
-- One sent after the wait wakes the parked run at once.
SELECT outcome FROM rendezvous.await_signal(:agent, :t3, 'webhook', clock_timestamp() + interval '1 hour');
RESET ROLE;
SELECT state, waiting_for, runnable_at > now() AS asleep FROM rendezvous.runs WHERE run_id = :agent;
SET ROLE rendezvous_regress_agent;
SELECT rendezvous.signal_run(:agent, 'webhook', '[1, 2]') AS delivered;
RESET ROLE;
SELECT state, waiting_for, runnable_at <= clock_timestamp() AS runnable_now FROM rendezvous.runs WHERE run_id = :agent;
SET ROLE rendezvous_regress_agent;
SELECT token AS t4 FROM rendezvous.claim_runs('host-b', 1, '30 s', ARRAY['agent'], '0 s') \gset
SELECT outcome, payload FROM rendezvous.await_signal(:agent, :t4, 'webhook', clock_timestamp() + interval '1 hour');
SELECT outcome FROM rendezvous.await_signal(:agent, :t4, 'never', clock_timestamp() - interval '1 s') AS timed_out;

-- Children: one per key however often the parent asks; the parent parks until all ended.
SELECT run_id AS c1, created FROM rendezvous.spawn_child(:agent, :t4, 'summarize', 'child', '{"part": 1}') \gset
SELECT :'created' AS c1_created;
SELECT run_id = :c1 AS same_child, created FROM rendezvous.spawn_child(:agent, :t4, 'summarize', 'child', '{"part": 1}');
-- (One attempt only: its first failure ends it.)
SELECT run_id AS c2 FROM rendezvous.spawn_child(:agent, :t4, 'translate', 'child', '{"part": 2}', 1) \gset
SELECT outcome FROM rendezvous.await_children(:agent, :t4, clock_timestamp() + interval '1 hour');
SELECT count(*) AS children_claimed FROM rendezvous.claim_runs('host-a', 10, '30 s', ARRAY['child'], '0 s');
SELECT rendezvous.complete_run(:c1, 1, '"short"') AS first_child_done;
RESET ROLE;
SELECT state, waiting_for FROM rendezvous.runs WHERE run_id = :agent;
SET ROLE rendezvous_regress_agent;
SELECT rendezvous.fail_run(:c2, 1, 'no language') AS last_child_ends;
RESET ROLE;
SELECT state, waiting_for, runnable_at <= clock_timestamp() AS runnable_now FROM rendezvous.runs WHERE run_id = :agent;
SET ROLE rendezvous_regress_agent;
SELECT token AS t5 FROM rendezvous.claim_runs('host-a', 1, '30 s', ARRAY['agent'], '0 s') \gset
SELECT outcome FROM rendezvous.await_children(:agent, :t5, clock_timestamp() + interval '1 hour');
SELECT child_key, child_run_id = :c1 AS is_c1, state, output, last_error FROM rendezvous.run_children(:agent);
SELECT rendezvous.set_run_progress(:agent, :t5, '{"phase": "answering"}') AS progress_set;
SELECT rendezvous.set_run_progress(:agent, :t5 - 1, '{}') AS stale_progress;
RESET ROLE;

-- Observers see a run's steps, children and progress.
SET ROLE rendezvous_regress_watcher;
SELECT count(*) AS steps_seen FROM rendezvous.run_steps(:agent);
SELECT count(*) AS children_seen FROM rendezvous.run_children(:agent);
SELECT state, progress, steps, last_step FROM rendezvous.status_runs WHERE run_id = :agent;
SELECT regress.err(format('SELECT rendezvous.signal_run(%s, %L)', :agent, 'x')) AS observer_may_not_signal;
RESET ROLE;

-- Cancellation reaches the tree: the parent and its unfinished children.
SET ROLE rendezvous_regress_agent;
SELECT run_id AS c3 FROM rendezvous.spawn_child(:agent, :t5, 'review', 'child') \gset
SELECT regress.err(format('SELECT rendezvous.cancel_run(%s)', :agent)) AS host_may_not_cancel;
RESET ROLE;
SET ROLE rendezvous_regress_boss;
SELECT rendezvous.cancel_run(:agent) AS cancelled;
RESET ROLE;
SELECT run_id = :agent AS parent, state FROM rendezvous.runs WHERE run_id IN (:agent, :c1, :c2, :c3) ORDER BY run_id;
SET ROLE rendezvous_regress_agent;
SELECT regress.err_no_ids(format('SELECT rendezvous.record_step(%s, %s, %L)', :agent, :t5, 'late')) AS cancelled_refuses_steps;
SELECT rendezvous.signal_run(:agent, 'late') AS finished_takes_no_signal;

-- A dispatch key taken by a run that is not the parent's child is refused.
SELECT run_id AS p2 FROM rendezvous.spawn_run('durable', 'agent', '{}', 'ask-2') \gset
SELECT token AS p2t FROM rendezvous.claim_runs('host-a', 1, '30 s', ARRAY['agent'], '0 s') \gset
SELECT run_id AS squatter FROM rendezvous.spawn_run('durable', 'child', '{}', format('child:%s:k', :p2)) \gset
SELECT regress.err_no_ids(format('SELECT rendezvous.spawn_child(%s, %s, %L, %L)', :p2, :p2t, 'k', 'child')) AS not_a_child;

-- Bad input: a clear error with a SQLSTATE.
SELECT regress.err(format('SELECT rendezvous.record_step(%s, %s, NULL)', :p2, :p2t));
SELECT regress.err(format('SELECT rendezvous.record_step(%s, %s, %L)', :p2, :p2t, ''));
SELECT regress.err(format('SELECT rendezvous.record_step(%s, %s, %L)', :p2, :p2t, repeat('s', 513)));
SELECT regress.err($$SELECT rendezvous.record_step(NULL, 1, 'a')$$);
SELECT regress.err($$SELECT rendezvous.record_step(999999, 1, 'a')$$);
SELECT regress.err($$SELECT * FROM rendezvous.run_steps(NULL)$$);
SELECT regress.err(format('SELECT rendezvous.sleep_run(%s, %s, NULL)', :p2, :p2t));
SELECT regress.err(format('SELECT rendezvous.sleep_run(%s, %s, %L)', :p2, :p2t, 'infinity'));
SELECT regress.err($$SELECT rendezvous.signal_run(NULL, 'a')$$);
SELECT regress.err($$SELECT rendezvous.signal_run(1, NULL)$$);
SELECT regress.err($$SELECT rendezvous.signal_run(1, '')$$);
SELECT regress.err(format('SELECT rendezvous.await_signal(%s, %s, %L, %L)', :p2, :p2t, 'x', '-infinity'));
SELECT regress.err(format('SELECT rendezvous.await_children(%s, %s, NULL)', :p2, :p2t));
SELECT regress.err(format('SELECT rendezvous.spawn_child(%s, %s, %L, %L)', :p2, :p2t, repeat('k', 257), 'child'));
SELECT regress.err(format('SELECT rendezvous.spawn_child(%s, %s, %L, NULL)', :p2, :p2t, 'k2'));
SELECT regress.err(format('SELECT rendezvous.set_run_progress(%s, %s, %L)', :p2, :p2t, to_jsonb(repeat('p', 70000))));
SELECT regress.err($$SELECT * FROM rendezvous.run_children(NULL)$$);
-- And no table access for hosts.
SELECT regress.err($$SELECT * FROM rendezvous.steps$$);
SELECT regress.err($$INSERT INTO rendezvous.signals (run_id, name) VALUES (1, 'forged')$$);
SELECT regress.err($$SELECT rendezvous._park_run(1, now(), 'x')$$);
RESET ROLE;
DROP TABLE public.answers;
DROP FUNCTION regress.err_no_ids(text);
DROP OWNED BY rendezvous_regress_agent, rendezvous_regress_watcher, rendezvous_regress_boss;
DROP ROLE rendezvous_regress_agent, rendezvous_regress_watcher, rendezvous_regress_boss;
