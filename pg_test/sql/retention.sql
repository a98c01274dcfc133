-- Retention: defaults, settings, bounded pruning of only what is old and finished, and the
-- indexes the status views and the scheduler's polls read (costs that do not grow with history).
SELECT kind, keep, is_default FROM rendezvous.retention_settings ORDER BY kind;

-- Bad settings and bad batch sizes are refused with 22023.
SELECT regress.err($$SELECT rendezvous.set_retention('jobs', '1 day')$$);
SELECT regress.err($$SELECT rendezvous.set_retention(NULL, '1 day')$$);
SELECT regress.err($$SELECT rendezvous.set_retention('runs', '-1 day')$$);
SELECT regress.err($$SELECT rendezvous.set_retention('runs', '300000 years')$$);
SELECT regress.err($$SELECT rendezvous.prune(0)$$);
SELECT regress.err($$SELECT rendezvous.prune(NULL)$$);
SELECT regress.err($$SELECT rendezvous.prune(100001)$$);

-- History: 5 firings completed two days ago, 1 completed now, 2 unfinished from two days ago,
-- 1 failed for good two days ago; 4 runs finished two days ago, 1 now, 1 pending from then;
-- 3 hosts silent for two days, 1 live.
TRUNCATE rendezvous.firings, rendezvous.runs, rendezvous.steps, rendezvous.signals, rendezvous.hosts;
-- (Written directly, as superuser: each row names its partition, day_mod_8. "Two days ago" is
-- noon UTC of that day: the old rows share one partition at any time of day.)
\set two_days_ago '(date_trunc(\'day\', now(), \'UTC\') - interval \'2 days\' + interval \'12 hours\')'
INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, completed_at, day_mod_8)
SELECT 'old-' || i, 'ret', :two_days_ago + i * interval '1 s', 1, :two_days_ago, :two_days_ago + i * interval '1 s',
       rendezvous._day_mod_8(:two_days_ago)
  FROM generate_series(1, 5) i;
INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, completed_at, day_mod_8)
VALUES ('new', 'ret', now(), 1, now(), now(), rendezvous._day_mod_8(now()));
INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, day_mod_8)
VALUES ('open-1', 'ret', :two_days_ago, 0, :two_days_ago, rendezvous._day_mod_8(:two_days_ago)),
       ('open-2', 'ret', :two_days_ago, 0, :two_days_ago, rendezvous._day_mod_8(:two_days_ago));
INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, failures, failed_at, day_mod_8)
VALUES ('failed', 'ret', :two_days_ago, 1, :two_days_ago, 3, :two_days_ago, rendezvous._day_mod_8(:two_days_ago));
INSERT INTO rendezvous.runs (tenant_id, workflow_ref, input, state, created_at, updated_at)
SELECT 't', 'w', '{}', 'succeeded', now() - interval '9 days', now() - interval '8 days' FROM generate_series(1, 4);
INSERT INTO rendezvous.runs (tenant_id, workflow_ref, input, state, created_at, updated_at)
VALUES ('t', 'w', '{}', 'succeeded', now(), now()), ('t', 'w', '{}', 'pending', now() - interval '9 days', now() - interval '9 days');
INSERT INTO rendezvous.hosts (host_id, first_seen, last_seen)
SELECT 'dead-' || i, now() - interval '3 days', now() - interval '2 days' FROM generate_series(1, 3) i;
SELECT rendezvous.heartbeat('alive') IS NOT NULL AS alive;

-- Bounded steps, oldest first: 4 at most of each kind a call, until a call returns fewer.
SELECT kind, deleted FROM rendezvous.prune(4) ORDER BY kind;
SELECT kind, deleted FROM rendezvous.prune(4) ORDER BY kind;
SELECT kind, deleted FROM rendezvous.prune(4) ORDER BY kind;
-- What is left: recent and unfinished work, and the live host.
SELECT firing_key FROM rendezvous.firings ORDER BY 1;
SELECT state, count(*) FROM rendezvous.runs GROUP BY state ORDER BY 1;
SELECT host_id FROM rendezvous.hosts ORDER BY 1;

-- The purges in bounded steps: finished rows older than the age only, at most max_rows a call,
-- oldest first (two runs finished 8 days ago, one now, one pending).
INSERT INTO rendezvous.runs (tenant_id, workflow_ref, input, state, created_at, updated_at)
VALUES ('t', 'old-1', '{}', 'succeeded', now() - interval '9 days', now() - interval '8 days' - interval '1 s'),
       ('t', 'old-2', '{}', 'failed', now() - interval '9 days', now() - interval '8 days');
INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, completed_at, day_mod_8)
VALUES ('old-a', 'ret', now() - interval '3 days', 1, now(), now() - interval '3 days' - interval '1 s', rendezvous._day_mod_8(now() - interval '3 days')),
       ('old-b', 'ret', now() - interval '3 days', 1, now(), now() - interval '3 days', rendezvous._day_mod_8(now() - interval '3 days'));
SELECT rendezvous.purge_runs('1 day', 1) AS step_1;
SELECT array_agg(workflow_ref ORDER BY workflow_ref) AS left_1 FROM rendezvous.runs;
SELECT rendezvous.purge_runs('1 day', 1) AS step_2, rendezvous.purge_runs('1 day', 1) AS step_3;
SELECT rendezvous.purge_firings('1 day', 1) AS step_1;
SELECT array_agg(firing_key ORDER BY firing_key) AS left_1 FROM rendezvous.firings;
SELECT rendezvous.purge_firings('1 day', 5) AS step_2;
SELECT state, count(*) FROM rendezvous.runs GROUP BY state ORDER BY 1;
SELECT regress.err($$SELECT rendezvous.purge_runs('1 day', 0)$$);
SELECT regress.err($$SELECT rendezvous.purge_firings('1 day', NULL)$$);
SELECT regress.err($$SELECT rendezvous.purge_firings('-1 day', 10)$$);

-- Kept for ever, or shorter: a setting per kind; reset returns to the default.
SELECT rendezvous.set_retention('firings', NULL), rendezvous.set_retention('runs', '1 hour');
SELECT kind, keep, is_default FROM rendezvous.retention_settings ORDER BY kind;
UPDATE rendezvous.firings SET completed_at = now() - interval '3 days' WHERE firing_key = 'new';
UPDATE rendezvous.runs SET updated_at = now() - interval '2 hours' WHERE state = 'succeeded';
SELECT kind, deleted FROM rendezvous.prune() ORDER BY kind;
SELECT count(*) AS firings_kept FROM rendezvous.firings;
SELECT rendezvous.reset_retention('firings'), rendezvous.reset_retention('runs');
SELECT kind, keep, is_default FROM rendezvous.retention_settings ORDER BY kind;

-- Who may: hosts prune, only admins change the settings, observers read them.
CREATE ROLE rendezvous_regress_keeper LOGIN;
GRANT rendezvous_host TO rendezvous_regress_keeper;
SET ROLE rendezvous_regress_keeper;
SELECT count(*) FROM rendezvous.prune(10);
SELECT regress.err($$SELECT rendezvous.set_retention('runs', '1 day')$$);
SELECT regress.err($$SELECT rendezvous.purge_runs('1 day', 10)$$);
SELECT regress.err($$SELECT rendezvous._delete_step('runs', '1 day', 10)$$);
SELECT regress.err($$SELECT * FROM rendezvous.retention$$);
RESET ROLE;
DROP ROLE rendezvous_regress_keeper;

-- Index use, whatever the history (enable_seqscan off: only a missing index shows a Seq Scan).
-- The firings emptied first, so that each of its partitions (whichever days the rows above
-- fell on) shows the same plan.
TRUNCATE rendezvous.firings;
SET enable_seqscan = off;
-- Retention's batches, oldest first.
EXPLAIN (COSTS OFF) SELECT firing_key FROM rendezvous.firings WHERE completed_at < now() - interval '1 day' ORDER BY completed_at LIMIT 1000;
EXPLAIN (COSTS OFF) SELECT run_id FROM rendezvous.runs
 WHERE state IN ('succeeded', 'failed', 'cancelled') AND updated_at < now() - interval '1 day' ORDER BY updated_at LIMIT 1000;
-- The status views' reads of firings in flight and recently completed (a stable clock in the
-- view lets the filters reach the indexes).
EXPLAIN (COSTS OFF) SELECT firing_key, state FROM rendezvous.status_firings
 WHERE completed_at IS NULL AND failed_at IS NULL ORDER BY fire_at LIMIT 20;
EXPLAIN (COSTS OFF) SELECT firing_key FROM rendezvous.status_firings WHERE completed_at IS NOT NULL ORDER BY completed_at DESC LIMIT 10;
-- A task's failed firings (failed for good: attempts made) and its latest error; retention's
-- batches of firings skipped by the overlap policy (finished without an attempt).
EXPLAIN (COSTS OFF) SELECT count(*) FROM rendezvous.firings WHERE task_id = 'ret' AND failed_at IS NOT NULL AND failures > 0;
EXPLAIN (COSTS OFF) SELECT firing_key FROM rendezvous.firings WHERE failed_at < now() - interval '1 day' AND failures = 0
 ORDER BY failed_at LIMIT 1000;
EXPLAIN (COSTS OFF) SELECT fire_at FROM rendezvous.firings WHERE task_id = 'ret' AND failures > 0 ORDER BY fire_at DESC LIMIT 1;
-- The scheduler's earliest unfinished firing, the next made ahead, and the leases of those
-- past their fire time (next_due_at): each from the unfinished firings' indexes, whatever the
-- history.
EXPLAIN (COSTS OFF) SELECT fire_at FROM rendezvous.firings WHERE completed_at IS NULL AND failed_at IS NULL ORDER BY fire_at LIMIT 100;
EXPLAIN (COSTS OFF) SELECT lease_until FROM rendezvous.firings WHERE completed_at IS NULL AND failed_at IS NULL
   AND fire_at > now() ORDER BY fire_at LIMIT 1;
EXPLAIN (COSTS OFF) SELECT min(lease_until) FROM rendezvous.firings WHERE completed_at IS NULL AND failed_at IS NULL
   AND fire_at <= now() AND lease_until > now();
RESET enable_seqscan;
-- One clock per statement in the status views: a firing's state cannot change mid-statement.
SELECT pg_catalog.pg_get_viewdef('rendezvous.status_firings'::regclass) LIKE '%clock_timestamp%' AS volatile_clock;
TRUNCATE rendezvous.firings, rendezvous.runs, rendezvous.steps, rendezvous.signals, rendezvous.hosts;

-- Firings in eight partitions by fire time (#42): each firing in its UTC day's (modulo 8).
-- Retention empties a partition whole once every firing in it finished more than the retention
-- ago (not counted in deleted), leaves one with a firing unfinished or recent, and deletes the
-- old finished firings of that one row by row.
-- (At noon UTC of their days: each pair shares a partition at any time of day.)
\set noon_3_days_ago '(date_trunc(\'day\', now(), \'UTC\') - interval \'3 days\' + interval \'12 hours\')'
\set noon_4_days_ago '(date_trunc(\'day\', now(), \'UTC\') - interval \'4 days\' + interval \'12 hours\')'
SELECT claimed FROM rendezvous.claim_firing('gone', :noon_3_days_ago, 'h');
SELECT claimed FROM rendezvous.claim_firing('gone-too', :noon_3_days_ago + interval '1 minute', 'h');
SELECT claimed FROM rendezvous.claim_firing('running', :noon_4_days_ago, 'h', '1 day');
SELECT claimed FROM rendezvous.claim_firing('old-beside-running', :noon_4_days_ago + interval '1 minute', 'h');
SELECT claimed FROM rendezvous.claim_firing('today', now(), 'h');
SELECT count(*) AS completed FROM rendezvous.firings f, rendezvous.complete_firing(f.task_id, f.fire_at, f.token) c
 WHERE f.task_id IN ('gone', 'gone-too', 'old-beside-running', 'today') AND c;
-- Finished long ago, the one beside the running firing first: a step of one row deletes it,
-- and the partition of the other two is emptied.
UPDATE rendezvous.firings
   SET completed_at = now() - interval '3 days' - CASE task_id WHEN 'old-beside-running' THEN interval '3 minutes'
                                                                 WHEN 'gone' THEN interval '2 minutes'
                                                                 ELSE interval '1 minute' END
 WHERE task_id IN ('gone', 'gone-too', 'old-beside-running');
SELECT task_id, tableoid::regclass::text = 'rendezvous.firings_' || rendezvous._day_mod_8(fire_at) AS in_its_day,
       day_mod_8 = rendezvous._day_mod_8(fire_at) AS day_mod_8_right
  FROM rendezvous.firings ORDER BY 1;
SELECT kind, deleted FROM rendezvous.prune(1) ORDER BY kind;
SELECT task_id FROM rendezvous.firings ORDER BY 1;
SELECT count(*) AS rows_in_the_emptied FROM rendezvous.firings f
 WHERE f.day_mod_8 = rendezvous._day_mod_8(:noon_3_days_ago);
-- The partition of a day is named beside the key in every lookup: one partition read.
EXPLAIN (COSTS OFF) SELECT * FROM rendezvous.firings f
 WHERE f.firing_key = 'k' AND f.day_mod_8 = rendezvous._day_mod_8('2026-01-01 00:00:00+00');
-- A row whose day_mod_8 is not its fire time's is refused.
SELECT regress.err($$INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, day_mod_8)
                     VALUES ('x', 'x', '2026-01-01 00:00:00+00', 1, now(), (rendezvous._day_mod_8('2026-01-01 00:00:00+00') + 1) % 8)$$);
-- Hosts cannot empty partitions themselves (prune does, as the owner).
SET ROLE rendezvous_host;
SELECT regress.err($$SELECT rendezvous._empty_firing_days('1 day')$$);
RESET ROLE;
TRUNCATE rendezvous.firings;
