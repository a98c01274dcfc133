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
COMMENT ON SCHEMA rendezvous IS 'pg_rendezvous: rendezvous dispatch, admission, leader and firing claims';
