-- Membership: the live host set, on the database clock (see membership.rs).
-- Loaded by extension_sql_file! in membership.rs; every name is schema-qualified. Functions and views
-- reach upgrades from here by themselves (sqlgen); a table or type change after a release also
-- goes into sql/migrations/ (the upgrade test checks they agree).

CREATE TABLE rendezvous.hosts (
    host_id    text PRIMARY KEY,
    weight     double precision NOT NULL DEFAULT 1,
    first_seen timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL,
    CONSTRAINT hosts_host_id_valid CHECK (host_id <> '' AND octet_length(host_id) <= rendezvous._max_id_bytes()),
    CONSTRAINT hosts_weight_valid CHECK (weight > 0 AND weight < 'Infinity' AND weight <> 'NaN')
);
COMMENT ON TABLE rendezvous.hosts IS 'Hosts that heartbeat; live while last_seen is within the staleness window (database clock).';
SELECT pg_catalog.pg_extension_config_dump('rendezvous.hosts', '');

-- How long a host stays live after its last heartbeat unless a caller says otherwise: the one
-- definition every default and the live-set functions use (the client checks it is its own).
CREATE FUNCTION rendezvous.default_staleness() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT interval '10 s' $$;
COMMENT ON FUNCTION rendezvous.default_staleness() IS 'The default staleness window of the live host set (10 s).';

-- Hosts that went silent, in order (a reader's check for hosts that left its view by
-- staleness, retention's oldest first).
CREATE INDEX hosts_last_seen ON rendezvous.hosts (last_seen);

-- The live set's version: bumped in the same transaction as every change a reader of the set
-- cannot see coming from the clock alone — a host joins, comes back after a silence of at least
-- default_staleness(), changes its weight, or leaves. (Going silent needs no bump: readers find
-- those hosts through hosts_last_seen.) So a host can keep its view of the set and read the
-- whole set again only when it changed (live_members_since), not on every heartbeat.
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
AS $$
BEGIN
    -- After a DELETE, only when a row went (prune's empty steps change nothing). Nested: the
    -- transition table exists only for the DELETE trigger.
    IF TG_OP = 'DELETE' THEN
        IF NOT EXISTS (SELECT 1 FROM gone) THEN
            RETURN NULL;
        END IF;
    END IF;
    UPDATE rendezvous.membership_version SET version = version + 1;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rendezvous._membership_changed() IS 'Trigger: bumps rendezvous.membership_version.';

CREATE TRIGGER hosts_joined AFTER INSERT ON rendezvous.hosts
    FOR EACH ROW EXECUTE FUNCTION rendezvous._membership_changed();
-- A heartbeat is an UPDATE that changes only last_seen, forward: no bump unless the host had
-- been silent for at least default_staleness() (readers with that staleness or more saw it go).
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

CREATE FUNCTION rendezvous.heartbeat(host_id text, weight double precision DEFAULT 1)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    seen timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM rendezvous._check_host_id(host_id);
    IF weight IS NULL THEN
        RAISE EXCEPTION 'weight must not be NULL' USING ERRCODE = '22004';
    ELSIF weight = 'NaN' OR weight <= 0 OR weight = 'Infinity' THEN
        RAISE EXCEPTION 'weight must be finite and greater than 0 (got %)', weight USING ERRCODE = '22023';
    END IF;
    INSERT INTO rendezvous.hosts AS h (host_id, weight, first_seen, last_seen)
    VALUES (host_id, weight, seen, seen)
    ON CONFLICT ON CONSTRAINT hosts_pkey
    DO UPDATE SET weight = excluded.weight, last_seen = excluded.last_seen;
    RETURN seen;
END
$$;
COMMENT ON FUNCTION rendezvous.heartbeat(text, double precision) IS 'Marks host_id live now (database clock) with a weight; returns the time recorded.';

CREATE FUNCTION rendezvous.leave(host_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    found_host boolean;
BEGIN
    PERFORM rendezvous._check_host_id(host_id);
    DELETE FROM rendezvous.hosts h WHERE h.host_id = host_id;
    GET DIAGNOSTICS found_host = ROW_COUNT;
    RETURN found_host;
END
$$;
COMMENT ON FUNCTION rendezvous.leave(text) IS 'Removes host_id from the set at once; true if it was there.';

CREATE FUNCTION rendezvous.live_hosts(staleness interval DEFAULT rendezvous.default_staleness()) RETURNS text[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_staleness(staleness);
    RETURN coalesce(
        (SELECT array_agg(h.host_id ORDER BY h.host_id)
           FROM rendezvous.hosts h
          WHERE h.last_seen > pg_catalog.clock_timestamp() - staleness),
        '{}');
END
$$;
COMMENT ON FUNCTION rendezvous.live_hosts(interval) IS 'Hosts whose last heartbeat is within staleness of the database clock, sorted.';

CREATE FUNCTION rendezvous.live_members(staleness interval DEFAULT rendezvous.default_staleness())
RETURNS TABLE (host_id text, weight double precision)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_staleness(live_members.staleness);
    RETURN QUERY
        SELECT h.host_id, h.weight FROM rendezvous.hosts h
         WHERE h.last_seen > pg_catalog.clock_timestamp() - live_members.staleness
         ORDER BY h.host_id;
END
$$;
COMMENT ON FUNCTION rendezvous.live_members(interval) IS 'live_hosts with each host''s weight: what a client needs to compute weighted HRW locally.';

-- A reader that keeps its view of the live set asks this on each heartbeat instead of reading
-- the set: two index probes when nothing changed, the whole set when something may have. What
-- changes a view read at known_read_at with known_version: a bump of the version (a join, a return after
-- silence, a weight change, a leave), or a host of the view falling silent — its last_seen,
-- which only moves forward, then lies in (known_read_at - staleness, now - staleness]. Returns the
-- set exactly when one of the two happened; a reader whose staleness
-- is shorter than default_staleness() (a return after a shorter silence bumps nothing) and a
-- first read (known_version or known_read_at NULL) always get the set.
CREATE FUNCTION rendezvous.live_members_since(staleness interval, known_version bigint, known_read_at timestamptz)
RETURNS TABLE (version bigint, read_at timestamptz, changed boolean, host_ids text[], weights double precision[])
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now_ts timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM rendezvous._check_staleness(staleness);
    -- The version is read before the set: a change committed between the two reads makes the
    -- next call read the set again (its bump is newer than the version kept), never hides it.
    SELECT v.version, now_ts,
           known_version IS NULL OR known_read_at IS NULL OR v.version <> known_version
           OR staleness < rendezvous.default_staleness() OR known_read_at > now_ts
           OR EXISTS (SELECT 1 FROM rendezvous.hosts h
                       WHERE h.last_seen > known_read_at - staleness AND h.last_seen <= now_ts - staleness)
      INTO live_members_since.version, live_members_since.read_at, changed
      FROM rendezvous.membership_version v;
    IF changed THEN
        SELECT coalesce(array_agg(h.host_id ORDER BY h.host_id), '{}'),
               coalesce(array_agg(h.weight ORDER BY h.host_id), '{}')
          INTO host_ids, weights
          FROM rendezvous.hosts h
         WHERE h.last_seen > now_ts - staleness;
    END IF;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION rendezvous.live_members_since(interval, bigint, timestamptz) IS
    'For a reader keeping its view of the live set: whether the set may have changed since a view read at known_read_at with known_version (NULLs: a first read), and if so the live hosts and weights, sorted; with the version and time to keep.';
