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

-- The live set's version: bumped by a join, a weight change, a return after silence and a
-- leave, never by a plain heartbeat or an empty prune step.
RESET ROLE;
DELETE FROM rendezvous.hosts;
CREATE TEMP TABLE v AS SELECT version AS at_start FROM rendezvous.membership_version;
CREATE FUNCTION pg_temp.bumps() RETURNS bigint LANGUAGE sql
AS $$ SELECT m.version - v.at_start FROM rendezvous.membership_version m, v $$;
SELECT pg_temp.bumps() AS none_yet;
SELECT rendezvous.heartbeat('m1') IS NOT NULL AS joined, pg_temp.bumps() AS join;
SELECT rendezvous.heartbeat('m1') IS NOT NULL AS again, pg_temp.bumps() AS heartbeat;
SELECT rendezvous.heartbeat('m1', 2) IS NOT NULL AS heavier, pg_temp.bumps() AS weight;
SELECT rendezvous.heartbeat('m2') IS NOT NULL AS joined, pg_temp.bumps() AS second_join;
-- Silent for longer than the default staleness (aged behind the triggers' back), then back.
ALTER TABLE rendezvous.hosts DISABLE TRIGGER hosts_changed;
UPDATE rendezvous.hosts SET last_seen = clock_timestamp() - interval '11 s' WHERE host_id = 'm2';
ALTER TABLE rendezvous.hosts ENABLE TRIGGER hosts_changed;
SELECT pg_temp.bumps() AS aged_quietly;
SELECT rendezvous.heartbeat('m2') IS NOT NULL AS back, pg_temp.bumps() AS return;
-- A return bumps from a silence of half the default staleness (5 s): not after 4 s, after 6 s.
-- (The trigger writes the half out; it must be default_staleness() / 2.)
SELECT pg_catalog.pg_get_triggerdef(t.oid)
       LIKE '%(new.last_seen - ' || pg_catalog.quote_literal(rendezvous.default_staleness() / 2) || '::interval)%'
       AS half_the_default_staleness
  FROM pg_catalog.pg_trigger t WHERE t.tgname = 'hosts_changed';
ALTER TABLE rendezvous.hosts DISABLE TRIGGER hosts_changed;
UPDATE rendezvous.hosts SET last_seen = clock_timestamp() - interval '4 s' WHERE host_id = 'm2';
ALTER TABLE rendezvous.hosts ENABLE TRIGGER hosts_changed;
SELECT rendezvous.heartbeat('m2') IS NOT NULL AS back, pg_temp.bumps() AS after_4_s;
ALTER TABLE rendezvous.hosts DISABLE TRIGGER hosts_changed;
UPDATE rendezvous.hosts SET last_seen = clock_timestamp() - interval '6 s' WHERE host_id = 'm2';
ALTER TABLE rendezvous.hosts ENABLE TRIGGER hosts_changed;
SELECT rendezvous.heartbeat('m2') IS NOT NULL AS back, pg_temp.bumps() AS after_6_s;
SELECT rendezvous.leave('m2') AS left, pg_temp.bumps() AS leave;
SELECT rendezvous.leave('m2') AS left_again, pg_temp.bumps() AS unknown_leave;
SELECT count(*) AS kinds, pg_temp.bumps() AS empty_prune FROM rendezvous.prune();

-- live_members_since: the set on a first read; nothing while nothing changes; the set again
-- after a bump or once a host of the view falls silent.
CREATE TEMP TABLE view AS SELECT * FROM rendezvous.live_members_since('10 s', NULL, NULL);
SELECT changed, host_ids, weights FROM view;
SELECT s.changed, s.host_ids, s.version = view.version AS same_version, s.read_at > view.read_at AS later
  FROM view, rendezvous.live_members_since('10 s', view.version, view.read_at) s;
SELECT rendezvous.heartbeat('m3') IS NOT NULL AS joined;
SELECT s.changed, s.host_ids FROM view, rendezvous.live_members_since('10 s', view.version, view.read_at) s;
-- A view that includes m4, 9.8 s after its last heartbeat: 0.3 s later m4 is silent.
ALTER TABLE rendezvous.hosts DISABLE TRIGGER hosts_changed;
INSERT INTO rendezvous.hosts VALUES ('m4', 1, clock_timestamp(), clock_timestamp() - interval '9.8 s');
ALTER TABLE rendezvous.hosts ENABLE TRIGGER hosts_changed;
TRUNCATE view;
INSERT INTO view SELECT * FROM rendezvous.live_members_since('10 s', NULL, NULL);
SELECT host_ids FROM view;
SELECT pg_sleep(0.3);
SELECT s.changed, s.host_ids, s.version = view.version AS same_version FROM view, rendezvous.live_members_since('10 s', view.version, view.read_at) s;
-- Shorter than the default staleness, or a read from the future: always the set.
SELECT s.changed FROM view, rendezvous.live_members_since('5 s', view.version, view.read_at) s;
SELECT s.changed FROM view, rendezvous.live_members_since('10 s', view.version, view.read_at + interval '1 h') s;
SELECT regress.err($$SELECT * FROM rendezvous.live_members_since(NULL, NULL, NULL)$$);
SELECT regress.err($$SELECT * FROM rendezvous.live_members_since('0 s', NULL, NULL)$$);

-- live_members_delta (#42): the same questions answered as a change to the view: the whole set
-- on a first read; then the hosts to add or update and those to remove, from the changes alone.
DELETE FROM rendezvous.hosts;
SELECT rendezvous.heartbeat('d1') IS NOT NULL, rendezvous.heartbeat('d2', 2) IS NOT NULL;
CREATE TEMP TABLE dview AS SELECT * FROM rendezvous.live_members_delta('10 s', NULL, NULL);
SELECT whole, host_ids, weights, removed FROM dview;
CREATE FUNCTION pg_temp.delta() RETURNS TABLE (whole boolean, host_ids text[], weights double precision[], removed text[])
LANGUAGE sql AS $$
    WITH d AS (SELECT s.* FROM dview, rendezvous.live_members_delta('10 s', dview.version, dview.read_at) s),
         kept AS (UPDATE dview SET version = d.version, read_at = d.read_at FROM d RETURNING 1)
    SELECT d.whole, d.host_ids, d.weights, d.removed FROM d
$$;
SELECT * FROM pg_temp.delta() AS nothing_changed;
SELECT rendezvous.heartbeat('d3') IS NOT NULL AS joined, rendezvous.heartbeat('d1', 3) IS NOT NULL AS heavier;
SELECT * FROM pg_temp.delta() AS joined_and_heavier;
SELECT rendezvous.heartbeat('d1', 3) IS NOT NULL AS plain_heartbeat;
SELECT * FROM pg_temp.delta() AS nothing_again;
SELECT rendezvous.leave('d2') AS left;
SELECT * FROM pg_temp.delta() AS one_left;
-- A host of the view falls silent: 9.8 s after its last heartbeat (aged behind the triggers'
-- back, as above), then 0.3 s pass.
ALTER TABLE rendezvous.hosts DISABLE TRIGGER hosts_changed;
UPDATE rendezvous.hosts SET last_seen = clock_timestamp() - interval '9.8 s' WHERE host_id = 'd3';
ALTER TABLE rendezvous.hosts ENABLE TRIGGER hosts_changed;
SELECT pg_sleep(0.3);
SELECT * FROM pg_temp.delta() AS gone_silent;
SELECT rendezvous.heartbeat('d3') IS NOT NULL AS back;
SELECT * FROM pg_temp.delta() AS came_back;
-- A change that leaves an old last heartbeat (a step back in time) is looked up, not taken
-- from the change: the host is removed while it stays silent, and live again once it beat
-- since, though that beat changed nothing (moved forward behind the triggers' back here, as a
-- heartbeat within half the staleness of the last one does).
UPDATE rendezvous.hosts SET last_seen = clock_timestamp() - interval '11 s' WHERE host_id = 'd3';
SELECT * FROM pg_temp.delta() AS stepped_back;
UPDATE rendezvous.hosts SET last_seen = clock_timestamp() - interval '12 s' WHERE host_id = 'd3';
ALTER TABLE rendezvous.hosts DISABLE TRIGGER hosts_changed;
UPDATE rendezvous.hosts SET last_seen = clock_timestamp() WHERE host_id = 'd3';
ALTER TABLE rendezvous.hosts ENABLE TRIGGER hosts_changed;
SELECT * FROM pg_temp.delta() AS beat_since;
SELECT c.weight, c.last_seen < clock_timestamp() - interval '11 s' AS stepped_back
  FROM rendezvous.membership_changes c WHERE c.host_id = 'd3' ORDER BY c.version DESC LIMIT 1;
-- A statement that deletes a host and inserts it again: its leave is recorded as the statement
-- left the host (back), after the insert's change.
WITH d AS (DELETE FROM rendezvous.hosts WHERE host_id = 'd3' RETURNING *)
INSERT INTO rendezvous.hosts SELECT d.host_id, 2, d.first_seen, clock_timestamp() FROM d;
SELECT * FROM pg_temp.delta() AS left_and_back;
-- A host gone silent is removed whatever its changes say (here it was aged behind the
-- triggers' back right after one).
WITH d AS (DELETE FROM rendezvous.hosts WHERE host_id = 'd3' RETURNING *)
INSERT INTO rendezvous.hosts SELECT d.host_id, 3, d.first_seen, clock_timestamp() FROM d;
ALTER TABLE rendezvous.hosts DISABLE TRIGGER hosts_changed;
UPDATE rendezvous.hosts SET last_seen = clock_timestamp() - interval '9.8 s' WHERE host_id = 'd3';
ALTER TABLE rendezvous.hosts ENABLE TRIGGER hosts_changed;
SELECT pg_sleep(0.3);
SELECT * FROM pg_temp.delta() AS silent_after_a_change;
-- Hosts that come and go in one statement share one version; a view from before the changes
-- kept, from another database, a shorter staleness and a read from the future get the set.
DELETE FROM rendezvous.hosts WHERE host_id IN ('d1', 'd3');
SELECT * FROM pg_temp.delta() AS both_left;
SELECT rendezvous.heartbeat('d4') IS NOT NULL AS joined;
SELECT s.whole, s.host_ids FROM dview, rendezvous.live_members_delta('10 s', dview.version - 1000000000, dview.read_at) s;
SELECT s.whole, s.host_ids FROM dview, rendezvous.live_members_delta('10 s', dview.version + 1000, dview.read_at) s;
SELECT s.whole FROM dview, rendezvous.live_members_delta('5 s', dview.version, dview.read_at) s;
SELECT s.whole FROM dview, rendezvous.live_members_delta('10 s', dview.version, dview.read_at + interval '1 h') s;
-- A TRUNCATE says nothing of who went: every kept view reads the set again.
BEGIN;
TRUNCATE rendezvous.hosts;
SELECT s.whole, s.host_ids FROM dview, rendezvous.live_members_delta('10 s', dview.version, dview.read_at) s;
ROLLBACK;
-- Changes older than they are kept go (every 256th bump), and views from before them are read whole.
UPDATE rendezvous.membership_changes SET changed_at = changed_at - interval '1 hour';
UPDATE rendezvous.membership_version SET version = version + 255 - version % 256;
SELECT rendezvous.heartbeat('d5') IS NOT NULL AS the_256th;
SELECT count(*) AS changes_left,
       (SELECT m.changes_from > d.version FROM rendezvous.membership_version m, dview d) AS view_too_old
  FROM rendezvous.membership_changes;
SELECT s.whole, s.host_ids FROM dview, rendezvous.live_members_delta('10 s', dview.version, dview.read_at) s;
SELECT regress.err($$SELECT * FROM rendezvous.live_members_delta(NULL, NULL, NULL)$$);
-- The looks plan with index scans only and without JIT, and live_members_delta keeps one plan
-- a statement for the session (#42; extension/src/membership.sql says what each setting avoids).
SELECT p.proname, p.proconfig FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'rendezvous'::regnamespace
   AND p.proname IN ('live_members_since', 'live_members_delta', '_live_members_at')
 ORDER BY p.proname;
DROP TABLE dview;

-- winner(key) and ranked(key, k) over the live set read it once per statement: a thousand
-- keys, one scan of the hosts table, and the same answers as the array forms.
SELECT rendezvous.heartbeat('m' || g, g) IS NOT NULL AS joined FROM generate_series(5, 9) g LIMIT 1;
BEGIN;
CREATE TEMP TABLE scans AS SELECT pg_stat_get_xact_numscans('rendezvous.hosts'::regclass) AS before;
SELECT count(*) FILTER (WHERE rendezvous.winner('k' || g) = rendezvous.winner('k' || g, l.h, l.w)) AS agree,
       count(*) FILTER (WHERE rendezvous.ranked('k' || g, 3) = rendezvous.ranked('k' || g, l.h, l.w, 3)) AS ranked_agree
  FROM generate_series(1, 1000) g,
       (SELECT array_agg(host_id) AS h, array_agg(weight) AS w FROM rendezvous.live_members()) l;
-- Three scans: live_members, winner's and ranked's (one each, not one a row).
SELECT pg_stat_get_xact_numscans('rendezvous.hosts'::regclass) - before AS scans FROM scans;
COMMIT;
SELECT regress.err($$SELECT rendezvous.winner(NULL::text)$$);
SELECT regress.err($$SELECT rendezvous.ranked('k', -1)$$);

DELETE FROM rendezvous.hosts;
DROP ROLE rendezvous_regress_host;

-- The hosts table is kept by pg_dump.
SELECT c.relname FROM pg_extension e, unnest(e.extconfig) AS cfg(oid) JOIN pg_class c ON c.oid = cfg.oid
 WHERE e.extname = 'pg_rendezvous' AND c.relname IN ('hosts') ORDER BY 1;
