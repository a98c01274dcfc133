#!/usr/bin/env bash
# The whole test suite, on a fresh or warm machine:
#   1. setup (packages, cargo-pgrx, pgrx init; skipped when present)
#   2. unit tests of the shared HRW crate and the client (`cargo test`)
#   3. the extension's #[pg_test]s (`cargo pgrx test`, run as the postgres OS user)
#   4. install the extension, start a throwaway cluster, run the SQL suites under pg_test/
#      (pg_regress and isolation specs), the Rust integration tests under tests/, and a short
#      `rendezvous fleet --chaos` that must PASS
# Every cluster it starts is stopped on exit, failure included.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"

"$ROOT_DIR/scripts/setup.sh"

log "unit tests: shared HRW crate and client"
cargo test --quiet -p rendezvous-hrw -p rendezvous-client

log "extension #[pg_test]s"
pgrx_data=$(mktemp -d /var/tmp/rendezvous-pgrx.XXXXXX)
trap 'rm -rf "$pgrx_data"' EXIT
runas=()
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$pgrx_data"
  runas=(--runas postgres)
fi
(cd extension && cargo pgrx test pg15 "${runas[@]}" --pgdata "$pgrx_data/data")
rm -rf "$pgrx_data"

# `cargo pgrx test` installed its test build; install the real one after it.
install_extension dev

cluster_start fsync=off
export RENDEZVOUS_TEST_DATABASE_URL=$DATABASE_URL

log "SQL suites (pg_regress) under pg_test/"
regress_out=$CLUSTER_DIR/regress
mkdir -p "$regress_out"
schedule=$(sed -n 's/^test: *//p' pg_test/schedule | tr '\n' ' ')
if ! "$PGXS_DIR/test/regress/pg_regress" --host=127.0.0.1 --port="$CLUSTER_PORT" \
     --user=postgres --inputdir=pg_test --outputdir="$regress_out" --dbname=rendezvous_regress \
     --load-extension=pg_rendezvous $schedule; then
  cat "$regress_out/regression.diffs" >&2 || true
  exit 1
fi

if ls pg_test/specs/*.spec >/dev/null 2>&1; then
  log "isolation specs under pg_test/specs"
  iso_out=$CLUSTER_DIR/isolation
  mkdir -p "$iso_out"
  specs=$(cd pg_test/specs && ls *.spec | sed 's/\.spec$//' | tr '\n' ' ')
  if ! "$PGXS_DIR/test/isolation/pg_isolation_regress" --host=127.0.0.1 \
       --port="$CLUSTER_PORT" --user=postgres --inputdir=pg_test --outputdir="$iso_out" \
       --dbname=rendezvous_isolation --load-extension=pg_rendezvous $specs; then
    cat "$iso_out/regression.diffs" >&2 || true
    exit 1
  fi
fi

log "integration tests under tests/, and the fleet (the main job) under chaos"
cargo test --quiet -p rendezvous-tests -p rendezvous-cli

log "all tests passed"
