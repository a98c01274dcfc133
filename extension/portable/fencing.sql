-- The portable edition's fencing.rs: the floor of every new epoch and token on this server,
-- (timeline - 1) << 32, the timeline read from the name of the WAL file being written (its
-- first eight hex digits). Refuses with 25006 on a standby, as the native edition does.
CREATE FUNCTION rendezvous._fence_floor() RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_is_in_recovery() THEN
        RAISE EXCEPTION 'this server is a standby (in recovery): leadership and firing claims need the primary'
            USING ERRCODE = '25006';
    END IF;
    RETURN greatest(('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1, 0) << 32;
END
$$;

-- The portable edition's fencing::floor_run_ids: the run id sequence at or above this
-- timeline's floor before an admission (no per-backend memory here: on a timeline after the
-- first, one read of the sequence per admission).
CREATE FUNCTION rendezvous._floor_run_ids() RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT pg_is_in_recovery() THEN
        PERFORM rendezvous._raise_run_ids(rendezvous._fence_floor());
    END IF;
END
$$;
