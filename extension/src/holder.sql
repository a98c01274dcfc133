-- Who holds a claim: a host and a database session (see holder.rs). Loaded by
-- extension_sql_file! in holder.rs; every name is schema-qualified. Functions reach upgrades
-- from here by themselves (sqlgen).

-- Whether the session that made (or last renewed) a claim is known to be gone: it started at
-- `started` with backend pid `pid`, and no such backend is connected now. A claim recorded
-- without a session (made before 0.3.0) is never gone by this test: only its lease ends it.
-- SECURITY DEFINER (privileges.sql): other roles' sessions show their start time only to
-- privileged roles. The backends are read once per transaction (PostgreSQL's own snapshot of
-- them, taken at the transaction's first look), so a session that ends during a transaction
-- still counts as there until its end, and a session that started after the transaction did
-- may be missing from it: such a holder is never judged gone here (the portable edition's
-- _session_started() takes that snapshot as a claim begins, and a claimer took a run from a
-- holder that had connected and claimed after it, a live one).
CREATE FUNCTION rendezvous._holder_gone(pid integer, started timestamptz) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT _holder_gone.pid IS NOT NULL AND _holder_gone.started IS NOT NULL
       AND _holder_gone.started < pg_catalog.now()
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_get_activity(_holder_gone.pid) a
                        WHERE a.pid = _holder_gone.pid AND a.backend_start = _holder_gone.started)
$$;
COMMENT ON FUNCTION rendezvous._holder_gone(integer, timestamptz) IS
    'Whether the backend with this pid and start time (a claim''s holder session) is gone: its claim can be taken over at once.';

-- Whether this session may act on a claim bound to holder_role (#39): a session of the role
-- that made the claim (session_user, _session_role()). A token fences; this is what keeps a
-- host of another role from completing, failing, renewing, releasing or fencing with a claim
-- whose token it knows or guesses. NULL: a claim made before 0.4.0, bound to no role.
-- Inlined into the statements that call it (no SET clause, every name qualified): it costs
-- what the comparison costs, not a function call with a search_path to save and restore.
CREATE FUNCTION rendezvous._is_holder_role(holder_role oid) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT _is_holder_role.holder_role IS NULL
        OR _is_holder_role.holder_role OPERATOR(pg_catalog.=) rendezvous._session_role()
$$;
COMMENT ON FUNCTION rendezvous._is_holder_role(oid) IS
    'Whether this session''s login role is the one a claim is bound to (NULL: a claim from before 0.4.0): only it acts on the claim.';
