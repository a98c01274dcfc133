-- Status views for operators (and `rendezvous status`), readable by rendezvous_observer: who is
-- live, who leads, which firings are in flight or done, which runs were admitted. Loaded by
-- extension_sql_file! in status.rs.

CREATE VIEW rendezvous.status_hosts AS
    SELECT h.host_id, h.weight, h.first_seen, h.last_seen,
           h.last_seen > pg_catalog.clock_timestamp() - rendezvous.default_staleness() AS live
      FROM rendezvous.hosts h;
COMMENT ON VIEW rendezvous.status_hosts IS 'Every host that heartbeats, and whether it is live (default staleness, database clock).';

CREATE VIEW rendezvous.status_leaders AS
    SELECT l.group_name, c.leader, l.epoch, c.since, c.pid AS holder_pid,
           c.pid IS NOT NULL AND c.leader IS NULL AS holder_unrecorded
      FROM rendezvous.leaders l
      CROSS JOIN LATERAL rendezvous.leader(l.group_name) c;
COMMENT ON VIEW rendezvous.status_leaders IS
    'Per leader group: who leads (NULL: nobody), the epoch, since when, the lock holder''s pid, and whether a session holds the lock without being the recorded leader (a claim in flight).';

CREATE VIEW rendezvous.status_firings AS
    SELECT f.firing_key, f.task_id, f.fire_at, f.holder, f.token, f.attempts, f.claimed_at, f.lease_until, f.completed_at,
           CASE WHEN f.completed_at IS NOT NULL THEN 'completed'
                WHEN f.lease_until > pg_catalog.clock_timestamp() THEN 'running'
                ELSE 'expired' END AS state
      FROM rendezvous.firings f;
COMMENT ON VIEW rendezvous.status_firings IS
    'Every claimed firing: its holder, token and lease, and whether it completed, is running, or its lease expired uncompleted.';

CREATE VIEW rendezvous.status_runs AS
    SELECT r.run_id, r.tenant_id, r.workflow_ref, r.dispatch_key, r.state, r.created_at, r.updated_at
      FROM rendezvous.runs r;
COMMENT ON VIEW rendezvous.status_runs IS 'Admitted runs, without their input.';
