-- Roles and privileges (loaded last). Three roles, made once per cluster (roles outlive a DROP
-- EXTENSION, and are shared by every database that installs pg_rendezvous):
--   rendezvous_host     EXECUTE on the API a host uses, no table privileges at all;
--   rendezvous_observer SELECT on the status_* views (what `rendezvous status` reads);
--   rendezvous_admin    both, plus the purges.
-- Give a login role one of them: GRANT rendezvous_host TO app;
-- Every function that touches a table runs SECURITY DEFINER (as the extension's owner) with
-- search_path pinned to pg_catalog, pg_temp, and names everything schema-qualified; whoever
-- calls it can do what the function does, and nothing else. Pure functions (HRW, firing_key,
-- the argument checks) stay executable by everyone with USAGE on the schema.
--
-- Roles that exist already (made by an install in another database, or by someone else) are
-- adopted only when nothing but a superuser can administer them and they carry no attribute
-- the extension would not give them: a CREATEROLE role that made them first would otherwise
-- keep ADMIN over them and grant itself rendezvous_admin in every database that installs the
-- extension later (#24), as CREATE EXTENSION refuses a schema it did not make.
DO $$
DECLARE
    unsafe text;
BEGIN
    SELECT string_agg(why, '; ' ORDER BY why) INTO unsafe FROM (
        SELECT format('role %I is administered by %I, who is not a superuser (ADMIN OPTION)', r.rolname, m.rolname) AS why
          FROM pg_catalog.pg_auth_members am
          JOIN pg_catalog.pg_roles r ON r.oid = am.roleid
          JOIN pg_catalog.pg_roles m ON m.oid = am.member
         WHERE r.rolname IN ('rendezvous_host', 'rendezvous_observer', 'rendezvous_admin')
           AND am.admin_option AND NOT m.rolsuper
           -- The installing role itself (the portable edition's owner, who made them here or in
           -- another of its databases: PostgreSQL 16 gives a CREATEROLE role ADMIN over those).
           AND m.rolname <> current_user
        UNION ALL
        SELECT format('role %I can log in or has attributes (SUPERUSER, CREATEDB, CREATEROLE, REPLICATION or BYPASSRLS)', r.rolname)
          FROM pg_catalog.pg_roles r
         WHERE r.rolname IN ('rendezvous_host', 'rendezvous_observer', 'rendezvous_admin')
           AND (r.rolcanlogin OR r.rolsuper OR r.rolcreatedb OR r.rolcreaterole OR r.rolreplication OR r.rolbypassrls)
    ) reasons;
    IF unsafe IS NOT NULL THEN
        RAISE EXCEPTION 'pg_rendezvous will not adopt roles that others could use to gain its privileges: %', unsafe
            USING ERRCODE = '42710',
                  HINT = 'Revoke the ADMIN OPTION (or the attributes), or drop the roles if nothing uses them, then create the extension again.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'rendezvous_host') THEN
        CREATE ROLE rendezvous_host NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'rendezvous_observer') THEN
        CREATE ROLE rendezvous_observer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'rendezvous_admin') THEN
        CREATE ROLE rendezvous_admin NOLOGIN IN ROLE rendezvous_host, rendezvous_observer;
    END IF;
END
$$;
GRANT USAGE ON SCHEMA rendezvous TO rendezvous_host, rendezvous_observer;

ALTER FUNCTION rendezvous.heartbeat(text, double precision) SECURITY DEFINER;
ALTER FUNCTION rendezvous.leave(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.live_hosts(interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.live_members(interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.live_members_since(interval, bigint, timestamptz) SECURITY DEFINER;
ALTER FUNCTION rendezvous.live_members_delta(interval, bigint, timestamptz) SECURITY DEFINER;
ALTER FUNCTION rendezvous.winner(text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION rendezvous.ranked(text, integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION rendezvous.spawn_run(text, text, jsonb, text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.purge_runs(interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.try_lead(text, text, boolean, interval) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION rendezvous.resign(text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION rendezvous.leader(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.assert_leader(text, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.claim_firing(text, timestamptz, text, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.claim_firings(text[], timestamptz[], text, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.complete_firing(text, timestamptz, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.complete_firings(text[], timestamptz[], bigint[]) SECURITY DEFINER;
ALTER FUNCTION rendezvous.renew_firing(text, timestamptz, bigint, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.release_firing(text, timestamptz, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.assert_firing(text, timestamptz, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.firing_states(text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION rendezvous.purge_firings(interval) SECURITY DEFINER;

-- Trigger functions run only from their triggers on the extension's tables: nobody attaches
-- them to a table of its own (CREATE TRIGGER needs EXECUTE; #39).
REVOKE EXECUTE ON FUNCTION rendezvous._membership_changed() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rendezvous._live_members_at(interval, timestamptz) FROM PUBLIC;

-- Internal helpers: only the functions above call them (as the owner).
REVOKE EXECUTE ON FUNCTION
    rendezvous._leader_lock_id(text), rendezvous._lock_holder(integer), rendezvous._durable_commit(),
    rendezvous._leader_lock_held(integer, integer), rendezvous._empty_firing_days(interval)
    FROM PUBLIC;

-- The host API.
REVOKE EXECUTE ON FUNCTION
    rendezvous.heartbeat(text, double precision), rendezvous.leave(text), rendezvous.live_hosts(interval),
    rendezvous.live_members(interval),
    rendezvous.live_members_since(interval, bigint, timestamptz), rendezvous.live_members_delta(interval, bigint, timestamptz),
    rendezvous.winner(text), rendezvous.ranked(text, integer),
    rendezvous.spawn_run(text, text, jsonb, text, integer, interval),
    rendezvous.try_lead(text, text, boolean, interval), rendezvous.resign(text), rendezvous.leader(text),
    rendezvous.assert_leader(text, bigint),
    rendezvous.claim_firing(text, timestamptz, text, interval),
    rendezvous.claim_firings(text[], timestamptz[], text, interval),
    rendezvous.complete_firing(text, timestamptz, bigint),
    rendezvous.complete_firings(text[], timestamptz[], bigint[]),
    rendezvous.renew_firing(text, timestamptz, bigint, interval),
    rendezvous.release_firing(text, timestamptz, bigint), rendezvous.assert_firing(text, timestamptz, bigint),
    rendezvous.firing_states(text[], timestamptz[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    rendezvous.heartbeat(text, double precision), rendezvous.leave(text), rendezvous.live_hosts(interval),
    rendezvous.live_members(interval),
    rendezvous.live_members_since(interval, bigint, timestamptz), rendezvous.live_members_delta(interval, bigint, timestamptz),
    rendezvous.winner(text), rendezvous.ranked(text, integer),
    rendezvous.spawn_run(text, text, jsonb, text, integer, interval),
    rendezvous.try_lead(text, text, boolean, interval), rendezvous.resign(text), rendezvous.leader(text),
    rendezvous.assert_leader(text, bigint),
    rendezvous.claim_firing(text, timestamptz, text, interval),
    rendezvous.claim_firings(text[], timestamptz[], text, interval),
    rendezvous.complete_firing(text, timestamptz, bigint),
    rendezvous.complete_firings(text[], timestamptz[], bigint[]),
    rendezvous.renew_firing(text, timestamptz, bigint, interval),
    rendezvous.release_firing(text, timestamptz, bigint), rendezvous.assert_firing(text, timestamptz, bigint),
    rendezvous.firing_states(text[], timestamptz[])
    TO rendezvous_host;

-- Observers read the status views (and may ask leader() about a group); admins purge.
GRANT EXECUTE ON FUNCTION rendezvous.leader(text) TO rendezvous_observer;
GRANT SELECT ON rendezvous.status_hosts, rendezvous.status_leaders, rendezvous.status_firings,
    rendezvous.status_runs, rendezvous.leader_locks TO rendezvous_observer;
REVOKE EXECUTE ON FUNCTION rendezvous.purge_runs(interval), rendezvous.purge_firings(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous.purge_runs(interval), rendezvous.purge_firings(interval) TO rendezvous_admin;

-- Retention (0.3.0): hosts prune (the scheduler does, in bounded steps); admins choose how long
-- each kind is kept; observers read the settings.
ALTER FUNCTION rendezvous.prune(integer) SECURITY DEFINER;
ALTER FUNCTION rendezvous.set_retention(text, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.reset_retention(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.purge_runs(interval, integer) SECURITY DEFINER;
ALTER FUNCTION rendezvous.purge_firings(interval, integer) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous.prune(integer), rendezvous.set_retention(text, interval),
    rendezvous.reset_retention(text), rendezvous.purge_runs(interval, integer),
    rendezvous.purge_firings(interval, integer), rendezvous._delete_step(text, interval, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous.prune(integer) TO rendezvous_host;
GRANT EXECUTE ON FUNCTION rendezvous.set_retention(text, interval), rendezvous.reset_retention(text),
    rendezvous.purge_runs(interval, integer), rendezvous.purge_firings(interval, integer) TO rendezvous_admin;
GRANT SELECT ON rendezvous.retention_settings TO rendezvous_observer;

-- The scheduler (0.2.0). Hosts register their tasks' schedules at startup and run them;
-- pausing, resuming and removing a task is an admin's; observers read status_tasks.
ALTER FUNCTION rendezvous.schedule_task(text, text, text, text, text, interval, interval, integer, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.unschedule_task(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.pause_task(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.resume_task(text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.due_firings(integer) SECURITY DEFINER;
ALTER FUNCTION rendezvous.next_due_at() SECURITY DEFINER;
ALTER FUNCTION rendezvous.fail_firing(text, timestamptz, bigint, text) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous._make_due_firings(timestamptz, integer, integer),
    rendezvous._make_task_firings(timestamptz, integer, text, integer),
    rendezvous._unmake_ahead(text, timestamptz), rendezvous._skip_overlapped(text[], timestamptz),
    rendezvous._firing_overlapped(text, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
    rendezvous.schedule_task(text, text, text, text, text, interval, interval, integer, interval),
    rendezvous.unschedule_task(text), rendezvous.pause_task(text), rendezvous.resume_task(text),
    rendezvous.due_firings(integer), rendezvous.next_due_at(), rendezvous.fail_firing(text, timestamptz, bigint, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    rendezvous.schedule_task(text, text, text, text, text, interval, interval, integer, interval),
    rendezvous.due_firings(integer), rendezvous.next_due_at(), rendezvous.fail_firing(text, timestamptz, bigint, text)
    TO rendezvous_host;
GRANT EXECUTE ON FUNCTION rendezvous.unschedule_task(text), rendezvous.pause_task(text), rendezvous.resume_task(text)
    TO rendezvous_admin;
GRANT SELECT ON rendezvous.status_tasks TO rendezvous_observer;

-- Replication status (0.2.0): pg_stat_replication shows its standbys' states only to
-- privileged roles, so it runs as the owner; observers and hosts may read it.
ALTER FUNCTION rendezvous.replication_status() SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous.replication_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous.replication_status() TO rendezvous_observer, rendezvous_host;

-- Admin actions (0.2.0): release a stuck firing claim.
ALTER FUNCTION rendezvous.release_firing_claim(text, timestamptz) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous.release_firing_claim(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous.release_firing_claim(text, timestamptz) TO rendezvous_admin;
ALTER FUNCTION rendezvous.request_step_down(text, text) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous.request_step_down(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous.request_step_down(text, text) TO rendezvous_admin;

-- Runs (0.3.0): hosts claim, renew, complete, fail and fence runs; cancelling is an admin's.
-- _holder_gone reads other roles' sessions (privileged), and observers' views call it.
ALTER FUNCTION rendezvous._holder_gone(integer, timestamptz) SECURITY DEFINER;
ALTER FUNCTION rendezvous.claim_runs(text, integer, interval, text[], interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.renew_run(bigint, bigint, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.complete_run(bigint, bigint, jsonb) SECURITY DEFINER;
ALTER FUNCTION rendezvous.complete_runs(bigint[], bigint[], jsonb[]) SECURITY DEFINER;
ALTER FUNCTION rendezvous.fail_run(bigint, bigint, text) SECURITY DEFINER;
ALTER FUNCTION rendezvous.release_run(bigint, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.assert_run(bigint, bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.cancel_run(bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.next_runnable_at(text[]) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous._holder_gone(integer, timestamptz), rendezvous._recover_runs(timestamptz),
    rendezvous._runs_walk(timestamptz, text[], integer), rendezvous._session_started() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous._holder_gone(integer, timestamptz) TO rendezvous_observer;
REVOKE EXECUTE ON FUNCTION
    rendezvous.claim_runs(text, integer, interval, text[], interval), rendezvous.renew_run(bigint, bigint, interval),
    rendezvous.complete_run(bigint, bigint, jsonb), rendezvous.complete_runs(bigint[], bigint[], jsonb[]),
    rendezvous.fail_run(bigint, bigint, text),
    rendezvous.release_run(bigint, bigint), rendezvous.assert_run(bigint, bigint), rendezvous.cancel_run(bigint),
    rendezvous.next_runnable_at(text[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    rendezvous.claim_runs(text, integer, interval, text[], interval), rendezvous.renew_run(bigint, bigint, interval),
    rendezvous.complete_run(bigint, bigint, jsonb), rendezvous.complete_runs(bigint[], bigint[], jsonb[]),
    rendezvous.fail_run(bigint, bigint, text),
    rendezvous.release_run(bigint, bigint), rendezvous.assert_run(bigint, bigint), rendezvous.next_runnable_at(text[])
    TO rendezvous_host;
GRANT EXECUTE ON FUNCTION rendezvous.cancel_run(bigint) TO rendezvous_admin;
GRANT SELECT ON rendezvous.status_run_queue TO rendezvous_observer;

-- A host starting under its id ends what an earlier process under that id still holds.
ALTER FUNCTION rendezvous.release_host_claims(text) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous.release_host_claims(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous.release_host_claims(text) TO rendezvous_host;

-- Durable runs (0.4.0): holders checkpoint steps, park and admit children; hosts signal runs
-- and read steps and children; observers read them too.
ALTER FUNCTION rendezvous.record_step(bigint, bigint, text, jsonb) SECURITY DEFINER;
ALTER FUNCTION rendezvous.run_steps(bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.sleep_run(bigint, bigint, timestamptz) SECURITY DEFINER;
ALTER FUNCTION rendezvous.signal_run(bigint, text, jsonb) SECURITY DEFINER;
ALTER FUNCTION rendezvous.await_signal(bigint, bigint, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION rendezvous.spawn_child(bigint, bigint, text, text, jsonb, integer, interval) SECURITY DEFINER;
ALTER FUNCTION rendezvous.run_children(bigint) SECURITY DEFINER;
ALTER FUNCTION rendezvous.await_children(bigint, bigint, timestamptz) SECURITY DEFINER;
ALTER FUNCTION rendezvous.set_run_progress(bigint, bigint, jsonb) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous._hold_run(bigint, bigint), rendezvous._park_run(bigint, timestamptz, text),
    rendezvous._wake_parents(bigint[]), rendezvous._refuse_other_role(bigint, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
    rendezvous.record_step(bigint, bigint, text, jsonb), rendezvous.run_steps(bigint),
    rendezvous.sleep_run(bigint, bigint, timestamptz), rendezvous.signal_run(bigint, text, jsonb),
    rendezvous.await_signal(bigint, bigint, text, timestamptz),
    rendezvous.spawn_child(bigint, bigint, text, text, jsonb, integer, interval), rendezvous.run_children(bigint),
    rendezvous.await_children(bigint, bigint, timestamptz), rendezvous.set_run_progress(bigint, bigint, jsonb)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    rendezvous.record_step(bigint, bigint, text, jsonb), rendezvous.run_steps(bigint),
    rendezvous.sleep_run(bigint, bigint, timestamptz), rendezvous.signal_run(bigint, text, jsonb),
    rendezvous.await_signal(bigint, bigint, text, timestamptz),
    rendezvous.spawn_child(bigint, bigint, text, text, jsonb, integer, interval), rendezvous.run_children(bigint),
    rendezvous.await_children(bigint, bigint, timestamptz), rendezvous.set_run_progress(bigint, bigint, jsonb)
    TO rendezvous_host;
GRANT EXECUTE ON FUNCTION rendezvous.run_steps(bigint), rendezvous.run_children(bigint) TO rendezvous_observer;

-- Run ids floored after a promotion (0.4.0, fencing.rs): the admissions' own business.
REVOKE EXECUTE ON FUNCTION rendezvous._floor_run_ids(), rendezvous._raise_run_ids(bigint) FROM PUBLIC;

-- Batch admission (0.4.0): as spawn_run, to hosts.
ALTER FUNCTION rendezvous.spawn_runs(text, text[], jsonb[], text[], integer[], interval[]) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous.spawn_runs(text, text[], jsonb[], text[], integer[], interval[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous.spawn_runs(text, text[], jsonb[], text[], integer[], interval[]) TO rendezvous_host;

-- Announcements (0.4.0, announce.rs): only the owner's code sends them; hosts read the key
-- that checks them.
ALTER FUNCTION rendezvous._announcement_key() SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION rendezvous._announce(text, text), rendezvous._announcement_key() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rendezvous._announcement_key() TO rendezvous_host;
REVOKE ALL ON rendezvous._announcement_key, rendezvous._announcements FROM PUBLIC;
