-- The portable edition's membership.rs: winner(key) and ranked(key, k) over the live hosts
-- (default staleness). The native edition reads the set once a statement; this one reads it
-- on every call (docs/operations.md, the portable edition's differences).

-- The live hosts (default staleness, as live_members) with their hashes (kept ones from
-- rendezvous._host_hashes) and their ratios to the largest weight (NULL when every weight is the
-- same). The table's constraints already refuse what _weighted_set checks.
CREATE FUNCTION rendezvous._live_set(OUT set_hosts text[], OUT set_hashes bigint[],
                                     OUT set_ratios double precision[])
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    weights double precision[];
    smallest double precision;
    largest double precision;
BEGIN
    SELECT coalesce(array_agg(h.host_id), '{}'),
           coalesce(array_agg(coalesce(x.hash, rendezvous._host_hash(h.host_id))), '{}'),
           array_agg(h.weight), min(h.weight), max(h.weight)
      INTO set_hosts, set_hashes, weights, smallest, largest
      FROM rendezvous.hosts h
      LEFT JOIN rendezvous._host_hashes x ON x.host_id = h.host_id
     WHERE h.last_seen > clock_timestamp() - rendezvous.default_staleness();
    set_ratios := rendezvous._weight_ratios(weights, smallest, largest);
END
$$;

CREATE FUNCTION rendezvous.winner(key text) RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN (rendezvous.ranked(key, 1))[1]; END $$;

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
    RETURN rendezvous._hrw_order(kh, s.set_hosts, s.set_hashes, s.set_ratios, k);
END
$$;
