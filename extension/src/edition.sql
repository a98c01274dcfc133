-- Which edition of pg_rendezvous this is, and its version: the native one (this library), or
-- the portable one (SQL and PL/pgSQL only, for servers that load no library; its definition
-- replaces this one, extension/portable/checks.sql). What the client's check_extension reports.
CREATE FUNCTION rendezvous.edition() RETURNS TABLE (edition text, version text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 'native'::text, e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_rendezvous' $$;
COMMENT ON FUNCTION rendezvous.edition() IS
    'Which edition of pg_rendezvous is installed (native: with its library; portable: SQL only) and its version.';
