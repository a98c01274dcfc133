-- Leader claims as a psql user makes them (one session here; tests/ and specs/ cover two).

-- Nobody leads a group nobody claimed.
SELECT leader, epoch, since, pid FROM rendezvous.leader('scheduler');

-- Claim it; repeating the claim (every refresh tick) is idempotent and never stacks the lock.
SELECT * FROM rendezvous.try_lead('scheduler', 'host-a');
SELECT * FROM rendezvous.try_lead('scheduler', 'host-a');
SELECT leader, epoch, since IS NOT NULL AS has_since, pid = pg_backend_pid() AS mine FROM rendezvous.leader('scheduler');
SELECT group_name, granted FROM rendezvous.leader_locks WHERE pid = pg_backend_pid();

-- The fencing token passes while it is live.
SELECT rendezvous.assert_leader('scheduler', 1);
SELECT regress.err($$SELECT rendezvous.assert_leader('scheduler', 0)$$);

-- One resign releases it; the epoch stays, nobody leads, and the token is dead.
SELECT rendezvous.resign('scheduler') AS released, rendezvous.resign('scheduler') AS again;
SELECT leader, epoch, pid FROM rendezvous.leader('scheduler');
SELECT regress.err($$SELECT rendezvous.assert_leader('scheduler', 1)$$);

-- A new term is a new epoch.
SELECT * FROM rendezvous.try_lead('scheduler', 'host-a');
SELECT rendezvous.resign('scheduler');

-- A claim whose transaction aborts leaves no lock behind, and no record.
BEGIN;
SELECT * FROM rendezvous.try_lead('reports', 'host-a');
ROLLBACK;
SELECT count(*) AS our_locks FROM rendezvous.leader_locks WHERE pid = pg_backend_pid();
SELECT leader, epoch FROM rendezvous.leader('reports');

-- So does a claim whose savepoint rolls back, however deep, once the claim is inside it.
BEGIN;
SAVEPOINT outer_sp;
SAVEPOINT inner_sp;
SELECT is_leader, epoch FROM rendezvous.try_lead('reports', 'host-a');
RELEASE inner_sp;
SELECT count(*) AS locks_in_savepoint FROM rendezvous.leader_locks WHERE pid = pg_backend_pid();
ROLLBACK TO outer_sp;
SELECT count(*) AS locks_after_rollback_to FROM rendezvous.leader_locks WHERE pid = pg_backend_pid();
COMMIT;
SELECT leader, epoch FROM rendezvous.leader('reports');
-- A savepoint released into a transaction that commits keeps the claim.
BEGIN;
SAVEPOINT sp;
SELECT is_leader, epoch FROM rendezvous.try_lead('reports', 'host-a');
RELEASE sp;
COMMIT;
SELECT leader, epoch, pid = pg_backend_pid() AS mine FROM rendezvous.leader('reports');
SELECT rendezvous.resign('reports');

-- A transaction that claimed leadership cannot be prepared (ROLLBACK PREPARED would undo the
-- term and keep the lock); the claim goes with it.
BEGIN;
SELECT is_leader FROM rendezvous.try_lead('reports', 'host-a');
PREPARE TRANSACTION 'claimed';
SELECT count(*) AS our_locks FROM rendezvous.leader_locks WHERE pid = pg_backend_pid();

-- Leader locks live where SQL cannot reach them: the advisory keys pg_locks shows for them,
-- taken with pg_advisory_lock in both forms, are other locks (specs/ shows they block nothing).
SELECT is_leader FROM rendezvous.try_lead('reports', 'host-a');
SELECT k.locktype, k.objsubid, k.classid = 'rendezvous.leaders'::regclass AS keyed_by_leaders_table
  FROM pg_locks k JOIN rendezvous.leader_locks l ON l.pid = k.pid AND k.objid = l.lock_id::oid
 WHERE l.group_name = 'reports' AND k.locktype = 'advisory';
SELECT rendezvous.resign('reports');

-- Groups get distinct allocated lock ids.
SELECT * FROM rendezvous.try_lead('g1', 'x');
SELECT * FROM rendezvous.try_lead('g2', 'x');
SELECT count(DISTINCT lock_id) AS distinct_ids FROM rendezvous.leaders WHERE group_name IN ('g1', 'g2');
SELECT rendezvous.resign('g1'), rendezvous.resign('g2');

-- Bad input.
SELECT regress.err($$SELECT * FROM rendezvous.try_lead(NULL, 'x')$$);
SELECT regress.err($$SELECT * FROM rendezvous.try_lead('g', NULL)$$);
SELECT regress.err($$SELECT * FROM rendezvous.try_lead('', 'x')$$);
SELECT regress.err($$SELECT * FROM rendezvous.try_lead(repeat('g', 257), 'x')$$);
SELECT regress.err($$SELECT rendezvous.resign(NULL)$$);
SELECT regress.err($$SELECT * FROM rendezvous.leader(NULL)$$);
SELECT regress.err($$SELECT rendezvous.assert_leader(NULL, 1)$$);
SELECT regress.err($$SELECT rendezvous.assert_leader('scheduler', NULL)$$);
SELECT regress.err($$SELECT rendezvous.assert_leader('no-such-group', 1)$$);
-- Resigning a group nobody ever claimed gives up nothing.
SELECT rendezvous.resign('never-created') AS resigned;
DELETE FROM rendezvous.leaders;

-- As a host role (a member of rendezvous_host, no table privileges), under a hostile
-- search_path whose text = operator matches everything: the claim, fencing and resign work on
-- the one group named, and the records cannot be touched directly.
CREATE SCHEMA evil;
CREATE FUNCTION evil.always(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always);
GRANT USAGE ON SCHEMA evil TO PUBLIC;
CREATE ROLE rendezvous_regress_leader LOGIN;
GRANT rendezvous_host TO rendezvous_regress_leader;
SELECT is_leader, epoch FROM rendezvous.try_lead('bystander', 'x');
SELECT rendezvous.resign('bystander');
SET ROLE rendezvous_regress_leader;
SET search_path = evil, pg_catalog;
SELECT 'a'::text = 'b'::text AS evil_operator_active;
SELECT is_leader, leader, epoch FROM rendezvous.try_lead('guarded', 'host-r');
SELECT rendezvous.assert_leader('guarded', 1);
SELECT leader, epoch FROM rendezvous.leader('bystander');
SELECT regress.err($$UPDATE rendezvous.leaders SET epoch = 0$$);
SELECT regress.err($$UPDATE rendezvous.leaders SET lock_id = 1 WHERE group_name = 'guarded'$$);
SELECT regress.err($$SELECT * FROM rendezvous.leader_locks$$);
SELECT rendezvous.resign('guarded');
RESET search_path;
RESET ROLE;
SELECT group_name, leader, epoch, pid IS NULL AS released FROM rendezvous.leaders WHERE group_name IN ('guarded', 'bystander') ORDER BY 1;
DROP ROLE rendezvous_regress_leader;
DROP SCHEMA evil CASCADE;
DELETE FROM rendezvous.leaders;

-- The leader records and the lock id sequence are kept by pg_dump (epochs survive a restore).
SELECT c.relname FROM pg_extension e, unnest(e.extconfig) AS cfg(oid) JOIN pg_class c ON c.oid = cfg.oid
 WHERE e.extname = 'pg_rendezvous' AND c.relname IN ('leaders', 'leader_lock_ids') ORDER BY 1;

-- An operator asks the leader to step down: at its next refresh it resigns and says why; a
-- later term is not affected. Admins only; nobody leading or an unknown group is said so.
SELECT is_leader, leader, epoch FROM rendezvous.try_lead('ops', 'host-a');
SET ROLE rendezvous_host;
SELECT regress.err($$SELECT rendezvous.request_step_down('ops')$$);
RESET ROLE;
SET ROLE rendezvous_admin;
SELECT * FROM rendezvous.request_step_down('ops', 'moving it off host-a for maintenance');
SELECT regress.err($$SELECT rendezvous.request_step_down('no-such-group')$$);
RESET ROLE;
SELECT is_leader, leader, epoch FROM rendezvous.try_lead('ops', 'host-a');
SELECT leader, epoch FROM rendezvous.leader('ops');
SELECT * FROM rendezvous.request_step_down('ops');
SELECT is_leader, leader, epoch FROM rendezvous.try_lead('ops', 'host-a');
SELECT is_leader, leader, epoch FROM rendezvous.try_lead('ops', 'host-a');
SELECT rendezvous.resign('ops');
DELETE FROM rendezvous.leaders;

-- Where the fence stops: replication_status() warns when nothing streams from this server, and
-- when leader epochs come from a later timeline than this server's (a restore elsewhere, or
-- pg_upgrade, which restarts the timeline at 1): a failover's floor could then be below them.
SELECT in_recovery, standbys, synchronous, warning FROM rendezvous.replication_status();
INSERT INTO rendezvous.leaders (group_name, epoch) VALUES ('from-timeline-3', (2::bigint << 32) + 5);
SELECT warning FROM rendezvous.replication_status();
SET ROLE rendezvous_observer;
SELECT standbys, warning IS NOT NULL AS warned FROM rendezvous.replication_status();
RESET ROLE;
DELETE FROM rendezvous.leaders;

-- No waiting inside the call (it held a snapshot and a lock on leaders): refused, with the way.
SELECT regress.err($$SELECT * FROM rendezvous.try_lead('waits', 'w', wait => true)$$);
SELECT is_leader FROM rendezvous.try_lead('waits', 'w', wait => false);
SELECT rendezvous.resign('waits');
DELETE FROM rendezvous.leaders;

-- The lock-table guard (#42): a claim that would take a group's lock is refused (53200, the lock
-- given back) while the server's shared lock table is at 3/4 of its size, so leader groups never
-- fill it and new sessions keep connecting; a group led already keeps its term. Here this
-- session's own advisory locks fill it that far.
SELECT is_leader FROM rendezvous.try_lead('guard-held', 'c');
SELECT count(pg_advisory_lock(1000000 + i)) > 0 AS filled
  FROM generate_series(1, (rendezvous._lock_table_size() * 3 / 4)::integer) i;
DO $$
BEGIN
    PERFORM rendezvous.try_lead('guard-new', 'c');
    RAISE NOTICE 'not refused';
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE '% %', SQLSTATE, split_part(SQLERRM, ':', 1);
END
$$;
SELECT count(*) AS lock_kept FROM rendezvous.leader_locks WHERE group_name = 'guard-new';
SELECT is_leader FROM rendezvous.try_lead('guard-held', 'c');
SELECT count(pg_advisory_unlock(1000000 + i)) > 0 AS emptied
  FROM generate_series(1, (rendezvous._lock_table_size() * 3 / 4)::integer) i;
SELECT is_leader FROM rendezvous.try_lead('guard-new', 'c');
SELECT rendezvous.resign('guard-held'), rendezvous.resign('guard-new');
DELETE FROM rendezvous.leaders;
