-- Rendezvous (HRW) functions as a psql user calls them.

SELECT rendezvous.hrw_algorithm();

-- Who owns which key among three hosts.
SELECT k, rendezvous.winner(k, ARRAY['host-a', 'host-b', 'host-c']) AS owner,
       rendezvous.ranked(k, ARRAY['host-a', 'host-b', 'host-c']) AS fallback_order
  FROM unnest(ARRAY['task-1', 'task-2', 'task-3', 'task-4', 'firing:report:2026-11-29T00:00:00Z']) AS k;

-- Order, duplicates and NULL elements do not change the answer.
SELECT count(*) AS keys,
       count(*) FILTER (WHERE rendezvous.winner(k, ARRAY['a','b','c','d'])
                            = rendezvous.winner(k, ARRAY['d',NULL,'c','b','a','a',NULL])) AS same_winner,
       count(*) FILTER (WHERE rendezvous.ranked(k, ARRAY['a','b','c','d'])
                            = rendezvous.ranked(k, ARRAY[NULL,'b','d','c','a','d'])) AS same_ranking
  FROM (SELECT 'key-' || g AS k FROM generate_series(1, 5000) g) keys;

-- Empty and all-NULL sets have no winner.
SELECT rendezvous.winner('k', '{}'::text[]) IS NULL AS empty,
       rendezvous.winner('k', ARRAY[NULL, NULL]::text[]) IS NULL AS all_null,
       rendezvous.winner('k', NULL::text[]) IS NULL AS null_array,
       rendezvous.ranked('k', '{}'::text[]) AS ranked_empty;

-- ranked: the first element is the winner; k limits the length.
SELECT rendezvous.ranked('job-9', ARRAY['a','b','c','d','e'], 2) AS top2,
       rendezvous.ranked('job-9', ARRAY['a','b','c','d','e'], 0) AS none,
       (rendezvous.ranked('job-9', ARRAY['a','b','c','d','e']))[1]
         = rendezvous.winner('job-9', ARRAY['a','b','c','d','e']) AS first_is_winner;

-- score is a non-negative bigint; the winner has the highest.
SELECT h, rendezvous.score('task-1', h) >= 0 AS non_negative,
       rendezvous.score('task-1', h) = max(rendezvous.score('task-1', h)) OVER () AS highest
  FROM unnest(ARRAY['host-a', 'host-b', 'host-c']) AS h ORDER BY h;

-- Weighted: shares follow weights (10,000 keys, weights 1:3).
SELECT rendezvous.winner('task-' || g, ARRAY['small', 'big'], ARRAY[1, 3]::float8[]) AS host,
       round(count(*) / 10000.0, 2) AS share
  FROM generate_series(1, 10000) g GROUP BY 1 ORDER BY 1;

-- Equal weights give exactly the unweighted answer.
SELECT count(*) FILTER (WHERE rendezvous.winner(k, ARRAY['a','b','c'])
                            <> rendezvous.winner(k, ARRAY['a','b','c'], ARRAY[7,7,7]::float8[])) AS differ
  FROM (SELECT 'key-' || g AS k FROM generate_series(1, 5000) g) keys;

-- Removing a host moves only that host's keys.
SELECT count(*) FILTER (WHERE before <> 'c' AND before <> after) AS moved_without_cause
  FROM (SELECT rendezvous.winner('k' || g, ARRAY['a','b','c','d']) AS before,
               rendezvous.winner('k' || g, ARRAY['a','b','d']) AS after
          FROM generate_series(1, 5000) g) x;

-- Untyped array literals work in every form (a text overload takes them where ranked(text,
-- integer) over the live set would make them ambiguous).
SELECT rendezvous.winner('job-9', '{a,b,c}') = rendezvous.winner('job-9', ARRAY['a','b','c']) AS winner,
       rendezvous.ranked('job-9', '{a,b,c}') = rendezvous.ranked('job-9', ARRAY['a','b','c']) AS ranked,
       rendezvous.ranked('job-9', '{a,b,c}', 2) = rendezvous.ranked('job-9', ARRAY['a','b','c'], 2) AS ranked_k,
       rendezvous.winner('job-9', '{a,b}', '{1,3}') = rendezvous.winner('job-9', ARRAY['a','b'], ARRAY[1,3]::float8[]) AS weighted,
       rendezvous.ranked('job-9', '{a,b}', '{1,3}') = rendezvous.ranked('job-9', ARRAY['a','b'], ARRAY[1,3]::float8[]) AS ranked_weighted,
       rendezvous.ranked('job-9', '{a,b}', '{1,3}', 1) = rendezvous.ranked('job-9', ARRAY['a','b'], ARRAY[1,3]::float8[], 1) AS ranked_weighted_k;
SELECT regress.err($$SELECT rendezvous.ranked('k', '{a,b')$$);

-- Limits, checked before anything is built: at most 100000 hosts in at most 16 MiB (54000).
SELECT rendezvous.winner('k', (SELECT array_agg(g::text) FROM generate_series(1, 100000) g)) IS NOT NULL AS at_the_limit;
SELECT regress.err($$SELECT rendezvous.winner('k', (SELECT array_agg(g::text) FROM generate_series(1, 100001) g))$$);
SELECT regress.err($$SELECT rendezvous.ranked('k', (SELECT array_agg(g::text) FROM generate_series(1, 100001) g))$$);
SELECT regress.err($$SELECT rendezvous.winner('k', (SELECT array_agg(g::text) FROM generate_series(1, 100001) g),
                                                   (SELECT array_agg(1.0::float8) FROM generate_series(1, 100001) g))$$);
SELECT regress.err($$SELECT rendezvous.winner('k', ARRAY[repeat('x', 17000000)])$$);
-- A key at most 1 MiB (one uninterruptible hash pass), for every function that hashes one.
SELECT rendezvous.winner(repeat('k', 1048576), ARRAY['a']) AS key_at_the_limit;
SELECT regress.err($$SELECT rendezvous.winner(repeat('k', 1048577), ARRAY['a'])$$);
SELECT regress.err($$SELECT rendezvous.ranked(repeat('k', 1048577), ARRAY['a'], ARRAY[1.0]::float8[])$$);
SELECT regress.err($$SELECT rendezvous.winner(repeat('k', 1048577))$$);
SELECT regress.err($$SELECT rendezvous.score(repeat('k', 1048577), 'a')$$);
SELECT regress.err($$SELECT rendezvous.score('k', repeat('a', 1048577))$$);

-- Bad input: a clear error with a SQLSTATE.
SELECT regress.err($$SELECT rendezvous.winner(NULL, ARRAY['a'])$$);
SELECT regress.err($$SELECT rendezvous.ranked(NULL, ARRAY['a'])$$);
SELECT regress.err($$SELECT rendezvous.score('k', NULL)$$);
SELECT regress.err($$SELECT rendezvous.ranked('k', ARRAY['a'], -1)$$);
SELECT regress.err($$SELECT rendezvous.winner('k', ARRAY['a','b'], ARRAY[1, 0]::float8[])$$);
SELECT regress.err($$SELECT rendezvous.winner('k', ARRAY['a'], ARRAY[-1]::float8[])$$);
SELECT regress.err($$SELECT rendezvous.winner('k', ARRAY['a'], ARRAY['NaN']::float8[])$$);
SELECT regress.err($$SELECT rendezvous.winner('k', ARRAY['a'], ARRAY['Infinity']::float8[])$$);
SELECT regress.err($$SELECT rendezvous.winner('k', ARRAY['a'], ARRAY['-Infinity']::float8[])$$);
SELECT regress.err($$SELECT rendezvous.winner('k', ARRAY['a','b'], ARRAY[1]::float8[])$$);
SELECT regress.err($$SELECT rendezvous.winner('k', ARRAY['a','a'], ARRAY[1,2]::float8[])$$);
SELECT regress.err($$SELECT rendezvous.winner('k', ARRAY['a'], ARRAY[NULL]::float8[])$$);
SELECT regress.err($$SELECT rendezvous.winner('k', ARRAY['a'], NULL)$$);
SELECT regress.err($$SELECT rendezvous.winner('k', ARRAY[1,2])$$);

-- The pure functions are IMMUTABLE and PARALLEL SAFE.
SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args, p.provolatile, p.proparallel
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'rendezvous' AND p.proname IN ('winner', 'ranked', 'score', 'hrw_algorithm')
 ORDER BY 1, 2;
