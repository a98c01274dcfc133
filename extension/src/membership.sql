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

CREATE FUNCTION rendezvous.winner(key text) RETURNS text
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT rendezvous.winner(key, coalesce(array_agg(h.host_id), '{}'), coalesce(array_agg(h.weight), '{}'))
      FROM rendezvous.hosts h
     WHERE h.last_seen > pg_catalog.clock_timestamp() - rendezvous.default_staleness()
$$;
COMMENT ON FUNCTION rendezvous.winner(text) IS 'The weighted winner for key among the live hosts (default staleness).';

CREATE FUNCTION rendezvous.ranked(key text, k integer) RETURNS text[]
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT rendezvous.ranked(key, coalesce(array_agg(h.host_id), '{}'), coalesce(array_agg(h.weight), '{}'), k)
      FROM rendezvous.hosts h
     WHERE h.last_seen > pg_catalog.clock_timestamp() - rendezvous.default_staleness()
$$;
COMMENT ON FUNCTION rendezvous.ranked(text, integer) IS 'The live hosts in descending weighted score order for key (default staleness).';

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
