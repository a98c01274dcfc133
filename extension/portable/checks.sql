-- The portable edition's checks.rs: the longest id any argument may be, in bytes.
CREATE FUNCTION rendezvous._max_id_bytes() RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT 256 $$;

-- The portable edition and its version: the extension's when pg_tle installed it, the script's
-- when psql did (no pg_extension row then).
CREATE FUNCTION rendezvous.edition() RETURNS TABLE (edition text, version text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'portable'::text,
           coalesce((SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_rendezvous'), '@EXTVERSION@')
$$;
