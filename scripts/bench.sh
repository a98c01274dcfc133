#!/usr/bin/env bash
# Benchmarks (not tests): each prints a markdown table of us beside a baseline, from one run.
#   scripts/bench.sh [hrw ...]     (default: all)
# Installs the release build of the extension and runs against a throwaway cluster with
# default durability settings.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(hrw)
"$ROOT_DIR/scripts/setup.sh"
install_extension release
cargo bench --no-run --quiet -p rendezvous-client "${benches[@]/#/--bench=}" 2>/dev/null || true
cluster_start
cluster_psql -d postgres -c "CREATE EXTENSION pg_rendezvous"
export RENDEZVOUS_DATABASE_URL=$DATABASE_URL
log "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for b in "${benches[@]}"; do
  cargo bench --quiet -p rendezvous-client --bench "$b"
done
