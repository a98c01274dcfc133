#!/usr/bin/env bash
# Benchmarks (not tests): each prints a markdown table of us beside a baseline, from one run.
#   scripts/bench.sh [hrw|admission|failover|firing|fencing|scheduler|runs|durable|takeover|replication|loaded-failover|scale|portable ...]   (default: all)
# Installs the release build of the extension and runs against a throwaway cluster
# (`rendezvous cluster run`) with default durability settings.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"

# Each bench lives in the crate whose pieces it measures.
package_of() { if [ -f "$ROOT_DIR/client/benches/$1.rs" ]; then echo rendezvous-client; else echo rendezvous-tests; fi; }

main() {
  local benches=("$@")
  [ ${#benches[@]} -gt 0 ] || benches=(hrw admission failover firing fencing scheduler runs durable takeover replication loaded-failover scale portable)
  "$ROOT_DIR/scripts/setup.sh"
  install_extension release
  # `replication` and `loaded-failover` run fleets on throwaway pairs of their own
  # (scripts/bench/replication.sh, loaded_failover.sh).
  local replication=false loaded=false on_cluster=()
  for b in "${benches[@]}"; do
    case "$b" in
      replication) replication=true ;;
      loaded-failover) loaded=true ;;
      *) on_cluster+=("$b") ;;
    esac
  done
  for b in "${on_cluster[@]}"; do
    [ "$b" = scale ] || [ "$b" = portable ] || [ "$b" = durable ] || cargo bench --no-run --quiet -p "$(package_of "$b")" --bench "$b"
  done
  log "building the rendezvous command"
  cargo build --quiet -p rendezvous-cli
  if $replication || $loaded; then
    cargo build --quiet --release -p rendezvous-cli
  fi
  if $replication; then "$ROOT_DIR/scripts/bench/replication.sh"; fi
  if $loaded; then "$ROOT_DIR/scripts/bench/loaded_failover.sh"; fi
  [ ${#on_cluster[@]} -gt 0 ] || return 0
  benches=("${on_cluster[@]}")
  # The scheduler bench compares with pg_cron, which must be preloaded.
  local settings=()
  if [[ " ${benches[*]} " == *" scheduler "* ]]; then
    settings=(-c shared_preload_libraries=pg_cron -c cron.database_name=postgres)
  fi
  "$RENDEZVOUS" cluster run "${settings[@]}" -- "$ROOT_DIR/scripts/bench.sh" --on-cluster "${benches[@]}"
}

# Run as `scripts/bench.sh --on-cluster BENCH...` under `rendezvous cluster run`, which exports
# DATABASE_URL (database postgres, with pg_rendezvous) and stops the cluster afterwards.
on_cluster() {
  export RENDEZVOUS_DATABASE_URL=$DATABASE_URL
  log "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  for b in "$@"; do
    # Status, retention and membership costs at growing history, hosts and groups (SQL and the
    # rendezvous command, no cargo bench).
    if [ "$b" = scale ]; then "$ROOT_DIR/scripts/bench/scale.sh"; continue; fi
    # The portable edition beside the native one, call by call (SQL, no cargo bench).
    if [ "$b" = portable ]; then "$ROOT_DIR/scripts/bench/portable.sh"; continue; fi
    # Durable runs beside DBOS Transact (Python, no cargo bench).
    if [ "$b" = durable ]; then "$ROOT_DIR/scripts/bench/durable.sh"; continue; fi
    cargo bench --quiet -p "$(package_of "$b")" --bench "$b"
    # Admission also in the server, where the client's round trip cannot hide its cost.
    if [ "$b" = admission ]; then "$ROOT_DIR/scripts/bench/admission_pgbench.sh"; fi
    # Batch admission beside the peers' batch calls (graphile-worker's addJobs, pg-boss's insert).
    if [ "$b" = admission ]; then "$ROOT_DIR/scripts/bench/runs_peers.sh" admission; fi
    # Runs beside the plain-SQL floor of a worker loop.
    if [ "$b" = runs ]; then "$ROOT_DIR/scripts/bench/runs_pgbench.sh"; fi
    # And beside the peers on PostgreSQL, graphile-worker and pg-boss.
    if [ "$b" = runs ]; then "$ROOT_DIR/scripts/bench/runs_peers.sh"; fi
    # And what a claim and a completion cost the server, beside plain SQL of growing shape.
    if [ "$b" = runs ]; then "$ROOT_DIR/scripts/bench/runs_server.sh"; fi
  done
}

if [ "${1:-}" = --on-cluster ]; then
  shift
  on_cluster "$@"
else
  main "$@"
fi
