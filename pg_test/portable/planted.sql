-- What a role with CREATE on `public` and on the database plants for the installer of the
-- portable edition (scripts/test_portable.sh, planted_objects_test), in `public` and in the
-- schema named after the installing role (`"$user"`, first on the default search_path): a
-- twin of every pg_catalog function that takes arguments, each argument text (the type an
-- unknown literal prefers: `convert_to(text, text)` beats pg_catalog's `convert_to(text,
-- name)` for `convert_to(x, 'UTF8')`), and a text operator for every operator name. Each
-- twin, when it runs, warns and writes who ran it to public.planted_calls; the install must
-- succeed with no such warning, no row, and no object of the install depending on a twin.
-- psql variable: installer (the installing role's name).
\set ON_ERROR_STOP 1
SELECT pg_catalog.set_config('rendezvous_planted.installer', :'installer', false);
CREATE TABLE public.planted_calls (called text, by_role text, at timestamptz DEFAULT now());
GRANT INSERT ON public.planted_calls TO PUBLIC;
CREATE SCHEMA :"installer";
GRANT USAGE ON SCHEMA :"installer" TO PUBLIC;

-- The twins' body: a warning (it survives the install's rollback) and a row (it survives a
-- twin whose call did not fail the install), then NULL.
CREATE FUNCTION public._planted_ran(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE WARNING 'planted object % ran as %', what, current_user;
    INSERT INTO public.planted_calls (called, by_role) VALUES (what, current_user);
END
$$;

DO $$
DECLARE
    f record;
    nsp text;
    args text;
BEGIN
    FOR f IN
        SELECT p.proname, p.pronargs, min(p.prorettype::regtype::text) AS ret
          FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_type t ON t.oid = p.prorettype
         WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.prokind = 'f'
           AND p.pronargs BETWEEN 1 AND 8 AND t.typtype <> 'p'
           -- A twin whose arguments are all text already is pg_catalog's own signature:
           -- pg_catalog, searched first, wins it anyway.
           AND NOT p.proargtypes::oid[] <@ ARRAY['text'::regtype::oid]
         GROUP BY p.proname, p.pronargs
    LOOP
        SELECT string_agg('text', ', ') INTO args FROM generate_series(1, f.pronargs);
        FOREACH nsp IN ARRAY ARRAY['public', current_setting('rendezvous_planted.installer')] LOOP
            EXECUTE format(
                'CREATE FUNCTION %I.%I(%s) RETURNS %s LANGUAGE plpgsql AS %L',
                nsp, f.proname, args, f.ret,
                format('BEGIN PERFORM public._planted_ran(%L); RETURN NULL; END',
                       nsp || '.' || f.proname || '(' || args || ')'));
        END LOOP;
    END LOOP;
END
$$;

CREATE FUNCTION public._planted_op(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM public._planted_ran('an operator');
    RETURN NULL;
END
$$;
DO $$
DECLARE
    op record;
    nsp text;
BEGIN
    FOR op IN
        SELECT DISTINCT o.oprname FROM pg_catalog.pg_operator o
         WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprkind = 'b'
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_operator t
                            WHERE t.oprname = o.oprname AND t.oprleft = 'text'::regtype AND t.oprright = 'text'::regtype)
    LOOP
        FOREACH nsp IN ARRAY ARRAY['public', current_setting('rendezvous_planted.installer')] LOOP
            EXECUTE format('CREATE OPERATOR %I.%s (LEFTARG = text, RIGHTARG = text, FUNCTION = public._planted_op)',
                           nsp, op.oprname);
        END LOOP;
    END LOOP;
END
$$;

-- The plant itself must have worked: a twin for most of pg_catalog's names, in each schema.
DO $$
DECLARE
    nsp text;
BEGIN
    FOREACH nsp IN ARRAY ARRAY['public', current_setting('rendezvous_planted.installer')] LOOP
        IF (SELECT count(*) FROM pg_catalog.pg_proc p WHERE p.pronamespace = nsp::regnamespace) < 1000
           OR (SELECT count(*) FROM pg_catalog.pg_operator o WHERE o.oprnamespace = nsp::regnamespace) < 40 THEN
            RAISE EXCEPTION 'planting in % made too few twins', nsp;
        END IF;
    END LOOP;
END
$$;
