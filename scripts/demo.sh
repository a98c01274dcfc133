#!/usr/bin/env bash
# The main job: `rendezvous fleet --chaos` — 6 hosts as separate processes coordinating through
# a throwaway local PostgreSQL for about a minute while hosts are killed, paused, cut off and
# misled; it ends with a report and a PASS/FAIL verdict (exit status 1 on FAIL).
# Installs what is missing, builds and installs the extension; the fleet starts its own
# cluster in a temp dir on its own port and stops it afterwards. Extra arguments go to
# `rendezvous fleet` (e.g. --hosts 8 --duration 30, or --database-url URL).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
"$ROOT_DIR/scripts/setup.sh"
install_extension dev
log "building the rendezvous command"
cargo build --quiet -p rendezvous-cli
exec "$RENDEZVOUS" fleet --chaos --duration 60 "$@"
