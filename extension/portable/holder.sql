-- The portable edition's holder.rs: when this backend started, as pg_stat_activity shows it
-- (a backend always sees its own row).
CREATE FUNCTION rendezvous._session_started() RETURNS timestamp with time zone
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN (SELECT a.backend_start FROM pg_stat_get_activity(pg_backend_pid()) a); END $$;

-- The portable edition's holder.rs: the role this session logged in as (its name quoted, so a
-- mixed-case name reads as itself). Inlined where it is called: no SET clause, every name
-- qualified.
CREATE FUNCTION rendezvous._session_role() RETURNS oid
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.quote_ident(session_user)::pg_catalog.regrole::pg_catalog.oid $$;
