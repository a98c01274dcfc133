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
-- half of default_staleness(), changes its weight, or leaves. (Going silent needs no bump: readers find
-- those hosts through hosts_last_seen.) So a host can keep its view of the set and read the
-- whole set again only when it changed (live_members_since), not on every heartbeat.
CREATE TABLE rendezvous.membership_version (
    version bigint NOT NULL,
    one_row boolean PRIMARY KEY DEFAULT true,
    CONSTRAINT membership_version_one_row CHECK (one_row),
    -- (0.4.0, added last) The version after which every change is kept in membership_changes.
    changes_from bigint NOT NULL
);
COMMENT ON TABLE rendezvous.membership_version IS 'The live set''s version, bumped by every join, return after silence, weight change and leave.';
COMMENT ON COLUMN rendezvous.membership_version.changes_from IS
    'Every change after this version is in membership_changes: a view kept from this version or later is brought up to date by its changes (live_members_delta).';
-- Starts at the creation time in microseconds, not 0: a database restored from a dump (this
-- row is not dumped) never shows a version a host kept from before.
INSERT INTO rendezvous.membership_version (version, changes_from)
SELECT v, v FROM (SELECT (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::bigint AS v) now_;

-- The changes behind each version (0.4.0, #42): which hosts a bump was about. A reader that
-- kept its view at version v reads the hosts changed after v and those that went silent since,
-- not the whole set (live_members_delta): a fleet where hosts come and go keeps its looks O(the
-- changes), where re-reading the set on every change made each look O(the fleet). Each change
-- carries the host's row as the change left it, so a reader needs no lookup of a host whose
-- last heartbeat there is still within its staleness. Kept for _membership_changes_kept(); an
-- older view is read again whole. Not dumped, like the version.
CREATE TABLE rendezvous.membership_changes (
    version    bigint NOT NULL,
    host_id    text NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    weight     double precision,
    last_seen  timestamptz
);
COMMENT ON TABLE rendezvous.membership_changes IS
    'The hosts each bump of membership_version was about (a join, a return after silence, a weight change, a leave), kept for 10 minutes.';
COMMENT ON COLUMN rendezvous.membership_changes.weight IS 'The host''s weight as the change left it; NULL when the host left (or took another id).';
COMMENT ON COLUMN rendezvous.membership_changes.last_seen IS 'The host''s last heartbeat as the change left it; NULL when the host left (or took another id).';
CREATE INDEX membership_changes_version ON rendezvous.membership_changes (version);

-- How long the changes are kept: a view older than this is read again whole.
CREATE FUNCTION rendezvous._membership_changes_kept() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT interval '10 minutes' $$;

CREATE FUNCTION rendezvous._membership_changed() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v bigint;
BEGIN
    -- After a DELETE, only when a row went (prune's empty steps change nothing). Nested: the
    -- transition table exists only for the DELETE trigger.
    IF TG_OP = 'DELETE' THEN
        IF NOT EXISTS (SELECT 1 FROM gone) THEN
            RETURN NULL;
        END IF;
    END IF;
    -- The version row is locked from here to the commit: bumps, and so their changes, commit
    -- in version order.
    UPDATE rendezvous.membership_version m SET version = m.version + 1 RETURNING m.version INTO v;
    IF TG_OP = 'TRUNCATE' THEN
        -- Which hosts went is not known: every view is read again whole.
        UPDATE rendezvous.membership_version m SET changes_from = v;
        DELETE FROM rendezvous.membership_changes;
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        -- As the statement left each host: gone, or back (a statement that deleted and
        -- inserted it again, whose row events came first).
        INSERT INTO rendezvous.membership_changes (version, host_id, weight, last_seen)
        SELECT v, g.host_id, h.weight, h.last_seen
          FROM gone g LEFT JOIN rendezvous.hosts h ON h.host_id = g.host_id;
    ELSE
        INSERT INTO rendezvous.membership_changes (version, host_id, weight, last_seen)
        VALUES (v, NEW.host_id, NEW.weight, NEW.last_seen);
        IF TG_OP = 'UPDATE' THEN
            IF OLD.host_id IS DISTINCT FROM NEW.host_id THEN
                INSERT INTO rendezvous.membership_changes (version, host_id) VALUES (v, OLD.host_id);
            END IF;
        END IF;
    END IF;
    -- Now and then, the changes older than they are kept go, and views older than the oldest
    -- change left are read again whole.
    IF v % 256 = 0 THEN
        -- The oldest changes first (membership_changes_version), at most 10,000 a time: versions
        -- grow with time, so the old ones are the first.
        WITH gone_changes AS (
            DELETE FROM rendezvous.membership_changes c
             WHERE c.version <= (SELECT max(o.version)
                                   FROM (SELECT x.version, x.changed_at FROM rendezvous.membership_changes x
                                          ORDER BY x.version LIMIT 10000) o
                                  WHERE o.changed_at < pg_catalog.clock_timestamp() - rendezvous._membership_changes_kept())
            RETURNING c.version
        )
        UPDATE rendezvous.membership_version m
           SET changes_from = greatest(m.changes_from, (SELECT max(g.version) FROM gone_changes g))
         WHERE EXISTS (SELECT 1 FROM gone_changes);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rendezvous._membership_changed() IS 'Trigger: bumps rendezvous.membership_version and records which hosts the bump is about in rendezvous.membership_changes.';

CREATE TRIGGER hosts_joined AFTER INSERT ON rendezvous.hosts
    FOR EACH ROW EXECUTE FUNCTION rendezvous._membership_changed();
-- A heartbeat is an UPDATE that changes only last_seen, forward: no bump unless the host had
-- been silent for at least half of default_staleness(). Readers with that staleness or more
-- saw it go only after a whole staleness; the half is a margin for a heartbeat that becomes
-- visible late (its commit waited, say, for a synchronous standby): a reader may have removed
-- the host meanwhile, and the host's next heartbeat, at least that far after, tells it (#42).
-- The half is written out (5 s): a function call in a trigger's WHEN is planned again by every
-- statement, which cost a third of a heartbeat's work (the SQL suite membership checks that
-- it is default_staleness() / 2).
CREATE TRIGGER hosts_changed AFTER UPDATE ON rendezvous.hosts
    FOR EACH ROW
    WHEN (OLD.host_id IS DISTINCT FROM NEW.host_id OR OLD.weight IS DISTINCT FROM NEW.weight
          OR NEW.last_seen < OLD.last_seen OR OLD.last_seen <= NEW.last_seen - interval '5 s')
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
    -- The checker (for its messages) only for an id the table refuses: a heartbeat is the
    -- fleet's most frequent call.
    IF host_id IS NULL OR host_id = '' OR octet_length(host_id) > rendezvous._max_id_bytes() THEN
        PERFORM rendezvous._check_host_id(host_id);
    END IF;
    IF weight IS NULL THEN
        RAISE EXCEPTION 'weight must not be NULL' USING ERRCODE = '22004';
    ELSIF weight = 'NaN' OR weight <= 0 OR weight = 'Infinity' THEN
        RAISE EXCEPTION 'weight must be finite and greater than 0 (got %)', weight USING ERRCODE = '22023';
    END IF;
    -- A known host first, by a plain UPDATE: an upsert would lock the row first, a WAL record
    -- of its own (15 % of a heartbeat's WAL). A new host (or one that left meanwhile) is inserted.
    UPDATE rendezvous.hosts h SET weight = heartbeat.weight, last_seen = seen WHERE h.host_id = heartbeat.host_id;
    IF NOT FOUND THEN
        INSERT INTO rendezvous.hosts AS h (host_id, weight, first_seen, last_seen)
        VALUES (host_id, weight, seen, seen)
        ON CONFLICT ON CONSTRAINT hosts_pkey
        DO UPDATE SET weight = excluded.weight, last_seen = excluded.last_seen;
    END IF;
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

-- The whole live set at an instant, as sorted arrays of hosts and their weights: what a kept
-- view is read from when it must be read again (live_members_since, live_members_delta): a
-- sequential read, which those two plan without.
CREATE FUNCTION rendezvous._live_members_at(staleness interval, as_of timestamptz)
RETURNS TABLE (host_ids text[], weights double precision[])
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = on
SET enable_bitmapscan = on
AS $$
    SELECT coalesce(array_agg(h.host_id ORDER BY h.host_id), '{}'),
           coalesce(array_agg(h.weight ORDER BY h.host_id), '{}')
      FROM rendezvous.hosts h
     WHERE h.last_seen > as_of - staleness
$$;

-- A reader that keeps its view of the live set asks this on each heartbeat instead of reading
-- the set: two index probes when nothing changed, the whole set when something may have. What
-- changes a view read at known_read_at with known_version: a bump of the version (a join, a return after
-- silence, a weight change, a leave), or a host of the view falling silent — its last_seen,
-- which only moves forward, then lies in (known_read_at - staleness, now - staleness]. Returns the
-- set exactly when one of the two happened; a reader whose staleness
-- is shorter than default_staleness() (a return after a shorter silence bumps nothing) and a
-- first read (known_version or known_read_at NULL) always get the set.
-- Planned with index scans only, as live_members_delta is (#42): the statistics of last_seen,
-- which moves all the time, are always old, and with them the planner took the window of hosts
-- gone silent for thousands of hosts and read every host each look (1.5 ms at 10,000), or read
-- it by a bitmap, which never marks the dead index entries that each heartbeat leaves there.
-- And without JIT: the one-row version table has no other plan than a sequential read, whose
-- cost with enable_seqscan off would have each call compile its plan (40 ms).
CREATE FUNCTION rendezvous.live_members_since(staleness interval, known_version bigint, known_read_at timestamptz)
RETURNS TABLE (version bigint, read_at timestamptz, changed boolean, host_ids text[], weights double precision[])
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
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
        SELECT s.host_ids, s.weights INTO host_ids, weights FROM rendezvous._live_members_at(staleness, now_ts) s;
    END IF;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION rendezvous.live_members_since(interval, bigint, timestamptz) IS
    'For a reader keeping its view of the live set: whether the set may have changed since a view read at known_read_at with known_version (NULLs: a first read), and if so the live hosts and weights, sorted; with the version and time to keep.';

-- live_members_since's answer as a change to the reader's view (0.4.0, #42): when the set may
-- have changed since the view read at known_read_at with known_version, the hosts to add or
-- update (live now, changed after known_version: joined, came back, changed weight) with
-- their weights, and the hosts to remove (changed and not live now: left; or gone silent in
-- the window: their last_seen, which only moves forward, lies in (known_read_at - staleness,
-- now - staleness]), each sorted; nothing when nothing changed (whole false, empty arrays).
-- What it reads grows with the changes, not with the fleet. The whole set instead (whole true,
-- removed NULL) for a first read (known_version or known_read_at NULL), a view older than the
-- changes kept (membership_version.changes_from) or from another database, and a staleness
-- shorter than default_staleness() (a return after a shorter silence is no change).
-- Planned as live_members_since is, and with one plan a statement kept for the session (a
-- generic plan, made again only when what it reads changes). Left to choose, the plan cache
-- compared the generic plan's estimate for a range of versions (a fixed share of every change
-- kept) with the custom plans' (a row or two), planned the read of the changes again on every
-- call once the changes table had grown, and a look with changes cost 0.3 ms instead of 0.12
-- (a churning fleet of 10,000 then fell behind, #42).
CREATE FUNCTION rendezvous.live_members_delta(staleness interval, known_version bigint, known_read_at timestamptz)
RETURNS TABLE (version bigint, read_at timestamptz, whole boolean, host_ids text[], weights double precision[],
               removed text[])
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    now_ts timestamptz := pg_catalog.clock_timestamp();
    since bigint;
BEGIN
    PERFORM rendezvous._check_staleness(staleness);
    -- The version first: every change up to it has committed (bumps take the version row's
    -- lock until their commit), and a later one is read by the next call.
    SELECT v.version, now_ts, v.changes_from INTO live_members_delta.version, live_members_delta.read_at, since
      FROM rendezvous.membership_version v;
    whole := known_version IS NULL OR known_read_at IS NULL OR known_version < since
             OR known_version > live_members_delta.version
             OR staleness < rendezvous.default_staleness() OR known_read_at > now_ts;
    -- Nothing changed (no bump, and no host of the view fell silent): two index probes, as
    -- live_members_since's answer, and empty arrays.
    IF NOT whole AND live_members_delta.version = known_version
       AND NOT EXISTS (SELECT 1 FROM rendezvous.hosts h
                        WHERE h.last_seen > known_read_at - staleness AND h.last_seen <= now_ts - staleness) THEN
        host_ids := '{}';
        weights := '{}';
        removed := '{}';
        RETURN NEXT;
        RETURN;
    END IF;
    IF NOT whole THEN
        WITH silent AS (
            -- Hosts gone silent since the view was read (hosts_last_seen): not live now,
            -- whatever a change says of them (a later one, or a write behind the triggers' back).
            SELECT h.host_id FROM rendezvous.hosts h
             WHERE h.last_seen > known_read_at - staleness AND h.last_seen <= now_ts - staleness
        ), latest AS (
            -- Each other host changed after the view (membership_changes_version), as its last
            -- change left it: its weight and last heartbeat, or NULLs for a host that left.
            SELECT DISTINCT ON (c.host_id) c.host_id, c.weight, c.last_seen
              FROM rendezvous.membership_changes c
             WHERE c.version > known_version AND c.version <= live_members_delta.version
               AND NOT EXISTS (SELECT 1 FROM silent s WHERE s.host_id = c.host_id)
             ORDER BY c.host_id, c.version DESC
        ), now_ AS (
            SELECT s.host_id, NULL::double precision AS weight, false AS live FROM silent s
            UNION ALL
            -- Live now when that last heartbeat is within the staleness: last_seen moves only
            -- forward without a change (moving back is one), and so does the weight. Gone
            -- when the host left.
            SELECT l.host_id, l.weight, l.last_seen IS NOT NULL
              FROM latest l
             WHERE l.last_seen IS NULL OR l.last_seen > now_ts - staleness
            UNION ALL
            -- An older heartbeat there (the change was a step back in time, or committed long
            -- after it was made) says nothing of the heartbeats since, which changed nothing:
            -- looked up by its key (hosts_pkey; LIMIT keeps the planner from turning this into
            -- a join that reads every host).
            SELECT l.host_id, x.weight, coalesce(x.live, false)
              FROM latest l
              LEFT JOIN LATERAL (SELECT h.weight, h.last_seen > now_ts - staleness AS live
                                   FROM rendezvous.hosts h WHERE h.host_id = l.host_id LIMIT 1) x ON true
             WHERE l.last_seen <= now_ts - staleness
        )
        SELECT coalesce(array_agg(n.host_id ORDER BY n.host_id) FILTER (WHERE n.live), '{}'),
               coalesce(array_agg(n.weight ORDER BY n.host_id) FILTER (WHERE n.live), '{}'),
               coalesce(array_agg(n.host_id ORDER BY n.host_id) FILTER (WHERE NOT n.live), '{}')
          INTO host_ids, weights, removed
          FROM now_ n;
        -- Changes pruned while this call read them (a statement of its own, another
        -- snapshot): the whole set after all.
        whole := known_version < (SELECT v.changes_from FROM rendezvous.membership_version v);
    END IF;
    IF whole THEN
        removed := NULL;
        SELECT s.host_ids, s.weights INTO host_ids, weights FROM rendezvous._live_members_at(staleness, now_ts) s;
    END IF;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION rendezvous.live_members_delta(interval, bigint, timestamptz) IS
    'For a reader keeping its view of the live set: what changed since a view read at known_read_at with known_version: the hosts to add or update (sorted, with weights) and those to remove, read from the changes, not the whole set; or the whole set (whole true) for a first read, a view older than the changes kept (10 minutes) and a staleness shorter than the default. With the version and time to keep.';
