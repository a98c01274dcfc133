-- Announcements hosts can trust (announce.rs): the install's key and the numbers that make
-- each announcement unique. Both are the owner's; rendezvous_host reads the key through
-- _announcement_key() to check what it hears.
CREATE TABLE rendezvous._announcement_key (
    key bytea NOT NULL
);
COMMENT ON TABLE rendezvous._announcement_key IS
    'The key of the MACs on the extension''s notifications (announce.rs); made at install, read by rendezvous_host.';
INSERT INTO rendezvous._announcement_key (key)
SELECT pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text
                                               || pg_catalog.clock_timestamp()::text, 'UTF8'));
CREATE SEQUENCE rendezvous._announcements;

-- The key, for a host checking announcements (granted to rendezvous_host in privileges.sql),
-- and the last number handed out so far: a connection counts everything up to it as heard, so
-- a replay of an announcement recorded before it connected is ignored too.
CREATE FUNCTION rendezvous._announcement_key() RETURNS TABLE (key bytea, last_number bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT k.key, CASE WHEN s.is_called THEN s.last_value ELSE 0 END
      FROM rendezvous._announcement_key k, rendezvous._announcements s
$$;
