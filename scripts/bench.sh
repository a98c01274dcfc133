#!/usr/bin/env bash
# Benchmarks (not tests): each prints a markdown table of us beside a baseline, from one run.
#   scripts/bench.sh [hrw|admission|failover|firing ...]     (default: all)
# Installs the release build of the extension and runs against a throwaway cluster with
# default durability settings.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(hrw admission failover firing)
# Each bench lives in the crate whose pieces it measures.
package_of() { if [ -f "$ROOT_DIR/client/benches/$1.rs" ]; then echo rendezvous-client; else echo rendezvous-tests; fi; }
"$ROOT_DIR/scripts/setup.sh"
install_extension release
for b in "${benches[@]}"; do cargo bench --no-run --quiet -p "$(package_of "$b")" --bench "$b"; done
cluster_start
cluster_psql -d postgres -c "CREATE EXTENSION pg_rendezvous"
export RENDEZVOUS_DATABASE_URL=$DATABASE_URL
log "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for b in "${benches[@]}"; do
  cargo bench --quiet -p "$(package_of "$b")" --bench "$b"
done
