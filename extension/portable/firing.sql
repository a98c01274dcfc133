-- The portable edition's firing.rs: the firing key, one claim, one completion, and the
-- durable commit of a claim or completion.

-- The commit of the current transaction is flushed before it is acknowledged: with
-- synchronous_commit off for the session, this transaction's becomes local (replication waits
-- still follow the session's setting, as ForceSyncCommit leaves them in the native edition).
CREATE FUNCTION rendezvous._durable_commit() RETURNS void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
END
$$;

CREATE FUNCTION rendezvous.firing_key(task_id text, fire_at timestamp with time zone) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_text('task_id', task_id, rendezvous._max_id_bytes());
    PERFORM rendezvous._check_fire_at(fire_at);
    RETURN 'firing:' || task_id || ':'
        || to_char(fire_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
END
$$;

CREATE FUNCTION rendezvous.claim_firing(
    task_id text,
    fire_at timestamp with time zone,
    host_id text,
    lease   interval DEFAULT '30 seconds'
) RETURNS rendezvous.firing_claim
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    key text := rendezvous.firing_key(claim_firing.task_id, claim_firing.fire_at);
    -- Its partition: every read and the insert name it.
    key_day smallint := rendezvous._day_mod_8(claim_firing.fire_at);
    first_token bigint;
    now_ timestamptz;
    result rendezvous.firing_claim;
    undecided rendezvous.firing_claim;
    refused boolean := false;
    skipped integer;
BEGIN
    PERFORM rendezvous._check_text('host_id', claim_firing.host_id, rendezvous._max_id_bytes());
    PERFORM rendezvous._check_lease(claim_firing.lease);
    -- Never before it is due by the database clock: not claimed, nobody holds it, and
    -- lease_until says when it can be claimed.
    IF claim_firing.fire_at > clock_timestamp() THEN
        RETURN ROW(false, NULL, NULL, false, claim_firing.fire_at)::rendezvous.firing_claim;
    END IF;
    first_token := greatest(rendezvous._fence_floor(), 1);
    FOR attempt IN 1 .. 5 LOOP
        now_ := clock_timestamp();
        -- A firing nobody can claim now (done, or a live lease) is answered from a read: the
        -- INSERT's ON CONFLICT DO UPDATE would lock its row even when its WHERE refuses, and a
        -- caller keeping that lock would hold up the holder's completion (firing.rs).
        SELECT false, f.holder, NULL::bigint, f.completed_at IS NOT NULL, f.lease_until INTO result
          FROM rendezvous.firings f
         WHERE f.firing_key = key AND f.day_mod_8 = key_day
           AND NOT rendezvous._firing_claimable(f.completed_at, f.lease_until, f.holder, f.holder_pid, f.holder_started, now_);
        IF FOUND THEN
            RETURN result;
        END IF;
        INSERT INTO rendezvous.firings AS f (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until,
                                             holder_pid, holder_started, holder_role, day_mod_8)
        VALUES (key, claim_firing.task_id, claim_firing.fire_at, claim_firing.host_id, first_token, now_,
                now_ + claim_firing.lease, pg_backend_pid(), rendezvous._session_started(), rendezvous._session_role(),
                key_day)
        ON CONFLICT (firing_key, day_mod_8) DO UPDATE
           SET holder = excluded.holder, token = greatest(f.token + 1, excluded.token),
               claimed_at = excluded.claimed_at, lease_until = excluded.lease_until,
               attempts = f.attempts + 1,
               holder_pid = excluded.holder_pid, holder_started = excluded.holder_started,
               holder_role = excluded.holder_role
         WHERE rendezvous._firing_claimable(f.completed_at, f.lease_until, f.holder, f.holder_pid, f.holder_started,
                                            excluded.claimed_at)
           AND (f.token <> 0 OR NOT rendezvous._firing_overlapped(f.task_id, f.fire_at))
        RETURNING true, f.holder, f.token, false, f.lease_until INTO result;
        IF FOUND THEN
            PERFORM rendezvous._durable_commit();
            RETURN result;
        END IF;
        -- Someone holds a live lease, or the firing is done, or its task's overlap policy skips
        -- it: then it is finished as skipped (the row is locked by us now; schedule.sql).
        -- A loser is not told the holder's token (#24).
        skipped := rendezvous._skip_overlapped(ARRAY[key], now_);
        SELECT false, f.holder, NULL::bigint, f.completed_at IS NOT NULL, f.lease_until INTO result
          FROM rendezvous.firings f WHERE f.firing_key = key AND f.day_mod_8 = key_day;
        IF FOUND THEN
            -- Refused by the overlap policy but not skipped (its task's row was held): tried
            -- again; after the last try, this answer stands.
            IF skipped = 0 AND result.holder IS NULL AND NOT result.completed AND result.lease_until <= now_ THEN
                undecided := result;
                refused := true;
                CONTINUE;
            END IF;
            RETURN result;
        END IF;
        -- The row was deleted (purged) between the two statements: claim again.
    END LOOP;
    IF refused THEN
        RETURN undecided;
    END IF;
    RAISE EXCEPTION 'could not claim %: it is being purged concurrently', key USING ERRCODE = '40001';
END
$$;

CREATE FUNCTION rendezvous.complete_firing(task_id text, fire_at timestamp with time zone, token bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    key text := rendezvous.firing_key(complete_firing.task_id, complete_firing.fire_at);
BEGIN
    IF complete_firing.token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22004';
    END IF;
    UPDATE rendezvous.firings f SET completed_at = coalesce(f.completed_at, clock_timestamp())
     WHERE f.firing_key = key AND f.day_mod_8 = rendezvous._day_mod_8(complete_firing.fire_at)
       AND rendezvous._firing_completable(f.token, f.holder, f.failed_at, f.holder_role, complete_firing.token);
    IF FOUND THEN
        PERFORM rendezvous._durable_commit();
        RETURN true;
    END IF;
    RETURN false;
END
$$;
