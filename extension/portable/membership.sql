-- The portable edition's membership.rs: winner(key) and ranked(key, k) over the live hosts
-- (default staleness). The native edition reads the set once a statement; this one reads it
-- on every call (docs/operations.md, the portable edition's differences).

-- The live hosts as a weighted set: (set_hosts, set_ratios) of _weighted_set.
CREATE FUNCTION rendezvous._live_set(OUT set_hosts text[], OUT set_ratios double precision[])
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hosts text[];
    weights double precision[];
    s record;
BEGIN
    SELECT coalesce(array_agg(m.host_id), '{}'), coalesce(array_agg(m.weight), '{}') INTO hosts, weights
      FROM rendezvous.live_members() m;
    s := rendezvous._weighted_set(hosts, weights);
    set_hosts := s.set_hosts;
    set_ratios := s.set_ratios;
END
$$;

CREATE FUNCTION rendezvous.winner(key text) RETURNS text
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT (rendezvous.ranked(key, 1))[1] $$;

CREATE FUNCTION rendezvous.ranked(key text, k integer) RETURNS text[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kh bigint := rendezvous._key_hash(key);
    s record;
BEGIN
    PERFORM rendezvous._check_hrw_input(NULL, k);
    s := rendezvous._live_set();
    RETURN rendezvous._hrw_order(kh, s.set_hosts, s.set_ratios, k);
END
$$;
