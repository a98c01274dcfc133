-- Schedules as a psql user writes them: fire times, tasks, due firings, catch-up, overlap,
-- retries and failure. docs/schedules.md states the rules these check.
SET timezone = 'UTC';

-- 5-field cron, 6-field with seconds, macros, fixed intervals.
SELECT * FROM rendezvous.fire_times('*/15 * * * *', 'UTC', '2026-11-29 10:00:00+00', '2026-11-29 11:00:00+00');
SELECT * FROM rendezvous.fire_times('*/20 * * * * *', 'UTC', '2026-11-29 10:00:00+00', '2026-11-29 10:01:00+00');
SELECT * FROM rendezvous.fire_times('@daily', 'Europe/Berlin', '2026-11-29 00:00:00+00', '2026-12-01 00:00:00+00');
SELECT * FROM rendezvous.fire_times('every 90 seconds', 'UTC', '2026-11-29 10:00:00+00', '2026-11-29 10:06:00+00');
SELECT rendezvous.every('90 seconds'), rendezvous.every('1 day');
-- Ranges, steps, lists and names.
SELECT * FROM rendezvous.fire_times('0 9-17/4 * * mon-fri', 'UTC', '2026-11-27 00:00:00+00', '2026-11-30 23:59:59+00');
SELECT * FROM rendezvous.fire_times('0 0 1,15 jan,jul *', 'UTC', '2026-01-01 00:00:00+00', '2026-12-31 00:00:00+00');
-- Day of month and day of week together: either matches (the classic cron OR rule); + makes it AND.
SELECT * FROM rendezvous.fire_times('0 0 13 * fri', 'UTC', '2026-02-01 00:00:00+00', '2026-03-31 00:00:00+00');
SELECT * FROM rendezvous.fire_times('0 0 13 * +fri', 'UTC', '2026-01-01 00:00:00+00', '2026-12-31 00:00:00+00');

-- Daylight saving, Europe/Berlin (2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00):
-- a daily 02:30 skipped by spring-forward runs at the first instant after the gap (03:00 CEST);
-- at fall-back it runs once, at the first 02:30 (CEST).
SELECT t AT TIME ZONE 'Europe/Berlin' AS berlin, t FROM rendezvous.fire_times('30 2 * * *', 'Europe/Berlin', '2026-03-27 12:00:00+00', '2026-03-31 12:00:00+00') t;
SELECT t AT TIME ZONE 'Europe/Berlin' AS berlin, t FROM rendezvous.fire_times('30 2 * * *', 'Europe/Berlin', '2026-10-23 12:00:00+00', '2026-10-27 12:00:00+00') t;
-- An interval-like pattern runs in both repeated hours at fall-back, and none is invented in the gap.
SELECT t FROM rendezvous.fire_times('0,30 * * * *', 'Europe/Berlin', '2026-10-24 23:00:00+00', '2026-10-25 02:00:00+00') t;
SELECT t FROM rendezvous.fire_times('0,30 * * * *', 'Europe/Berlin', '2026-03-28 23:00:00+00', '2026-03-29 02:00:00+00') t;
-- America/New_York (2026-03-08 02:00 -> 03:00, 2026-11-01 02:00 -> 01:00).
SELECT t AT TIME ZONE 'America/New_York' AS new_york, t FROM rendezvous.fire_times('0 2 * * *', 'America/New_York', '2026-03-06 12:00:00+00', '2026-03-10 12:00:00+00') t;
SELECT t AT TIME ZONE 'America/New_York' AS new_york, t FROM rendezvous.fire_times('30 1 * * *', 'America/New_York', '2026-10-30 12:00:00+00', '2026-11-03 12:00:00+00') t;
-- Intervals ignore zones: every 30 minutes is every 30 minutes through the fall-back hour.
SELECT count(*) FROM rendezvous.fire_times('every 30 minutes', 'America/New_York', '2026-11-01 04:00:00+00', '2026-11-01 08:00:00+00');

-- Bad input: clear errors, never a crash.
SELECT regress.err($$SELECT rendezvous.fire_times(NULL, 'UTC', now(), now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('* * * * *', NULL, now(), now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('* * * * *', 'UTC', NULL, now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('', 'UTC', now(), now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('* * *', 'UTC', now(), now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('* * * * * * *', 'UTC', now(), now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('61 * * * *', 'UTC', now(), now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('every 0 seconds', 'UTC', now(), now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('every 5 fortnights', 'UTC', now(), now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('* * * * *', 'Mars/Olympus_Mons', now(), now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('* * * * *', '', now(), now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('* * * * *', 'UTC', 'infinity', now())$$);
SELECT regress.err($$SELECT rendezvous.fire_times('* * * * * *', 'UTC', '2026-01-01', '2027-01-01')$$);
SELECT regress.err($$SELECT rendezvous.fire_times(repeat('1', 2000), 'UTC', now(), now())$$);
SELECT regress.err($$SELECT rendezvous.every('1 month')$$);
SELECT regress.err($$SELECT rendezvous.every('1.5 seconds')$$);
SELECT regress.err($$SELECT rendezvous.every(NULL)$$);
-- Days times microseconds a day beyond 64 bits: refused, not wrapped (#39).
SELECT regress.err($$SELECT rendezvous.every('213503982 days 08:02:49.551616')$$);
SELECT regress.err($$SELECT rendezvous.every('213503982 days 08:02:49')$$);
SELECT regress.err($$SELECT rendezvous.every('-2147483648 days')$$);
-- A pattern that never matches gives no fire times.
SELECT count(*) FROM rendezvous.fire_times('0 0 30 2 *', 'UTC', '2026-01-01', '2030-01-01');

-- Tasks: created, idempotent, updated; the next fire time is after now, by the database clock.
SELECT rendezvous.schedule_task('report', '0 0 * * *', 'Europe/Berlin') > clock_timestamp() AS next_in_future;
SELECT rendezvous.schedule_task('report', '0 0 * * *', 'Europe/Berlin') = next_fire_at AS idempotent
  FROM rendezvous.tasks WHERE task_id = 'report';
SELECT task_id, schedule, time_zone, paused, overlap, catch_up, catch_up_window, lease, max_attempts, retry_backoff,
       to_char(next_fire_at AT TIME ZONE 'Europe/Berlin', 'HH24:MI') AS local_next
  FROM rendezvous.tasks;
-- A changed policy keeps the next fire time; a changed schedule starts over.
SELECT rendezvous.schedule_task('report', '0 0 * * *', 'Europe/Berlin', max_attempts => 5) IS NOT NULL AS updated;
SELECT max_attempts FROM rendezvous.tasks WHERE task_id = 'report';
SELECT rendezvous.schedule_task('report', '30 6 * * *', 'Europe/Berlin') > clock_timestamp() AS restarted;
SELECT to_char(next_fire_at AT TIME ZONE 'Europe/Berlin', 'HH24:MI') AS local_time FROM rendezvous.tasks WHERE task_id = 'report';
-- Bad tasks: nothing written.
SELECT regress.err($$SELECT rendezvous.schedule_task('', '* * * * *')$$);
SELECT regress.err($$SELECT rendezvous.schedule_task(NULL, '* * * * *')$$);
SELECT regress.err($$SELECT rendezvous.schedule_task(repeat('t', 300), '* * * * *')$$);
SELECT regress.err($$SELECT rendezvous.schedule_task('bad', 'often')$$);
SELECT regress.err($$SELECT rendezvous.schedule_task('bad', '* * * * *', 'Nowhere/Special')$$);
SELECT regress.err($$SELECT rendezvous.schedule_task('bad', '0 0 30 2 *')$$);
SELECT regress.err($$SELECT rendezvous.schedule_task('bad', '* * * * *', overlap => 'queue')$$);
SELECT regress.err($$SELECT rendezvous.schedule_task('bad', '* * * * *', catch_up => 'some')$$);
SELECT regress.err($$SELECT rendezvous.schedule_task('bad', '* * * * *', catch_up_window => '0')$$);
-- A time zone name is at most 64 bytes: a huge one never comes back in an error.
SELECT regress.err($$SELECT rendezvous.schedule_task('bad', '* * * * *', repeat('x', 10000000))$$);
-- A window of more than a year is refused: '7000 years' once made every host's due_firings fail.
SELECT regress.err($$SELECT rendezvous.schedule_task('bad', '* * * * *', catch_up_window => '7000 years')$$);
SELECT regress.err($$SELECT rendezvous.schedule_task('bad', '* * * * *', lease => '-1 s')$$);
SELECT regress.err($$SELECT rendezvous.schedule_task('bad', '* * * * *', max_attempts => 0)$$);
SELECT regress.err($$SELECT rendezvous.schedule_task('bad', '* * * * *', retry_backoff => NULL)$$);
SELECT count(*) AS bad_tasks FROM rendezvous.tasks WHERE task_id = 'bad';
SELECT rendezvous.unschedule_task('report') AS removed, rendezvous.unschedule_task('report') AS again;

-- Nothing is due before its time.
SELECT rendezvous.schedule_task('minutely', '* * * * *') IS NOT NULL AS scheduled;
SELECT count(*) AS due_now FROM rendezvous.due_firings();
-- The next wake-up: half a second before the next fire time, when its firing is made (or, made
-- already by a poll in that half second, when it becomes claimable).
SELECT rendezvous.next_due_at() = least((SELECT next_fire_at - rendezvous._made_ahead() FROM rendezvous.tasks WHERE task_id = 'minutely'),
                                        (SELECT min(lease_until) FROM rendezvous.firings WHERE task_id = 'minutely'))
       AS next_due;

-- The whole fleet was down for ten hours (made so by moving the cursor back).
-- catch_up = latest (the default): only the latest missed fire time runs; the others are counted as skipped.
SELECT rendezvous.schedule_task('hourly-latest', '0 * * * *') IS NOT NULL AS scheduled;
UPDATE rendezvous.tasks SET next_fire_at = date_trunc('hour', now()) - interval '10 hours' WHERE task_id = 'hourly-latest';
SELECT task_id, fire_at = date_trunc('hour', now()) AS latest, attempts, failures, lease
  FROM rendezvous.due_firings() WHERE task_id = 'hourly-latest';
SELECT skipped, last_skip_reason, next_fire_at = date_trunc('hour', now()) + interval '1 hour' AS next_is_next_hour
  FROM rendezvous.tasks WHERE task_id = 'hourly-latest';
-- A second poll makes nothing new; the firing stays due until claimed.
SELECT count(*) AS still_one FROM rendezvous.due_firings() WHERE task_id = 'hourly-latest';
SELECT count(*) AS firings FROM rendezvous.firings WHERE task_id = 'hourly-latest';
-- catch_up = all: every fire time within the window runs (overlap allowed), older ones are skipped.
SELECT rendezvous.schedule_task('hourly-all', '0 * * * *', catch_up => 'all', catch_up_window => '3 hours', overlap => 'allow') IS NOT NULL;
UPDATE rendezvous.tasks SET next_fire_at = date_trunc('hour', now()) - interval '10 hours' WHERE task_id = 'hourly-all';
SELECT date_trunc('hour', now()) - fire_at AS hours_ago FROM rendezvous.due_firings() WHERE task_id = 'hourly-all' ORDER BY fire_at;
SELECT skipped, last_skip_reason FROM rendezvous.tasks WHERE task_id = 'hourly-all';
-- ... but with overlap = skip only the first of them runs.
SELECT rendezvous.schedule_task('hourly-all-serial', '0 * * * *', catch_up => 'all', catch_up_window => '3 hours') IS NOT NULL;
UPDATE rendezvous.tasks SET next_fire_at = date_trunc('hour', now()) - interval '10 hours' WHERE task_id = 'hourly-all-serial';
SELECT date_trunc('hour', now()) - fire_at AS hours_ago FROM rendezvous.due_firings() WHERE task_id = 'hourly-all-serial';
SELECT skipped, last_skip_reason FROM rendezvous.tasks WHERE task_id = 'hourly-all-serial';
-- catch_up = skip: a fire time older than the window never runs.
SELECT rendezvous.schedule_task('daily-skip', '0 0 * * *', catch_up => 'skip', catch_up_window => '1 second') IS NOT NULL;
UPDATE rendezvous.tasks SET next_fire_at = date_trunc('day', now()) - interval '3 days' WHERE task_id = 'daily-skip';
SELECT count(*) AS runs FROM rendezvous.due_firings() WHERE task_id = 'daily-skip';
SELECT skipped, last_skip_reason, next_fire_at = date_trunc('day', now()) + interval '1 day' AS next_is_tomorrow
  FROM rendezvous.tasks WHERE task_id = 'daily-skip';

-- A due firing is claimed like any other; the claim takes the pending row (token 1).
SELECT claimed, holder, token FROM rendezvous.claim_firing('hourly-latest', date_trunc('hour', now()), 'host-a', '1 hour');
SELECT count(*) AS due_after_claim FROM rendezvous.due_firings() WHERE task_id = 'hourly-latest';
-- Overlap = skip: while a firing runs, the next fire times are skipped, and recorded.
SELECT rendezvous.schedule_task('secondly', '* * * * * *') IS NOT NULL AS scheduled;
UPDATE rendezvous.tasks SET next_fire_at = now() - interval '5 seconds' WHERE task_id = 'secondly';
SELECT count(*) AS one_runs FROM rendezvous.due_firings() WHERE task_id = 'secondly';
SELECT claimed, holder, token FROM rendezvous.claim_firing('secondly', (SELECT fire_at FROM rendezvous.firings WHERE task_id = 'secondly'), 'host-a', '1 hour');
UPDATE rendezvous.tasks SET next_fire_at = now() - interval '2 seconds', skipped = 0 WHERE task_id = 'secondly';
SELECT count(*) AS due_while_running FROM rendezvous.due_firings() WHERE task_id = 'secondly';
SELECT skipped > 0 AS skipped, last_skip_reason FROM rendezvous.tasks WHERE task_id = 'secondly';
SELECT task_id, running, holders, pending, retrying, failed, last_skip_reason FROM rendezvous.status_tasks
 WHERE task_id = 'secondly';

-- Failure: retried after the backoff (doubling), then failed for good after max_attempts.
SELECT rendezvous.schedule_task('flaky', 'every 1 hour', max_attempts => 2, retry_backoff => '1 hour') IS NOT NULL;
UPDATE rendezvous.tasks SET next_fire_at = date_trunc('hour', now()) WHERE task_id = 'flaky';
SELECT count(*) FROM rendezvous.due_firings() WHERE task_id = 'flaky';
SELECT claimed, token FROM rendezvous.claim_firing('flaky', (SELECT fire_at FROM rendezvous.firings WHERE task_id = 'flaky'), 'host-a');
SELECT recorded, retry_at - clock_timestamp() BETWEEN interval '59 minutes' AND interval '1 hour' AS retry_in_an_hour
  FROM rendezvous.fail_firing('flaky', (SELECT fire_at FROM rendezvous.firings WHERE task_id = 'flaky'), 1, 'connection refused');
-- The failed attempt's token is done: it completes, renews and fences nothing.
SELECT rendezvous.complete_firing('flaky', (SELECT fire_at FROM rendezvous.firings WHERE task_id = 'flaky'), 1) AS stale_complete;
SELECT regexp_replace(regress.err($$SELECT rendezvous.assert_firing('flaky', (SELECT fire_at FROM rendezvous.firings WHERE task_id = 'flaky'), 1)$$), 'flaky:[^ ]*', 'flaky:…') AS err;
SELECT recorded FROM rendezvous.fail_firing('flaky', (SELECT fire_at FROM rendezvous.firings WHERE task_id = 'flaky'), 1, 'again');
-- Not claimable during the backoff; not due either.
SELECT claimed, holder FROM rendezvous.claim_firing('flaky', (SELECT fire_at FROM rendezvous.firings WHERE task_id = 'flaky'), 'host-b');
SELECT count(*) AS due_in_backoff FROM rendezvous.due_firings() WHERE task_id = 'flaky';
SELECT state, failures, last_error FROM rendezvous.status_firings WHERE task_id = 'flaky';
-- The backoff over (moved), the retry is claimed with the next token and fails for good.
UPDATE rendezvous.firings SET lease_until = now() WHERE task_id = 'flaky';
SELECT count(*) AS due_for_retry FROM rendezvous.due_firings() WHERE task_id = 'flaky';
SELECT claimed, holder, token FROM rendezvous.claim_firing('flaky', (SELECT fire_at FROM rendezvous.firings WHERE task_id = 'flaky'), 'host-b');
SELECT recorded, retry_at FROM rendezvous.fail_firing('flaky', (SELECT fire_at FROM rendezvous.firings WHERE task_id = 'flaky'), 2, 'disk full');
SELECT claimed, completed, lease_until FROM rendezvous.claim_firing('flaky', (SELECT fire_at FROM rendezvous.firings WHERE task_id = 'flaky'), 'host-c');
SELECT state, failures, attempts, last_error FROM rendezvous.status_firings WHERE task_id = 'flaky';
SELECT task_id, failed, last_error FROM rendezvous.status_tasks WHERE task_id = 'flaky';
SELECT regress.err($$SELECT rendezvous.fail_firing('flaky', now(), NULL)$$);
-- A firing of no scheduled task fails for good at once.
SELECT claimed FROM rendezvous.claim_firing('adhoc', '2026-01-01', 'host-a');
SELECT recorded, retry_at FROM rendezvous.fail_firing('adhoc', '2026-01-01', 1, 'boom');

-- Pause, resume, unschedule.
SELECT rendezvous.pause_task('minutely'), rendezvous.pause_task('minutely');
UPDATE rendezvous.tasks SET next_fire_at = now() - interval '1 hour' WHERE task_id = 'minutely';
SELECT count(*) AS due_while_paused FROM rendezvous.due_firings() WHERE task_id = 'minutely';
SELECT rendezvous.resume_task('minutely') > clock_timestamp() AS resumes_in_future;
SELECT count(*) AS missed_while_paused_do_not_run FROM rendezvous.due_firings() WHERE task_id = 'minutely';
SELECT regress.err($$SELECT rendezvous.pause_task('nope')$$);
SELECT regress.err($$SELECT rendezvous.resume_task('nope')$$);
SELECT regress.err($$SELECT rendezvous.due_firings(0)$$);
SELECT regress.err($$SELECT rendezvous.due_firings(NULL)$$);
-- Unscheduling removes the task's pending firings, keeps the history.
SELECT rendezvous.unschedule_task('hourly-all') AS removed;
SELECT count(*) AS pending_left FROM rendezvous.firings WHERE task_id = 'hourly-all';

-- Who may do what: hosts schedule and run tasks; only admins pause, resume and unschedule.
SET ROLE rendezvous_host;
SELECT rendezvous.schedule_task('from-a-host', '@hourly') IS NOT NULL AS host_schedules;
SELECT count(*) >= 0 AS host_polls FROM rendezvous.due_firings();
SELECT regress.err($$SELECT rendezvous.pause_task('from-a-host')$$);
SELECT regress.err($$SELECT rendezvous.unschedule_task('from-a-host')$$);
SELECT regress.err($$SELECT * FROM rendezvous.tasks$$);
RESET ROLE;
SET ROLE rendezvous_observer;
SELECT count(*) > 0 AS observer_sees_tasks FROM rendezvous.status_tasks;
SELECT regress.err($$SELECT rendezvous.due_firings()$$);
RESET ROLE;
SET ROLE rendezvous_admin;
SELECT rendezvous.pause_task('from-a-host'), rendezvous.unschedule_task('from-a-host') AS admin_unschedules;
RESET ROLE;

DELETE FROM rendezvous.firings;
DELETE FROM rendezvous.tasks;

-- An operator releases a stuck claim: the holder's token goes stale at once, the next host
-- takes the firing over without waiting out the lease. Admins only.
SELECT claimed, token FROM rendezvous.claim_firing('stuck', '2026-01-01', 'hung-host', '1 day');
SET ROLE rendezvous_observer;
SELECT regress.err($$SELECT rendezvous.release_firing_claim('stuck', '2026-01-01')$$);
RESET ROLE;
SET ROLE rendezvous_host;
SELECT regress.err($$SELECT rendezvous.release_firing_claim('stuck', '2026-01-01')$$);
RESET ROLE;
SET ROLE rendezvous_admin;
SELECT * FROM rendezvous.release_firing_claim('stuck', '2026-01-01');
SELECT * FROM rendezvous.release_firing_claim('stuck', '2026-01-01');
SELECT regress.err($$SELECT rendezvous.release_firing_claim('nope', '2026-01-01')$$);
RESET ROLE;
SELECT rendezvous.complete_firing('stuck', '2026-01-01', 1) AS stale_holder_completes;
SELECT claimed, holder, token FROM rendezvous.claim_firing('stuck', '2026-01-01', 'next-host');
DELETE FROM rendezvous.firings;

-- A year's backlog of a per-second task, caught up 'all': one pass makes 1,000 firings, and never
-- holds more fire times than that in memory (it collected all 26 million before).
SET statement_timeout = '1s';
SELECT rendezvous.schedule_task('year-backlog', rendezvous.every('1 second'), catch_up => 'all', catch_up_window => '1 year', overlap => 'allow') IS NOT NULL;
UPDATE rendezvous.tasks SET next_fire_at = now() - interval '300 days' WHERE task_id = 'year-backlog';
SELECT count(*) FROM rendezvous.due_firings(5000) WHERE task_id = 'year-backlog';
RESET statement_timeout;
SELECT rendezvous.unschedule_task('year-backlog');

-- A backlog does not starve on-time work: a per-second task 3 hours behind (catch_up 'all':
-- thousands of firings due) beside a per-second task that is on time (catch_up 'latest'): its
-- current firing is the first due, ahead of the backlog, which follows oldest first.
SELECT rendezvous.schedule_task('backlog', rendezvous.every('1 second'), catch_up => 'all', catch_up_window => '1 day', overlap => 'allow') IS NOT NULL;
UPDATE rendezvous.tasks SET next_fire_at = now() - interval '3 hours' WHERE task_id = 'backlog';
SELECT count(*) > 100 AS backlog_due FROM rendezvous.due_firings(100000) WHERE task_id = 'backlog';
SELECT rendezvous.schedule_task('current', rendezvous.every('1 second')) IS NOT NULL;
UPDATE rendezvous.tasks SET next_fire_at = now() - interval '5 seconds' WHERE task_id = 'current';
SELECT d.task_id, d.place FROM (SELECT task_id, row_number() OVER () AS place FROM rendezvous.due_firings(100)) d WHERE d.task_id = 'current';
SELECT count(*) AS backlog_in_first_100, min(fire_at) = (SELECT min(fire_at) FROM rendezvous.firings WHERE task_id = 'backlog') AS oldest_first
  FROM rendezvous.due_firings(100) WHERE task_id = 'backlog';
SELECT rendezvous.unschedule_task('backlog'), rendezvous.unschedule_task('current');
DELETE FROM rendezvous.firings;

-- Many tasks catching up at once: one call makes at most 10,000 firings in all, each task its
-- share (30 tasks 10 minutes behind: 333 each, not 600 or 1,000 each); the next calls the rest.
SELECT count(rendezvous.schedule_task('many-' || i, rendezvous.every('1 second'), catch_up => 'all', catch_up_window => '1 hour', overlap => 'allow'))
  FROM generate_series(1, 30) i;
UPDATE rendezvous.tasks SET next_fire_at = now() - interval '10 minutes' WHERE task_id LIKE 'many-%';
SELECT count(*) FROM rendezvous.due_firings(1);
SELECT count(*) AS made, count(DISTINCT task_id) AS tasks, max(n) AS most_of_one_task
  FROM (SELECT task_id, count(*) OVER (PARTITION BY task_id) AS n FROM rendezvous.firings WHERE task_id LIKE 'many-%') f;
SELECT count(*) FROM rendezvous.due_firings(1);
SELECT count(*) > 9990 AS the_rest_follows FROM rendezvous.firings WHERE task_id LIKE 'many-%';
SELECT count(rendezvous.unschedule_task('many-' || i)) FROM generate_series(1, 30) i;
DELETE FROM rendezvous.firings;

-- One task that cannot be planned stops nobody else's scheduling: set aside with its error
-- (visible in status_tasks), the others' firings are made; registering it again clears it.
SELECT rendezvous.schedule_task('healthy', rendezvous.every('1 second'), overlap => 'allow') IS NOT NULL;
SELECT rendezvous.schedule_task('poison', rendezvous.every('1 second'), catch_up => 'skip', overlap => 'allow') IS NOT NULL;
-- As an old version (or a hand edit) could leave it: a window no instant can be planned with.
UPDATE rendezvous.tasks SET catch_up_window = interval '7000 years', next_fire_at = now() - interval '2 seconds'
 WHERE task_id = 'poison';
UPDATE rendezvous.tasks SET next_fire_at = now() - interval '2 seconds' WHERE task_id = 'healthy';
SELECT count(*) > 0 AS healthy_made FROM rendezvous.due_firings() WHERE task_id = 'healthy';
SELECT task_id, plan_error IS NOT NULL AS set_aside, plan_error LIKE '%SQLSTATE 22008%' AS says_why
  FROM rendezvous.status_tasks WHERE task_id IN ('healthy', 'poison') ORDER BY 1;
SELECT rendezvous.schedule_task('poison', rendezvous.every('1 second'), catch_up => 'skip', catch_up_window => '1 hour', overlap => 'allow') IS NOT NULL;
SELECT plan_error FROM rendezvous.tasks WHERE task_id = 'poison';
SELECT rendezvous.unschedule_task('healthy'), rendezvous.unschedule_task('poison');

-- Made ahead: every task has its next firing made up to _made_ahead() (half a second) before
-- its fire time, planned as a poll at that instant would; claimable from then, not before. Under
-- overlap = 'skip' ('on-time') its claim decides the overlap (below). (Instants are given to
-- _make_task_firings, as a poll gives its clock; the fire time is half a minute away.)
SELECT rendezvous._made_ahead();
SELECT rendezvous.schedule_task('ahead', rendezvous.every('1 second'), overlap => 'allow') IS NOT NULL,
       rendezvous.schedule_task('on-time', rendezvous.every('1 second')) IS NOT NULL;
UPDATE rendezvous.tasks SET next_fire_at = date_trunc('second', clock_timestamp()) + interval '30 s'
 WHERE task_id IN ('ahead', 'on-time');
CREATE TEMP TABLE fire AS SELECT next_fire_at AS at FROM rendezvous.tasks WHERE task_id = 'ahead';
-- next_due_at wakes a host when the firing is to be made (these two tasks alone).
BEGIN;
DELETE FROM rendezvous.tasks WHERE task_id NOT IN ('ahead', 'on-time');
SELECT rendezvous.next_due_at() - (SELECT at FROM fire) AS wakes_at;
ROLLBACK;
-- 0.6 s before: too early for either.
SELECT rendezvous._make_task_firings((SELECT at FROM fire) - interval '0.6 s', 10, NULL, 100);
SELECT count(*) AS made_too_early FROM rendezvous.firings WHERE task_id IN ('ahead', 'on-time');
-- 0.3 s before: both are made.
SELECT rendezvous._make_task_firings((SELECT at FROM fire) - interval '0.3 s', 10, NULL, 100);
SELECT f.task_id, f.fire_at = fire.at AS at_its_time, f.lease_until = fire.at AS claimable_from_then, f.holder, f.token
  FROM rendezvous.firings f, fire WHERE f.task_id IN ('ahead', 'on-time');
SELECT task_id, next_fire_at - (SELECT at FROM fire) AS next_after FROM rendezvous.tasks
 WHERE task_id IN ('ahead', 'on-time') ORDER BY 1;
-- Not due, not claimable, before its time; schedule_task (unchanged) still says it is next.
SELECT count(*) AS due_now FROM rendezvous.due_firings() WHERE task_id = 'ahead';
SELECT claimed FROM rendezvous.claim_firing('ahead', (SELECT at FROM fire), 'early-host');
SELECT rendezvous.schedule_task('ahead', rendezvous.every('1 second'), overlap => 'allow') = (SELECT at FROM fire) AS still_next;
-- Then at its fire time, when it becomes claimable (not half a second before the next one).
BEGIN;
DELETE FROM rendezvous.tasks WHERE task_id NOT IN ('ahead', 'on-time');
UPDATE rendezvous.tasks SET next_fire_at = next_fire_at + interval '1 hour' WHERE task_id = 'on-time';
SELECT rendezvous.next_due_at() - (SELECT at FROM fire) AS wakes_at;
ROLLBACK;
-- A changed policy unmakes it and its fire time is next again; pausing unmakes it for good.
SELECT rendezvous.schedule_task('ahead', rendezvous.every('1 second'), overlap => 'allow', lease => '1 minute') = (SELECT at FROM fire) AS next_again;
SELECT count(*) AS made FROM rendezvous.firings WHERE task_id = 'ahead';
SELECT rendezvous._make_task_firings((SELECT at FROM fire) - interval '0.3 s', 10, 'ahead', 100);
SELECT count(*) AS made_again FROM rendezvous.firings WHERE task_id = 'ahead';
SELECT rendezvous.pause_task('ahead');
SELECT count(*) AS made_after_pause FROM rendezvous.firings WHERE task_id = 'ahead';
SELECT rendezvous.unschedule_task('ahead'), rendezvous.unschedule_task('on-time');
DROP TABLE fire;

-- Overlap = skip, decided when claimed (#42): a firing made ahead while the one before it still
-- runs is skipped by the first claim that reaches it, through claim_firing or claim_firings:
-- finished as skipped (never claimable again, so no claim makes it anew), counted in the task's
-- skipped, and shown as skipped. Made ahead while nothing runs, it is claimed as usual.
SELECT rendezvous.schedule_task('serial', rendezvous.every('1 second')) IS NOT NULL,
       rendezvous.schedule_task('serial-too', rendezvous.every('1 second')) IS NOT NULL,
       rendezvous.schedule_task('free', rendezvous.every('1 second')) IS NOT NULL;
-- Fire times of one, two and three seconds ago: the first is claimed and runs.
UPDATE rendezvous.tasks SET next_fire_at = date_trunc('second', clock_timestamp()) - interval '3 s', skipped = 0
 WHERE task_id IN ('serial', 'serial-too', 'free');
CREATE TEMP TABLE fire AS SELECT next_fire_at AS at FROM rendezvous.tasks WHERE task_id = 'serial';
SELECT rendezvous._make_task_firings((SELECT at FROM fire), 10, NULL, 100);
SELECT task_id, claimed, token FROM (VALUES ('serial'), ('serial-too')) v(task_id),
       rendezvous.claim_firing(v.task_id, (SELECT at FROM fire), 'host-a', '1 hour') ORDER BY 1;
-- 'free' runs its first firing to completion; then the next fire time is made ahead, as a poll
-- half a second before it makes it (the overlap is left to the claim).
SELECT claimed FROM rendezvous.claim_firing('free', (SELECT at FROM fire), 'host-a');
SELECT rendezvous.complete_firing('free', (SELECT at FROM fire),
                                  (SELECT token FROM rendezvous.firings WHERE task_id = 'free' AND token > 0));
SELECT rendezvous._make_task_firings((SELECT at FROM fire) + interval '0.7 s', 10, NULL, 100);
SELECT task_id, fire_at - (SELECT at FROM fire) AS after_first, holder, token FROM rendezvous.firings
 WHERE task_id IN ('serial', 'serial-too', 'free') AND token = 0 ORDER BY 1, 2;
-- At its time the claims decide: one through claim_firing, one through claim_firings.
SELECT claimed, holder, token, completed, lease_until = 'infinity' AS never_claimable
  FROM rendezvous.claim_firing('serial', (SELECT at FROM fire) + interval '1 s', 'host-b');
SELECT ord, claimed, holder, token > 0 AS has_token, completed, lease_until = 'infinity' AS never_claimable
  FROM rendezvous.claim_firings(ARRAY['serial-too', 'free'],
                                ARRAY[(SELECT at FROM fire) + interval '1 s', (SELECT at FROM fire) + interval '1 s'],
                                'host-b') ORDER BY ord;
SELECT task_id, fire_at - (SELECT at FROM fire) AS after_first, state, attempts, last_error
  FROM rendezvous.status_firings WHERE task_id IN ('serial', 'serial-too', 'free') ORDER BY 1, 2;
SELECT task_id, skipped, last_skip_reason, running, failed FROM rendezvous.status_tasks
 WHERE task_id IN ('serial', 'serial-too', 'free') ORDER BY 1;
-- Skipped stays skipped: claimed again, by either call, it is not claimed and not made anew.
SELECT claimed, holder, token FROM rendezvous.claim_firing('serial', (SELECT at FROM fire) + interval '1 s', 'host-c');
SELECT count(*) AS claimed FROM rendezvous.claim_firings(ARRAY['serial'], ARRAY[(SELECT at FROM fire) + interval '1 s'], 'host-c')
 WHERE claimed;
SELECT count(*) AS due FROM rendezvous.due_firings() WHERE task_id IN ('serial', 'serial-too')
   AND fire_at = (SELECT at FROM fire) + interval '1 s';
-- A read of where it stands: never claimable again (NULL), as a firing failed for good.
SELECT claimed, completed, lease_remaining FROM rendezvous.firing_states(ARRAY['serial'], ARRAY[(SELECT at FROM fire) + interval '1 s']);
SELECT rendezvous.unschedule_task('serial'), rendezvous.unschedule_task('serial-too'), rendezvous.unschedule_task('free');
DROP TABLE fire;
-- Nobody claims a task's firings (no host takes it, or none has a free slot): under
-- overlap = 'skip' the task keeps a few pending firings (those made before the first had been
-- due 5 s), the next fire times skipped as they are made, not one more every fire time.
SELECT rendezvous.schedule_task('unclaimed', rendezvous.every('1 second')) IS NOT NULL;
UPDATE rendezvous.tasks SET next_fire_at = date_trunc('second', clock_timestamp()) - interval '20 s', skipped = 0
 WHERE task_id = 'unclaimed';
CREATE TEMP TABLE fire AS SELECT next_fire_at AS at FROM rendezvous.tasks WHERE task_id = 'unclaimed';
SELECT rendezvous._make_task_firings((SELECT at FROM fire), 10, 'unclaimed', 100);
SELECT count(rendezvous._make_task_firings((SELECT at FROM fire) + g * interval '1 s' + interval '0.7 s', 10, 'unclaimed', 100))
  FROM generate_series(0, 8) g;
SELECT count(*) AS pending, min(fire_at) = (SELECT at FROM fire) AS the_first,
       (SELECT skipped FROM rendezvous.tasks WHERE task_id = 'unclaimed') AS skipped,
       (SELECT next_fire_at - (SELECT at FROM fire) FROM rendezvous.tasks WHERE task_id = 'unclaimed') AS next_after
  FROM rendezvous.firings WHERE task_id = 'unclaimed';
SELECT rendezvous.unschedule_task('unclaimed');
DROP TABLE fire;

-- status_tasks' next few tasks read those tasks' history, not every task's: 200 tasks with 5
-- finished firings each, and the 3 next (as `rendezvous status` asks for 20) counted by the
-- transaction's own statistics (rows read from firings and its indexes, the second time: the
-- first plans the query; every task's history was read before).
BEGIN;
SELECT count(rendezvous.schedule_task('many-' || i, rendezvous.every('1 hour'))) AS tasks
  FROM generate_series(1, 200) i;
INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until, completed_at, day_mod_8)
SELECT rendezvous.firing_key('many-' || i, '2026-01-01'::timestamptz + g * interval '1 hour'), 'many-' || i,
       '2026-01-01'::timestamptz + g * interval '1 hour', 'h', 1, now(), now(), now(),
       rendezvous._day_mod_8('2026-01-01'::timestamptz + g * interval '1 hour')
  FROM generate_series(1, 200) i, generate_series(1, 5) g;
\set firings_reads 'SELECT sum(pg_catalog.pg_stat_get_xact_tuples_returned(o)) FROM (SELECT p.oid FROM pg_catalog.pg_class p WHERE p.oid IN (SELECT i.inhrelid FROM pg_catalog.pg_inherits i WHERE i.inhparent = \'rendezvous.firings\'::regclass) UNION ALL SELECT x.indexrelid FROM pg_catalog.pg_index x WHERE x.indrelid IN (SELECT i.inhrelid FROM pg_catalog.pg_inherits i WHERE i.inhparent = \'rendezvous.firings\'::regclass)) r(o)'
\set next_three 'SELECT count(*) AS next_three FROM (SELECT task_id, running, pending, failed, last_error FROM rendezvous.status_tasks ORDER BY next_fire_at NULLS LAST, task_id LIMIT 3) s'
:next_three;
:firings_reads \gset before_
:next_three;
SELECT sum - :before_sum <= 100 AS reads_three_tasks_history FROM (:firings_reads) r(sum);
ROLLBACK;
