-- Status views for operators (and `rendezvous status`), readable by rendezvous_observer: who is
-- live, who leads, which firings are in flight or done, which runs were admitted. Loaded by
-- extension_sql_file! in status.rs.

CREATE VIEW rendezvous.status_hosts AS
    SELECT h.host_id, h.weight, h.first_seen, h.last_seen,
           h.last_seen > pg_catalog.now() - rendezvous.default_staleness() AS live
      FROM rendezvous.hosts h;
COMMENT ON VIEW rendezvous.status_hosts IS 'Every host that heartbeats, and whether it is live (default staleness, database clock).';

-- pg_locks is read once for all groups (not once per group, as leader() would).
CREATE VIEW rendezvous.status_leaders AS
    SELECT l.group_name, CASE WHEN k.pid = l.pid THEN l.leader END AS leader, l.epoch,
           CASE WHEN k.pid = l.pid THEN l.since END AS since, k.pid AS holder_pid,
           k.pid IS NOT NULL AND (k.pid IS DISTINCT FROM l.pid OR l.leader IS NULL) AS holder_unrecorded
      FROM rendezvous.leaders l
      LEFT JOIN (SELECT g.lock_id, g.pid FROM rendezvous.leader_locks g WHERE g.granted) k ON k.lock_id = l.lock_id;
COMMENT ON VIEW rendezvous.status_leaders IS
    'Per leader group: who leads (NULL: nobody), the epoch, since when, the lock holder''s pid, and whether a session holds the lock without being the recorded leader (a claim in flight).';

-- The statement's clock (now(), stable), not clock_timestamp(): a volatile expression in a view
-- keeps a caller's filters from reaching the indexes.
CREATE VIEW rendezvous.status_firings AS
    SELECT f.firing_key, f.task_id, f.fire_at, f.holder, f.token, f.attempts, f.claimed_at, f.lease_until, f.completed_at,
           CASE WHEN f.completed_at IS NOT NULL THEN 'completed'
                -- Finished with no failure: skipped by the overlap policy when claimed (a firing fails for
                -- good only after a failed attempt).
                WHEN f.failed_at IS NOT NULL AND f.failures = 0 THEN 'skipped'
                WHEN f.failed_at IS NOT NULL THEN 'failed'
                WHEN f.holder IS NULL AND f.failures > 0 THEN 'retrying'
                WHEN f.holder IS NULL THEN 'pending'
                WHEN f.lease_until > pg_catalog.now()
                     AND NOT rendezvous._holder_gone(f.holder_pid, f.holder_started) THEN 'running'
                ELSE 'expired' END AS state,
           f.failures, f.failed_at, f.last_error
      FROM rendezvous.firings f;
COMMENT ON VIEW rendezvous.status_firings IS
    'Every firing: its holder, token and lease, and its state: pending (made, not claimed yet; claimable from lease_until, which a firing made ahead of its time reaches at fire_at), running, expired (lease over or holder session gone, uncompleted), retrying (an attempt failed; claimable again at lease_until), failed (for good), skipped (made ahead, then skipped by its task''s overlap policy when claimed: never run), completed.';

CREATE VIEW rendezvous.status_tasks AS
    SELECT t.task_id, t.schedule, t.time_zone, t.paused, t.overlap, t.catch_up, t.next_fire_at,
           done.fire_at AS last_completed_fire_at, done.completed_at AS last_completed_at,
           coalesce(open.running, 0) AS running, open.holders, coalesce(open.pending, 0) AS pending,
           coalesce(open.retrying, 0) AS retrying, coalesce(bad.failed, 0) AS failed,
           err.fire_at AS last_error_fire_at, err.last_error,
           t.skipped, t.last_skipped_at, t.last_skip_reason, t.plan_error
      -- The tasks in next_fire_at order first: a reader that wants the next few (`ORDER BY
      -- next_fire_at, task_id LIMIT n`, as `rendezvous status` does) then looks at the history of
      -- n tasks, not of every task (5 -> 1.9 ms at 1,000 tasks with 20 firings each).
      FROM (SELECT * FROM rendezvous.tasks ORDER BY next_fire_at, task_id) t
      LEFT JOIN LATERAL (
          SELECT f.fire_at, f.completed_at FROM rendezvous.firings f
           WHERE f.task_id = t.task_id AND f.completed_at IS NOT NULL
           ORDER BY f.fire_at DESC LIMIT 1) done ON true
      LEFT JOIN LATERAL (
          SELECT count(*) FILTER (WHERE f.holder IS NOT NULL AND f.lease_until > pg_catalog.now()) AS running,
                 array_agg(DISTINCT f.holder)
                     FILTER (WHERE f.holder IS NOT NULL AND f.lease_until > pg_catalog.now()) AS holders,
                 count(*) FILTER (WHERE f.holder IS NULL AND f.failures = 0) AS pending,
                 count(*) FILTER (WHERE f.holder IS NULL AND f.failures > 0) AS retrying
            FROM rendezvous.firings f
           WHERE f.task_id = t.task_id AND f.completed_at IS NULL AND f.failed_at IS NULL) open ON true
      LEFT JOIN LATERAL (
          SELECT count(*) AS failed FROM rendezvous.firings f
           WHERE f.task_id = t.task_id AND f.failed_at IS NOT NULL AND f.failures > 0) bad ON true    -- firings_failed
      LEFT JOIN LATERAL (
          SELECT f.fire_at, f.last_error FROM rendezvous.firings f
           WHERE f.task_id = t.task_id AND f.failures > 0                  -- firings_errors
           ORDER BY f.fire_at DESC LIMIT 1) err ON true;
COMMENT ON VIEW rendezvous.status_tasks IS
    'Per scheduled task: its schedule and next fire time, its last completed firing, firings running (and their holders), pending and waiting to be retried, failed for good, the latest error, fire times skipped by policy, and why its firings could not be made (plan_error).';

CREATE VIEW rendezvous.status_runs AS
    SELECT r.run_id, r.tenant_id, r.workflow_ref, r.dispatch_key, r.state, r.created_at, r.updated_at,
           r.holder, r.attempts, r.max_attempts, r.runnable_at, r.lease_until, r.last_error,
           r.waiting_for, r.progress, r.parent_run_id,
           (SELECT count(*) FROM rendezvous.steps s WHERE s.run_id = r.run_id)::integer AS steps,
           (SELECT s.step FROM rendezvous.steps s WHERE s.run_id = r.run_id ORDER BY s.position DESC LIMIT 1) AS last_step
      FROM rendezvous.runs r;
COMMENT ON VIEW rendezvous.status_runs IS
    'Admitted runs, without their input or output: state, holder and lease while running, attempts made and allowed, when a pending run is runnable, the last error; what a parked run waits for, the holder''s progress, the parent run, steps recorded and the last one.';

-- The run queue per workflow: pending (and how many are runnable now), running, and the age of
-- the oldest runnable run. Reads only unfinished runs (partial indexes), whatever the history.
CREATE VIEW rendezvous.status_run_queue AS
    -- Pending and running runs read apart, each through its partial index (one filter on both
    -- states read every run: 60 ms at a million finished ones).
    SELECT q.workflow_ref, sum(q.pending)::bigint AS pending, sum(q.runnable)::bigint AS runnable,
           sum(q.running)::bigint AS running, max(q.oldest_runnable_age) AS oldest_runnable_age
      FROM (SELECT r.workflow_ref, count(*) AS pending,
                   count(*) FILTER (WHERE r.runnable_at <= pg_catalog.now()) AS runnable, 0::bigint AS running,
                   pg_catalog.now() - min(r.runnable_at) FILTER (WHERE r.runnable_at <= pg_catalog.now()) AS oldest_runnable_age
              FROM rendezvous.runs r WHERE r.state = 'pending' GROUP BY r.workflow_ref
            UNION ALL
            SELECT r.workflow_ref, 0, 0, count(*), NULL
              FROM rendezvous.runs r WHERE r.state = 'running' GROUP BY r.workflow_ref) q
     GROUP BY q.workflow_ref;
COMMENT ON VIEW rendezvous.status_run_queue IS
    'Per workflow_ref: runs pending (runnable now), running, and how long the oldest runnable run has waited.';

-- Whether failover can lose what was acknowledged: standbys streaming from this server, how
-- many of them are synchronous, and warnings (docs/guarantees.md): this server is a standby;
-- no standby at all; standbys but none synchronous; synchronous_commit off or local where
-- hosts' commits would be made (this session, the configured default, any role or database
-- setting; a session's own SET cannot be seen); leader epochs from a later timeline than this
-- server's (its history is not the one they came from: restored elsewhere, or pg_upgraded,
-- which restarts the timeline at 1).
CREATE FUNCTION rendezvous.replication_status()
RETURNS TABLE (in_recovery boolean, standbys integer, synchronous integer, synchronous_standby_names text,
               synchronous_commit text, warning text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.in_recovery, r.standbys, r.synchronous, r.names, r.commit_mode,
           nullif(concat_ws('; ',
               CASE WHEN r.in_recovery THEN
                   'this server is a standby: leadership and firing claims need the primary' END,
               CASE WHEN NOT r.in_recovery AND r.standbys = 0 THEN
                   'no standby streams from this server: what it acknowledged is lost with it, and a failover to an older copy can repeat fencing numbers' END,
               CASE WHEN r.standbys > 0 AND r.synchronous = 0 THEN
                   'standbys exist but none is synchronous: after a failover to one, acknowledged runs and completions can be lost' END,
               CASE WHEN r.synchronous > 0 AND r.weak IS NOT NULL THEN
                   'synchronous_commit is off or local for ' || r.weak || ': those commits do not wait for the synchronous standby' END,
               CASE WHEN r.top_epoch_timeline > r.timeline THEN
                   'leader epochs come from timeline ' || r.top_epoch_timeline || ' or later, this server is on timeline '
                   || r.timeline || ': its history is not the one they came from (restored, or upgraded with pg_upgrade?), '
                   || 'and until its timeline passes theirs a failover''s floor can be below numbers already handed out' END
           ), '')
      FROM (SELECT s.*,
                   -- Where commits would not wait for a synchronous standby.
                   (SELECT string_agg(w.place, ', ')
                      FROM (SELECT 'this session' AS place WHERE s.commit_mode IN ('off', 'local')
                            UNION ALL
                            SELECT 'the configured default' FROM pg_catalog.pg_settings p
                             WHERE p.name = 'synchronous_commit' AND p.reset_val IN ('off', 'local')
                            UNION ALL
                            SELECT concat_ws(' in ', 'role ' || ro.rolname, 'database ' || d.datname)
                              FROM pg_catalog.pg_db_role_setting rs
                              LEFT JOIN pg_catalog.pg_roles ro ON ro.oid = rs.setrole
                              LEFT JOIN pg_catalog.pg_database d ON d.oid = rs.setdatabase
                             WHERE rs.setconfig OPERATOR(pg_catalog.&&)
                                   ARRAY['synchronous_commit=off', 'synchronous_commit=local']) w) AS weak,
                   -- A number handed out on timeline t is at least (t - 1) << 32.
                   CASE WHEN NOT s.in_recovery THEN (rendezvous._fence_floor() >> 32) + 1 END AS timeline,
                   (SELECT (max(l.epoch) >> 32) + 1 FROM rendezvous.leaders l) AS top_epoch_timeline
              FROM (SELECT pg_catalog.pg_is_in_recovery() AS in_recovery,
                           (SELECT count(*)::integer FROM pg_catalog.pg_stat_replication) AS standbys,
                           (SELECT count(*)::integer FROM pg_catalog.pg_stat_replication
                             WHERE sync_state IN ('sync', 'quorum')) AS synchronous,
                           pg_catalog.current_setting('synchronous_standby_names') AS names,
                           pg_catalog.current_setting('synchronous_commit') AS commit_mode) s) r
$$;
COMMENT ON FUNCTION rendezvous.replication_status() IS
    'Standbys streaming from this server, how many are synchronous, the synchronous settings, and warnings when a failover could lose what was acknowledged or repeat fencing numbers: this server is a standby; no standby; standbys, none synchronous; synchronous_commit off or local for this session, the configured default, or a role or database; leader epochs from a later timeline than this server''s.';
