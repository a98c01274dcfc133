-- The schema's comment, and the one requirement on the database: UTF-8 (loaded first).
-- Keys and host ids are hashed as UTF-8 bytes, as docs/hrw.md specifies and the client does;
-- in another encoding the server would hash other bytes than the client, so refuse it.
DO $$
BEGIN
    IF pg_catalog.getdatabaseencoding() <> 'UTF8' THEN
        RAISE EXCEPTION 'pg_rendezvous needs a UTF8 database; this one is %', pg_catalog.getdatabaseencoding()
            USING ERRCODE = '0A000',
                  HINT = 'Keys and host ids are hashed as UTF-8 bytes: create the database with ENCODING ''UTF8''.';
    END IF;
END
$$;
-- CREATE EXTENSION adopts a schema that already exists; one made by someone else could be
-- dropped from under us by its owner, or hold objects of theirs. Install only into an empty
-- schema owned by the installing role: one this CREATE EXTENSION made, or the one a DROP
-- EXTENSION left behind (PostgreSQL keeps the schema; its grants are ours).
DO $$
DECLARE
    nsp oid := 'rendezvous'::regnamespace;
BEGIN
    IF (SELECT n.nspowner <> (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)
          FROM pg_catalog.pg_namespace n WHERE n.oid = nsp)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = nsp)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_proc p WHERE p.pronamespace = nsp)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_type t WHERE t.typnamespace = nsp) THEN
        RAISE EXCEPTION 'schema "rendezvous" already exists: pg_rendezvous installs only into a schema CREATE EXTENSION makes'
            USING ERRCODE = '42P06', HINT = 'Drop or rename the existing schema "rendezvous", then CREATE EXTENSION again.';
    END IF;
END
$$;
COMMENT ON SCHEMA rendezvous IS 'pg_rendezvous: rendezvous dispatch, admission, leader and firing claims';
