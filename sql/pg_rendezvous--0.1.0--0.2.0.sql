-- pg_rendezvous 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_rendezvous UPDATE TO '0.2.0').
-- Every schema change of 0.2.0, in the order it was made. scripts/test.sh installs 0.1.0 from
-- its frozen script, fills it, runs this, checks the data, and checks that the catalog equals
-- a fresh install of 0.2.0 (pg_test/upgrade/). Frozen once 0.2.0 is released.
\echo Use "ALTER EXTENSION pg_rendezvous UPDATE TO '0.2.0'" to load this file. \quit

-- Refuse databases that are not UTF-8 (keys and host ids are hashed as UTF-8 bytes).
DO $$
BEGIN
    IF pg_catalog.getdatabaseencoding() <> 'UTF8' THEN
        RAISE EXCEPTION 'pg_rendezvous needs a UTF8 database; this one is %', pg_catalog.getdatabaseencoding()
            USING ERRCODE = '0A000',
                  HINT = 'Keys and host ids are hashed as UTF-8 bytes: create the database with ENCODING ''UTF8''.';
    END IF;
END
$$;

-- Firing keys refuse BC instants (the key's year has no era).
CREATE OR REPLACE FUNCTION rendezvous.firing_key(task_id text, fire_at timestamptz) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF task_id IS NULL OR task_id = '' OR octet_length(task_id) > 256 THEN
        PERFORM rendezvous._check_text('task_id', task_id, 256);
    END IF;
    IF fire_at IS NULL THEN
        RAISE EXCEPTION 'fire_at must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT isfinite(fire_at) THEN
        RAISE EXCEPTION 'fire_at must be finite (got %)', fire_at USING ERRCODE = '22023';
    ELSIF fire_at < '0001-01-01 00:00:00+00'::timestamptz THEN
        -- The key spells the year without an era: a BC instant would share an AD firing's key.
        RAISE EXCEPTION 'fire_at must not be before 0001-01-01 00:00:00 UTC (got %)', fire_at USING ERRCODE = '22023';
    END IF;
    RETURN 'firing:' || task_id || ':'
        || to_char(fire_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
END
$$;

-- complete_firings checks its arrays as complete_firing checks its arguments.
CREATE OR REPLACE FUNCTION rendezvous.complete_firings(task_ids text[], fire_ats timestamptz[], tokens bigint[])
RETURNS TABLE (ord integer, completed boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF complete_firings.task_ids IS NULL OR complete_firings.fire_ats IS NULL OR complete_firings.tokens IS NULL THEN
        RAISE EXCEPTION 'task_ids, fire_ats and tokens must not be NULL' USING ERRCODE = '22004';
    ELSIF cardinality(complete_firings.task_ids) <> cardinality(complete_firings.fire_ats)
       OR cardinality(complete_firings.task_ids) <> cardinality(complete_firings.tokens) THEN
        RAISE EXCEPTION 'task_ids, fire_ats and tokens must have the same length (got %, % and %)',
            cardinality(complete_firings.task_ids), cardinality(complete_firings.fire_ats),
            cardinality(complete_firings.tokens) USING ERRCODE = '22023';
    ELSIF array_position(complete_firings.tokens, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'tokens must not contain NULL (element %)', array_position(complete_firings.tokens, NULL)
            USING ERRCODE = '22004';
    END IF;
    RETURN QUERY
        WITH done AS (
            UPDATE rendezvous.firings f
               SET completed_at = coalesce(f.completed_at, pg_catalog.clock_timestamp())
              FROM (SELECT rendezvous.firing_key(u.t, u.f) AS fk, u.tok
                      FROM unnest(complete_firings.task_ids, complete_firings.fire_ats, complete_firings.tokens) AS u(t, f, tok)
                     ORDER BY 1) x
             WHERE f.firing_key = x.fk AND f.token = x.tok
            RETURNING f.firing_key
        )
        SELECT u.ord::integer, rendezvous.firing_key(u.t, u.f) IN (SELECT d.firing_key FROM done d)
          FROM unnest(complete_firings.task_ids, complete_firings.fire_ats, complete_firings.tokens)
               WITH ORDINALITY AS u(t, f, tok, ord)
         ORDER BY u.ord;
END
$$;

-- Untyped array literals work for every ranked form.
CREATE FUNCTION rendezvous.ranked(key text, hosts text) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT rendezvous.ranked(key, hosts::text[]) $$;
COMMENT ON FUNCTION rendezvous.ranked(text, text) IS 'ranked(key, hosts) for an untyped array literal such as ''{a,b}''.';

CREATE FUNCTION rendezvous.ranked(key text, hosts text[], weights text) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT rendezvous.ranked(key, hosts, weights::double precision[]) $$;
COMMENT ON FUNCTION rendezvous.ranked(text, text[], text) IS 'Weighted ranked(key, hosts, weights) for an untyped weights literal such as ''{1,2}''.';
