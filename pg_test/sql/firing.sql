-- Firing claims as a psql user makes them; tests/ drives many hosts at once.

-- The same instant, written in any zone or precision, is the same firing.
SELECT rendezvous.firing_key('nightly-report', '2026-11-29 00:00:00+00');
SELECT rendezvous.firing_key('nightly-report', '2026-11-29 01:00:00.000000+01')
     = rendezvous.firing_key('nightly-report', '2026-11-28 19:00:00-05') AS same_instant;

-- First claim wins with token 1; the next host is told who holds it.
SELECT claimed, holder, token, completed FROM rendezvous.claim_firing('nightly-report', '2026-11-29 00:00:00+00', 'host-a', '1 hour');
SELECT claimed, holder, token, completed FROM rendezvous.claim_firing('nightly-report', '2026-11-28 19:00:00-05', 'host-b', '1 hour');
-- Even the holder cannot claim its live claim twice.
SELECT claimed, holder, token FROM rendezvous.claim_firing('nightly-report', '2026-11-29 00:00:00+00', 'host-a');

-- Fencing and renewal with the live token pass; a wrong token does not.
SELECT rendezvous.assert_firing('nightly-report', '2026-11-29 00:00:00+00', 1);
SELECT rendezvous.renew_firing('nightly-report', '2026-11-29 00:00:00+00', 1, '1 hour') > clock_timestamp() AS renewed;
SELECT regress.err($$SELECT rendezvous.assert_firing('nightly-report', '2026-11-29 00:00:00+00', 7)$$);
SELECT rendezvous.renew_firing('nightly-report', '2026-11-29 00:00:00+00', 7) IS NULL AS stale_renewal_refused;

-- An expired, uncompleted claim is taken over with a higher token (expire it by releasing).
SELECT rendezvous.release_firing('nightly-report', '2026-11-29 00:00:00+00', 1) AS released;
SELECT claimed, holder, token FROM rendezvous.claim_firing('nightly-report', '2026-11-29 00:00:00+00', 'host-b', '1 hour');
-- A losing claim and a stale completion write nothing, not even a transaction id.
BEGIN;
SELECT claimed FROM rendezvous.claim_firing('nightly-report', '2026-11-29 00:00:00+00', 'host-c');
SELECT rendezvous.complete_firing('nightly-report', '2026-11-29 00:00:00+00', 1) AS stale_completion;
SELECT pg_catalog.pg_current_xact_id_if_assigned() IS NULL AS losers_write_nothing;
ROLLBACK;
-- The stale holder's completion and fenced write are rejected.
SELECT rendezvous.complete_firing('nightly-report', '2026-11-29 00:00:00+00', 1) AS stale_completion;
SELECT regress.err($$SELECT rendezvous.assert_firing('nightly-report', '2026-11-29 00:00:00+00', 1)$$);
-- The new holder completes; a completed firing is never claimed again.
SELECT rendezvous.complete_firing('nightly-report', '2026-11-29 00:00:00+00', 2) AS completed,
       rendezvous.complete_firing('nightly-report', '2026-11-29 00:00:00+00', 2) AS again;
SELECT claimed, holder, token, completed FROM rendezvous.claim_firing('nightly-report', '2026-11-29 00:00:00+00', 'host-c');
SELECT task_id, holder, token, attempts, completed_at IS NOT NULL AS done FROM rendezvous.firings;

-- Purge: completed firings older than the bound.
SELECT rendezvous.purge_firings('1 hour') AS kept, rendezvous.purge_firings('0 s') AS purged;

-- Many at once, results in input order: one taken, one free, one done.
SELECT claimed, holder, token FROM rendezvous.claim_firing('batch-b', '2026-11-29 00:00+00', 'host-x', '1 hour');
SELECT ord, claimed, holder, token, completed
  FROM rendezvous.claim_firings(ARRAY['batch-a', 'batch-b', 'batch-c'],
                                ARRAY['2026-11-29 00:00+00', '2026-11-29 00:00+00', '2026-11-29 00:00+00']::timestamptz[],
                                'host-y', '1 hour');
SELECT * FROM rendezvous.complete_firings(ARRAY['batch-a', 'batch-b', 'batch-c'],
                                          ARRAY['2026-11-29 00:00+00', '2026-11-29 00:00+00', '2026-11-29 00:00+00']::timestamptz[],
                                          ARRAY[1, 7, 1]);
SELECT regress.err($$SELECT * FROM rendezvous.claim_firings(ARRAY['a'], ARRAY[]::timestamptz[], 'h')$$);
DELETE FROM rendezvous.firings;

-- Nothing is claimed before it is due by the database clock, whatever the caller's clock says:
-- not claimed, no holder, and lease_until says when it can be.
SELECT claimed, holder, token, completed, lease_until = now() + interval '1 hour' AS lease_until_is_fire_at
  FROM rendezvous.claim_firing('later', now() + interval '1 hour', 'fast-clock-host');
SELECT ord, claimed, holder IS NOT NULL AS has_holder, token
  FROM rendezvous.claim_firings(ARRAY['earlier', 'later'], ARRAY[now() - interval '1 min', now() + interval '1 hour'], 'fast-clock-host');
SELECT ord, claimed, completed, lease_remaining > interval '59 min' AS due_in_an_hour
  FROM rendezvous.firing_states(ARRAY['later'], ARRAY[now() + interval '1 hour']);
SELECT task_id FROM rendezvous.firings WHERE task_id IN ('earlier', 'later');
DELETE FROM rendezvous.firings;

-- As a host role (rendezvous_host: the API, no table privileges): claim, look, complete; the
-- claim rows themselves are out of reach: tokens and completions change only through the API.
CREATE ROLE rendezvous_regress_firer LOGIN;
GRANT rendezvous_host TO rendezvous_regress_firer;
SET ROLE rendezvous_regress_firer;
SELECT claimed, holder, token FROM rendezvous.claim_firing('as-host', '2026-11-29 00:00+00', 'host-h');
SELECT ord, claimed, completed, lease_remaining > interval '20 seconds' AS leased
  FROM rendezvous.firing_states(ARRAY['as-host', 'never'], ARRAY['2026-11-29 00:00+00', '2026-11-29 00:00+00']::timestamptz[]);
SELECT rendezvous.complete_firing('as-host', '2026-11-29 00:00+00', 1);
SELECT ord, claimed, completed FROM rendezvous.firing_states(ARRAY['as-host'], ARRAY['2026-11-29 00:00+00']::timestamptz[]);
SELECT regress.err($$UPDATE rendezvous.firings SET token = token + 1$$);
SELECT regress.err($$DELETE FROM rendezvous.firings$$);
SELECT regress.err($$SELECT rendezvous.purge_firings('0 s')$$);
SELECT regress.err($$SELECT * FROM rendezvous.firing_states(ARRAY['a'], NULL)$$);
SELECT regress.err($$SELECT * FROM rendezvous.firing_states(ARRAY['a', 'b'], ARRAY[now()])$$);
RESET ROLE;
DROP ROLE rendezvous_regress_firer;
DELETE FROM rendezvous.firings;

-- Bad input.
SELECT regress.err($$SELECT * FROM rendezvous.claim_firing(NULL, now(), 'h')$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_firing('', now(), 'h')$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_firing('t', NULL, 'h')$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_firing('t', 'infinity', 'h')$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_firing('t', '-infinity', 'h')$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_firing('t', now(), NULL)$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_firing('t', now(), 'h', '0 s')$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_firing('t', now(), 'h', '-1 min')$$);
-- A lease is at most a day: a host cannot hold a firing for years (nor renew one that long).
SELECT regress.err($$SELECT * FROM rendezvous.claim_firing('t', now(), 'h', '1000 years')$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_firings(ARRAY['t'], ARRAY[now()], 'h', '25 hours')$$);
SELECT regress.err($$SELECT rendezvous.renew_firing('t', now(), 1, '2 days')$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_firing('t', now(), 'h', NULL)$$);
SELECT regress.err($$SELECT rendezvous.complete_firing('t', now(), NULL)$$);
SELECT regress.err($$SELECT rendezvous.assert_firing('never', '2026-01-01 00:00:00+00', 1)$$);
SELECT regress.err($$SELECT rendezvous.purge_firings('-1 s')$$);
-- The key's year has no era: a BC instant is refused, not given an AD firing's key.
SELECT rendezvous.firing_key('t', '0001-01-01 00:00:00+00') AS first_instant_of_the_era;
SELECT rendezvous.firing_key('t', '10000-01-01 00:00:00+00') AS five_digit_year;
-- The key's instant is to_char(fire_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), the
-- definition firing_key had in SQL, over edge instants and a spread across the whole range.
SELECT count(*) AS keys_unlike_to_char FROM (
    SELECT t FROM unnest(ARRAY['0001-01-01 00:00:00+00', '0999-12-31 23:59:59.999999+00', '1969-12-31 23:59:59.5+00',
                               '2000-02-29 12:00:00+00', '9999-12-31 23:59:59.999999+00', '10000-01-01 00:00:00+00',
                               '294276-12-31 23:59:59.999999+00']::timestamptz[]) AS e(t)
    UNION ALL
    SELECT '0001-01-01 00:00:00+00'::timestamptz + i * interval '7777 days 3 hours 17 min 1.234567 s'
      FROM generate_series(0, 3000) AS g(i)
) s
WHERE rendezvous.firing_key('t', t) IS DISTINCT FROM 'firing:t:' || to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
SELECT regress.err($$SELECT rendezvous.firing_key('t', '0001-12-31 23:59:59+00 BC')$$);
SELECT regress.err($$SELECT * FROM rendezvous.claim_firing('t', '2026-11-29 00:00:00+00 BC', 'h')$$);
-- complete_firings checks its arrays as complete_firing checks its arguments.
SELECT regress.err($$SELECT * FROM rendezvous.complete_firings(NULL, ARRAY[now()], ARRAY[1])$$);
SELECT regress.err($$SELECT * FROM rendezvous.complete_firings(ARRAY['t'], NULL, ARRAY[1])$$);
SELECT regress.err($$SELECT * FROM rendezvous.complete_firings(ARRAY['t'], ARRAY[now()], NULL)$$);
SELECT regress.err($$SELECT * FROM rendezvous.complete_firings(ARRAY['t', 'u'], ARRAY[now(), now()], ARRAY[1])$$);
SELECT regress.err($$SELECT * FROM rendezvous.complete_firings(ARRAY['t'], ARRAY[now()], ARRAY[NULL]::bigint[])$$);
SELECT regress.err($$SELECT * FROM rendezvous.complete_firings(ARRAY[NULL], ARRAY[now()], ARRAY[1])$$);
-- A claim, a takeover, a renewal and a release write no index (#42): HOT updates, as the
-- counts of this transaction show (in the firing's partition, its day's). A completion leaves
-- the unfinished firings' indexes, so it cannot be one.
SELECT format('rendezvous.firings_%s', rendezvous._day_mod_8('2026-01-01 00:00:00+00')) AS part \gset
BEGIN;
SELECT pg_catalog.pg_stat_get_xact_tuples_updated(:'part'::regclass) AS updated0,
       pg_catalog.pg_stat_get_xact_tuples_hot_updated(:'part'::regclass) AS hot0 \gset
SELECT claimed FROM rendezvous.claim_firing('hot', '2026-01-01 00:00:00+00', 'h1');
SELECT rendezvous.release_firing('hot', '2026-01-01 00:00:00+00', 1);
SELECT claimed, token FROM rendezvous.claim_firing('hot', '2026-01-01 00:00:00+00', 'h2');
SELECT rendezvous.renew_firing('hot', '2026-01-01 00:00:00+00', 2, '1 minute') IS NOT NULL AS renewed;
SELECT pg_catalog.pg_stat_get_xact_tuples_updated(:'part'::regclass) - :updated0 AS updated,
       pg_catalog.pg_stat_get_xact_tuples_hot_updated(:'part'::regclass) - :hot0 AS hot;
SELECT rendezvous.complete_firing('hot', '2026-01-01 00:00:00+00', 2);
SELECT pg_catalog.pg_stat_get_xact_tuples_updated(:'part'::regclass) - :updated0 AS updated,
       pg_catalog.pg_stat_get_xact_tuples_hot_updated(:'part'::regclass) - :hot0 AS hot;
ROLLBACK;
SELECT count(*) AS firings_left FROM rendezvous.firings;

SELECT c.relname FROM pg_extension e, unnest(e.extconfig) AS cfg(oid) JOIN pg_class c ON c.oid = cfg.oid
 WHERE e.extname = 'pg_rendezvous' AND c.relname LIKE 'firings%' ORDER BY 1;

-- The calls on one firing keep one plan a statement for the session (extension/src/firing.sql
-- says why).
SELECT p.proname, 'plan_cache_mode=force_generic_plan' = ANY (p.proconfig) AS planned_once_a_session
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'rendezvous'::regnamespace
   AND p.proname IN ('claim_firing', 'renew_firing', 'assert_firing', 'complete_firing', 'release_firing', 'fail_firing')
 ORDER BY p.proname;

-- A firing's partition is its fire time's UTC day (days since 1970-01-01), modulo 8, whatever
-- the session's time zone: across the epoch, a UTC midnight (20,792 days is 8 x 2,599), a time
-- given in another zone, and far into both ends of the range (-2,440,222 days: 2;
-- 106,762,939: 3).
SET timezone = 'Pacific/Kiritimati';
SELECT t AT TIME ZONE 'UTC' AS utc, rendezvous._day_mod_8(t) AS partition
  FROM unnest(ARRAY[timestamptz '1969-12-31 23:59:59.999999+00', '1970-01-01 00:00:00+00',
                    '2026-12-05 23:59:59.999999+00', '2026-12-06 00:00:00+00', '2026-12-06 05:00:00+14',
                    '4713-11-24 00:00:00+00 BC', '294276-12-31 23:59:59.999999+00']) t;
RESET timezone;
