#!/usr/bin/env bash
# The whole test suite, on a fresh or warm machine:
#   scripts/test.sh                     on PostgreSQL 15 (Debian's), 16, 17 and 18
#   scripts/test.sh --majors "15 18"    on those majors only (a quicker run while working)
#   1. setup (packages, the other majors' PostgreSQL, cargo-pgrx, pgrx init; skipped when
#      present); one style: rustfmt and clippy with warnings as errors; released
#      install/upgrade scripts unchanged
#   2. unit tests of the shared HRW crate, the client and sqlgen (`cargo test`), the client's
#      public API against its last release's (cargo semver-checks), and `cargo publish
#      --dry-run` of the crates users install or depend on, once
#   3. for each major: the extension's #[pg_test]s (`cargo pgrx test`, run as the postgres OS
#      user); install the extension into its private copy, then against one throwaway cluster of it
#      (`rendezvous cluster run`): the SQL suites under pg_test/ (pg_regress and isolation
#      specs), the portable edition's tests (scripts/test_portable.sh: the same suites against
#      it, installed by a database owner that is not superuser, and its upgrade in both forms),
#      the upgrade test (pg_test/upgrade/) and the Rust integration tests under tests/;
#      on 15, also the integration tests against the portable edition, and the CLI's tests (a
#      short `rendezvous fleet --chaos` that must PASS, the fleet across a pg_auto_failover
#      failover, TLS, the dashboard)
#   4. the Debian packages installed into a clean Debian 12 root (scripts/test_package.sh)
# Every cluster it starts is stopped and removed on exit, failure included. Every build it
# installs goes into a private copy of each major's PostgreSQL under target/postgresql/, never
# into the system's (checked at the end).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"

# The private copies: target/postgresql/<major>/ followed by the original absolute paths.
# PostgreSQL finds its share, lib and include directories relative to its own binaries, so a
# copy that keeps their layout is an installation of its own, whose pg_config names it. The
# servers run as the postgres OS user, which must reach them: when it cannot reach target/ (a
# checkout under a private home directory), they go under /var/tmp, one directory per target/.
choose_private_pg_dir() {
  mkdir -p "$TARGET_DIR"
  PRIVATE_PG_DIR=$TARGET_DIR/postgresql
  if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$TARGET_DIR"; then
    PRIVATE_PG_DIR=/var/tmp/pg_rendezvous-$(printf %s "$TARGET_DIR" | sha256sum | cut -c1-12)/postgresql
    log "the postgres OS user cannot reach $TARGET_DIR: the private copies go to $PRIVATE_PG_DIR"
  fi
}

private_pg_config_of() { echo "$PRIVATE_PG_DIR/$1$(pg_config_of "$1")"; }

# Makes major $1's private copy, or makes it again when the system's tree changed (a minor
# upgrade, a new extension package). Our own files in the system's tree are not copied.
private_pg_tree() {
  local dest=$PRIVATE_PG_DIR/$1 roots stamp tmp
  mapfile -t roots < <(pg_tree_roots "$(pg_config_of "$1")")
  stamp=$(find "${roots[@]}" ! -type d ! -name '*rendezvous*' -printf '%p %s %T@\n' | sort | sha256sum)
  [ "$(cat "$dest/.made-from" 2>/dev/null)" != "$stamp" ] || return 0
  log "PostgreSQL $1: a private copy of ${roots[*]} in $dest"
  tmp=$dest.new.$$
  rm -rf "$tmp"
  mkdir -p "$tmp"
  tar -C / -cf - "${roots[@]#/}" | tar -C "$tmp" -xpf -
  find "$tmp" ! -type d -name '*rendezvous*' -delete
  echo "$stamp" >"$tmp/.made-from"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$(private_pg_config_of "$1")"; then
    echo "the postgres OS user cannot reach $dest" >&2
    exit 1
  fi
}

# pgrx's configuration naming the private copies (`cargo pgrx test` installs into and runs the
# pg_config it names). Written only when it changes: pgrx-pg-sys is built again when it does.
use_private_pgrx_home() {
  local major config="[configs]"
  PGRX_HOME=$TARGET_DIR/pgrx-home
  for major in "${PG_MAJORS_ALL[@]}"; do config+=$'\n'"pg$major = \"$(private_pg_config_of "$major")\""; done
  mkdir -p "$PGRX_HOME"
  [ "$(cat "$PGRX_HOME/config.toml" 2>/dev/null)" = "$config" ] || echo "$config" >"$PGRX_HOME/config.toml"
  export PGRX_HOME
}

main() {
  local majors=("$@") major system_trees=()
  "$ROOT_DIR/scripts/setup.sh"
  umask 022 # what the postgres OS user runs and reads must be readable to it
  choose_private_pg_dir
  for major in "${PG_MAJORS_ALL[@]}"; do
    private_pg_tree "$major"
    mapfile -t -O "${#system_trees[@]}" system_trees < <(pg_tree_roots "$(pg_config_of "$major")")
  done
  use_private_pgrx_home
  # The system's trees must not change from here on (checked at the end).
  SYSTEM_MARK=$(mktemp)
  trap 'rm -f "$SYSTEM_MARK"' EXIT

  log "style: cargo fmt --check, cargo clippy -D warnings"
  cargo fmt --all -- --check
  cargo clippy --quiet --workspace --all-targets -- -D warnings

  log "released scripts are frozen (sql/released.sha256)"
  (cd sql && sha256sum --quiet -c released.sha256) || {
    echo "a released install or upgrade script was edited: restore it and put the change into the next upgrade script" >&2
    exit 1
  }

  log "unit tests: shared HRW crate, client, sqlgen"
  cargo test --quiet -p rendezvous-hrw -p rendezvous-client -p rendezvous-sqlgen

  # Code written against the last release's client builds unchanged (client/api/README.md).
  # cargo-semver-checks, exactly this version, installed here (once, several minutes) rather
  # than by setup.sh, which the demo runs too.
  local semver_checks=0.51.0
  if ! cargo semver-checks --version 2>/dev/null | grep -qx "cargo-semver-checks $semver_checks"; then
    log "installing cargo-semver-checks $semver_checks (several minutes, once)"
    cargo install cargo-semver-checks --version "=$semver_checks" --locked --quiet
  fi
  log "the client's public API keeps 0.3.0's (cargo semver-checks against client/api/)"
  local baseline=$TARGET_DIR/api-baseline-0.3.0.json
  gunzip -c client/api/rendezvous_client-0.3.0.rustdoc.json.gz >"$baseline"
  cargo semver-checks --quiet -p rendezvous-client --baseline-rustdoc "$baseline" --release-type minor

  # The crates users install or depend on must build from their packaged sources alone, with
  # versioned dependencies (target/package), as they would from a registry.
  log "the published crates package and build: HRW, client, CLI (cargo publish --dry-run)"
  cargo publish --dry-run --quiet --allow-dirty -p rendezvous-hrw -p rendezvous-client -p rendezvous-cli

  # Built once, before any cluster starts; this also builds the rendezvous command.
  log "building the rendezvous command, the integration tests and the CLI's tests"
  cargo test --no-run --quiet -p rendezvous-tests -p rendezvous-cli

  for major in "${majors[@]}"; do
    major_leg "$major"
  done
  # The Debian packages, installed into a clean Debian 12 root (Debian packages PostgreSQL 15
  # only: the other majors' packages are built the same way, their servers come from PGDG).
  if [[ " ${majors[*]} " == *" $DEBIAN_PG_MAJOR "* ]]; then
    "$ROOT_DIR/scripts/test_package.sh"
  fi

  log "the system's PostgreSQL trees are as they were (${system_trees[*]})"
  local changed
  changed=$(find "${system_trees[@]}" \( -newer "$SYSTEM_MARK" -o -cnewer "$SYSTEM_MARK" \) -print | sed -n 1,20p)
  if [ -n "$changed" ]; then
    echo "the test run changed the system's PostgreSQL (or something else did meanwhile):" >&2
    echo "$changed" >&2
    exit 1
  fi
  log "all tests passed on PostgreSQL ${majors[*]}"
}

# Steps 3 and 4 on one major: its #[pg_test]s, then the extension installed into it and the
# SQL, upgrade and integration layers against a throwaway cluster of it.
major_leg() {
  use_pg_major "$1"
  PG_CONFIG=$(private_pg_config_of "$1")
  log "PostgreSQL $1: $("$PG_CONFIG" --version) ($PG_CONFIG)"

  log "extension #[pg_test]s on PostgreSQL $PG_MAJOR"
  pgrx_data=$(mktemp -d /var/tmp/rendezvous-pgrx.XXXXXX)
  trap 'rm -rf "$pgrx_data" "$SYSTEM_MARK"' EXIT
  runas=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$pgrx_data"
    runas=(--runas postgres)
  fi
  # `cargo pgrx test` installs its test build into the private copy with `cp`, which rewrites an
  # existing file in place: a server that has pg_rendezvous.so loaded would crash (SIGBUS).
  # Unlink it first, so cp writes a new file and running servers keep the one they mapped.
  as_root rm -f "$("$PG_CONFIG" --pkglibdir)/pg_rendezvous.so"
  (cd extension && cargo pgrx test "pg$PG_MAJOR" "${runas[@]}" --pgdata "$pgrx_data/data")
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

  "$RENDEZVOUS" cluster run -c fsync=off -- "$ROOT_DIR/scripts/test.sh" --on-cluster
}

# Step 4, run as `scripts/test.sh --on-cluster` under `rendezvous cluster run`, which exports
# PGHOST, PGPORT, PGUSER, DATABASE_URL and RENDEZVOUS_CLUSTER_DIR (the cluster's directory,
# where results go), and stops and removes the cluster however this ends. PG_CONFIG and
# PG_MAJOR come from major_leg.
on_cluster() {
  log "throwaway PostgreSQL on port $PGPORT (in $RENDEZVOUS_CLUSTER_DIR): $(cluster_psql -d postgres -Atc 'SELECT version()')"
  sql_suites
  "$ROOT_DIR/scripts/test_portable.sh"
  isolation_specs
  upgrade_test
  integration_tests
}

sql_suites() {
  log "SQL suites (pg_regress) under pg_test/"
  local out=$RENDEZVOUS_CLUSTER_DIR/regress schedule
  mkdir -p "$out"
  schedule=$(sed -n 's/^test: *//p' pg_test/schedule | tr '\n' ' ')
  # The lint suite needs plpgsql_check, which Debian packages for its own PostgreSQL only; it
  # checks the extension's SQL, the same on every major.
  if [ "$PG_MAJOR" != "$DEBIAN_PG_MAJOR" ]; then schedule=${schedule/lint /}; fi
  # shellcheck disable=SC2086 # one argument per suite
  if ! "$(pgxs_dir)/test/regress/pg_regress" --bindir="$(pg_bindir)" --host="$PGHOST" --port="$PGPORT" \
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
  if ! "$(pgxs_dir)/test/isolation/pg_isolation_regress" --bindir="$(pg_bindir)" --host="$PGHOST" \
       --port="$PGPORT" --user="$PGUSER" --inputdir=pg_test --outputdir="$out" \
       --dbname=rendezvous_isolation --load-extension=pg_rendezvous $specs; then
    cat "$out/regression.diffs" >&2 || true
    exit 1
  fi
}

upgrade_test() {
  local dir=$RENDEZVOUS_CLUSTER_DIR fill from db
  cluster_psql -d postgres -c "CREATE DATABASE rendezvous_fresh"
  cluster_psql -d rendezvous_fresh -c "CREATE EXTENSION pg_rendezvous"
  cluster_psql -d rendezvous_fresh -f pg_test/upgrade/catalog.sql >"$dir/catalog.fresh"
  # Every released version, filled through its own API, updated along the scripts to this one.
  for fill in pg_test/upgrade/fill_*.sql; do
    from=$(basename "$fill" .sql); from=${from#fill_}; db=rendezvous_from_${from//./_}
    # The version being made has nothing to update from yet (the portable upgrade test uses it).
    [ "$from" != "$(extension_version)" ] || continue
    log "upgrade test: $from filled, updated to $(extension_version), equal to a fresh install"
    cluster_psql -d postgres -c "CREATE DATABASE $db"
    cluster_psql -d "$db" -o /dev/null -f "pg_test/upgrade/fill_$from.sql"
    cluster_psql -d "$db" -c "ALTER EXTENSION pg_rendezvous UPDATE"
    cluster_psql -d "$db" -f "pg_test/upgrade/check_$from.sql"
    cluster_psql -d "$db" -f pg_test/upgrade/catalog.sql >"$dir/catalog.from_$from"
    if ! diff -u "$dir/catalog.fresh" "$dir/catalog.from_$from" >&2; then
      echo "the catalog upgraded from $from differs from a fresh install (- fresh, + upgraded):" \
           "fix sql/migrations/ (tables, types, drops) or sqlgen" >&2
      exit 1
    fi
  done
  log "upgraded catalogs equal a fresh install ($(grep -c '^member ' "$dir/catalog.fresh") objects)"
}

integration_tests() {
  # Both commands name the same packages, so cargo resolves the same features and reuses what
  # the build step made (one package alone would rebuild the shared crates with other features).
  local pkgs=(-p rendezvous-tests -p rendezvous-cli) cli_log=$RENDEZVOUS_CLUSTER_DIR/cli-tests.log cli=""
  export RENDEZVOUS_EXPECT_PG_MAJOR=$PG_MAJOR
  # The portable edition's script for this major (tests/it/portable.rs installs it).
  export RENDEZVOUS_PORTABLE_SCRIPT=$ROOT_DIR/target/package-dev-pg$PG_MAJOR/portable/pg_rendezvous-$(extension_version)-portable.sql
  if [ "$PG_MAJOR" = "$DEBIAN_PG_MAJOR" ]; then
    log "integration tests under tests/, beside the CLI's tests (fleets on clusters of their own)"
    # The fleet tests mostly wait out their chaos and failovers: run them beside the
    # integration tests, not after.
    cargo test --quiet "${pkgs[@]}" --test fleet --test cluster >"$cli_log" 2>&1 &
    cli=$!
  else
    log "integration tests under tests/ on PostgreSQL $PG_MAJOR"
  fi
  if ! RENDEZVOUS_TEST_DATABASE_URL=$DATABASE_URL cargo test --quiet "${pkgs[@]}" --lib --bins --test integration; then
    [ -z "$cli" ] || wait "$cli" || true
    exit 1
  fi
  [ -n "$cli" ] || return 0
  # The same suite against the portable edition (every test database gets its script instead
  # of CREATE EXTENSION), once: the tests of what docs/operations.md says differs say so and end.
  log "integration tests under tests/ again, against the portable edition"
  if ! RENDEZVOUS_TEST_PORTABLE_SCRIPT=$RENDEZVOUS_PORTABLE_SCRIPT RENDEZVOUS_TEST_DATABASE_URL=$DATABASE_URL \
       cargo test --quiet "${pkgs[@]}" --test integration; then
    wait "$cli" || true
    exit 1
  fi
  if ! wait "$cli"; then
    cat "$cli_log" >&2
    exit 1
  fi
  cat "$cli_log"
  # Alone: it loads the machine with CPU hogs, which would slow the tests above.
  log "the fleet on a loaded machine (8 CPU hogs beside it)"
  cargo test --quiet "${pkgs[@]}" --test fleet -- --ignored a_loaded_machine_keeps_the_fleet_completing_firings
}

usage() { echo "usage: scripts/test.sh [--majors \"15 18\"]   (supported: ${PG_MAJORS_ALL[*]})" >&2; exit 2; }

case "${1:-}" in
  "") main "${PG_MAJORS_ALL[@]}" ;;
  --majors)
    read -r -a majors <<<"${2:-}"
    [ ${#majors[@]} -gt 0 ] || usage
    for m in "${majors[@]}"; do [[ " ${PG_MAJORS_ALL[*]} " == *" $m "* ]] || usage; done
    main "${majors[@]}"
    ;;
  --on-cluster) on_cluster ;;
  *) usage ;;
esac
