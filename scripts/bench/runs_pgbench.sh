#!/usr/bin/env bash
# `scripts/bench.sh runs`, the floor: the plainest worker loop PostgreSQL allows, in pgbench.
# One job per pgbench transaction script, two transactions per job, as a worker does it:
# claim the oldest pending job (FOR UPDATE SKIP LOCKED) and mark it running, then mark it done.
# No leases, tokens, retries, placement or fencing: what any queue on PostgreSQL pays at least.
# At 4, 16 and 64 clients (the runtime's 4 hosts × 1, 4 and 16 handlers), default durability,
# SECONDS_PER_CASE (default 10) each, on a fresh table with more jobs than can run out.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
seconds=${SECONDS_PER_CASE:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pgbench="$(pg_bindir)/pgbench"

cat >"$work/worker.sql" <<'SQL'
BEGIN;
SELECT id AS job FROM floor_jobs WHERE state = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED \gset
UPDATE floor_jobs SET state = 'running', started_at = now() WHERE id = :job;
COMMIT;
BEGIN;
UPDATE floor_jobs SET state = 'done' WHERE id = :job;
COMMIT;
SQL

echo
echo "The floor: a plain-SQL worker loop in pgbench (claim with FOR UPDATE SKIP LOCKED and mark running; then mark done: two transactions per job)"
echo
echo "| clients | jobs/s |"
echo "|---:|---:|"
for clients in 4 16 64; do
  cluster_psql -d postgres -q \
    -c "DROP TABLE IF EXISTS floor_jobs" \
    -c "CREATE TABLE floor_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL DEFAULT '{}', state text NOT NULL DEFAULT 'pending', started_at timestamptz)" \
    -c "CREATE INDEX floor_jobs_pending ON floor_jobs (id) WHERE state = 'pending'" \
    -c "INSERT INTO floor_jobs (payload) SELECT '{}' FROM generate_series(1, 400000)" \
    -c "VACUUM ANALYZE floor_jobs" -c "CHECKPOINT"
  tps=$("$pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "$work/worker.sql" -d postgres 2>/dev/null \
        | sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
  printf '| %s | %.0f |\n' "$clients" "$tps"
done
cluster_psql -d postgres -q -c "DROP TABLE floor_jobs"
