-- The shapes through which a caller could reach the owner's rights, checked on every function
-- of the schema, in both editions (#39): a SECURITY DEFINER function runs as the owner, so it
-- must pin its search_path, must not be a trigger function (a caller attaches a trigger
-- function to a table of its own, whose column types, casts and operators are the caller's),
-- and must take no argument of a pseudo-type (anyelement, record, …: the caller's own types
-- would reach its body).
SELECT p.oid::regprocedure AS function,
       concat_ws('; ',
           CASE WHEN NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')
                THEN 'search_path not pinned' END,
           CASE WHEN p.prorettype = 'pg_catalog.trigger'::pg_catalog.regtype THEN 'a trigger function' END,
           CASE WHEN EXISTS (SELECT 1 FROM unnest(p.proargtypes::oid[]) a JOIN pg_catalog.pg_type t ON t.oid = a
                              WHERE t.typtype = 'p') THEN 'an argument of a pseudo-type' END) AS unsafe
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'rendezvous'::regnamespace AND p.prosecdef
   AND (NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')
        OR p.prorettype = 'pg_catalog.trigger'::pg_catalog.regtype
        OR EXISTS (SELECT 1 FROM unnest(p.proargtypes::oid[]) a JOIN pg_catalog.pg_type t ON t.oid = a WHERE t.typtype = 'p'))
 ORDER BY 1;
-- And every trigger function of the schema (the portable edition has some) is beyond PUBLIC's
-- reach: CREATE TRIGGER needs EXECUTE on it.
SELECT p.oid::regprocedure AS trigger_function_public_may_attach
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'rendezvous'::regnamespace AND p.prorettype = 'pg_catalog.trigger'::pg_catalog.regtype
   AND pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY 1;
