#!/usr/bin/env bash
# The main job: a fleet of hosts coordinating through a throwaway local PostgreSQL.
# Installs what is missing, builds and installs the extension, starts a cluster in a temp dir
# on its own port, runs the demo against it, and stops the cluster on exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
"$ROOT_DIR/scripts/setup.sh"
install_extension dev
log "building the demo"
cargo build --quiet -p rendezvous-client --example demo
cluster_start
cluster_psql -d postgres -c "CREATE EXTENSION pg_rendezvous"
"$ROOT_DIR/target/debug/examples/demo" "$DATABASE_URL"
