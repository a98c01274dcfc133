-- Membership on the database clock, as a host role: a member of rendezvous_host, which has
-- EXECUTE on the API and no table privileges.

CREATE ROLE rendezvous_regress_host LOGIN;
GRANT rendezvous_host TO rendezvous_regress_host;
SET ROLE rendezvous_regress_host;

-- Nobody live yet: no winner, an empty ranking.
SELECT rendezvous.winner('k') IS NULL AS no_winner, cardinality(rendezvous.ranked('k', 3)) AS ranked;

SELECT rendezvous.heartbeat('host-a') <= clock_timestamp() AS stamped_by_db;
SELECT rendezvous.heartbeat('host-b', 2) IS NOT NULL AS ok;
SELECT rendezvous.heartbeat('host-c') IS NOT NULL AS ok;
SELECT rendezvous.live_hosts();
SELECT host_id, weight FROM rendezvous.live_members();

-- The live-set winner is the weighted winner over the live hosts.
SELECT rendezvous.winner('task-' || g) = rendezvous.winner('task-' || g, ARRAY['host-a','host-b','host-c'], ARRAY[1,2,1]::float8[]) AS same,
       count(*)
  FROM generate_series(1, 1000) g GROUP BY 1;
SELECT rendezvous.ranked('task-1', 2) = rendezvous.ranked('task-1', ARRAY['host-a','host-b','host-c'], ARRAY[1,2,1]::float8[], 2) AS same;

-- A heartbeat updates weight and last_seen, not first_seen.
SELECT rendezvous.heartbeat('host-b', 1) IS NOT NULL AS ok;
RESET ROLE;
SELECT host_id, weight, last_seen >= first_seen AS ordered FROM rendezvous.hosts WHERE host_id = 'host-b';
SET ROLE rendezvous_regress_host;

-- Leaving is immediate.
SELECT rendezvous.leave('host-c') AS was_there, rendezvous.leave('host-c') AS again;
SELECT rendezvous.live_hosts();

-- A host whose last heartbeat is older than the window is not live (aged on the DB clock).
RESET ROLE;
UPDATE rendezvous.hosts SET last_seen = last_seen - interval '30 seconds' WHERE host_id = 'host-a';
SET ROLE rendezvous_regress_host;
SELECT rendezvous.live_hosts() AS default_10s, rendezvous.live_hosts('1 minute') AS one_minute;
SELECT count(DISTINCT rendezvous.winner('task-' || g)) AS owners FROM generate_series(1, 100) g;

-- Bad input.
SELECT regress.err($$SELECT rendezvous.heartbeat(NULL)$$);
SELECT regress.err($$SELECT rendezvous.heartbeat('')$$);
SELECT regress.err($$SELECT rendezvous.heartbeat(repeat('x', 257))$$);
SELECT regress.err($$SELECT rendezvous.heartbeat('h', 0)$$);
SELECT regress.err($$SELECT rendezvous.heartbeat('h', -1)$$);
SELECT regress.err($$SELECT rendezvous.heartbeat('h', 'NaN')$$);
SELECT regress.err($$SELECT rendezvous.heartbeat('h', 'Infinity')$$);
SELECT regress.err($$SELECT rendezvous.heartbeat('h', NULL)$$);
SELECT regress.err($$SELECT rendezvous.leave(NULL)$$);
SELECT regress.err($$SELECT rendezvous.live_hosts(NULL)$$);
SELECT regress.err($$SELECT rendezvous.live_hosts('0 s')$$);
SELECT regress.err($$SELECT rendezvous.live_hosts('-5 s')$$);
SELECT regress.err($$SELECT * FROM rendezvous.live_members('0 s')$$);
SELECT rendezvous.live_hosts();

-- The API is all a host gets: no table, no status view, no purge.
SELECT regress.err($$SELECT * FROM rendezvous.hosts$$);
SELECT regress.err($$UPDATE rendezvous.hosts SET last_seen = now()$$);
SELECT regress.err($$INSERT INTO rendezvous.hosts VALUES ('forged', 1, now(), now())$$);
SELECT regress.err($$SELECT * FROM rendezvous.status_hosts$$);

RESET ROLE;
DELETE FROM rendezvous.hosts;
DROP ROLE rendezvous_regress_host;

-- The hosts table is kept by pg_dump.
SELECT c.relname FROM pg_extension e, unnest(e.extconfig) AS cfg(oid) JOIN pg_class c ON c.oid = cfg.oid
 WHERE e.extname = 'pg_rendezvous' AND c.relname IN ('hosts') ORDER BY 1;
