#!/usr/bin/env bash
# `scripts/bench.sh portable`: each hot call in both editions side by side, in one run on one
# cluster: the native extension (database postgres) and the portable edition (SQL and PL/pgSQL
# only: database rendezvous_portable, installed with psql by its owner). pgbench, prepared
# statements, SECONDS_PER_CASE (default 10) each; calls a second (transactions of one call) and
# average latency, and the portable edition's share of the native one's rate.
#   winner over 100 and 1,000 hosts (array form: hosts that joined, whose hashes the portable
#   edition keeps, and 1,000 that never did), winner(key) over 1,000 live hosts, spawn_run (a
#   new key each time), a firing's
#   claim_firing + complete_firing (one transaction each), due_firings with 100 per-minute
#   tasks, try_lead by the holder (the leader's refresh).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
: "${DATABASE_URL:?run through scripts/bench.sh portable}"
seconds=${SECONDS_PER_CASE:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pgbench="$(pg_bindir)/pgbench"
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$("$PG_CONFIG" --sharedir)/extension/pg_rendezvous.control")
script=$ROOT_DIR/target/package-release-pg$PG_MAJOR/portable/pg_rendezvous-$version-portable.sql
[ -f "$script" ] || script=$ROOT_DIR/target/package-dev-pg$PG_MAJOR/portable/pg_rendezvous-$version-portable.sql

cluster_psql -d postgres -c "CREATE ROLE rendezvous_owner LOGIN CREATEROLE" \
  -c "CREATE DATABASE rendezvous_portable OWNER rendezvous_owner" >/dev/null
cluster_psql -d rendezvous_portable -U rendezvous_owner -f "$script" >/dev/null
native=$DATABASE_URL
portable=$(echo "$DATABASE_URL" | sed 's|/postgres$|/rendezvous_portable|')

# The same state in both: 100 per-minute tasks (none due), hosts host-1 … host-1000 joined.
for url in "$native" "$portable"; do
  cluster_psql "$url" -c "SELECT count(rendezvous.schedule_task('bench-' || i, '0 0 1 1 *')) FROM generate_series(1, 100) i" \
    -c "SELECT count(rendezvous.heartbeat('host-' || i)) FROM generate_series(1, 1000) i" >/dev/null
done

cat >"$work/winner100.sql" <<'SQL'
\set k random(1, 1000000000)
SELECT rendezvous.winner('key-' || :k, :hosts100::text[]);
SQL
cat >"$work/winner1000.sql" <<'SQL'
\set k random(1, 1000000000)
SELECT rendezvous.winner('key-' || :k, :hosts1000::text[]);
SQL
cat >"$work/winner1000new.sql" <<'SQL'
\set k random(1, 1000000000)
SELECT rendezvous.winner('key-' || :k, :others1000::text[]);
SQL
cat >"$work/winnerlive.sql" <<'SQL'
\set k random(1, 1000000000)
SELECT rendezvous.winner('key-' || :k);
SQL
cat >"$work/spawn.sql" <<'SQL'
\set k random(1, 2000000000)
SELECT rendezvous.spawn_run('bench', 'w', '{}', 'k' || :client_id || '-' || :k);
SQL
cat >"$work/claim.sql" <<'SQL'
\set k random(1, 2000000000)
SELECT (rendezvous.claim_firing('bench-' || :client_id || '-' || :k, '2026-01-01 00:00:00+00', 'host')).token AS token \gset
SELECT rendezvous.complete_firing('bench-' || :client_id || '-' || :k, '2026-01-01 00:00:00+00', :token);
SQL
cat >"$work/due.sql" <<'SQL'
SELECT count(*) FROM rendezvous.due_firings();
SQL
cat >"$work/lead.sql" <<'SQL'
SELECT is_leader FROM rendezvous.try_lead('bench-group-' || :client_id, 'host-' || :client_id);
SQL
hosts100="{$(seq -s, -f 'host-%g' 1 100)}"
hosts1000="{$(seq -s, -f 'host-%g' 1 1000)}"
others1000="{$(seq -s, -f 'other-%g' 1 1000)}"

# rate URL SCRIPT CLIENTS: "tps latency_ms" of pgbench.
rate() {
  local out
  # The live form needs the hosts live (10 s staleness): their heartbeats every 2 s meanwhile.
  local beating=
  if [ "$2" = winnerlive ]; then
    while :; do
      cluster_psql "$1" -c "SELECT count(rendezvous.heartbeat('host-' || i)) FROM generate_series(1, 1000) i" >/dev/null
      sleep 2
    done &
    beating=$!
    sleep 0.5
  fi
  out=$("$pgbench" -n -M prepared -c "$3" -j "$3" -T "$seconds" -D hosts100="$hosts100" -D hosts1000="$hosts1000" \
          -D others1000="$others1000" \
          -f "$work/$2.sql" "$1" 2>&1)
  if [ -n "$beating" ]; then kill "$beating"; wait "$beating" 2>/dev/null || true; fi
  echo "$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1) $(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p')"
}

echo
echo "Each hot call in both editions (pgbench, prepared, ${seconds} s each, PostgreSQL $PG_MAJOR):"
echo
echo "| call | clients | native calls/s (latency) | portable calls/s (latency) | portable / native |"
echo "|---|---:|---:|---:|---:|"
for case in "winner over 100 hosts:winner100:1" "winner over 1,000 hosts:winner1000:1" \
            "winner over 1,000 hosts that never joined:winner1000new:1" \
            "winner(key) over 1,000 live hosts:winnerlive:1" \
            "due_firings (100 tasks, none due):due:1" "spawn_run:spawn:4" \
            "claim_firing + complete_firing:claim:4" "try_lead by the holder:lead:4"; do
  IFS=: read -r label file clients <<<"$case"
  read -r n_tps n_lat <<<"$(rate "$native" "$file" "$clients")"
  read -r p_tps p_lat <<<"$(rate "$portable" "$file" "$clients")"
  printf '| %s | %s | %.0f (%s ms) | %.0f (%s ms) | %.2f |\n' "$label" "$clients" "$n_tps" "$n_lat" "$p_tps" "$p_lat" \
    "$(echo "scale=4; $p_tps / $n_tps" | bc)"
done
