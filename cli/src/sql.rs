//! Every statement the `rendezvous` command sends to a database with pg_rendezvous: status,
//! admin, check, and the fleet's hosts, controller and report (with its bookkeeping tables,
//! [`FLEET_SCHEMA`]). Declared as the client's are (`rendezvous_client::sql_statements!`), so
//! `tests/it/contract.rs` prepares each against the installed extension and compares its
//! parameter and column types with these. Statements the command sends to other servers
//! (a pg_auto_failover monitor, a standby being set up: ha.rs, cluster.rs) are not here.

/// The fleet's bookkeeping tables (in the database it runs against), made if missing.
pub const FLEET_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS fleet_starts (tag text, firing_key text, token bigint, host_id text, at timestamptz DEFAULT clock_timestamp());
ALTER TABLE fleet_starts ADD COLUMN IF NOT EXISTS fire_at timestamptz;
CREATE TABLE IF NOT EXISTS fleet_effects (tag text, firing_key text, token bigint, host_id text, run_id bigint, at timestamptz DEFAULT clock_timestamp());
ALTER TABLE fleet_effects ADD COLUMN IF NOT EXISTS fire_at timestamptz;
CREATE TABLE IF NOT EXISTS fleet_admissions (tag text, firing_key text, run_id bigint, created boolean);
CREATE TABLE IF NOT EXISTS fleet_leader_actions (tag text, epoch bigint, host_id text, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS fleet_run_starts (tag text, run_id bigint, token bigint, host_id text, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS fleet_run_effects (tag text, run_id bigint, token bigint, host_id text, at timestamptz DEFAULT clock_timestamp());
ALTER TABLE fleet_leader_actions ADD COLUMN IF NOT EXISTS action_id bigint;
CREATE TABLE IF NOT EXISTS fleet_step_calls (tag text, run_id bigint, step text, token bigint, host_id text, cost_cents integer, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS fleet_external (tag text, idempotency_key text PRIMARY KEY, run_id bigint, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS fleet_answers (tag text, run_id bigint, token bigint, host_id text, at timestamptz DEFAULT clock_timestamp());";

rendezvous_client::sql_statements! {
    /// `rendezvous status` (status.rs).
    STATUS_HOSTS = "SELECT host_id, weight, extract(epoch FROM clock_timestamp() - last_seen)::float8, live,
                count(*) OVER (), count(*) FILTER (WHERE live) OVER (),
                coalesce(sum(weight) FILTER (WHERE live) OVER (), 0)::float8
           FROM rendezvous.status_hosts ORDER BY live, host_id LIMIT 100"
        () -> ("host_id": TEXT, "weight": FLOAT8, "extract": FLOAT8, "live": BOOL, "count": INT8, "count": INT8, "coalesce": FLOAT8);
    /// `rendezvous status` (status.rs).
    STATUS_LEADERS = "SELECT group_name, leader, epoch, holder_pid, extract(epoch FROM clock_timestamp() - since)::float8,
                count(*) OVER (), count(leader) OVER ()
           FROM rendezvous.status_leaders ORDER BY leader IS NOT NULL, 1 LIMIT 100"
        () -> ("group_name": TEXT, "leader": TEXT, "epoch": INT8, "holder_pid": INT4, "extract": FLOAT8, "count": INT8, "count": INT8);
    /// `rendezvous status` (status.rs).
    STATUS_FIRINGS_IN_FLIGHT = "SELECT firing_key, holder, token, attempts, extract(epoch FROM lease_until - clock_timestamp())::float8, false, state,
                (extract(epoch FROM claimed_at - fire_at) * 1000)::float8
           FROM rendezvous.status_firings WHERE completed_at IS NULL AND failed_at IS NULL ORDER BY fire_at LIMIT 20"
        () -> ("firing_key": TEXT, "holder": TEXT, "token": INT8, "attempts": INT4, "extract": FLOAT8, "?column?": BOOL, "state": TEXT, "float8": FLOAT8);
    /// `rendezvous status` (status.rs).
    STATUS_FIRINGS_RECENT = "SELECT firing_key, holder, token, attempts, 0::float8, true, state,
                (extract(epoch FROM claimed_at - fire_at) * 1000)::float8
           FROM rendezvous.status_firings WHERE completed_at IS NOT NULL ORDER BY completed_at DESC LIMIT 10"
        () -> ("firing_key": TEXT, "holder": TEXT, "token": INT8, "attempts": INT4, "float8": FLOAT8, "?column?": BOOL, "state": TEXT, "float8": FLOAT8);
    /// `rendezvous status` (status.rs).
    STATUS_FIRING_COUNTS = "SELECT (SELECT count(*) FROM rendezvous.status_firings WHERE completed_at IS NULL AND failed_at IS NULL),
                (SELECT count(*) FROM rendezvous.status_firings WHERE completed_at > now() - interval '1 minute'),
                (SELECT count(*) FROM rendezvous.status_firings WHERE failed_at IS NOT NULL AND failures > 0)"
        () -> ("count": INT8, "count": INT8, "count": INT8);
    /// `rendezvous status` (status.rs).
    STATUS_TASKS = "SELECT task_id, schedule, time_zone, paused, extract(epoch FROM next_fire_at - clock_timestamp())::float8,
                running, pending + retrying, failed, last_error, skipped
           FROM rendezvous.status_tasks ORDER BY next_fire_at NULLS LAST, task_id LIMIT 20"
        () -> ("task_id": TEXT, "schedule": TEXT, "time_zone": TEXT, "paused": BOOL, "extract": FLOAT8, "running": INT8, "?column?": INT8, "failed": INT8, "last_error": TEXT, "skipped": INT8);
    /// `rendezvous status` (status.rs).
    STATUS_REPLICATION = "SELECT in_recovery, standbys, synchronous, synchronous_standby_names, synchronous_commit, warning
           FROM rendezvous.replication_status()"
        () -> ("in_recovery": BOOL, "standbys": INT4, "synchronous": INT4, "synchronous_standby_names": TEXT, "synchronous_commit": TEXT, "warning": TEXT);
    /// `rendezvous status` (status.rs).
    STATUS_RUNS = "SELECT run_id, tenant_id, workflow_ref, coalesce(dispatch_key, ''), state, steps, last_step, waiting_for, progress
           FROM rendezvous.status_runs ORDER BY run_id DESC LIMIT 10"
        () -> ("run_id": INT8, "tenant_id": TEXT, "workflow_ref": TEXT, "coalesce": TEXT, "state": TEXT, "steps": INT4,
               "last_step": TEXT, "waiting_for": TEXT, "progress": JSONB);
    /// `rendezvous status` (status.rs).
    STATUS_RUN_QUEUE = "SELECT workflow_ref, pending, runnable, running, extract(epoch FROM oldest_runnable_age)::float8
           FROM rendezvous.status_run_queue ORDER BY workflow_ref LIMIT 50"
        () -> ("workflow_ref": TEXT, "pending": INT8, "runnable": INT8, "running": INT8, "extract": FLOAT8);
    /// `rendezvous admin` (admin.rs).
    PAUSE_TASK = "SELECT rendezvous.pause_task($1)"
        (TEXT) -> ("pause_task": VOID);
    /// `rendezvous admin` (admin.rs).
    RESUME_TASK = "SELECT rendezvous.resume_task($1)"
        (TEXT) -> ("resume_task": TIMESTAMPTZ);
    /// `rendezvous admin` (admin.rs).
    UNSCHEDULE_TASK = "SELECT rendezvous.unschedule_task($1)"
        (TEXT) -> ("unschedule_task": BOOL);
    /// `rendezvous admin` (admin.rs).
    RELEASE_FIRING_CLAIM = "SELECT released, holder, token FROM rendezvous.release_firing_claim($1, $2::text::timestamptz)"
        (TEXT, TEXT) -> ("released": BOOL, "holder": TEXT, "token": INT8);
    /// `rendezvous admin` (admin.rs).
    REQUEST_STEP_DOWN = "SELECT requested, leader, epoch FROM rendezvous.request_step_down($1, $2)"
        (TEXT, TEXT) -> ("requested": BOOL, "leader": TEXT, "epoch": INT8);
    /// `rendezvous admin` (admin.rs).
    LEAVE = "SELECT rendezvous.leave($1)"
        (TEXT) -> ("leave": BOOL);
    /// `rendezvous check` (check.rs).
    CHECK_SESSION = "SELECT current_user, current_database(), current_setting('server_version'), \
                    coalesce(host(inet_server_addr()) || ':' || inet_server_port(), 'local socket'), \
                    s.ssl, s.version, s.cipher \
               FROM pg_catalog.pg_stat_ssl s WHERE s.pid = pg_catalog.pg_backend_pid()"
        () -> ("current_user": NAME, "current_database": NAME, "current_setting": TEXT, "coalesce": TEXT, "ssl": BOOL, "version": TEXT, "cipher": TEXT);
    /// `rendezvous check` (check.rs): what the session's role may do with the extension, and
    /// whether the functions that judge a claim's holder gone read every role's sessions (the
    /// owner is a superuser or a member of pg_read_all_stats).
    CHECK_ROLE = "SELECT has_function_privilege('rendezvous.claim_runs(text, integer, interval, text[], interval)', 'EXECUTE') AS host,
                has_table_privilege('rendezvous.status_hosts', 'SELECT') AS observer,
                has_function_privilege('rendezvous.purge_runs(interval)', 'EXECUTE') AS admin,
                (SELECT o.rolsuper OR pg_has_role(o.oid, 'pg_read_all_stats', 'USAGE')
                        OR pg_has_role(o.oid, session_user, 'USAGE')
                   FROM pg_roles o JOIN pg_proc p ON p.proowner = o.oid
                  WHERE p.oid = 'rendezvous._holder_gone(integer, timestamp with time zone)'::regprocedure) AS sees_sessions"
        () -> ("host": BOOL, "observer": BOOL, "admin": BOOL, "sees_sessions": BOOL);
    /// `rendezvous status` (status.rs): whether the extension's owner reads every role's
    /// sessions (a superuser, or a member of pg_read_all_stats), which a dead holder's work
    /// needs to move at once rather than at its lease (the portable edition's owner may not).
    STATUS_TAKEOVER = "SELECT (SELECT o.rolsuper OR pg_has_role(o.oid, 'pg_read_all_stats', 'USAGE')
                   FROM pg_roles o JOIN pg_proc p ON p.proowner = o.oid
                  WHERE p.oid = 'rendezvous._holder_gone(integer, timestamp with time zone)'::regprocedure) AS sees_sessions"
        () -> ("sees_sessions": BOOL);
    /// `rendezvous fleet` (host.rs).
    FLEET_START = "INSERT INTO fleet_starts (tag, firing_key, token, host_id, fire_at) VALUES ($1, $2, $3, $4, $5)"
        (TEXT, TEXT, INT8, TEXT, TIMESTAMPTZ) -> ();
    /// `rendezvous fleet` (host.rs).
    FLEET_ADMISSION = "INSERT INTO fleet_admissions (tag, firing_key, run_id, created) VALUES ($1, $2, $3, $4)"
        (TEXT, TEXT, INT8, BOOL) -> ();
    /// `rendezvous fleet` (host.rs).
    FLEET_EFFECT = "INSERT INTO fleet_effects (tag, firing_key, token, host_id, run_id, fire_at) VALUES ($1, $2, $3, $4, $5, $6)"
        (TEXT, TEXT, INT8, TEXT, INT8, TIMESTAMPTZ) -> ();
    /// `rendezvous fleet` (host.rs).
    FLEET_RUN_START = "INSERT INTO fleet_run_starts (tag, run_id, token, host_id) VALUES ($1, $2, $3, $4)"
        (TEXT, INT8, INT8, TEXT) -> ();
    /// `rendezvous fleet` (host.rs).
    FLEET_RUN_EFFECT = "INSERT INTO fleet_run_effects (tag, run_id, token, host_id) VALUES ($1, $2, $3, $4)"
        (TEXT, INT8, INT8, TEXT) -> ();
    /// `rendezvous fleet` (host.rs): one execution of an agent step's work (what a provider bills).
    FLEET_STEP_CALL = "INSERT INTO fleet_step_calls (tag, run_id, step, token, host_id, cost_cents) VALUES ($1, $2, $3, $4, $5, $6)"
        (TEXT, INT8, TEXT, INT8, TEXT, INT4) -> ();
    /// `rendezvous fleet` (host.rs): the fake external service, which deduplicates by key.
    FLEET_EXTERNAL_REQUEST = "INSERT INTO fleet_external (tag, idempotency_key, run_id) VALUES ($1, $2, $3)
           ON CONFLICT (idempotency_key) DO NOTHING"
        (TEXT, TEXT, INT8) -> ();
    /// `rendezvous fleet` (host.rs): the agent's database step.
    FLEET_ANSWER = "INSERT INTO fleet_answers (tag, run_id, token, host_id) VALUES ($1, $2, $3, $4)"
        (TEXT, INT8, INT8, TEXT) -> ();
    /// `rendezvous fleet` (host.rs).
    FLEET_LEADER_ACTION = "INSERT INTO fleet_leader_actions (tag, epoch, host_id, action_id) VALUES ($1, $2, $3, $4)"
        (TEXT, INT8, TEXT, INT8) -> ();
    /// `rendezvous fleet` (host.rs).
    FLEET_ALL_DONE = "SELECT count(*) FILTER (WHERE t.next_fire_at > $2) = $3
                    AND NOT EXISTS (SELECT 1 FROM rendezvous.status_firings f
                                     WHERE f.task_id LIKE $1 AND f.fire_at <= $2 AND f.completed_at IS NULL)
                    AND NOT EXISTS (SELECT 1 FROM rendezvous.status_runs r
                                      JOIN rendezvous.status_firings f ON f.firing_key = r.dispatch_key
                                     WHERE r.tenant_id = $4 AND r.state IN ('pending', 'running')
                                       AND f.task_id LIKE $1 AND f.fire_at <= $2)
               FROM rendezvous.status_tasks t WHERE t.task_id LIKE $1"
        (TEXT, TIMESTAMPTZ, INT8, TEXT) -> ("?column?": BOOL);
    /// `rendezvous fleet` (ledger.rs).
    LEDGER_RUNS_LOST = "SELECT count(*) FROM unnest($1::text[], $2::int8[]) AS l(key, run_id)
              WHERE NOT EXISTS (SELECT 1 FROM rendezvous.status_runs r
                                 WHERE r.run_id = l.run_id AND r.dispatch_key = l.key)"
        (TEXT_ARRAY, INT8_ARRAY) -> ("count": INT8);
    /// `rendezvous fleet` (ledger.rs).
    LEDGER_COMPLETIONS_LOST = "SELECT count(*) FROM unnest($1::text[], $2::int8[]) AS l(key, token)
              WHERE NOT EXISTS (SELECT 1 FROM rendezvous.status_firings f
                                 WHERE f.firing_key = l.key AND f.completed_at IS NOT NULL)
                 OR NOT EXISTS (SELECT 1 FROM fleet_effects e WHERE e.firing_key = l.key AND e.token = l.token)"
        (TEXT_ARRAY, INT8_ARRAY) -> ("count": INT8);
    /// `rendezvous fleet` (ledger.rs).
    LEDGER_RUN_COMPLETIONS_LOST = "SELECT count(*) FROM unnest($1::int8[], $2::int8[]) AS l(run_id, token)
              WHERE NOT EXISTS (SELECT 1 FROM rendezvous.status_runs r WHERE r.run_id = l.run_id AND r.state = 'succeeded')
                 OR NOT EXISTS (SELECT 1 FROM fleet_run_effects e WHERE e.run_id = l.run_id AND e.token = l.token)"
        (INT8_ARRAY, INT8_ARRAY) -> ("count": INT8);
    /// `rendezvous fleet` (ledger.rs).
    LEDGER_TERMS_LOST = "SELECT count(*) FROM unnest($1::int8[]) AS l(epoch)
              WHERE l.epoch > (SELECT coalesce(max(epoch), 0) FROM rendezvous.status_leaders WHERE group_name = $2)"
        (INT8_ARRAY, TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (ledger.rs).
    LEDGER_ACTIONS_LOST = "SELECT count(*) FROM unnest($1::text[], $2::int8[], $3::int8[]) AS l(host_id, epoch, action_id)
              WHERE NOT EXISTS (SELECT 1 FROM fleet_leader_actions a
                                 WHERE a.host_id = l.host_id AND a.epoch = l.epoch AND a.action_id = l.action_id)"
        (TEXT_ARRAY, INT8_ARRAY, INT8_ARRAY) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/hosts.rs).
    FLEET_PROGRESS = "SELECT count(*) FROM rendezvous.status_firings
              WHERE task_id LIKE $1 AND completed_at IS NOT NULL AND fire_at <= $2"
        (TEXT, TIMESTAMPTZ) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/chaos.rs).
    FLEET_HELD_FIRINGS = "SELECT firing_key, token FROM rendezvous.status_firings WHERE holder = $1 AND state = 'running'"
        (TEXT) -> ("firing_key": TEXT, "token": INT8);
    /// `rendezvous fleet` (fleet/chaos.rs).
    FLEET_HELD_RUNS = "SELECT run_id, attempts FROM rendezvous.status_runs WHERE holder = $1 AND state = 'running'"
        (TEXT) -> ("run_id": INT8, "attempts": INT4);
    /// `rendezvous fleet` (fleet/chaos.rs).
    FLEET_FIRINGS_HELD_AGAIN = "SELECT f.firing_key FROM rendezvous.status_firings f
                   JOIN unnest($1::text[], $2::int8[]) AS h(key, token) ON h.key = f.firing_key
                  WHERE f.completed_at IS NOT NULL OR f.token > h.token"
        (TEXT_ARRAY, INT8_ARRAY) -> ("firing_key": TEXT);
    /// `rendezvous fleet` (fleet/chaos.rs).
    FLEET_RUNS_HELD_AGAIN = "SELECT r.run_id FROM rendezvous.status_runs r
                   JOIN unnest($1::int8[], $2::int4[]) AS h(run_id, attempts) ON h.run_id = r.run_id
                  WHERE r.state IN ('succeeded', 'failed', 'cancelled') OR r.attempts > h.attempts"
        (INT8_ARRAY, INT4_ARRAY) -> ("run_id": INT8);
    /// `rendezvous fleet` (fleet/controller.rs): whether a node takes writes, and on which
    /// WAL timeline (the one it writes, from the current WAL file's name; NULL on a standby).
    FLEET_NODE_TIMELINE = "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS writable,
                CASE WHEN NOT pg_is_in_recovery()
                     THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END AS timeline"
        () -> ("writable": BOOL, "timeline": INT4);
    /// `rendezvous fleet` (fleet/chaos.rs).
    FLEET_TERMINATE_HOST = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1"
        (TEXT) -> ("pg_terminate_backend": BOOL);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_EXECUTED_TWICE = "SELECT count(*) FROM (SELECT e.firing_key FROM fleet_effects e
           JOIN rendezvous.status_firings f ON f.firing_key = e.firing_key AND f.task_id LIKE $3
          WHERE e.tag = $1 AND f.fire_at <= $2 GROUP BY 1 HAVING count(*) > 1) x"
        (TEXT, TIMESTAMPTZ, TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_RERUN_AFTER_TAKEOVER = "SELECT count(*) FROM (SELECT s.firing_key FROM fleet_starts s
           JOIN rendezvous.status_firings f ON f.firing_key = s.firing_key AND f.task_id LIKE $3
          WHERE s.tag = $1 AND f.fire_at <= $2 AND f.failures = 0 GROUP BY 1 HAVING count(DISTINCT s.token) > 1) x"
        (TEXT, TIMESTAMPTZ, TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_STARTED_EARLY = "SELECT count(*) FROM fleet_starts s JOIN rendezvous.status_firings f ON f.firing_key = s.firing_key
          WHERE s.tag = $1 AND s.at < f.fire_at AND f.fire_at <= $2 AND f.task_id LIKE $3"
        (TEXT, TIMESTAMPTZ, TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_RUNS_ADMITTED = "SELECT count(*) FROM rendezvous.status_runs r JOIN rendezvous.status_firings f ON f.firing_key = r.dispatch_key
          WHERE r.tenant_id = $1 AND f.fire_at <= $2 AND f.task_id LIKE $3"
        (TEXT, TIMESTAMPTZ, TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_DEDUPLICATED = "SELECT count(*) FROM fleet_admissions a JOIN rendezvous.status_firings f ON f.firing_key = a.firing_key
          WHERE a.tag = $1 AND NOT a.created AND f.fire_at <= $2 AND f.task_id LIKE $3"
        (TEXT, TIMESTAMPTZ, TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_KEYS_WITH_TWO_RUNS = "SELECT count(*) FROM (SELECT r.dispatch_key FROM rendezvous.status_runs r
           JOIN rendezvous.status_firings f ON f.firing_key = r.dispatch_key AND f.task_id LIKE $3
          WHERE r.tenant_id = $1 AND f.fire_at <= $2 GROUP BY 1 HAVING count(*) > 1) x"
        (TEXT, TIMESTAMPTZ, TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_RUN_OUTCOMES = "SELECT count(*) FILTER (WHERE r.state = 'succeeded'),
                    count(*) FILTER (WHERE r.state IN ('pending', 'running')),
                    count(*) FILTER (WHERE r.state = 'failed'),
                    count(*) FILTER (WHERE r.state = 'succeeded' AND r.attempts > 1
                                       AND r.run_id IN (SELECT run_id FROM fleet_run_starts WHERE tag = $1
                                                         GROUP BY 1 HAVING count(*) > 1)),
                    (array_agg(r.last_error ORDER BY r.run_id) FILTER (WHERE r.state = 'failed'))[1] AS failed_error
               FROM rendezvous.status_runs r JOIN rendezvous.status_firings f ON f.firing_key = r.dispatch_key
              WHERE r.tenant_id = $1 AND f.fire_at <= $2 AND f.task_id LIKE $3"
        (TEXT, TIMESTAMPTZ, TEXT) -> ("count": INT8, "count": INT8, "count": INT8, "count": INT8, "failed_error": TEXT);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_RUNS_EXECUTED_TWICE = "SELECT count(*) FROM (SELECT run_id FROM fleet_run_effects WHERE tag = $1 GROUP BY 1 HAVING count(*) > 1) x"
        (TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_RUNS_TAKEN_OVER = "SELECT count(*) FROM (SELECT s.run_id FROM fleet_run_starts s WHERE s.tag = $1
              GROUP BY 1 HAVING count(DISTINCT s.token) > 1 AND s.run_id % 9 <> 0) x"
        (TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/report.rs): the agent workflow's durable steps, of the runs
    /// the firings due up to the end (`$2`) admitted. Steps whose
    /// work ran more than once; executions of a step by an attempt that began after the step
    /// was recorded (a replay that ran it again: must be 0; a zombie holder finishing the step
    /// it was in is not one); runs whose external call reached the service under two keys, and
    /// runs whose database step wrote twice (both must be 0); inference calls, their cost, and
    /// those beyond one per run.
    FLEET_STEP_FIGURES = "WITH w AS (SELECT r.run_id FROM rendezvous.status_runs r
                              JOIN rendezvous.status_firings f ON f.firing_key = r.dispatch_key
                             WHERE r.tenant_id = $1 AND f.fire_at <= $2),
                c AS (SELECT c.* FROM fleet_step_calls c JOIN w ON w.run_id = c.run_id WHERE c.tag = $1)
         SELECT (SELECT count(*) FROM (SELECT 1 FROM c GROUP BY run_id, step HAVING count(*) > 1) x),
                (SELECT count(*) FROM c
                   JOIN fleet_run_starts st ON st.tag = c.tag AND st.run_id = c.run_id AND st.token = c.token
                   CROSS JOIN LATERAL rendezvous.run_steps(c.run_id) s
                  WHERE s.step = c.step AND s.recorded_at < st.at),
                (SELECT count(*) FROM (SELECT e.run_id FROM fleet_external e JOIN w ON w.run_id = e.run_id
                                        WHERE e.tag = $1 GROUP BY 1 HAVING count(*) > 1) x),
                (SELECT count(*) FROM (SELECT a.run_id FROM fleet_answers a JOIN w ON w.run_id = a.run_id
                                        WHERE a.tag = $1 GROUP BY 1 HAVING count(*) > 1) x),
                (SELECT count(*) FROM c WHERE step = 'inference'),
                (SELECT coalesce(sum(cost_cents), 0) FROM c WHERE step = 'inference'),
                (SELECT count(*) - count(DISTINCT run_id) FROM c WHERE step = 'inference')"
        (TEXT, TIMESTAMPTZ) -> ("count": INT8, "count": INT8, "count": INT8, "count": INT8, "count": INT8, "coalesce": INT8, "?column?": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_SPLIT_BRAIN_EPOCHS = "SELECT count(*) FROM (SELECT epoch FROM fleet_leader_actions WHERE tag = $1
              GROUP BY 1 HAVING count(DISTINCT host_id) > 1) x"
        (TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_RUN_PICKUP = "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l), percentile_cont(0.99) WITHIN GROUP (ORDER BY l)
               FROM (SELECT extract(epoch FROM min(s.at) - r.created_at)::float8 AS l
                       FROM fleet_run_starts s JOIN rendezvous.status_runs r ON r.run_id = s.run_id
                      WHERE s.tag = $1 GROUP BY s.run_id, r.created_at) x"
        (TEXT) -> ("percentile_cont": FLOAT8, "percentile_cont": FLOAT8);
    /// `rendezvous fleet --overload` (fleet/report.rs): seconds from the cap's lift ($2) to the
    /// last completion of what was due (firings) or admitted (runs) by then.
    FLEET_OVERLOAD_DRAINED = "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM rendezvous.status_firings f
                                         WHERE f.task_id LIKE $1 || '-task-%' AND f.fire_at <= $2 AND f.completed_at IS NULL)
                     AND NOT EXISTS (SELECT 1 FROM rendezvous.status_runs r
                                      WHERE r.tenant_id = $1 AND r.created_at <= $2 AND r.state <> 'succeeded')
                THEN extract(epoch FROM greatest(
                    (SELECT max(f.completed_at) FROM rendezvous.status_firings f
                      WHERE f.task_id LIKE $1 || '-task-%' AND f.fire_at <= $2),
                    (SELECT max(r.updated_at) FROM rendezvous.status_runs r
                      WHERE r.tenant_id = $1 AND r.created_at <= $2 AND r.state = 'succeeded')) - $2)::float8 END AS drained"
        (TEXT, TIMESTAMPTZ) -> ("drained": FLOAT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_LATENESS = "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l), percentile_cont(0.99) WITHIN GROUP (ORDER BY l), max(l)
               FROM (SELECT extract(epoch FROM min(s.at) - s.fire_at)::float8 AS l FROM fleet_starts s
                      WHERE s.tag = $1 AND s.fire_at <= $2 GROUP BY s.firing_key, s.fire_at) x"
        (TEXT, TIMESTAMPTZ) -> ("percentile_cont": FLOAT8, "percentile_cont": FLOAT8, "max": FLOAT8);
    /// `rendezvous fleet` (fleet/mod.rs): the sessions the server has for clients.
    FLEET_CONNECTIONS_AVAILABLE = "SELECT current_setting('max_connections')::int4 - current_setting('superuser_reserved_connections')::int4"
        () -> ("?column?": INT4);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_TIMELINE_STARTS = "SELECT s.host_id, s.at, e.at,
                    EXISTS (SELECT 1 FROM fleet_starts p
                             WHERE p.tag = s.tag AND p.firing_key = s.firing_key AND p.token < s.token)
                    OR f.failures > 0
               FROM fleet_starts s
               LEFT JOIN fleet_effects e ON e.tag = s.tag AND e.firing_key = s.firing_key AND e.token = s.token
               LEFT JOIN rendezvous.status_firings f ON f.firing_key = s.firing_key
              WHERE s.tag = $1"
        (TEXT) -> ("host_id": TEXT, "at": TIMESTAMPTZ, "at": TIMESTAMPTZ, "?column?": BOOL);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_TIMELINE_TERMS = "SELECT host_id, epoch, min(at), max(at) FROM fleet_leader_actions WHERE tag = $1 GROUP BY 1, 2"
        (TEXT) -> ("host_id": TEXT, "epoch": INT8, "min": TIMESTAMPTZ, "max": TIMESTAMPTZ);
    /// `rendezvous admin purge` (admin.rs).
    PURGE_RUNS_STEP = "SELECT rendezvous.purge_runs($1::text::interval, $2)"
        (TEXT, INT4) -> ("purge_runs": INT8);
    /// `rendezvous admin purge` (admin.rs).
    PURGE_FIRINGS_STEP = "SELECT rendezvous.purge_firings($1::text::interval, $2)"
        (TEXT, INT4) -> ("purge_firings": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_FIRINGS_COMPLETED = "SELECT count(*) FROM rendezvous.status_firings WHERE $1::text IS NOT NULL AND task_id LIKE $3 AND fire_at <= $2 AND completed_at IS NOT NULL"
        (TEXT, TIMESTAMPTZ, TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_FIRINGS_RETRIED = "SELECT count(*) FROM rendezvous.status_firings WHERE $1::text IS NOT NULL AND task_id LIKE $3 AND fire_at <= $2 AND failures > 0 AND completed_at IS NOT NULL"
        (TEXT, TIMESTAMPTZ, TEXT) -> ("count": INT8);
    /// `rendezvous fleet` (fleet/report.rs).
    FLEET_FIRINGS_FAILED = "SELECT count(*) FROM rendezvous.status_firings WHERE $1::text IS NOT NULL AND task_id LIKE $3 AND fire_at <= $2 AND state = 'failed'"
        (TEXT, TIMESTAMPTZ, TEXT) -> ("count": INT8);
}

#[cfg(test)]
mod tests {
    /// The contract test covers what is declared above: SQL the command sends to a database
    /// with pg_rendezvous written anywhere else would escape it. ha.rs and cluster.rs talk to
    /// other servers (a failover monitor, a standby being set up); tests and doc comments are
    /// fine.
    #[test]
    fn the_command_sends_no_sql_but_these() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let files = rendezvous_client::sql::source_files(&src);
        assert!(files.iter().any(|p| p.ends_with("fleet/report.rs")), "the walk reaches module directories");
        for path in files {
            let name = path.file_name().unwrap().to_str().unwrap();
            if ["sql.rs", "ha.rs", "cluster.rs"].contains(&name) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            for (n, line) in code.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                for verb in
                    ["\"SELECT ", "\"INSERT ", "\"UPDATE ", "\"DELETE ", "\"WITH ", "\"CREATE ", "\"ALTER "]
                {
                    assert!(!line.contains(verb), "{}:{}: SQL outside sql.rs: {line}", path.display(), n + 1);
                }
            }
        }
    }
}
