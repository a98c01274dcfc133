-- Keys and host ids are hashed as UTF-8 bytes (docs/hrw.md), as the client does: in a database
-- of another encoding the server would hash other bytes, so the extension refuses to install.
CREATE DATABASE rendezvous_regress_latin1 TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C';
\c rendezvous_regress_latin1
DO $$
BEGIN
    CREATE EXTENSION pg_rendezvous;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE '%: %', SQLSTATE, SQLERRM;
END
$$;
SELECT count(*) AS leftovers FROM pg_namespace WHERE nspname = 'rendezvous';
\c rendezvous_regress
DROP DATABASE rendezvous_regress_latin1;
