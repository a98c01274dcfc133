-- Rendezvous (HRW) hashing in SQL: the portable edition's winner, ranked, score and
-- hrw_algorithm, bit-identical to the Rust crate (docs/hrw.md, hrw/vectors.json).
--
-- 64-bit words are held in bigint and wrap as Rust's u64 does: PostgreSQL's shifts wrap, XOR
-- and AND are bitwise, and addition and multiplication are done in parts small enough never to
-- overflow. The small helpers are single-expression SQL functions with no SET clause, so the
-- planner inlines them into the callers' expressions.
--
-- What a call costs is hashing: a host's SipHash takes ~12 µs in PL/pgSQL. So host hashes are
-- kept in rendezvous._host_hashes, written when a host joins (a memo: a hash never changes, so
-- a missing or extra row costs time, never a different answer), and the scores of a whole set
-- are one PL/pgSQL loop (_scores) rather than a call per host.

-- a + b modulo 2^64.
CREATE FUNCTION rendezvous._add64(a bigint, b bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN (a < 0) <> (b < 0) THEN a + b
        -- Same signs: move the sum by 2^63 (never overflows), then back, wrapping.
        WHEN (CASE WHEN b >= 0 THEN a + ((b - 9223372036854775807) - 1) ELSE a + ((b + 9223372036854775807) + 1) END) < 0
            THEN (CASE WHEN b >= 0 THEN a + ((b - 9223372036854775807) - 1) ELSE a + ((b + 9223372036854775807) + 1) END)
                 + 9223372036854775807 + 1
        ELSE (CASE WHEN b >= 0 THEN a + ((b - 9223372036854775807) - 1) ELSE a + ((b + 9223372036854775807) + 1) END)
             - 9223372036854775807 - 1
    END
$$;

-- x rotated left by n bits (0 < n < 63).
CREATE FUNCTION rendezvous._rotl64(x bigint, n integer) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (x << n) | ((x >> (64 - n)) & ((1::bigint << n) - 1)) $$;

-- x shifted right by n bits, zeros coming in (0 < n < 64).
CREATE FUNCTION rendezvous._shr64(x bigint, n integer) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (x >> n) & ~((-1)::bigint << (64 - n)) $$;

-- SipHash-2-4 of data with the key (k0, k1).
CREATE FUNCTION rendezvous._siphash24(k0 bigint, k1 bigint, data bytea) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v0 bigint := k0 # 8317987319222330741;   -- 0x736f6d6570736575
    v1 bigint := k1 # 7237128888997146477;   -- 0x646f72616e646f6d
    v2 bigint := k0 # 7816392313619706465;   -- 0x6c7967656e657261
    v3 bigint := k1 # 8387220255154660723;   -- 0x7465646279746573
    n integer := length(data);
    words integer := n / 8;
    m bigint;
    i integer;
BEGIN
    FOR w IN 0 .. words LOOP
        IF w < words THEN
            i := w * 8;
            m := get_byte(data, i)::bigint | (get_byte(data, i + 1)::bigint << 8)
                 | (get_byte(data, i + 2)::bigint << 16) | (get_byte(data, i + 3)::bigint << 24)
                 | (get_byte(data, i + 4)::bigint << 32) | (get_byte(data, i + 5)::bigint << 40)
                 | (get_byte(data, i + 6)::bigint << 48) | (get_byte(data, i + 7)::bigint << 56);
        ELSE
            -- The last word: the length's low byte on top, the bytes left below it.
            m := (n & 255)::bigint << 56;
            FOR j IN 0 .. n - words * 8 - 1 LOOP
                m := m | (get_byte(data, words * 8 + j)::bigint << (8 * j));
            END LOOP;
        END IF;
        v3 := v3 # m;
        FOR r IN 1 .. 2 LOOP
            v0 := rendezvous._add64(v0, v1); v1 := rendezvous._rotl64(v1, 13) # v0; v0 := rendezvous._rotl64(v0, 32);
            v2 := rendezvous._add64(v2, v3); v3 := rendezvous._rotl64(v3, 16) # v2;
            v0 := rendezvous._add64(v0, v3); v3 := rendezvous._rotl64(v3, 21) # v0;
            v2 := rendezvous._add64(v2, v1); v1 := rendezvous._rotl64(v1, 17) # v2; v2 := rendezvous._rotl64(v2, 32);
        END LOOP;
        v0 := v0 # m;
    END LOOP;
    v2 := v2 # 255;
    FOR r IN 1 .. 4 LOOP
        v0 := rendezvous._add64(v0, v1); v1 := rendezvous._rotl64(v1, 13) # v0; v0 := rendezvous._rotl64(v0, 32);
        v2 := rendezvous._add64(v2, v3); v3 := rendezvous._rotl64(v3, 16) # v2;
        v0 := rendezvous._add64(v0, v3); v3 := rendezvous._rotl64(v3, 21) # v0;
        v2 := rendezvous._add64(v2, v1); v1 := rendezvous._rotl64(v1, 17) # v2; v2 := rendezvous._rotl64(v2, 32);
    END LOOP;
    RETURN v0 # v1 # v2 # v3;
END
$$;

-- A key's hash (rendezvous-hrw-v1 key keys), refusing NULL and keys over 1 MiB as the native
-- edition does.
CREATE FUNCTION rendezvous._key_hash(key text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bytes bytea;
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'key must not be NULL' USING ERRCODE = '22004';
    END IF;
    bytes := convert_to(key, 'UTF8');
    IF length(bytes) > 1048576 THEN
        RAISE EXCEPTION 'key is % bytes; the limit is 1048576', length(bytes) USING ERRCODE = '54000';
    END IF;
    RETURN rendezvous._siphash24(8243116070449870447, 8463158064046484785, bytes);
END
$$;

-- A host id's hash (rendezvous-hrw-v1 host keys).
CREATE FUNCTION rendezvous._host_hash(host text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT rendezvous._siphash24(8243116070449870447, 8463158051328980017, convert_to(host, 'UTF8')) $$;

-- The 63-bit scores of hosts for a key from their hashes: fmix64(key ^ host) >> 1 each, in the
-- hosts' order. The word is held as two 32-bit halves (hi, lo), so fmix64's shifts by 33 are
-- lo ^= hi >> 1, and each multiplication by a constant c = (ch, cl) is
--   lo × cl + ((hi × cl + lo × ch) mod 2^32) << 32   (mod 2^64)
-- with lo × cl taken in 16-bit parts of cl: no product reaches 2^49.
CREATE FUNCTION rendezvous._scores(key_hash bigint, host_hashes bigint[]) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    x bigint;
    lo bigint;
    hi bigint;
    p bigint;
    scores bigint[] := '{}'::bigint[];
BEGIN
    FOREACH x IN ARRAY host_hashes LOOP
        x := key_hash # x;
        lo := x & 4294967295;
        hi := (x >> 32) & 4294967295;
        lo := lo # (hi >> 1);
        -- × 0xff51afd7ed558ccd: cl = 0xed558ccd (60757, 36045), ch = 0xff51afd7 (65361, 45015)
        p := lo * 36045 + (((lo * 60757) & 65535) << 16);
        hi := ((p >> 32) + ((lo * 60757) >> 16) + hi * 36045 + (((hi * 60757) & 65535) << 16)
               + lo * 45015 + (((lo * 65361) & 65535) << 16)) & 4294967295;
        lo := (p & 4294967295) # (hi >> 1);
        -- × 0xc4ceb9fe1a85ec53: cl = 0x1a85ec53 (6789, 60499), ch = 0xc4ceb9fe (50382, 47614)
        p := lo * 60499 + (((lo * 6789) & 65535) << 16);
        hi := ((p >> 32) + ((lo * 6789) >> 16) + hi * 60499 + (((hi * 6789) & 65535) << 16)
               + lo * 47614 + (((lo * 50382) & 65535) << 16)) & 4294967295;
        -- (hi:lo ^ hi >> 1) >> 1
        scores := array_append(scores, (hi << 31) | (((p & 4294967295) # (hi >> 1)) >> 1));
    END LOOP;
    RETURN scores;
END
$$;

-- ratio / -ln(u) for each score and its host's ratio, u = (2 × (score >> 11) + 1) × 2^-53, with
-- the IEEE-exact series of docs/hrw.md: float8 arithmetic is IEEE binary64 (+ - × ÷ correctly
-- rounded), and u's exponent and mantissa come from the integer exactly.
CREATE FUNCTION rendezvous._weighted_scores(scores bigint[], ratios double precision[])
RETURNS double precision[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    bits integer;
    m double precision;
    e integer;
    s double precision;
    z double precision;
    p double precision;
    weighted double precision[] := '{}'::double precision[];
BEGIN
    FOR i IN 1 .. cardinality(scores) LOOP
        n := 2 * (scores[i] >> 11) + 1;    -- odd, below 2^53: exact as a float8
        -- n's bit length: the float estimate, made exact.
        bits := floor(ln(n::double precision) / ln(2::double precision))::integer + 1;
        IF (n >> (bits - 1)) = 0 THEN
            bits := bits - 1;
        ELSIF (n >> bits) > 0 THEN
            bits := bits + 1;
        END IF;
        -- u = m × 2^e with m in [1, 2): a division by a power of two is exact.
        m := n::double precision / (1::bigint << (bits - 1))::double precision;
        e := bits - 54;
        IF m > 1.4142135623730951::double precision THEN
            m := m * 0.5::double precision;
            e := e + 1;
        END IF;
        s := (m - 1::double precision) / (m + 1::double precision);
        z := s * s;
        p := 1::double precision / 23::double precision;
        FOR k IN REVERSE 10 .. 0 LOOP
            p := p * z + 1::double precision / (2 * k + 1)::double precision;
        END LOOP;
        weighted := array_append(weighted,
            ratios[i] / -(e::double precision * 0.6931471805599453::double precision + 2::double precision * s * p));
    END LOOP;
    RETURN weighted;
END
$$;

-- The order of a host set for a key: by weighted score when the weights differ, then by
-- score, then by host id in byte order; the first k (all for NULL). hosts are distinct and
-- not NULL, hashes their hashes; ratios are each host's weight over the largest (NULL:
-- unweighted).
CREATE FUNCTION rendezvous._hrw_order(key_hash bigint, hosts text[], hashes bigint[],
                                      ratios double precision[], k integer)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    scores bigint[] := rendezvous._scores(key_hash, hashes);
    weighted double precision[] := CASE WHEN ratios IS NOT NULL THEN rendezvous._weighted_scores(scores, ratios) END;
    best integer;
    best_score bigint;
BEGIN
    IF k = 1 AND weighted IS NULL THEN
        -- The winner of an unweighted set: one pass, no sort.
        FOR i IN 1 .. cardinality(scores) LOOP
            IF best IS NULL OR scores[i] > best_score
               OR (scores[i] = best_score AND hosts[i] COLLATE "C" < hosts[best] COLLATE "C") THEN
                best := i;
                best_score := scores[i];
            END IF;
        END LOOP;
        RETURN CASE WHEN best IS NULL THEN '{}'::text[] ELSE ARRAY[hosts[best]] END;
    END IF;
    RETURN coalesce((
        SELECT array_agg(o.host ORDER BY o.ws DESC NULLS LAST, o.s DESC, o.host COLLATE "C")
          FROM (SELECT u.host, u.s, u.ws FROM unnest(hosts, scores, weighted) AS u(host, s, ws)
                 ORDER BY u.ws DESC NULLS LAST, u.s DESC, u.host COLLATE "C"
                 LIMIT k) o), '{}');
END
$$;

-- The hashes of hosts, in their order: kept ones from rendezvous._host_hashes, the others
-- computed. SECURITY DEFINER: callers of winner need no privilege on the table, and it tells
-- them nothing but the hashes of the ids they name.
CREATE FUNCTION rendezvous._host_hashes_of(hosts text[]) RETURNS bigint[]
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- PL/pgSQL, not SQL: its plan is kept for the session (a SQL function's is made per call).
    RETURN coalesce((SELECT array_agg(coalesce(x.hash, rendezvous._host_hash(u.host)) ORDER BY u.ord)
                       FROM unnest(hosts) WITH ORDINALITY AS u(host, ord)
                       LEFT JOIN rendezvous._host_hashes x ON x.host_id = u.host), '{}'::bigint[]);
END
$$;

-- The kept host hashes: a row for each host that joined (the trigger below), gone when the
-- host goes. Not dumped: a restore's rows of rendezvous.hosts fire the trigger again.
CREATE TABLE rendezvous._host_hashes (
    host_id text PRIMARY KEY,
    hash    bigint NOT NULL
);
COMMENT ON TABLE rendezvous._host_hashes IS 'Portable edition: each host''s HRW hash, kept so winner and ranked do not recompute it.';

-- The triggers below keep _host_hashes in step with rendezvous.hosts. They are not SECURITY
-- DEFINER: rendezvous.hosts changes only inside the extension's own SECURITY DEFINER functions
-- (heartbeat, leave, prune), where they already run as the owner; and they refuse to run on
-- any other table. (0.3.0 made them SECURITY DEFINER and executable by PUBLIC: a host attached
-- one to a table of its own whose host_id had its own type with an implicit cast to text, and
-- its cast ran as the owner, #39.)
CREATE FUNCTION rendezvous._check_hosts_trigger(schema_name text, table_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF schema_name <> 'rendezvous' OR table_name <> 'hosts' THEN
        RAISE EXCEPTION 'this trigger keeps rendezvous._host_hashes: it runs on rendezvous.hosts only, not %.%', schema_name, table_name
            USING ERRCODE = '42501';
    END IF;
END
$$;

CREATE FUNCTION rendezvous._host_joined() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_hosts_trigger(TG_TABLE_SCHEMA::text, TG_TABLE_NAME::text);
    INSERT INTO rendezvous._host_hashes (host_id, hash)
    VALUES (NEW.host_id, rendezvous._host_hash(NEW.host_id))
    ON CONFLICT (host_id) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE FUNCTION rendezvous._hosts_left() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_hosts_trigger(TG_TABLE_SCHEMA::text, TG_TABLE_NAME::text);
    -- Nested: the transition table exists only for the DELETE trigger.
    IF TG_OP = 'DELETE' THEN
        DELETE FROM rendezvous._host_hashes x USING gone g WHERE x.host_id = g.host_id;
    ELSE
        DELETE FROM rendezvous._host_hashes;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER hosts_hash_kept AFTER INSERT ON rendezvous.hosts
    FOR EACH ROW EXECUTE FUNCTION rendezvous._host_joined();
CREATE TRIGGER hosts_hash_dropped AFTER DELETE ON rendezvous.hosts
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION rendezvous._hosts_left();
CREATE TRIGGER hosts_hashes_dropped AFTER TRUNCATE ON rendezvous.hosts
    FOR EACH STATEMENT EXECUTE FUNCTION rendezvous._hosts_left();

-- Refuses what the native edition refuses before reading a hosts array: k below 0 (22023), an
-- array over 16 MiB or 100,000 elements (54000).
CREATE FUNCTION rendezvous._check_hrw_input(hosts text[], k integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF k < 0 THEN
        RAISE EXCEPTION 'k must be >= 0 or NULL (got %)', k USING ERRCODE = '22023';
    ELSIF pg_column_size(hosts) > 16777216 THEN
        RAISE EXCEPTION 'hosts is % bytes; the limit is 16777216', pg_column_size(hosts) USING ERRCODE = '54000';
    ELSIF cardinality(hosts) > 100000 THEN
        RAISE EXCEPTION 'hosts has % elements; the limit is 100000', cardinality(hosts) USING ERRCODE = '54000';
    END IF;
END
$$;

-- Each weight over the largest, in order; NULL when every weight is the same (the set is
-- unweighted) or there are none. smallest and largest are the weights' own, which the callers
-- read with them.
CREATE FUNCTION rendezvous._weight_ratios(weights double precision[], smallest double precision,
                                          largest double precision) RETURNS double precision[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN smallest < largest
                THEN ARRAY(SELECT w / largest FROM unnest(weights) WITH ORDINALITY AS r(w, ord) ORDER BY r.ord)
           END
$$;

-- The distinct hosts of a weighted set and their ratios to the largest weight (ratios NULL
-- when every weight is the same: the set is unweighted), refusing NULL weights, weights that
-- are not finite and positive, and a host given two weights.
CREATE FUNCTION rendezvous._weighted_set(hosts text[], weights double precision[],
                                         OUT set_hosts text[], OUT set_ratios double precision[])
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad record;
    set_weights double precision[];
    smallest double precision;
    largest double precision;
BEGIN
    IF hosts IS NULL OR weights IS NULL THEN
        RAISE EXCEPTION 'hosts and weights must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rendezvous._check_hrw_input(hosts, NULL);
    IF cardinality(hosts) <> cardinality(weights) THEN
        RAISE EXCEPTION 'hosts and weights must have the same length (got % hosts and % weights)',
            cardinality(hosts), cardinality(weights) USING ERRCODE = '22023';
    END IF;
    SELECT u.host INTO bad FROM unnest(hosts, weights) WITH ORDINALITY AS u(host, weight, ord)
     WHERE u.host IS NOT NULL AND u.weight IS NULL ORDER BY u.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'the weight of host "%" must not be NULL', bad.host USING ERRCODE = '22004';
    END IF;
    SELECT u.host, u.weight INTO bad FROM unnest(hosts, weights) WITH ORDINALITY AS u(host, weight, ord)
     WHERE u.host IS NOT NULL AND (u.weight = 'NaN' OR u.weight <= 0 OR u.weight = 'Infinity')
     ORDER BY u.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'weight % of host "%" is invalid: weights must be finite and greater than 0',
            bad.weight, bad.host USING ERRCODE = '22023';
    END IF;
    SELECT u.host INTO bad FROM unnest(hosts, weights) AS u(host, weight)
     WHERE u.host IS NOT NULL GROUP BY u.host HAVING count(DISTINCT u.weight) > 1
     ORDER BY u.host COLLATE "C" LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'host "%" appears more than once with different weights', bad.host USING ERRCODE = '22023';
    END IF;
    SELECT coalesce(array_agg(d.host), '{}'), array_agg(d.weight), min(d.weight), max(d.weight)
      INTO set_hosts, set_weights, smallest, largest
      FROM (SELECT DISTINCT u.host, u.weight FROM unnest(hosts, weights) AS u(host, weight)
             WHERE u.host IS NOT NULL) d;
    set_ratios := rendezvous._weight_ratios(set_weights, smallest, largest);
END
$$;

CREATE FUNCTION rendezvous.hrw_algorithm() RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT 'rendezvous-hrw-v1'::text $$;

CREATE FUNCTION rendezvous.score(key text, host text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kh bigint := rendezvous._key_hash(key);
BEGIN
    IF host IS NULL THEN
        RAISE EXCEPTION 'host must not be NULL' USING ERRCODE = '22004';
    ELSIF octet_length(host) > 1048576 THEN
        RAISE EXCEPTION 'host is % bytes; the limit is 1048576', octet_length(host) USING ERRCODE = '54000';
    END IF;
    RETURN (rendezvous._scores(kh, ARRAY[rendezvous._host_hash(host)]))[1];
END
$$;

CREATE FUNCTION rendezvous.ranked(key text, hosts text[], k integer DEFAULT NULL) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kh bigint := rendezvous._key_hash(key);
    distinct_hosts text[];
BEGIN
    PERFORM rendezvous._check_hrw_input(hosts, k);
    IF hosts IS NULL THEN
        RETURN '{}'::text[];
    END IF;
    distinct_hosts := ARRAY(SELECT DISTINCT h FROM unnest(hosts) h WHERE h IS NOT NULL);
    RETURN rendezvous._hrw_order(kh, distinct_hosts, rendezvous._host_hashes_of(distinct_hosts), NULL, k);
END
$$;

CREATE FUNCTION rendezvous.ranked(key text, hosts text[], weights double precision[], k integer DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kh bigint := rendezvous._key_hash(key);
    s record;
BEGIN
    PERFORM rendezvous._check_hrw_input(NULL, k);
    s := rendezvous._weighted_set(hosts, weights);
    RETURN rendezvous._hrw_order(kh, s.set_hosts, rendezvous._host_hashes_of(s.set_hosts), s.set_ratios, k);
END
$$;

-- Whether host is among the first max_rank + 1 of the weighted ranking (claim_runs' placement
-- test): its place in the same order ranked() gives, with the native edition's checks.
CREATE FUNCTION rendezvous._rank_within(key text, hosts text[], weights double precision[], host text, max_rank bigint)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF host IS NULL THEN
        RAISE EXCEPTION 'host must not be NULL' USING ERRCODE = '22004';
    ELSIF max_rank IS NULL THEN
        RAISE EXCEPTION 'max_rank must not be NULL' USING ERRCODE = '22004';
    ELSIF max_rank < 0 THEN
        RAISE EXCEPTION 'max_rank must be >= 0 (got %)', max_rank USING ERRCODE = '22023';
    END IF;
    RETURN coalesce(array_position(rendezvous.ranked(key, hosts, weights), host) - 1 <= max_rank, false);
END
$$;

-- The winner is the first of the ranking: the same checks, the same order. (PL/pgSQL rather
-- than SQL here and below: a SQL function with a SET clause is planned again at every call.)
CREATE FUNCTION rendezvous.winner(key text, hosts text[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN (rendezvous.ranked(key, hosts, 1))[1]; END $$;

CREATE FUNCTION rendezvous.winner(key text, hosts text[], weights double precision[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN (rendezvous.ranked(key, hosts, weights, 1))[1]; END $$;

-- Only the triggers on rendezvous.hosts run the hash keepers: nobody may attach them to a
-- table of its own (CREATE TRIGGER needs EXECUTE on the function).
REVOKE EXECUTE ON FUNCTION rendezvous._host_joined(), rendezvous._hosts_left() FROM PUBLIC;
