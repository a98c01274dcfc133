-- Every function header of schema rendezvous, one line each, as sorted text: scripts/
-- test_portable.sh prints it in a native and a portable install and diffs the two, so the
-- editions cannot drift apart in what a caller sees (arguments, result, volatility,
-- strictness, parallel safety, SECURITY DEFINER and its settings, who may execute it). Not
-- compared: the language, the body, the owner (whoever installs owns). Helpers of one edition
-- alone are printed too; pg_test/portable/headers.allowed lists the differences that are meant.
\pset format unaligned
\pset tuples_only on
SELECT p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
       || ' -> ' || pg_catalog.pg_get_function_result(p.oid)
       || ' ' || CASE p.provolatile WHEN 'i' THEN 'IMMUTABLE' WHEN 's' THEN 'STABLE' ELSE 'VOLATILE' END
       || CASE WHEN p.proisstrict THEN ' STRICT' ELSE '' END
       || ' PARALLEL ' || CASE p.proparallel WHEN 's' THEN 'SAFE' WHEN 'r' THEN 'RESTRICTED' ELSE 'UNSAFE' END
       || CASE WHEN p.prosecdef THEN ' SECURITY DEFINER' ELSE '' END
       || coalesce(' SET ' || pg_catalog.array_to_string(p.proconfig, ', '), '')
       || ' EXECUTE ' || coalesce((
            SELECT pg_catalog.string_agg(CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, ',' ORDER BY 1)
              FROM pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
             WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner), '(owner only)')
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'rendezvous'::regnamespace
 ORDER BY 1;
