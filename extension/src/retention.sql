-- Retention (retention.rs): how long finished firings, finished runs and dead hosts are kept,
-- and prune(), which deletes what is older in bounded batches through indexes.

-- An administrator's settings; a kind without a row keeps its default (_retention_default).
-- keep NULL: kept for ever.
CREATE TABLE rendezvous.retention (
    kind text PRIMARY KEY,
    keep interval,
    CONSTRAINT retention_kind_valid CHECK (kind IN ('firings', 'runs', 'hosts')),
    CONSTRAINT retention_keep_valid CHECK (keep IS NULL OR (keep > interval '0' AND isfinite(keep)))
);
COMMENT ON TABLE rendezvous.retention IS
    'How long each kind of history is kept, where an administrator changed the default (set_retention); keep NULL: for ever.';
SELECT pg_catalog.pg_extension_config_dump('rendezvous.retention', '');

-- The defaults: firings a day (far longer than any host could still see one as due), runs a
-- week (a redelivered dispatch_key of a purged run admits a new run: keep runs longer than any
-- redelivery), dead hosts a day.
CREATE FUNCTION rendezvous._retention_default(kind text) RETURNS interval
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE kind WHEN 'firings' THEN interval '1 day' WHEN 'runs' THEN interval '7 days'
                     WHEN 'hosts' THEN interval '1 day' END
$$;

-- The settings in force, one row per kind.
CREATE VIEW rendezvous.retention_settings AS
    SELECT k.kind, CASE WHEN r.kind IS NULL THEN rendezvous._retention_default(k.kind) ELSE r.keep END AS keep,
           r.kind IS NULL AS is_default
      FROM (VALUES ('firings'), ('runs'), ('hosts')) AS k(kind)
      LEFT JOIN rendezvous.retention r ON r.kind = k.kind;
COMMENT ON VIEW rendezvous.retention_settings IS
    'How long finished firings, finished runs and dead hosts are kept (keep NULL: for ever), and whether that is the default.';

CREATE FUNCTION rendezvous.set_retention(kind text, keep interval) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF set_retention.kind IS NULL OR set_retention.kind NOT IN ('firings', 'runs', 'hosts') THEN
        RAISE EXCEPTION 'kind must be firings, runs or hosts (got %)', coalesce(quote_literal(set_retention.kind), 'NULL')
            USING ERRCODE = '22023';
    ELSIF set_retention.keep IS NOT NULL AND (set_retention.keep <= interval '0' OR NOT isfinite(set_retention.keep)
                                              OR set_retention.keep > interval '1000 years') THEN
        -- At most 1000 years: a longer one put the cut-off before timestamptz's range, and every
        -- prune() of every kind failed with 22008 from then on (#39).
        RAISE EXCEPTION 'keep must be a positive interval of at most 1000 years, or NULL to keep % for ever (got %)',
            set_retention.kind, set_retention.keep USING ERRCODE = '22023';
    END IF;
    INSERT INTO rendezvous.retention AS r (kind, keep) VALUES (set_retention.kind, set_retention.keep)
    ON CONFLICT (kind) DO UPDATE SET keep = excluded.keep;
END
$$;
COMMENT ON FUNCTION rendezvous.set_retention(text, interval) IS
    'Keeps finished firings, finished runs or dead hosts (kind) for keep (NULL: for ever) instead of the default.';

CREATE FUNCTION rendezvous.reset_retention(kind text) RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM rendezvous.retention r WHERE r.kind = reset_retention.kind
$$;
COMMENT ON FUNCTION rendezvous.reset_retention(text) IS 'Returns kind to its default retention.';

-- Refuses a step size out of 1 to 100,000.
CREATE FUNCTION rendezvous._check_max_rows(max_rows integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF max_rows IS NULL OR max_rows < 1 OR max_rows > 100000 THEN
        RAISE EXCEPTION 'max_rows must be 1 to 100000 (got %)', coalesce(max_rows::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- One bounded step of deleting one kind (firings, runs or hosts): at most max_rows rows older
-- than older_than, finished ones only, oldest first, through the indexes on completed_at,
-- failed_at, the runs' updated_at and the hosts' last_seen. Rows another session has locked are
-- skipped, so concurrent callers share the work. Retention (prune) and the bounded purges
-- share it.
CREATE FUNCTION rendezvous._delete_step(kind text, older_than interval, max_rows integer) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- A value, not an expression: the planner then reads each index from its start.
    cutoff timestamptz := clock_timestamp() - older_than;
    n bigint;
    m bigint;
BEGIN
    PERFORM rendezvous._check_older_than(older_than);
    PERFORM rendezvous._check_max_rows(max_rows);
    IF kind = 'firings' THEN
        DELETE FROM rendezvous.firings f WHERE f.firing_key = ANY (ARRAY(
            SELECT g.firing_key FROM rendezvous.firings g WHERE g.completed_at < cutoff
             ORDER BY g.completed_at LIMIT max_rows FOR UPDATE SKIP LOCKED));
        GET DIAGNOSTICS n = ROW_COUNT;
        DELETE FROM rendezvous.firings f WHERE f.firing_key = ANY (ARRAY(
            SELECT g.firing_key FROM rendezvous.firings g WHERE g.failed_at < cutoff AND g.failures > 0
             ORDER BY g.failed_at LIMIT max_rows - n FOR UPDATE SKIP LOCKED));
        GET DIAGNOSTICS m = ROW_COUNT;
        n := n + m;
        -- Skipped by the overlap policy when claimed (firings_skipped).
        DELETE FROM rendezvous.firings f WHERE f.firing_key = ANY (ARRAY(
            SELECT g.firing_key FROM rendezvous.firings g WHERE g.failed_at < cutoff AND g.failures = 0
             ORDER BY g.failed_at LIMIT max_rows - n FOR UPDATE SKIP LOCKED));
        GET DIAGNOSTICS m = ROW_COUNT;
        RETURN n + m;
    ELSIF kind = 'runs' THEN
        DELETE FROM rendezvous.runs r WHERE r.run_id = ANY (ARRAY(
            SELECT q.run_id FROM rendezvous.runs q
             WHERE q.state IN ('succeeded', 'failed', 'cancelled') AND q.updated_at < cutoff
             ORDER BY q.updated_at LIMIT max_rows FOR UPDATE SKIP LOCKED));
    ELSE
        DELETE FROM rendezvous.hosts h WHERE h.host_id = ANY (ARRAY(
            SELECT x.host_id FROM rendezvous.hosts x WHERE x.last_seen < cutoff
             ORDER BY x.last_seen LIMIT max_rows FOR UPDATE SKIP LOCKED));
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The partitions of firings (firing.sql) all of whose firings finished more than older_than
-- ago, emptied whole (TRUNCATE): what _delete_step would delete of them row by row, at the cost
-- of a table's new file. A partition is read without a lock first (most calls lock nothing),
-- then locked and read again, so no claim adds a row to it in between. The lock lasts until the
-- caller's transaction ends, and every claim reads every partition (the overlap check): prune
-- calls this last, in its own statement. A lock waits at most lock_timeout, and once one could
-- not be had the call stops (the next pass tries again): claims never queue behind more than
-- one such wait. Under REPEATABLE READ or SERIALIZABLE the second read would not see rows
-- committed since the transaction's snapshot, which TRUNCATE removes all the same: then it
-- empties nothing (row deletes are safe under any isolation). Returns how many it emptied.
CREATE FUNCTION rendezvous._empty_firing_days(older_than interval) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '100ms'
AS $$
DECLARE
    cutoff timestamptz := clock_timestamp() - older_than;
    emptied integer := 0;
    part regclass;
    -- Whether a partition holds a firing to keep (unfinished, or finished since the cutoff).
    keeps text := 'SELECT EXISTS (SELECT FROM %1$s f WHERE f.completed_at IS NULL AND f.failed_at IS NULL)'
                  ' OR EXISTS (SELECT FROM %1$s f WHERE f.completed_at >= $1)'
                  ' OR EXISTS (SELECT FROM %1$s f WHERE f.failed_at >= $1 AND f.failed_at IS NOT NULL AND f.failures > 0)'
                  ' OR EXISTS (SELECT FROM %1$s f WHERE f.failed_at >= $1 AND f.failed_at IS NOT NULL AND f.failures = 0)';
    skip boolean;
BEGIN
    PERFORM rendezvous._check_older_than(older_than);
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN 0;
    END IF;
    FOR d IN 0..7 LOOP
        part := format('rendezvous.firings_%s', d)::regclass;
        BEGIN
            EXECUTE format('SELECT NOT EXISTS (SELECT FROM %1$s) OR (' || keeps || ')', part) INTO skip USING cutoff;
            IF NOT skip THEN
                EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', part);
                EXECUTE format(keeps, part) INTO skip USING cutoff;
                IF NOT skip THEN
                    EXECUTE format('TRUNCATE %s', part);
                    emptied := emptied + 1;
                END IF;
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            -- Busy (a session holds a lock on it, or another prune is emptying it): next pass.
            RETURN emptied;
        END;
    END LOOP;
    RETURN emptied;
END
$$;

-- One bounded step of retention: at most max_rows of each kind older than its setting (see
-- _delete_step), and then the firings' partitions that are all past keeping emptied whole
-- (_empty_firing_days: last, so that its lock is held only to the end of the statement). A caller that got max_rows of a kind back calls again (after a pause: the
-- scheduler does).
CREATE FUNCTION rendezvous.prune(max_rows integer DEFAULT 1000)
RETURNS TABLE (kind text, deleted bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s record;
BEGIN
    PERFORM rendezvous._check_max_rows(max_rows);
    FOR s IN SELECT r.kind, r.keep FROM rendezvous.retention_settings r WHERE r.keep IS NOT NULL ORDER BY r.kind LOOP
        kind := s.kind;
        deleted := rendezvous._delete_step(s.kind, s.keep, max_rows);
        RETURN NEXT;
    END LOOP;
    -- Whole partitions of firings last (not counted in deleted: their rows are not read).
    PERFORM rendezvous._empty_firing_days(r.keep) FROM rendezvous.retention_settings r
      WHERE r.kind = 'firings' AND r.keep IS NOT NULL;
END
$$;
COMMENT ON FUNCTION rendezvous.prune(integer) IS
    'One bounded step of retention: deletes at most max_rows finished firings, finished runs and dead hosts older than their retention_settings, oldest first, and empties the partitions of firings that are all past keeping; returns how many rows of each it deleted (an emptied partition''s not counted). Call again while a kind returns max_rows.';

-- The purges in bounded steps: at most max_rows finished runs (firings) older than older_than,
-- oldest first; call again while a call returns max_rows (`rendezvous admin purge` does, with
-- pauses). A large age deleted at once by purge_runs(older_than) is one long transaction.
CREATE FUNCTION rendezvous.purge_runs(older_than interval, max_rows integer) RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT rendezvous._delete_step('runs', older_than, max_rows) $$;
COMMENT ON FUNCTION rendezvous.purge_runs(interval, integer) IS
    'One bounded step of purge_runs: deletes at most max_rows finished runs last updated more than older_than ago, oldest first; call again while it returns max_rows.';

CREATE FUNCTION rendezvous.purge_firings(older_than interval, max_rows integer) RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT rendezvous._delete_step('firings', older_than, max_rows) $$;
COMMENT ON FUNCTION rendezvous.purge_firings(interval, integer) IS
    'One bounded step of purge_firings: deletes at most max_rows firings completed (or failed for good) longer than older_than ago, oldest first; call again while it returns max_rows.';
