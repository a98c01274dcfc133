-- Everything pg_rendezvous puts in a database's catalog, as sorted text: the upgrade test runs
-- it in a database upgraded from the oldest release and in a fresh install, and diffs the two
-- (the portable edition's upgrade test too: without an extension, what its schema holds).
-- Data (rows, sequence values) is left out; owners too (whoever installs owns).
\pset format unaligned
\pset tuples_only on
WITH ext AS (
    SELECT e.oid, e.extname, e.extversion, e.extconfig, e.extcondition, e.extrelocatable
      FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_rendezvous'
), members AS (
    SELECT d.classid, d.objid
      FROM pg_catalog.pg_depend d JOIN ext ON d.refobjid = ext.oid
     WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.deptype = 'e'
    -- No extension (the portable edition installed with psql): what schema rendezvous holds.
    UNION ALL
    SELECT 'pg_catalog.pg_proc'::regclass, p.oid FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'rendezvous'::regnamespace AND NOT EXISTS (SELECT FROM ext)
    UNION ALL
    SELECT 'pg_catalog.pg_class'::regclass, c.oid FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'rendezvous'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
       AND NOT EXISTS (SELECT FROM ext)
    UNION ALL
    SELECT 'pg_catalog.pg_type'::regclass, t.oid FROM pg_catalog.pg_type t
      LEFT JOIN pg_catalog.pg_class c ON c.oid = t.typrelid
     WHERE t.typnamespace = 'rendezvous'::regnamespace AND t.typcategory <> 'A' AND (t.typrelid = 0 OR c.relkind = 'c')
       AND NOT EXISTS (SELECT FROM ext)
), rels AS (
    SELECT c.* FROM pg_catalog.pg_class c JOIN members m ON m.classid = 'pg_catalog.pg_class'::regclass AND m.objid = c.oid
), procs AS (
    SELECT p.* FROM pg_catalog.pg_proc p JOIN members m ON m.classid = 'pg_catalog.pg_proc'::regclass AND m.objid = p.oid
)
SELECT line FROM (
    SELECT 'extension ' || extname || ' ' || extversion || ' relocatable=' || extrelocatable FROM ext
    UNION ALL
    SELECT 'member ' || pg_catalog.pg_describe_object(m.classid, m.objid, 0) FROM members m
    UNION ALL
    SELECT 'config dump ' || c::regclass::text || ' where ' || coalesce(nullif(w, ''), '(all rows)')
      FROM ext, unnest(ext.extconfig, ext.extcondition) AS u(c, w)
    UNION ALL
    SELECT 'schema rendezvous acl=' || coalesce(n.nspacl::text, '(default)') || ' comment=' || coalesce(pg_catalog.obj_description(n.oid, 'pg_namespace'), '')
      FROM pg_catalog.pg_namespace n WHERE n.nspname = 'rendezvous'
    UNION ALL
    -- Functions: signature, defaults, result, language, volatility, strictness, security,
    -- parallel safety, settings and body, all in pg_get_functiondef; then grants and comment.
    SELECT 'function ' || p.oid::regprocedure::text || E'\n' || pg_catalog.pg_get_functiondef(p.oid)
           || 'acl=' || coalesce(p.proacl::text, '(default)')
           || ' comment=' || coalesce(pg_catalog.obj_description(p.oid, 'pg_proc'), '')
      FROM procs p WHERE p.prokind IN ('f', 'p', 'w')
    UNION ALL
    SELECT 'aggregate ' || p.oid::regprocedure::text FROM procs p WHERE p.prokind = 'a'
    UNION ALL
    SELECT 'relation ' || c.oid::regclass::text || ' kind=' || c.relkind::text || ' persistence=' || c.relpersistence::text
           || ' rls=' || c.relrowsecurity || ' options=' || coalesce(c.reloptions::text, '')
           || ' acl=' || coalesce(c.relacl::text, '(default)')
           || ' comment=' || coalesce(pg_catalog.obj_description(c.oid, 'pg_class'), '')
      FROM rels c
    UNION ALL
    -- Columns in their physical order (dropped ones skipped): an upgrade that adds a column
    -- puts it last, so a fresh install must too, or `SELECT *` would differ.
    SELECT 'column ' || c.oid::regclass::text || ' #' || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum)
           || ' ' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
           || coalesce(' default ' || pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), '')
           || CASE a.attidentity WHEN 'a' THEN ' identity always' WHEN 'd' THEN ' identity by default' ELSE '' END
           || CASE a.attgenerated WHEN 's' THEN ' generated stored' ELSE '' END
           || coalesce(' collate ' || co.collname, '')
           || ' acl=' || coalesce(a.attacl::text, '(default)')
           || ' comment=' || coalesce(pg_catalog.col_description(c.oid, a.attnum), '')
      FROM rels c
      JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
      LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 100
     WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
    UNION ALL
    SELECT 'constraint ' || con.conrelid::regclass::text || ' ' || con.conname || ' '
           || pg_catalog.pg_get_constraintdef(con.oid) || ' deferrable=' || con.condeferrable
      FROM pg_catalog.pg_constraint con JOIN rels c ON c.oid = con.conrelid
    UNION ALL
    SELECT 'index ' || pg_catalog.pg_get_indexdef(i.indexrelid)
      FROM pg_catalog.pg_index i JOIN rels c ON c.oid = i.indrelid
    UNION ALL
    SELECT 'sequence ' || s.seqrelid::regclass::text || ' type=' || s.seqtypid::regtype::text
           || ' start=' || s.seqstart || ' increment=' || s.seqincrement || ' min=' || s.seqmin
           || ' max=' || s.seqmax || ' cache=' || s.seqcache || ' cycle=' || s.seqcycle
           || coalesce(' owned by ' || (SELECT d.refobjid::regclass::text || '.' || a.attname
                                          FROM pg_catalog.pg_depend d
                                          JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                                         WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = s.seqrelid
                                           AND d.deptype IN ('a', 'i') AND d.refobjsubid > 0), '')
      FROM pg_catalog.pg_sequence s JOIN rels c ON c.oid = s.seqrelid
    UNION ALL
    SELECT 'view ' || c.oid::regclass::text || E'\n' || pg_catalog.pg_get_viewdef(c.oid)
      FROM rels c WHERE c.relkind IN ('v', 'm')
    UNION ALL
    SELECT 'trigger ' || pg_catalog.pg_get_triggerdef(t.oid)
      FROM pg_catalog.pg_trigger t JOIN rels c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal
    UNION ALL
    SELECT 'policy ' || pol.polrelid::regclass::text || ' ' || pol.polname || ' cmd=' || pol.polcmd::text
           || ' permissive=' || pol.polpermissive || ' roles=' || pol.polroles::regrole[]::text
           || ' using=' || coalesce(pg_catalog.pg_get_expr(pol.polqual, pol.polrelid), '')
           || ' check=' || coalesce(pg_catalog.pg_get_expr(pol.polwithcheck, pol.polrelid), '')
      FROM pg_catalog.pg_policy pol JOIN rels c ON c.oid = pol.polrelid
    UNION ALL
    SELECT 'type ' || t.oid::regtype::text || ' kind=' || t.typtype::text
           || coalesce(' labels=' || (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                                        FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid), '')
      FROM pg_catalog.pg_type t JOIN members m ON m.classid = 'pg_catalog.pg_type'::regclass AND m.objid = t.oid
) described(line)
ORDER BY line COLLATE "C";
