-- The scheduler: recurring tasks whose firings the database makes due on its own clock (see
-- schedule.rs, docs/schedules.md). Loaded by extension_sql_file! in schedule.rs; every name is
-- schema-qualified. Functions reach upgrades from here by themselves (sqlgen); a table change
-- after a release also goes into sql/migrations/.
--
-- A task's row holds its schedule, its policies, and next_fire_at: the first fire time not yet
-- turned into a firing. due_firings() turns every task whose next_fire_at has come (by the
-- database clock) into firings rows, applying the catch-up and overlap policies, then returns
-- the firings that can be claimed now. A firing row made this way is pending (no holder,
-- token 0, claimable from fire_at); claim_firing takes it like any other.

CREATE TABLE rendezvous.tasks (
    task_id          text PRIMARY KEY,
    schedule         text NOT NULL,
    time_zone        text NOT NULL,
    paused           boolean NOT NULL DEFAULT false,
    overlap          text NOT NULL,
    catch_up         text NOT NULL,
    catch_up_window  interval NOT NULL,
    lease            interval NOT NULL,
    max_attempts     integer NOT NULL,
    retry_backoff    interval NOT NULL,
    next_fire_at     timestamptz,
    skipped          bigint NOT NULL DEFAULT 0,
    last_skipped_at  timestamptz,
    last_skip_reason text,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    plan_error       text,
    CONSTRAINT tasks_task_id_valid CHECK (task_id <> '' AND octet_length(task_id) <= rendezvous._max_id_bytes()),
    CONSTRAINT tasks_overlap_valid CHECK (overlap IN ('allow', 'skip')),
    CONSTRAINT tasks_catch_up_valid CHECK (catch_up IN ('latest', 'all', 'skip')),
    CONSTRAINT tasks_catch_up_window_valid CHECK (catch_up_window > interval '0' AND isfinite(catch_up_window)),
    CONSTRAINT tasks_lease_valid CHECK (lease > interval '0' AND isfinite(lease)),
    CONSTRAINT tasks_max_attempts_valid CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT tasks_retry_backoff_valid CHECK (retry_backoff >= interval '0' AND isfinite(retry_backoff)),
    CONSTRAINT tasks_last_skip_reason_valid CHECK (last_skip_reason IN ('catch_up', 'overlap'))
);
COMMENT ON TABLE rendezvous.tasks IS
    'Recurring tasks: schedule, time zone and policies; next_fire_at is the first fire time not yet made a firing (NULL: never again).';
COMMENT ON COLUMN rendezvous.tasks.plan_error IS
    'Why making this task''s firings failed (its fire times are not made, other tasks''s are); schedule_task clears it.';
COMMENT ON COLUMN rendezvous.tasks.skipped IS
    'Fire times that never ran by policy: never made a firing (catch-up or overlap), counted up to 100,000 a pass, or made ahead and skipped when claimed (overlap).';
-- What due_firings reads each poll: only tasks whose time has come, never all of them.
CREATE INDEX tasks_due ON rendezvous.tasks (next_fire_at) WHERE NOT paused;
SELECT pg_catalog.pg_extension_config_dump('rendezvous.tasks', '');

-- Validates the policy arguments of schedule_task (22004 / 22023).
CREATE FUNCTION rendezvous._check_task_policy(
    overlap text, catch_up text, catch_up_window interval, lease interval, max_attempts integer,
    retry_backoff interval
) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF overlap IS NULL OR catch_up IS NULL OR catch_up_window IS NULL OR max_attempts IS NULL
       OR retry_backoff IS NULL THEN
        RAISE EXCEPTION 'overlap, catch_up, catch_up_window, max_attempts and retry_backoff must not be NULL'
            USING ERRCODE = '22004';
    ELSIF overlap NOT IN ('allow', 'skip') THEN
        RAISE EXCEPTION 'overlap must be allow or skip (got "%")', overlap USING ERRCODE = '22023';
    ELSIF catch_up NOT IN ('latest', 'all', 'skip') THEN
        RAISE EXCEPTION 'catch_up must be latest, all or skip (got "%")', catch_up USING ERRCODE = '22023';
    ELSIF catch_up_window <= interval '0' OR NOT isfinite(catch_up_window) OR catch_up_window > interval '1 year' THEN
        RAISE EXCEPTION 'catch_up_window must be a positive interval of at most 1 year (got %)', catch_up_window
            USING ERRCODE = '22023';
    ELSIF max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 1000 (got %)', max_attempts USING ERRCODE = '22023';
    ELSIF retry_backoff < interval '0' OR NOT isfinite(retry_backoff) THEN
        RAISE EXCEPTION 'retry_backoff must be a finite interval, zero or more (got %)', retry_backoff
            USING ERRCODE = '22023';
    END IF;
    PERFORM rendezvous._check_lease(lease);
END
$$;

-- Creates or updates a task; returns its next fire time. Idempotent: the same call again
-- changes nothing. A changed schedule or time zone starts over from the next fire time after
-- now; changed policies apply from the next firing. A paused task stays paused.
CREATE FUNCTION rendezvous.schedule_task(
    task_id         text,
    schedule        text,
    time_zone       text DEFAULT 'UTC',
    overlap         text DEFAULT 'skip',
    catch_up        text DEFAULT 'latest',
    catch_up_window interval DEFAULT '1 hour',
    lease           interval DEFAULT '30 seconds',
    max_attempts    integer DEFAULT 3,
    retry_backoff   interval DEFAULT '10 seconds'
) RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
    next_ timestamptz;
    ahead_ timestamptz;
    sched text := btrim(schedule_task.schedule);
    t rendezvous.tasks%ROWTYPE;
BEGIN
    PERFORM rendezvous._check_text('task_id', schedule_task.task_id, rendezvous._max_id_bytes());
    PERFORM rendezvous._check_task_policy(schedule_task.overlap, schedule_task.catch_up,
        schedule_task.catch_up_window, schedule_task.lease, schedule_task.max_attempts, schedule_task.retry_backoff);
    next_ := rendezvous._check_schedule(sched, schedule_task.time_zone, now_);
    SELECT * INTO t FROM rendezvous.tasks tk WHERE tk.task_id = schedule_task.task_id FOR UPDATE;
    IF FOUND AND t.plan_error IS NOT NULL THEN
        -- Registered again: planned again (if it still fails, it is set aside again).
        UPDATE rendezvous.tasks tk SET plan_error = NULL, updated_at = now_ WHERE tk.task_id = schedule_task.task_id;
    END IF;
    IF NOT FOUND THEN
        INSERT INTO rendezvous.tasks AS tk (task_id, schedule, time_zone, overlap, catch_up, catch_up_window, lease,
                                            max_attempts, retry_backoff, next_fire_at)
        VALUES (schedule_task.task_id, sched, schedule_task.time_zone, schedule_task.overlap, schedule_task.catch_up,
                schedule_task.catch_up_window, schedule_task.lease, schedule_task.max_attempts,
                schedule_task.retry_backoff, next_)
        ON CONFLICT (task_id) DO NOTHING;
        IF FOUND THEN
            RETURN next_;
        END IF;
        -- Created concurrently by the same call from another host: update it as below.
        SELECT * INTO t FROM rendezvous.tasks tk WHERE tk.task_id = schedule_task.task_id FOR UPDATE;
    END IF;
    IF (t.schedule, t.time_zone, t.overlap, t.catch_up, t.catch_up_window, t.lease, t.max_attempts, t.retry_backoff)
       IS NOT DISTINCT FROM (sched, schedule_task.time_zone, schedule_task.overlap, schedule_task.catch_up,
                             schedule_task.catch_up_window, schedule_task.lease, schedule_task.max_attempts,
                             schedule_task.retry_backoff) THEN
        -- Its next fire time: one whose firing is made ahead comes before next_fire_at.
        RETURN least(t.next_fire_at,
                     (SELECT min(f.fire_at) FROM rendezvous.firings f
                       WHERE f.task_id = schedule_task.task_id AND f.fire_at > now_ AND f.holder IS NULL
                         AND f.attempts = 0 AND f.completed_at IS NULL AND f.failed_at IS NULL));
    END IF;
    -- A firing made ahead was planned by the old schedule and policies: unmade, and its fire
    -- time is the next one again if the schedule stays.
    ahead_ := rendezvous._unmake_ahead(schedule_task.task_id, now_);
    UPDATE rendezvous.tasks tk
       SET schedule = sched, time_zone = schedule_task.time_zone, overlap = schedule_task.overlap,
           catch_up = schedule_task.catch_up, catch_up_window = schedule_task.catch_up_window,
           lease = schedule_task.lease, max_attempts = schedule_task.max_attempts,
           retry_backoff = schedule_task.retry_backoff, updated_at = now_,
           next_fire_at = CASE WHEN (t.schedule, t.time_zone) = (sched, schedule_task.time_zone)
                               THEN least(tk.next_fire_at, ahead_) ELSE next_ END
     WHERE tk.task_id = schedule_task.task_id
    RETURNING tk.next_fire_at INTO next_;
    RETURN next_;
END
$$;
COMMENT ON FUNCTION rendezvous.schedule_task(text, text, text, text, text, interval, interval, integer, interval) IS
    'Creates or updates a recurring task (idempotent) and returns its next fire time. schedule: 5- or 6-field cron, a macro (@hourly, @daily, …) or every <n> seconds|minutes|hours|days; time_zone: an IANA name.';

-- Removes a task; true when it existed. Its pending (never claimed) firings go with it;
-- claimed ones finish or expire as usual and stay in the history.
CREATE FUNCTION rendezvous.unschedule_task(task_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_text('task_id', unschedule_task.task_id, rendezvous._max_id_bytes());
    DELETE FROM rendezvous.tasks t WHERE t.task_id = unschedule_task.task_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM rendezvous.firings f
     WHERE f.task_id = unschedule_task.task_id AND f.holder IS NULL AND f.completed_at IS NULL;
    RETURN true;
END
$$;
COMMENT ON FUNCTION rendezvous.unschedule_task(text) IS
    'Removes a task and its pending firings; true when it existed. Firings already claimed finish as usual.';

-- Deletes a task's firings made ahead (not due at now_, never claimed); returns the earliest
-- of their fire times (NULL: none), for a caller that keeps it as the task's next fire time.
CREATE FUNCTION rendezvous._unmake_ahead(task_id text, now_ timestamptz) RETURNS timestamptz
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (
        DELETE FROM rendezvous.firings f
         WHERE f.task_id = _unmake_ahead.task_id AND f.fire_at > now_ AND f.holder IS NULL
           AND f.attempts = 0 AND f.completed_at IS NULL AND f.failed_at IS NULL
        RETURNING f.fire_at
    )
    SELECT min(g.fire_at) FROM gone g
$$;

-- Pausing stops new firings; a firing already claimed finishes. Idempotent.
CREATE FUNCTION rendezvous.pause_task(task_id text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_text('task_id', pause_task.task_id, rendezvous._max_id_bytes());
    UPDATE rendezvous.tasks t SET paused = true, updated_at = pg_catalog.clock_timestamp()
     WHERE t.task_id = pause_task.task_id AND NOT t.paused;
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM rendezvous.tasks t WHERE t.task_id = pause_task.task_id) THEN
        RAISE EXCEPTION 'there is no task "%"', pause_task.task_id USING ERRCODE = 'P0002';
    END IF;
    -- A firing made ahead would fall due while paused: it never runs (resume starts after now).
    PERFORM rendezvous._unmake_ahead(pause_task.task_id, pg_catalog.clock_timestamp());
END
$$;
COMMENT ON FUNCTION rendezvous.pause_task(text) IS
    'Stops new firings of a task (idempotent); firings already claimed finish. P0002 when there is no such task.';

-- Resuming starts from the next fire time after now: what fell due while paused never runs.
CREATE FUNCTION rendezvous.resume_task(task_id text) RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t rendezvous.tasks%ROWTYPE;
    now_ timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM rendezvous._check_text('task_id', resume_task.task_id, rendezvous._max_id_bytes());
    SELECT * INTO t FROM rendezvous.tasks tk WHERE tk.task_id = resume_task.task_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'there is no task "%"', resume_task.task_id USING ERRCODE = 'P0002';
    ELSIF NOT t.paused THEN
        RETURN t.next_fire_at;
    END IF;
    UPDATE rendezvous.tasks tk
       SET paused = false, updated_at = now_,
           next_fire_at = rendezvous._next_fire_time(tk.schedule, tk.time_zone, now_)
     WHERE tk.task_id = resume_task.task_id
    RETURNING tk.next_fire_at INTO t.next_fire_at;
    RETURN t.next_fire_at;
END
$$;
COMMENT ON FUNCTION rendezvous.resume_task(text) IS
    'Resumes a paused task from its next fire time after now (idempotent) and returns it; P0002 when there is no such task.';

-- The overlap policy at claim time (#42): a firing of a task with overlap = 'skip' is not run
-- while an earlier firing of the task is unfinished (running, pending, or waiting to be
-- retried). Plain SQL, every name qualified, no SET clause: the claims (firing.rs and
-- claim_firings) inline it, and ask it only of a firing never claimed (token 0).
CREATE FUNCTION rendezvous._firing_overlapped(task_id text, fire_at timestamptz) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (
        SELECT 1 FROM rendezvous.tasks t
         WHERE t.task_id OPERATOR(pg_catalog.=) _firing_overlapped.task_id
           AND t.overlap OPERATOR(pg_catalog.=) 'skip'
           AND EXISTS (SELECT 1 FROM rendezvous.firings f      -- firings_open
                        WHERE f.task_id OPERATOR(pg_catalog.=) _firing_overlapped.task_id
                          AND f.fire_at OPERATOR(pg_catalog.<) _firing_overlapped.fire_at
                          AND f.completed_at IS NULL AND f.failed_at IS NULL))
$$;
COMMENT ON FUNCTION rendezvous._firing_overlapped(text, timestamptz) IS
    'Whether a firing is skipped by its task''s overlap = skip policy: an earlier firing of the task is unfinished.';

-- What a claim does with the due firings it was given that the overlap policy skips (made
-- ahead, never claimed, an earlier firing of the task unfinished): each is finished as skipped
-- (failed_at set, attempts and failures 0, never claimable again, so no claim makes it anew) and counted
-- in its task's skipped. Rows another session holds are passed over (it is claiming or
-- skipping them), and so are the firings of a task another session holds. Returns how many
-- were skipped.
CREATE FUNCTION rendezvous._skip_overlapped(keys text[], now_ timestamptz) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    n integer;
BEGIN
    -- The tasks are locked without waiting, as the firings are: a claim holds its firings'
    -- rows, and a task's row may be held by a pass making firings or a call changing the task
    -- (which may wait for those firings). A firing whose task is locked is left as it is: not
    -- claimed now, and decided by the next claim that reaches it.
    WITH candidates AS (
        SELECT g.firing_key, g.task_id FROM rendezvous.firings g
         WHERE g.firing_key = ANY (keys) AND g.token = 0 AND g.holder IS NULL
           AND g.completed_at IS NULL AND g.failed_at IS NULL AND g.fire_at <= now_
           AND rendezvous._firing_overlapped(g.task_id, g.fire_at)
         ORDER BY g.firing_key
           FOR UPDATE SKIP LOCKED
    ), counted AS (
        SELECT t.task_id FROM rendezvous.tasks t
         WHERE t.task_id IN (SELECT c.task_id FROM candidates c)
         ORDER BY t.task_id
           FOR NO KEY UPDATE SKIP LOCKED
    ), skipped AS (
        UPDATE rendezvous.firings f
           SET failed_at = now_, lease_until = 'infinity',
               last_error = 'skipped: an earlier firing of the task was unfinished (overlap = skip)'
          FROM candidates c
         WHERE f.firing_key = c.firing_key AND c.task_id IN (SELECT k.task_id FROM counted k)
        RETURNING f.task_id
    ), recorded AS (
        UPDATE rendezvous.tasks t
           SET skipped = t.skipped + s.n, last_skipped_at = now_, last_skip_reason = 'overlap'
          FROM (SELECT k.task_id, count(*) AS n FROM skipped k GROUP BY k.task_id) s
         WHERE t.task_id = s.task_id
    )
    SELECT count(*)::integer INTO n FROM skipped;
    RETURN n;
END
$$;

-- One row per call: without this the planner assumes 1,000 and, over a pass of many tasks,
-- costs the statement high enough to JIT-compile it (a quarter of a second, every pass).
ALTER FUNCTION rendezvous._plan_firings(text, text, text, interval, timestamptz, timestamptz, integer) ROWS 1;

-- How long before its fire time a task's next firing is made: at its fire time the hosts only
-- read and claim it. Made ahead, it is claimable from its fire time (its lease_until), not
-- before. Whether an earlier firing of a task with overlap = 'skip' is still unfinished is
-- known only at the fire time: the claim decides it (_skip_overlapped, firing.sql).
CREATE FUNCTION rendezvous._made_ahead() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT interval '500 milliseconds' $$;

-- Turns the fire times that have come into firings, for at most max_tasks tasks (those
-- another session is doing are skipped, not waited for), and about max_firings firings in
-- all: a catching-up task makes its share of them a pass, the rest on the next passes. Per task: the catch-up policy picks
-- which due fire times run (_plan_firings); with overlap = 'skip', none does while an earlier
-- firing of the task is unfinished, and one pass makes at most one. One statement for all the
-- tasks of a pass.
CREATE FUNCTION rendezvous._make_due_firings(now_ timestamptz, max_tasks integer, max_firings integer) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    one text;
BEGIN
    BEGIN
        PERFORM rendezvous._make_task_firings(now_, max_tasks, NULL, max_firings);
    EXCEPTION WHEN OTHERS THEN
        -- One task could not be planned (a window out of range, a zone gone after a tzdata
        -- update): plan them one at a time, and set aside the one that fails with its error,
        -- so it stops every host's scheduling no longer (#24).
        FOR one IN
            SELECT t.task_id FROM rendezvous.tasks t
             WHERE t.next_fire_at <= now_ + rendezvous._made_ahead() AND NOT t.paused AND t.plan_error IS NULL
             ORDER BY t.next_fire_at LIMIT max_tasks
        LOOP
            BEGIN
                PERFORM rendezvous._make_task_firings(now_, 1, one, max_firings);
            EXCEPTION WHEN OTHERS THEN
                UPDATE rendezvous.tasks tk
                   SET plan_error = SQLERRM || ' (SQLSTATE ' || SQLSTATE || ')', updated_at = now_
                 WHERE tk.task_id = one;
            END;
        END LOOP;
    END;
END
$$;

-- Makes the due firings of up to max_tasks tasks (of only that one, when given) whose fire
-- time has come, in one statement; a task set aside with a plan error is passed over. Each
-- task makes at most its share of max_firings (at least one), so a pass after a long gap
-- stays short however many tasks catch up. A task that fires within _made_ahead() has that
-- one fire time made now, planned as a poll at that instant would (under overlap = 'skip'
-- without the overlap check: its claim takes that decision).
CREATE FUNCTION rendezvous._make_task_firings(now_ timestamptz, max_tasks integer, only_task text,
                                              max_firings integer) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    WITH due AS (
        SELECT t.task_id, t.schedule, t.time_zone, t.overlap, t.catch_up, t.catch_up_window, t.next_fire_at
          FROM rendezvous.tasks t
         WHERE t.next_fire_at <= now_ + rendezvous._made_ahead() AND NOT t.paused AND t.plan_error IS NULL
           AND (only_task IS NULL OR t.task_id = only_task)
         ORDER BY t.next_fire_at
         LIMIT max_tasks
           FOR UPDATE SKIP LOCKED
    ), share AS (
        SELECT greatest(1, least(1000, max_firings / greatest(count(*), 1)))::integer AS per_task FROM due
    ), planned AS (
        SELECT d.task_id, d.overlap, p.run_at, p.skipped, p.next_fire_at,
               -- (Only the skip policy asks: the check costs an index probe a task.) A fire
               -- time that came: any unfinished firing makes it wait. One made ahead is decided
               -- when it is claimed, unless an earlier firing has been due for 5 s and nobody
               -- claimed it (no host takes the task, or none has a free slot): then it is
               -- skipped now, so such a task keeps a few pending firings, not one more every
               -- fire time. (The 5 s leave room for the rank delays of hosts that died.)
               CASE WHEN d.overlap = 'allow' THEN false
                    WHEN d.next_fire_at > now_ THEN EXISTS (
                        SELECT 1 FROM rendezvous.firings f
                         WHERE f.task_id = d.task_id AND f.completed_at IS NULL AND f.failed_at IS NULL
                           AND f.token = 0 AND f.fire_at <= now_ - interval '5 seconds')
                    ELSE EXISTS (SELECT 1 FROM rendezvous.firings f
                                  WHERE f.task_id = d.task_id AND f.completed_at IS NULL AND f.failed_at IS NULL)
               END AS busy
          FROM due d
          CROSS JOIN share
          CROSS JOIN LATERAL rendezvous._plan_firings(d.schedule, d.time_zone, d.catch_up, d.catch_up_window,
                                                      d.next_fire_at, greatest(now_, d.next_fire_at), share.per_task) p
    ), decided AS (
        SELECT pl.task_id, pl.next_fire_at, pl.skipped AS catch_up_skipped,
               CASE WHEN pl.overlap = 'allow' OR cardinality(pl.run_at) = 0 THEN pl.run_at
                    WHEN pl.busy THEN '{}'::timestamptz[]
                    ELSE pl.run_at[1:1] END AS run_at,
               CASE WHEN pl.overlap = 'allow' OR cardinality(pl.run_at) = 0 THEN 0
                    WHEN pl.busy THEN cardinality(pl.run_at)
                    ELSE cardinality(pl.run_at) - 1 END AS overlap_skipped
          FROM planned pl
    ), made AS (
        INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until, attempts, day_mod_8)
        SELECT rendezvous.firing_key(d.task_id, r.at), d.task_id, r.at, NULL, 0, NULL, r.at, 0, rendezvous._day_mod_8(r.at)
          FROM decided d CROSS JOIN LATERAL unnest(d.run_at) AS r(at)
         -- In key order, as claim_firings inserts: inserts of one key wait for each other.
         ORDER BY 1
        ON CONFLICT (firing_key, day_mod_8) DO NOTHING
    )
    UPDATE rendezvous.tasks tk
       SET next_fire_at = d.next_fire_at,
           skipped = tk.skipped + d.catch_up_skipped + d.overlap_skipped,
           last_skipped_at = CASE WHEN d.catch_up_skipped + d.overlap_skipped > 0 THEN now_ ELSE tk.last_skipped_at END,
           last_skip_reason = CASE WHEN d.overlap_skipped > 0 THEN 'overlap'
                                   WHEN d.catch_up_skipped > 0 THEN 'catch_up'
                                   ELSE tk.last_skip_reason END
      FROM decided d
     WHERE tk.task_id = d.task_id;
    -- Tasks came due: schedulers waiting for their firings (they skipped the tasks this
    -- session holds) look again at this commit, not at their next tick.
    IF FOUND THEN
        PERFORM rendezvous._announce('rendezvous_firings', '');
    END IF;
END
$$;

-- The firings that can be claimed now, by the database clock: due, unfinished, not held
-- under a live lease, not waiting out a retry backoff, of tasks that are not paused. Makes the
-- firings that have come due first. On-time ones first, then late ones, each oldest first; at
-- most max_firings.
CREATE FUNCTION rendezvous.due_firings(max_firings integer DEFAULT 1000)
RETURNS TABLE (task_id text, fire_at timestamptz, claimable_since timestamptz, attempts integer, failures integer,
               lease interval)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF due_firings.max_firings IS NULL THEN
        RAISE EXCEPTION 'max_firings must not be NULL' USING ERRCODE = '22004';
    ELSIF due_firings.max_firings NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'max_firings must be between 1 and 100000 (got %)', due_firings.max_firings
            USING ERRCODE = '22023';
    END IF;
    -- Every task that came due, not just max_firings of them: one poller makes a burst of
    -- firings at once (the others skip the tasks it holds), so every host then sees the same
    -- due firings and claims its own. At most 10,000 tasks and about 10,000 firings a call
    -- (one per task when more are due): a backlog after a long gap is made over several
    -- calls, each a short transaction.
    PERFORM rendezvous._make_due_firings(now_, 10000, 10000);
    -- On-time firings first (fire time less than a minute ago), then the late ones, each
    -- oldest first: a task catching up a backlog (catch_up = 'all' after an outage) never holds
    -- other tasks' current firings back. Each half walks firings_open_fire_at for at most
    -- max_firings rows.
    RETURN QUERY
        SELECT x.task_id, x.fire_at, x.lease_until, x.attempts, x.failures, x.lease FROM (
            (SELECT f.task_id, f.fire_at, f.lease_until, f.attempts, f.failures, t.lease, false AS late
               FROM rendezvous.firings f
               JOIN rendezvous.tasks t ON t.task_id = f.task_id
              WHERE f.completed_at IS NULL AND f.failed_at IS NULL AND NOT t.paused
                AND f.fire_at >= now_ - interval '1 minute'
                AND (f.lease_until <= now_ OR (f.holder IS NOT NULL AND rendezvous._holder_gone(f.holder_pid, f.holder_started)))
              ORDER BY f.fire_at
              LIMIT due_firings.max_firings)
            UNION ALL
            (SELECT f.task_id, f.fire_at, f.lease_until, f.attempts, f.failures, t.lease, true
               FROM rendezvous.firings f
               JOIN rendezvous.tasks t ON t.task_id = f.task_id
              WHERE f.completed_at IS NULL AND f.failed_at IS NULL AND NOT t.paused
                AND f.fire_at < now_ - interval '1 minute'
                AND (f.lease_until <= now_ OR (f.holder IS NOT NULL AND rendezvous._holder_gone(f.holder_pid, f.holder_started)))
              ORDER BY f.fire_at
              LIMIT due_firings.max_firings)
        ) x
         ORDER BY x.late, x.fire_at
         LIMIT due_firings.max_firings;
END
$$;
COMMENT ON FUNCTION rendezvous.due_firings(integer) IS
    'The firings of scheduled tasks that can be claimed now by the database clock (due, unfinished, no live lease, no retry pending, task not paused), those due less than a minute ago first, each part oldest first, after the catch-up and overlap policies: with when each became claimable (its fire time, or the end of the last lease or retry backoff), the attempts and failures so far, and its task''s lease.';

-- When something may next become claimable that is not claimable now: _made_ahead() before
-- the earliest next fire time of an active task, when its firing is made (it may be past:
-- firings still to be made), or the end of a live lease, retry
-- backoff or a firing made ahead. A scheduler sleeps until then (firings already claimable are in
-- due_firings, and their ranks tell each host when to try).
-- PL/pgSQL, for its plan: up to PostgreSQL 17, a SQL function that cannot be inlined (this one
-- has its own search_path) is planned again on every call, and planning this one (two ordered
-- walks of every partition of firings) cost 3.8 ms against its 0.3 ms of work, on a call every
-- scheduler makes when it polls. It has no parameters, so PL/pgSQL keeps one plan for the
-- session (made again only when what it reads changes: an ANALYZE, say).
CREATE FUNCTION rendezvous.next_due_at() RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT min(x.at) FROM (
        (SELECT t.next_fire_at - rendezvous._made_ahead() AS at FROM rendezvous.tasks t
          WHERE NOT t.paused AND t.next_fire_at IS NOT NULL ORDER BY t.next_fire_at LIMIT 1)
        UNION ALL
        -- Made ahead: a firing before its fire time is never claimed (every claim refuses it),
        -- so its lease_until is its fire time and the first one in firings_open_fire_at is
        -- the earliest. (The clock read once, in a subquery: a bound the index scan can start
        -- from.)
        (SELECT f.lease_until FROM rendezvous.firings f JOIN rendezvous.tasks t ON t.task_id = f.task_id
          WHERE f.completed_at IS NULL AND f.failed_at IS NULL AND NOT t.paused
            AND f.fire_at > (SELECT pg_catalog.clock_timestamp())
          ORDER BY f.fire_at LIMIT 1)
        UNION ALL
        -- Past their fire time and held (a live lease) or waiting for a retry: the lease ends of
        -- the 1,000 unfinished firings past their fire time with the latest fire times. No index
        -- orders leases: a claim would then write every index (firing.sql). Bounded, so that a
        -- backlog of due firings (a task nobody handles, a catch-up) costs a poll no more: a
        -- lease behind them is seen once they are claimed, and a host polls at least every
        -- poll interval anyway. Firings of paused tasks and of no task are not told apart here
        -- (a probe of tasks a row would cost more than the walk): the end of one's lease wakes
        -- a scheduler once for nothing.
        (SELECT min(x.lease_until)
           FROM (SELECT f.lease_until FROM rendezvous.firings f
                  WHERE f.completed_at IS NULL AND f.failed_at IS NULL AND f.fire_at <= (SELECT pg_catalog.clock_timestamp())
                  ORDER BY f.fire_at DESC LIMIT 1000) x
          WHERE x.lease_until > pg_catalog.clock_timestamp())
    ) x);
END
$$;
COMMENT ON FUNCTION rendezvous.next_due_at() IS
    'The earliest instant something scheduled may become claimable that is not claimable now, or a firing is to be made: half a second before a task''s next fire time, when its firing is made ahead (past while its firings are being made), or the end of a live lease, a retry backoff or the wait of a firing made ahead; NULL when nothing is scheduled.';

-- A failed attempt: retried after the task's backoff (doubling each time, at most an hour)
-- until max_attempts failures, then failed for good (failed_at set, never claimed again). A
-- firing of no scheduled task fails for good at once. recorded is false for a stale token or a
-- finished firing; retry_at is NULL when the failure is final.
CREATE FUNCTION rendezvous.fail_firing(task_id text, fire_at timestamptz, token bigint, error text DEFAULT NULL)
RETURNS TABLE (recorded boolean, retry_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    fk text := rendezvous.firing_key(fail_firing.task_id, fail_firing.fire_at);
    max_ integer := 1;
    backoff interval := interval '0';
    now_ timestamptz := pg_catalog.clock_timestamp();
    f rendezvous.firings%ROWTYPE;
BEGIN
    IF fail_firing.token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT t.max_attempts, t.retry_backoff INTO max_, backoff
      FROM rendezvous.tasks t WHERE t.task_id = fail_firing.task_id;
    IF NOT FOUND THEN
        max_ := 1;
    END IF;
    UPDATE rendezvous.firings fr
       SET failures = fr.failures + 1,
           holder = NULL,
           last_error = left(fail_firing.error, 2000),
           failed_at = CASE WHEN fr.failures + 1 >= max_ THEN now_ END,
           -- A failed firing's lease never ends: no claim takes it again.
           lease_until = CASE WHEN fr.failures + 1 >= max_ THEN 'infinity'::timestamptz
                              ELSE now_ + least(backoff * power(2, least(fr.failures, 20)), interval '1 hour') END
     WHERE fr.firing_key = fk AND fr.day_mod_8 = rendezvous._day_mod_8(fail_firing.fire_at)
       AND fr.token = fail_firing.token AND fr.holder IS NOT NULL
       AND fr.completed_at IS NULL AND fr.failed_at IS NULL AND rendezvous._is_holder_role(fr.holder_role)
    RETURNING fr.* INTO f;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, NULL::timestamptz;
        RETURN;
    END IF;
    PERFORM rendezvous._durable_commit();
    RETURN QUERY SELECT true, CASE WHEN f.failed_at IS NULL THEN f.lease_until END;
END
$$;
COMMENT ON FUNCTION rendezvous.fail_firing(text, timestamptz, bigint, text) IS
    'Records a failed attempt of a claimed firing: retried after the task''s backoff (doubling, at most 1 hour) until max_attempts failures, then failed for good. recorded is false for a stale token or a finished firing; retry_at is NULL when the failure is final.';
