-- Static checks of every PL/pgSQL function of the extension with plpgsql_check: no errors and
-- no warnings (extra, performance and security warnings included).
CREATE EXTENSION plpgsql_check;
CREATE TEMP VIEW extension_plpgsql AS
    -- A trigger function is checked against its table (and its transition table, if any).
    SELECT p.oid::regprocedure AS function,
           coalesce((SELECT t.tgrelid FROM pg_catalog.pg_trigger t WHERE t.tgfoid = p.oid LIMIT 1), 0)::regclass AS relid,
           (SELECT t.tgoldtable FROM pg_catalog.pg_trigger t WHERE t.tgfoid = p.oid AND t.tgoldtable IS NOT NULL LIMIT 1) AS oldtable
      FROM pg_catalog.pg_proc p
      -- Everything in the schema is the extension's (the portable edition installed by psql
      -- belongs to no extension).
      JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace AND n.nspname = 'rendezvous'
      JOIN pg_catalog.pg_language l ON l.oid = p.prolang AND l.lanname = 'plpgsql';
SELECT count(*) > 15 AS checks_every_plpgsql_function FROM extension_plpgsql;
SELECT f.function, c.lineno, c.level, c.sqlstate, c.message
  FROM extension_plpgsql f
  CROSS JOIN LATERAL plpgsql_check_function_tb(f.function, f.relid, oldtable => f.oldtable, extra_warnings => true,
                                               performance_warnings => true, security_warnings => true) c
 -- leader() reads the lock manager, which is not MVCC: it stays VOLATILE so every call looks again.
 WHERE NOT (f.function = 'rendezvous.leader(text)'::regprocedure AND c.message = 'routine is marked as VOLATILE, should be STABLE')
 ORDER BY 1, 2;
DROP EXTENSION plpgsql_check;
