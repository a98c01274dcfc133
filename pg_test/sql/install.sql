-- What CREATE EXTENSION refuses. Keys and host ids are hashed as UTF-8 bytes (docs/hrw.md), as
-- the client does: in a database of another encoding the server would hash other bytes.
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

-- A schema named rendezvous that someone else made is not adopted (its owner could drop what
-- the extension puts there): CREATE EXTENSION refuses it, and leaves it alone.
CREATE DATABASE rendezvous_regress_squat;
\c rendezvous_regress_squat
CREATE ROLE rendezvous_regress_squatter;
CREATE SCHEMA rendezvous AUTHORIZATION rendezvous_regress_squatter;
DO $$
BEGIN
    CREATE EXTENSION pg_rendezvous;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE '%: %', SQLSTATE, SQLERRM;
END
$$;
SELECT n.nspname, r.rolname AS owner FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE n.nspname = 'rendezvous';
DROP SCHEMA rendezvous;
-- Without it, the extension installs, and makes its schema its own.
CREATE EXTENSION pg_rendezvous;
SELECT r.rolname = current_user AS owned_by_installer FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE n.nspname = 'rendezvous';
\c rendezvous_regress
DROP DATABASE rendezvous_regress_squat;
DROP ROLE rendezvous_regress_squatter;

-- Roles that exist already are adopted only when no one but a superuser administers them and
-- they carry no attribute (#24): a CREATEROLE role holding ADMIN OPTION on rendezvous_admin
-- could otherwise grant itself the admin functions of every database installing later.
CREATE ROLE rendezvous_regress_creator CREATEROLE;
GRANT rendezvous_admin TO rendezvous_regress_creator WITH ADMIN OPTION;
ALTER ROLE rendezvous_observer LOGIN;
CREATE DATABASE rendezvous_regress_roles;
\c rendezvous_regress_roles
DO $$
BEGIN
    CREATE EXTENSION pg_rendezvous;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE '%: %', SQLSTATE, SQLERRM;
END
$$;
SELECT count(*) AS leftovers FROM pg_namespace WHERE nspname = 'rendezvous';
REVOKE rendezvous_admin FROM rendezvous_regress_creator;
ALTER ROLE rendezvous_observer NOLOGIN;
-- Safe again: adopted.
CREATE EXTENSION pg_rendezvous;
SELECT extversion IS NOT NULL AS installed FROM pg_extension WHERE extname = 'pg_rendezvous';
\c rendezvous_regress
DROP DATABASE rendezvous_regress_roles;
DROP ROLE rendezvous_regress_creator;
