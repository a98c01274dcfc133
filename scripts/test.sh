#!/usr/bin/env bash
# The whole test suite, on a fresh or warm machine:
#   1. setup (packages, cargo-pgrx, pgrx init; skipped when present); one style: rustfmt and
#      clippy with warnings as errors; released install/upgrade scripts unchanged
#   2. unit tests of the shared HRW crate and the client (`cargo test`)
#   3. the extension's #[pg_test]s (`cargo pgrx test`, run as the postgres OS user)
#   4. install the extension, then against one throwaway cluster (`rendezvous cluster run`):
#      the SQL suites under pg_test/ (pg_regress and isolation specs), the upgrade test
#      (pg_test/upgrade/), the Rust integration tests under tests/, and a short
#      `rendezvous fleet --chaos` (on its own embedded cluster) that must PASS
# Every cluster it starts is stopped and removed on exit, failure included.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"

main() {
  "$ROOT_DIR/scripts/setup.sh"

  log "style: cargo fmt --check, cargo clippy -D warnings"
  cargo fmt --all -- --check
  cargo clippy --quiet --workspace --all-targets -- -D warnings

  log "released scripts are frozen (sql/released.sha256)"
  (cd sql && sha256sum --quiet -c released.sha256) || {
    echo "a released install or upgrade script was edited: restore it and put the change into the next upgrade script" >&2
    exit 1
  }

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
  # `cargo pgrx test` installs its test build with `cp`, which rewrites an existing file in
  # place: a server that has pg_rendezvous.so loaded would crash (SIGBUS). Unlink it first, so
  # cp writes a new file and running servers keep the one they mapped.
  as_root rm -f "$("$PG_CONFIG" --pkglibdir)/pg_rendezvous.so"
  (cd extension && cargo pgrx test pg15 "${runas[@]}" --pgdata "$pgrx_data/data")
  rm -rf "$pgrx_data"

  # `cargo pgrx test` installed its test build; install the real one after it, by rename: the
  # library file is a new one (another inode), never the old one rewritten.
  local library before
  library="$("$PG_CONFIG" --pkglibdir)/pg_rendezvous.so"
  before=$(stat -c %i "$library")
  install_extension dev
  if [ "$(stat -c %i "$library")" = "$before" ]; then
    echo "scripts/install.sh rewrote pg_rendezvous.so in place: it must write a new file and rename it" >&2
    exit 1
  fi

  # Built before the cluster starts; this also builds the rendezvous command.
  log "building the rendezvous command, the integration tests and the fleet test"
  cargo test --no-run --quiet -p rendezvous-tests -p rendezvous-cli

  "$RENDEZVOUS" cluster run -c fsync=off -- "$ROOT_DIR/scripts/test.sh" --on-cluster

  log "all tests passed"
}

# Step 4, run as `scripts/test.sh --on-cluster` under `rendezvous cluster run`, which exports
# PGHOST, PGPORT, PGUSER, DATABASE_URL and RENDEZVOUS_CLUSTER_DIR (the cluster's directory,
# where results go), and stops and removes the cluster however this ends.
on_cluster() {
  log "throwaway PostgreSQL on port $PGPORT (in $RENDEZVOUS_CLUSTER_DIR)"
  sql_suites
  isolation_specs
  upgrade_test
  integration_tests
}

sql_suites() {
  log "SQL suites (pg_regress) under pg_test/"
  local out=$RENDEZVOUS_CLUSTER_DIR/regress schedule
  mkdir -p "$out"
  schedule=$(sed -n 's/^test: *//p' pg_test/schedule | tr '\n' ' ')
  # shellcheck disable=SC2086 # one argument per suite
  if ! "$(pgxs_dir)/test/regress/pg_regress" --host="$PGHOST" --port="$PGPORT" \
       --user="$PGUSER" --inputdir=pg_test --outputdir="$out" --dbname=rendezvous_regress \
       --load-extension=pg_rendezvous $schedule; then
    cat "$out/regression.diffs" >&2 || true
    exit 1
  fi
}

isolation_specs() {
  ls pg_test/specs/*.spec >/dev/null 2>&1 || return 0
  log "isolation specs under pg_test/specs"
  local out=$RENDEZVOUS_CLUSTER_DIR/isolation specs
  mkdir -p "$out"
  specs=$(cd pg_test/specs && ls *.spec | sed 's/\.spec$//' | tr '\n' ' ')
  # shellcheck disable=SC2086 # one argument per spec
  if ! "$(pgxs_dir)/test/isolation/pg_isolation_regress" --host="$PGHOST" \
       --port="$PGPORT" --user="$PGUSER" --inputdir=pg_test --outputdir="$out" \
       --dbname=rendezvous_isolation --load-extension=pg_rendezvous $specs; then
    cat "$out/regression.diffs" >&2 || true
    exit 1
  fi
}

upgrade_test() {
  log "upgrade test: 0.1.0 filled, updated through sql/, equal to a fresh install"
  local dir=$RENDEZVOUS_CLUSTER_DIR
  cluster_psql -d postgres -c "CREATE DATABASE rendezvous_upgraded" -c "CREATE DATABASE rendezvous_fresh"
  cluster_psql -d rendezvous_upgraded -o /dev/null -f pg_test/upgrade/fill_0.1.0.sql
  cluster_psql -d rendezvous_upgraded -c "ALTER EXTENSION pg_rendezvous UPDATE"
  cluster_psql -d rendezvous_upgraded -f pg_test/upgrade/check.sql
  cluster_psql -d rendezvous_fresh -c "CREATE EXTENSION pg_rendezvous"
  cluster_psql -d rendezvous_upgraded -f pg_test/upgrade/catalog.sql >"$dir/catalog.upgraded"
  cluster_psql -d rendezvous_fresh -f pg_test/upgrade/catalog.sql >"$dir/catalog.fresh"
  if ! diff -u "$dir/catalog.fresh" "$dir/catalog.upgraded" >&2; then
    echo "the upgraded catalog differs from a fresh install (- fresh, + upgraded): fix the upgrade script" >&2
    exit 1
  fi
  log "upgraded catalog equals a fresh install ($(grep -c '^member ' "$dir/catalog.fresh") objects)"
}

integration_tests() {
  log "integration tests under tests/, beside the CLI's tests (the fleet under chaos, on its own cluster)"
  # The fleet test mostly waits out its chaos: run it beside the integration tests, not after.
  # Both commands name the same packages, so cargo resolves the same features and reuses what
  # the build step made (one package alone would rebuild the shared crates with other features).
  local pkgs=(-p rendezvous-tests -p rendezvous-cli) cli_log=$RENDEZVOUS_CLUSTER_DIR/cli-tests.log cli
  cargo test --quiet "${pkgs[@]}" --test fleet --test cluster >"$cli_log" 2>&1 &
  cli=$!
  if ! RENDEZVOUS_TEST_DATABASE_URL=$DATABASE_URL cargo test --quiet "${pkgs[@]}" --lib --bins --test integration; then
    wait "$cli" || true
    exit 1
  fi
  if ! wait "$cli"; then
    cat "$cli_log" >&2
    exit 1
  fi
  cat "$cli_log"
}

case "${1:-}" in
  "") main ;;
  --on-cluster) on_cluster ;;
  *) echo "usage: scripts/test.sh" >&2; exit 2 ;;
esac
