-- The portable edition's checks.rs: the longest id any argument may be, in bytes.
CREATE FUNCTION rendezvous._max_id_bytes() RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT 256 $$;
