-- Argument checks shared by the SQL functions of every module (22004 for NULL, 22023 for a bad value).
-- Loaded by extension_sql_file! in checks.rs; every name is schema-qualified. Functions and views
-- reach upgrades from here by themselves (sqlgen); a table or type change after a release also
-- goes into sql/migrations/ (the upgrade test checks they agree).

-- Validates a host id: not NULL, not empty, at most _max_id_bytes() bytes.
CREATE FUNCTION rendezvous._check_host_id(host_id text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_text('host_id', host_id, rendezvous._max_id_bytes());
END
$$;

-- Validates a staleness window: not NULL, greater than zero.
CREATE FUNCTION rendezvous._check_staleness(staleness interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF staleness IS NULL THEN
        RAISE EXCEPTION 'staleness must not be NULL' USING ERRCODE = '22004';
    ELSIF staleness <= interval '0' THEN
        RAISE EXCEPTION 'staleness must be greater than zero (got %)', staleness USING ERRCODE = '22023';
    END IF;
END
$$;

-- Validates a required text argument: not NULL, not empty, at most max_bytes bytes.
CREATE FUNCTION rendezvous._check_text(name text, value text, max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', name USING ERRCODE = '22004';
    ELSIF value = '' THEN
        RAISE EXCEPTION '% must not be empty', name USING ERRCODE = '22023';
    ELSIF octet_length(value) > max_bytes THEN
        RAISE EXCEPTION '% is % bytes long; the limit is %', name, octet_length(value), max_bytes
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- Validates a lease: not NULL, positive, finite.
CREATE FUNCTION rendezvous._check_lease(lease interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF lease IS NULL THEN
        RAISE EXCEPTION 'lease must not be NULL' USING ERRCODE = '22004';
    ELSIF lease <= interval '0' OR NOT isfinite(lease) OR lease > interval '1 day' THEN
        -- At most a day: a lease is what a silent holder costs (renewals keep a live one), and
        -- a host must not be able to hold another's work for years (#24).
        RAISE EXCEPTION 'lease must be a positive interval of at most 1 day (got %)', lease USING ERRCODE = '22023';
    END IF;
END
$$;

-- Validates a retention bound: not NULL, not negative.
CREATE FUNCTION rendezvous._check_older_than(older_than interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF older_than IS NULL THEN
        RAISE EXCEPTION 'older_than must not be NULL' USING ERRCODE = '22004';
    ELSIF older_than < interval '0' THEN
        RAISE EXCEPTION 'older_than must not be negative (got %)', older_than USING ERRCODE = '22023';
    END IF;
END
$$;
