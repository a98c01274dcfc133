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
    changed_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    weight     double precision,
    last_seen  timestamptz
);
CREATE INDEX membership_changes_version ON rendezvous.membership_changes (version);


-- A return after a silence of half the default staleness bumps the version (membership.sql):
-- a heartbeat that became visible late is then learnt by readers kept by deltas.
DROP TRIGGER hosts_changed ON rendezvous.hosts;
CREATE TRIGGER hosts_changed AFTER UPDATE ON rendezvous.hosts
    FOR EACH ROW
    WHEN (OLD.host_id IS DISTINCT FROM NEW.host_id OR OLD.weight IS DISTINCT FROM NEW.weight
          OR NEW.last_seen < OLD.last_seen OR OLD.last_seen <= NEW.last_seen - interval '5 s')
    EXECUTE FUNCTION rendezvous._membership_changed();

-- Firings in eight partitions by fire time (firing.sql, #42), which retention empties whole,
-- each leaving 60 % of its pages for claims that write no index (no index names lease_until
-- any more: firings_open_lease is gone). 0.3.0's table is copied into them and dropped: one
-- pass over its rows, which retention has kept to a day of them by default. (Its indexes are
-- made anew on the partitions: firings_failed counts failed-for-good firings only, and
-- firings_skipped finds the firings skipped by the overlap policy when claimed, which are
-- finished with no failure.)
CREATE FUNCTION rendezvous._day_mod_8(fire_at timestamptz) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (((pg_catalog.timezone('UTC', fire_at)::pg_catalog.date OPERATOR(pg_catalog.-) '1970-01-01'::pg_catalog.date)
             OPERATOR(pg_catalog.%) 8 OPERATOR(pg_catalog.+) 8) OPERATOR(pg_catalog.%) 8)::smallint
$$;
-- The views on it are made again after this (CREATE OR REPLACE, with their grants).
DROP VIEW rendezvous.status_firings;
DROP VIEW rendezvous.status_tasks;
ALTER TABLE rendezvous.firings RENAME TO firings_0_3;
ALTER TABLE rendezvous.firings_0_3 RENAME CONSTRAINT firings_pkey TO firings_0_3_pkey;
-- PostgreSQL 18 names NOT NULL constraints (firings_token_not_null, ...): renamed too, or the new
-- table's would be named apart from a fresh install's (firings_token_not_null1, ...). None before 18.
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT k.conname FROM pg_catalog.pg_constraint k
              WHERE k.conrelid = 'rendezvous.firings_0_3'::regclass AND k.contype = 'n' LOOP
        EXECUTE format('ALTER TABLE rendezvous.firings_0_3 RENAME CONSTRAINT %I TO %I', c.conname, 'firings_0_3_' || c.conname);
    END LOOP;
END
$$;
ALTER INDEX rendezvous.firings_completed_at RENAME TO firings_0_3_completed_at;
ALTER INDEX rendezvous.firings_open RENAME TO firings_0_3_open;
ALTER INDEX rendezvous.firings_task RENAME TO firings_0_3_task;
ALTER INDEX rendezvous.firings_open_fire_at RENAME TO firings_0_3_open_fire_at;
ALTER INDEX rendezvous.firings_open_lease RENAME TO firings_0_3_open_lease;
ALTER INDEX rendezvous.firings_failed RENAME TO firings_0_3_failed;
ALTER INDEX rendezvous.firings_errors RENAME TO firings_0_3_errors;
CREATE TABLE rendezvous.firings (
    firing_key   text NOT NULL,
    task_id      text NOT NULL,
    fire_at      timestamptz NOT NULL,
    holder       text,
    token        bigint NOT NULL,
    claimed_at   timestamptz,
    lease_until  timestamptz NOT NULL,
    completed_at timestamptz,
    attempts     integer NOT NULL DEFAULT 1,
    failures     integer NOT NULL DEFAULT 0,
    failed_at    timestamptz,
    last_error   text,
    holder_pid     integer,
    holder_started timestamptz,
    holder_role    oid,
    day_mod_8    smallint NOT NULL,
    PRIMARY KEY (firing_key, day_mod_8),
    CONSTRAINT firings_day_mod_8_valid CHECK (day_mod_8 = rendezvous._day_mod_8(fire_at))
) PARTITION BY LIST (day_mod_8);
CREATE INDEX firings_completed_at ON rendezvous.firings (completed_at) WHERE completed_at IS NOT NULL;
CREATE INDEX firings_open ON rendezvous.firings (task_id) WHERE completed_at IS NULL AND failed_at IS NULL;
CREATE INDEX firings_task ON rendezvous.firings (task_id, fire_at);
CREATE INDEX firings_open_fire_at ON rendezvous.firings (fire_at) WHERE completed_at IS NULL AND failed_at IS NULL;
CREATE INDEX firings_failed ON rendezvous.firings (task_id, failed_at) WHERE failed_at IS NOT NULL AND failures > 0;
CREATE INDEX firings_skipped ON rendezvous.firings (failed_at) WHERE failed_at IS NOT NULL AND failures = 0;
CREATE INDEX firings_errors ON rendezvous.firings (task_id, fire_at) WHERE failures > 0;
CREATE TABLE rendezvous.firings_0 PARTITION OF rendezvous.firings FOR VALUES IN (0) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_1 PARTITION OF rendezvous.firings FOR VALUES IN (1) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_2 PARTITION OF rendezvous.firings FOR VALUES IN (2) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_3 PARTITION OF rendezvous.firings FOR VALUES IN (3) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_4 PARTITION OF rendezvous.firings FOR VALUES IN (4) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_5 PARTITION OF rendezvous.firings FOR VALUES IN (5) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_6 PARTITION OF rendezvous.firings FOR VALUES IN (6) WITH (fillfactor = 40);
CREATE TABLE rendezvous.firings_7 PARTITION OF rendezvous.firings FOR VALUES IN (7) WITH (fillfactor = 40);
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_0', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_1', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_2', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_3', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_4', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_5', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_6', '');
SELECT pg_catalog.pg_extension_config_dump('rendezvous.firings_7', '');
INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until, completed_at,
                                attempts, failures, failed_at, last_error, holder_pid, holder_started, holder_role,
                                day_mod_8)
SELECT f.firing_key, f.task_id, f.fire_at, f.holder, f.token, f.claimed_at, f.lease_until, f.completed_at,
       f.attempts, f.failures, f.failed_at, f.last_error, f.holder_pid, f.holder_started, f.holder_role,
       rendezvous._day_mod_8(f.fire_at)
  FROM rendezvous.firings_0_3 f;
-- Out of the extension first (and out of its tables pg_dump keeps): the extension is
-- pg_rendezvous, or the portable edition's pg_tle form under any name, or none (the portable
-- edition installed with psql).
DO $$
DECLARE
    ext name := (SELECT e.extname FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
                  WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = 'rendezvous.firings_0_3'::regclass
                    AND d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.deptype = 'e');
BEGIN
    IF ext IS NOT NULL THEN
        EXECUTE format('ALTER EXTENSION %I DROP TABLE rendezvous.firings_0_3', ext);
    END IF;
END
$$;
DROP TABLE rendezvous.firings_0_3;
