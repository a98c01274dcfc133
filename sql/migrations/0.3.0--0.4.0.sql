-- pg_rendezvous 0.3.0 -> 0.4.0: what no generator can know, in the order it was made. sqlgen
-- puts this first in pg_rendezvous--0.3.0--0.4.0.sql and then makes every function, view,
-- comment and grant of 0.4.0 again from extension/src/ (sql/README.md). Here go table, type
-- and index changes, data migrations, and DROPs of what CREATE OR REPLACE cannot change (a
-- new return type or parameter name, a view losing a column, an object that goes away).

-- Durable runs (steps.sql): what a parked run waits for, the holder's progress and a child's
-- parent, last, as admission.sql declares them; the steps and signals tables; the wait type.
ALTER TABLE rendezvous.runs
    ADD COLUMN waiting_for   text,
    ADD COLUMN progress      jsonb,
    ADD COLUMN parent_run_id bigint;
CREATE INDEX runs_parent ON rendezvous.runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
-- The sessions holding running runs: recovery reads them instead of every running run.
CREATE INDEX runs_holders ON rendezvous.runs (holder_pid, holder_started) WHERE state = 'running';
COMMENT ON COLUMN rendezvous.runs.waiting_for IS
    'What a parked run waits for (sleep, signal:<name>, children) until runnable_at; NULL otherwise.';
COMMENT ON COLUMN rendezvous.runs.progress IS 'What the holder last said it is doing (set_run_progress).';
COMMENT ON COLUMN rendezvous.runs.parent_run_id IS 'The run that admitted this one as its child (spawn_child).';
CREATE TABLE rendezvous.steps (
    run_id      bigint NOT NULL REFERENCES rendezvous.runs ON DELETE CASCADE,
    position    integer NOT NULL,
    step        text NOT NULL,
    output      jsonb,
    attempt     integer NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (run_id, position),
    CONSTRAINT steps_step_unique UNIQUE (run_id, step),
    CONSTRAINT steps_step_valid CHECK (step <> '' AND octet_length(step) <= 512)
);
COMMENT ON TABLE rendezvous.steps IS
    'Finished steps of runs (record_step), in the order recorded; the first record of a step wins.';
SELECT pg_catalog.pg_extension_config_dump('rendezvous.steps', '');
CREATE TABLE rendezvous.signals (
    run_id  bigint NOT NULL REFERENCES rendezvous.runs ON DELETE CASCADE,
    name    text NOT NULL,
    payload jsonb,
    sent_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (run_id, name),
    CONSTRAINT signals_name_valid CHECK (name <> '' AND octet_length(name) <= 512)
);
COMMENT ON TABLE rendezvous.signals IS 'Signals sent to runs (signal_run); the first of a name counts.';
SELECT pg_catalog.pg_extension_config_dump('rendezvous.signals', '');
CREATE TYPE rendezvous.run_wait AS (outcome text, payload jsonb);
COMMENT ON TYPE rendezvous.run_wait IS
    'outcome: received (a signal: its payload), finished (every child ended), timed_out (until passed first) or parked (the run gave its slot back: stop working on it).';

-- A retention longer than 1000 years is refused now (set_retention): one set before made every
-- prune() fail (#39). It meant "for ever", which NULL says.
UPDATE rendezvous.retention SET keep = NULL WHERE keep > interval '1000 years';

-- Announcements hosts can trust (announce.rs, #39): the key of their MACs and their numbers.
CREATE TABLE rendezvous._announcement_key (
    key bytea NOT NULL
);
COMMENT ON TABLE rendezvous._announcement_key IS
    'The key of the MACs on the extension''s notifications (announce.rs); made at install, read by rendezvous_host.';
INSERT INTO rendezvous._announcement_key (key)
SELECT pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text
                                               || pg_catalog.clock_timestamp()::text, 'UTF8'));
CREATE SEQUENCE rendezvous._announcements;

-- A claim is bound to the login role that made it (holder.sql, #39): only that role's sessions
-- act on it. Claims live during the upgrade have none and stay open to any host, as before.
ALTER TABLE rendezvous.runs ADD COLUMN holder_role oid;
COMMENT ON COLUMN rendezvous.runs.holder_role IS
    'The login role of the session that claimed the run: only sessions of that role act on the claim (NULL: claimed before 0.4.0).';
ALTER TABLE rendezvous.firings ADD COLUMN holder_role oid;

-- Every task's next firing is made ahead now, overlap = 'skip' too (its claim decides the
-- overlap, #42): tasks_due serves both of next_due_at's probes.
DROP INDEX rendezvous.tasks_due_ahead;

-- Membership deltas (membership.sql, #42): which hosts each version's bump was about, and
-- from which version they are all kept; views kept from before the upgrade read the set whole
-- once.
ALTER TABLE rendezvous.membership_version ADD COLUMN changes_from bigint;
UPDATE rendezvous.membership_version SET changes_from = version;
ALTER TABLE rendezvous.membership_version ALTER COLUMN changes_from SET NOT NULL;
CREATE TABLE rendezvous.membership_changes (
    version    bigint NOT NULL,
    host_id    text NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
CREATE INDEX membership_changes_version ON rendezvous.membership_changes (version);

-- Firings skipped by the overlap policy when claimed (#42) are finished with no failure:
-- firings_failed keeps the failed for good only (the status views count those), and retention
-- finds the skipped ones through firings_skipped.
DROP INDEX rendezvous.firings_failed;
CREATE INDEX firings_failed ON rendezvous.firings (task_id, failed_at) WHERE failed_at IS NOT NULL AND failures > 0;
CREATE INDEX firings_skipped ON rendezvous.firings (failed_at) WHERE failed_at IS NOT NULL AND failures = 0;

-- A return after a silence of half the default staleness bumps the version (membership.sql):
-- a heartbeat that became visible late is then learnt by readers kept by deltas.
DROP TRIGGER hosts_changed ON rendezvous.hosts;
CREATE TRIGGER hosts_changed AFTER UPDATE ON rendezvous.hosts
    FOR EACH ROW
    WHEN (OLD.host_id IS DISTINCT FROM NEW.host_id OR OLD.weight IS DISTINCT FROM NEW.weight
          OR NEW.last_seen < OLD.last_seen OR OLD.last_seen <= NEW.last_seen - rendezvous.default_staleness() / 2)
    EXECUTE FUNCTION rendezvous._membership_changed();

-- Claims that write no index (firing.sql, #42): no index names lease_until, which every claim
-- changes, and 60 % of each new page is left for the claims' row versions (firing.sql).
DROP INDEX rendezvous.firings_open_lease;
ALTER TABLE rendezvous.firings SET (fillfactor = 40);
