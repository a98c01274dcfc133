#!/usr/bin/env bash
# `scripts/bench.sh admission`, server side: pgbench runs spawn_run and a plain
# `INSERT … ON CONFLICT DO NOTHING RETURNING` into a table with the same columns, constraints and
# unique partial index, interleaved in one loop (each case right after the other, the order
# rotating from round to round), for both protocols and 1, 4 and 16 clients, and once more with
# synchronous_commit = off; prints the medians over the rounds. spawn_run is read both ways SQL
# allows: `FROM` it (as the client does) and in the select list (one composite value).
# Then the same for claim_firing + complete_firing against a plain upsert + update. Run by
# scripts/bench.sh under `rendezvous cluster run` (PGHOST and PGPORT set); fresh keys throughout.
#   ROUNDS (default 3) rounds of SECONDS_PER_CASE (default 5) per case.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
rounds=${ROUNDS:-3}
seconds=${SECONDS_PER_CASE:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pgbench="$(pg_bindir)/pgbench"

cluster_psql -d postgres -c "DROP TABLE IF EXISTS bench_plain_runs" -c \
  "CREATE TABLE bench_plain_runs (LIKE rendezvous.runs INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING IDENTITY)"
cluster_psql -d postgres -c "DROP TABLE IF EXISTS bench_plain_firings" -c \
  "CREATE TABLE bench_plain_firings (LIKE rendezvous.firings INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)"
cat >"$work/plain.sql" <<'SQL'
\set k random(1, 9000000000000000000)
INSERT INTO bench_plain_runs (tenant_id, workflow_ref, input, dispatch_key)
VALUES ('tenant', 'reports/nightly', '{}', :client_id || '-' || :k)
ON CONFLICT (tenant_id, dispatch_key) WHERE dispatch_key IS NOT NULL DO NOTHING RETURNING run_id;
SQL
cat >"$work/spawn_from.sql" <<'SQL'
\set k random(1, 9000000000000000000)
SELECT run_id, created, same_request FROM rendezvous.spawn_run('tenant', 'reports/nightly', '{}', :client_id || '-' || :k);
SQL
cat >"$work/spawn_list.sql" <<'SQL'
\set k random(1, 9000000000000000000)
SELECT rendezvous.spawn_run('tenant', 'reports/nightly', '{}', :client_id || '-' || :k);
SQL

# tps of one pgbench case: way (a script in $work), protocol, clients, extra PGOPTIONS. Every
# case starts on empty tables after a checkpoint, so no way pays for rows or dirty pages
# another one left.
tps() {
  cluster_psql -d postgres -q -c "TRUNCATE rendezvous.runs, bench_plain_runs, rendezvous.firings, bench_plain_firings CASCADE" \
    -c "CHECKPOINT"
  PGOPTIONS="${4:-}" "$pgbench" -n -M "$2" -c "$3" -j "$(( $3 < 2 ? $3 : 2 ))" -T "$seconds" \
    -f "$work/$1.sql" -d postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

cases=()
for protocol in prepared simple; do for clients in 1 4 16; do cases+=("$protocol $clients"); done; done
cases+=("prepared 1 -csynchronous_commit=off" "prepared 4 -csynchronous_commit=off")
ways=(plain spawn_from spawn_list)
for round in $(seq "$rounds"); do
  for c in "${cases[@]}"; do
    read -r protocol clients opts <<<"$c"
    f=$work/$(echo "$c" | tr ' =' '__')
    # Each round starts with the next way, so no way always runs first (or last) in a case.
    for i in 0 1 2; do
      way=${ways[$(( (round + i) % 3 ))]}
      tps "$way" "$protocol" "$clients" "${opts:-}" >>"$f.$way"
    done
  done
done

echo "Spawn admission in the server: pgbench, spawn_run beside a plain INSERT … ON CONFLICT DO NOTHING"
echo "RETURNING into a table like rendezvous.runs, interleaved; median tps of $rounds rounds of ${seconds} s;"
echo "spawn_run read FROM it (as the client does) and in the select list"
echo
echo "| protocol | clients | durability | plain INSERT tps | FROM spawn_run tps | / plain | SELECT spawn_run tps | / plain |"
echo "|---|---:|---|---:|---:|---:|---:|---:|"
for c in "${cases[@]}"; do
  read -r protocol clients opts <<<"$c"
  f=$work/$(echo "$c" | tr ' =' '__')
  plain=$(median <"$f.plain"); from=$(median <"$f.spawn_from"); list=$(median <"$f.spawn_list")
  durability=${opts:+synchronous_commit = off}
  printf '| %s | %s | %s | %.0f | %.0f | %.2f | %.0f | %.2f |\n' "$protocol" "$clients" "${durability:-default}" \
    "$plain" "$from" "$(echo "$from / $plain" | bc -l)" "$list" "$(echo "$list / $plain" | bc -l)"
done

# Firing claims in the server: claim_firing then complete_firing, as the client sends them (one
# transaction, as a dispatcher's single firing does) beside a plain upsert then update of a table with the same
# columns and keys; a new firing each time. Same rounds and medians.
cat >"$work/plain_firing.sql" <<'SQL'
\set k random(1, 1000000000)
BEGIN;
INSERT INTO bench_plain_firings AS f (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until)
VALUES ('firing-t-' || CAST(:client_id AS text) || '-' || CAST(:k AS text), 't', now() - interval '1 s', 'h', 1, now(), now() + interval '5 min')
ON CONFLICT (firing_key) DO UPDATE SET holder = excluded.holder, token = f.token + 1
 WHERE f.completed_at IS NULL AND f.lease_until <= excluded.claimed_at
RETURNING true, f.holder, f.token, false, f.lease_until;
UPDATE bench_plain_firings SET completed_at = now()
 WHERE firing_key = 'firing-t-' || CAST(:client_id AS text) || '-' || CAST(:k AS text) AND token = 1;
COMMIT;
SQL
cat >"$work/claim_firing.sql" <<'SQL'
\set k random(1, 1000000000)
BEGIN;
SELECT claimed, token FROM rendezvous.claim_firing('t' || CAST(:client_id AS text), pg_catalog.to_timestamp(CAST(:k AS float8)), 'h', '5 min');
SELECT rendezvous.complete_firing('t' || CAST(:client_id AS text), pg_catalog.to_timestamp(CAST(:k AS float8)), 1);
COMMIT;
SQL
fcases=("prepared 1" "prepared 4" "prepared 16" "simple 4")
for c in "${fcases[@]}"; do : >"$work/f_$(echo "$c" | tr ' ' '_').plain"; : >"$work/f_$(echo "$c" | tr ' ' '_').claim"; done
for round in $(seq "$rounds"); do
  for c in "${fcases[@]}"; do
    read -r protocol clients <<<"$c"
    f=$work/f_$(echo "$c" | tr ' ' '_')
    if (( round % 2 )); then
      tps plain_firing "$protocol" "$clients" >>"$f.plain"
      tps claim_firing "$protocol" "$clients" >>"$f.claim"
    else
      tps claim_firing "$protocol" "$clients" >>"$f.claim"
      tps plain_firing "$protocol" "$clients" >>"$f.plain"
    fi
  done
done
echo
echo "Firing claims in the server: claim_firing + complete_firing beside a plain upsert + update (one"
echo "transaction each, a new firing each time); median tps of $rounds rounds of ${seconds} s"
echo
echo "| protocol | clients | plain upsert + update tps | claim_firing + complete_firing tps | ours / plain |"
echo "|---|---:|---:|---:|---:|"
for c in "${fcases[@]}"; do
  read -r protocol clients <<<"$c"
  f=$work/f_$(echo "$c" | tr ' ' '_')
  plain=$(median <"$f.plain"); claim=$(median <"$f.claim")
  printf '| %s | %s | %.0f | %.0f | %.2f |\n' "$protocol" "$clients" "$plain" "$claim" "$(echo "$claim / $plain" | bc -l)"
done
