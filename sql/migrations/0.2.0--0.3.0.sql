-- pg_rendezvous 0.2.0 -> 0.3.0: what no generator can know, in the order it was made. sqlgen
-- puts this first in pg_rendezvous--0.2.0--0.3.0.sql and then makes every function, view,
-- comment and grant of 0.3.0 again from extension/src/ (sql/README.md). Here go table, type
-- and index changes, data migrations, and DROPs of what CREATE OR REPLACE cannot change (a
-- new return type or parameter name, a view losing a column, an object that goes away).

-- Runs that run (runs.sql): execution columns, last, as admission.sql declares them. The
-- runnable_at default is now() (not volatile), so adding it rewrites no table.
ALTER TABLE rendezvous.runs
    ADD COLUMN holder         text,
    ADD COLUMN token          bigint NOT NULL DEFAULT 0,
    ADD COLUMN attempts       integer NOT NULL DEFAULT 0,
    ADD COLUMN max_attempts   integer NOT NULL DEFAULT 3,
    ADD COLUMN retry_backoff  interval NOT NULL DEFAULT '10 seconds',
    ADD COLUMN runnable_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    ADD COLUMN lease_until    timestamptz,
    ADD COLUMN holder_pid     integer,
    ADD COLUMN holder_started timestamptz,
    ADD COLUMN output         jsonb,
    ADD COLUMN last_error     text,
    ADD CONSTRAINT runs_max_attempts_valid CHECK (max_attempts BETWEEN 1 AND 1000),
    ADD CONSTRAINT runs_retry_backoff_valid CHECK (retry_backoff >= interval '0' AND isfinite(retry_backoff));
COMMENT ON COLUMN rendezvous.runs.runnable_at IS
    'A pending run''s first claimable instant (admission, or the end of a retry backoff), database clock.';
COMMENT ON COLUMN rendezvous.runs.holder IS
    'The host running it (state running), with its token, lease and session (holder_pid, holder_started); the claim ends with that session.';
CREATE INDEX runs_runnable ON rendezvous.runs (runnable_at, run_id) WHERE state = 'pending';
CREATE INDEX runs_running ON rendezvous.runs (lease_until) WHERE state = 'running';
CREATE TYPE rendezvous.run_claim AS (run_id bigint, token bigint, tenant_id text, workflow_ref text, input jsonb, attempt integer);
COMMENT ON TYPE rendezvous.run_claim IS
    'A run claimed by claim_runs: its token (for renew_run, complete_run, fail_run and assert_run), what to run, and which attempt this is (1 for the first).';
-- spawn_run takes a retry policy (a new signature); any state following any other goes.
DROP FUNCTION rendezvous.spawn_run(text, text, jsonb, text);
DROP FUNCTION rendezvous.set_run_state(bigint, text);

-- Firing claims end with the holder's session (holder.sql).
ALTER TABLE rendezvous.firings ADD COLUMN holder_pid integer, ADD COLUMN holder_started timestamptz;

-- A leader's term has a lease the server knows (leader.rs): a holder silent past it loses its
-- session to the next candidate. try_lead takes it (a new signature).
ALTER TABLE rendezvous.leader_confirmations ADD COLUMN lease interval;
COMMENT ON TABLE rendezvous.leader_confirmations IS
    'When each group''s leader last confirmed its term (try_lead by the holding session), and the term''s lease: a holder silent past it plus a second loses its session to the next candidate.';
DROP FUNCTION rendezvous.try_lead(text, text, boolean);

-- A catch-up window is at most a year (schedule_task refuses more): a longer one planned
-- instants out of range for every host's due_firings (#24). Tasks registered with more keep a
-- year.
UPDATE rendezvous.tasks SET catch_up_window = interval '1 year' WHERE catch_up_window > interval '1 year';
-- A task whose firings cannot be made is set aside with its error, alone (#24).
ALTER TABLE rendezvous.tasks ADD COLUMN plan_error text;
COMMENT ON COLUMN rendezvous.tasks.plan_error IS
    'Why making this task''s firings failed (its fire times are not made, other tasks''s are); schedule_task clears it.';
-- A lease is at most a day (_check_lease refuses more); tasks registered with more keep a day.
UPDATE rendezvous.tasks SET lease = interval '1 day' WHERE lease > interval '1 day';

-- A pass makes a bounded number of firings in all (#24): the catch-up planner takes each
-- task's share (a new signature), and the pass its budget.
DROP FUNCTION rendezvous._plan_firings(text, text, text, interval, timestamptz, timestamptz);
DROP FUNCTION rendezvous._make_due_firings(timestamptz, integer);

-- Costs that do not grow with time (#25): ordered indexes on unfinished firings (due_firings,
-- next_due_at), per-task indexes of failed firings and firings with errors (status_tasks,
-- retention).
CREATE INDEX firings_open_fire_at ON rendezvous.firings (fire_at) WHERE completed_at IS NULL AND failed_at IS NULL;
CREATE INDEX firings_open_lease ON rendezvous.firings (lease_until) WHERE completed_at IS NULL AND failed_at IS NULL;
CREATE INDEX firings_failed ON rendezvous.firings (task_id, failed_at) WHERE failed_at IS NOT NULL;
CREATE INDEX firings_errors ON rendezvous.firings (task_id, fire_at) WHERE failures > 0;
-- Tasks whose firings are made ahead of their time (next_due_at).
CREATE INDEX tasks_due_ahead ON rendezvous.tasks (next_fire_at) WHERE NOT paused AND overlap = 'allow';
-- Retention by default (retention.sql): an administrator's settings.
CREATE TABLE rendezvous.retention (
    kind text PRIMARY KEY,
    keep interval,
    CONSTRAINT retention_kind_valid CHECK (kind IN ('firings', 'runs', 'hosts')),
    CONSTRAINT retention_keep_valid CHECK (keep IS NULL OR (keep > interval '0' AND isfinite(keep)))
);
COMMENT ON TABLE rendezvous.retention IS
    'How long each kind of history is kept, where an administrator changed the default (set_retention); keep NULL: for ever.';
SELECT pg_catalog.pg_extension_config_dump('rendezvous.retention', '');

-- The live set's version (membership.sql): the table, its row, the trigger function (made
-- again with every function after this script) and the triggers; an index on last_seen.
CREATE INDEX hosts_last_seen ON rendezvous.hosts (last_seen);
CREATE TABLE rendezvous.membership_version (
    version bigint NOT NULL,
    one_row boolean PRIMARY KEY DEFAULT true,
    CONSTRAINT membership_version_one_row CHECK (one_row)
);
COMMENT ON TABLE rendezvous.membership_version IS 'The live set''s version, bumped by every join, return after silence, weight change and leave.';
-- Starts at the creation time in microseconds, not 0: a database restored from a dump (this
-- row is not dumped) never shows a version a host kept from before.
INSERT INTO rendezvous.membership_version (version)
VALUES ((EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::bigint);
CREATE FUNCTION rendezvous._membership_changed() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER hosts_joined AFTER INSERT ON rendezvous.hosts
    FOR EACH ROW EXECUTE FUNCTION rendezvous._membership_changed();
CREATE TRIGGER hosts_changed AFTER UPDATE ON rendezvous.hosts
    FOR EACH ROW
    WHEN (OLD.host_id IS DISTINCT FROM NEW.host_id OR OLD.weight IS DISTINCT FROM NEW.weight
          OR NEW.last_seen < OLD.last_seen OR OLD.last_seen <= NEW.last_seen - rendezvous.default_staleness())
    EXECUTE FUNCTION rendezvous._membership_changed();
CREATE TRIGGER hosts_left AFTER DELETE ON rendezvous.hosts
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION rendezvous._membership_changed();
CREATE TRIGGER hosts_truncated AFTER TRUNCATE ON rendezvous.hosts
    FOR EACH STATEMENT EXECUTE FUNCTION rendezvous._membership_changed();
