#!/usr/bin/env bash
# `scripts/bench.sh runs`, the server's share: what a claim of 200 runs and their completion in
# one call cost the server, in µs per run, beside the same work in plain SQL of growing shape:
#   1. graphile-worker's shape: a queue table with one index, a FOR UPDATE SKIP LOCKED claim
#      (UPDATE … WHERE id IN (SELECT … LIMIT 200 FOR UPDATE SKIP LOCKED)), a batched DELETE;
#   2. the same, finished runs kept as history (an UPDATE to 'succeeded' instead of the DELETE);
#   3. a copy of rendezvous.runs with all its indexes, history kept;
#   4. rendezvous.claim_runs (4 live hosts, grace 0.2 s) and rendezvous.complete_runs.
# The CPU of the session's backend, from /proc (utime + stime, read through psql's \! before and
# after), for 200 claims and completions in one psql session, each statement its own
# transaction, on 50,000 fresh pending runs: µs per run, the median of ROUNDS rounds (default
# 3). With a split into claim and completion from the same session's statement times
# (server time plus a round trip spread over 200 runs; under default durability each includes
# its commit's flush).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
rounds=${ROUNDS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"; cluster_psql -d postgres -q -c "DROP SCHEMA IF EXISTS bench_server CASCADE" >/dev/null 2>&1 || true' EXIT
psql_q() { cluster_psql -d postgres -q "$@" >/dev/null 2>&1; }

# The plain table: rendezvous.runs' columns, the runnable index only (more with `full`).
plain_table() {
  psql_q -c "DROP SCHEMA IF EXISTS bench_server CASCADE" -c "CREATE SCHEMA bench_server" \
    -c "CREATE TABLE bench_server.jobs (LIKE rendezvous.runs INCLUDING DEFAULTS)" \
    -c "ALTER TABLE bench_server.jobs ALTER COLUMN run_id ADD GENERATED ALWAYS AS IDENTITY" \
    -c "ALTER TABLE bench_server.jobs ADD PRIMARY KEY (run_id)" \
    -c "CREATE INDEX ON bench_server.jobs (runnable_at, run_id) WHERE state = 'pending'"
  if [ "$1" = full ]; then
    psql_q -c "CREATE UNIQUE INDEX ON bench_server.jobs (tenant_id, dispatch_key) WHERE dispatch_key IS NOT NULL" \
      -c "CREATE INDEX ON bench_server.jobs (updated_at) WHERE state IN ('succeeded', 'failed', 'cancelled')" \
      -c "CREATE INDEX ON bench_server.jobs (lease_until) WHERE state = 'running'" \
      -c "CREATE INDEX ON bench_server.jobs (holder_pid, holder_started) WHERE state = 'running'" \
      -c "CREATE INDEX ON bench_server.jobs (parent_run_id) WHERE parent_run_id IS NOT NULL"
  fi
}
fill_plain() {
  psql_q -c "TRUNCATE bench_server.jobs" \
    -c "INSERT INTO bench_server.jobs (tenant_id, workflow_ref) SELECT 't', 'noop' FROM generate_series(1, 50000)" \
    -c "VACUUM ANALYZE bench_server.jobs" -c "CHECKPOINT"
}
fill_ours() {
  psql_q -c "TRUNCATE rendezvous.runs CASCADE" \
    -c "SELECT rendezvous.heartbeat('bench-host-' || g) FROM generate_series(1, 4) g" \
    -c "DO \$\$ BEGIN FOR i IN 1..100 LOOP PERFORM rendezvous.spawn_runs('t', (SELECT array_agg('noop'::text) FROM generate_series(1, 500))); END LOOP; END \$\$" \
    -c "VACUUM ANALYZE rendezvous.runs" -c "CHECKPOINT"
}

# The backend's CPU ticks (100 a second): what the psql script below reads through \!.
cat >"$work/ticks.sh" <<'SH'
#!/bin/sh
awk '{ sub(/.*\) /, ""); split($0, f, " "); print f[12] + f[13] }' "/proc/$BACKEND_PID/stat" >>"$1"
SH
chmod +x "$work/ticks.sh"

# A psql script of 200 cycles of one shape's claim and completion, timed, with the backend's
# CPU read first and last.
psql_script() {
  local claim=$1 complete=$2 i
  echo "SELECT pg_catalog.pg_backend_pid() AS pid \gset"
  echo "\\setenv BACKEND_PID :pid"
  echo "\\! $work/ticks.sh $work/ticks"
  echo "\\timing on"
  for i in $(seq 200); do
    echo "$claim"
    echo "$complete"
  done
  echo "\\timing off"
  echo "\\! $work/ticks.sh $work/ticks"
}

# Rounds of one shape: "backend-CPU claim-time completion-time" µs per run, the round with
# the median CPU.
measure() {
  local script=$1 fill=$2 r out cpu results=()
  for r in $(seq "$rounds"); do
    "$fill"
    : >"$work/ticks"
    out=$(cluster_psql -d postgres -f "$work/$script.psql" 2>&1)
    cpu=$(awk 'NR == 1 { a = $1 } NR == 2 { print $1 - a }' "$work/ticks")
    # "Time: x ms" lines alternate claim, completion (ms per 200 runs); a tick is 0.25 µs a run.
    results+=("$(awk -v t="$cpu" '/^Time:/ { if (++n % 2) c += $2; else d += $2 }
                 END { printf "%.1f %.1f %.1f", t * 0.25, c / 200 * 5, d / 200 * 5 }' <<<"$out")")
  done
  printf '%s\n' "${results[@]}" | sort -n -k1 | sed -n "$(((rounds + 1) / 2))p"
}
plain_claim="WITH c AS (UPDATE bench_server.jobs SET state = 'running', holder = 'h', token = token + 1, attempts = attempts + 1,
    lease_until = now() + interval '30 s', holder_pid = pg_backend_pid(), holder_started = now(), updated_at = clock_timestamp()
  WHERE run_id IN (SELECT run_id FROM bench_server.jobs WHERE state = 'pending' AND runnable_at <= now()
                    AND workflow_ref = 'noop' ORDER BY runnable_at, run_id LIMIT 200 FOR UPDATE SKIP LOCKED)
  RETURNING run_id, token, tenant_id, workflow_ref, input, attempts)
SELECT coalesce(array_agg(run_id)::text, '{}') AS ids FROM c \\gset"
psql_script "$plain_claim" "DELETE FROM bench_server.jobs WHERE run_id = ANY (:'ids'::bigint[]);" >"$work/delete.psql"
psql_script "$plain_claim" "UPDATE bench_server.jobs SET state = 'succeeded', output = NULL, updated_at = clock_timestamp(),
    lease_until = NULL, holder_pid = NULL, holder_started = NULL WHERE run_id = ANY (:'ids'::bigint[]) AND state = 'running';" \
  >"$work/update.psql"
psql_script "SELECT coalesce(array_agg(run_id)::text, '{}') AS ids, coalesce(array_agg(token)::text, '{}') AS toks
  FROM rendezvous.claim_runs('bench-host-' || (1 + random() * 3)::int, 200, '30 seconds', ARRAY['noop'], '0.2 seconds') \\gset" \
  "SELECT count(*) FROM rendezvous.complete_runs(:'ids'::bigint[], :'toks'::bigint[]);" >"$work/ours.psql"

row() { local label=$1 cpu claim complete; read -r cpu claim complete <<<"$2"; echo "| $label | $cpu | $claim | $complete |"; }

echo
echo "The server's share: a claim of 200 runs and their completion in one call, µs per run (one session, the median of $rounds rounds of 200 cycles)"
echo
echo "| what the server runs | the backend's CPU | claim time | completion time |"
echo "|---|---:|---:|---:|"
plain_table min
row "a queue table with one index: SKIP LOCKED claim, batched DELETE (graphile-worker's shape)" "$(measure delete fill_plain)"
row "the same, finished runs kept (UPDATE to succeeded)" "$(measure update fill_plain)"
plain_table full
row "rendezvous.runs' columns and indexes, finished runs kept" "$(measure update fill_plain)"
row "claim_runs (4 live hosts) + complete_runs" "$(measure ours fill_ours)"
