-- HRW overloads that take an untyped literal: `rendezvous.ranked('k', '{a,b}')` would otherwise
-- be ambiguous between ranked(text, text[]) and ranked(text, integer) over the live set, and
-- `ranked('k', '{a,b}', '{1,2}')` between the weighted form and ranked(text, text[], integer).
-- PostgreSQL prefers a text parameter for an untyped literal; these parse it and call the
-- array form. Loaded by extension_sql_file! in hrw.rs.

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

COMMENT ON FUNCTION rendezvous._rank_within(text, text[], double precision[], text, bigint) IS
    'Whether host is among the first max_rank + 1 hosts for key over the weighted hosts (rank 0 is the winner; false for a host not among them): claim_runs'' placement test, stopping once more than max_rank hosts outrank host.';
