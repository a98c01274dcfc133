#!/usr/bin/env bash
# The whole test suite, on a fresh or warm machine:
#   scripts/test.sh                     on PostgreSQL 15 (Debian's), 16, 17 and 18
#   scripts/test.sh --majors "15 18"    on those majors only (a quicker run while working)
#   1. setup (packages, the other majors' PostgreSQL, cargo-pgrx, pgrx init; skipped when
#      present); one style: rustfmt and clippy with warnings as errors; released
#      install/upgrade scripts unchanged
#   2. unit tests of the shared HRW crate, the client and sqlgen (`cargo test`), and
#      `cargo publish --dry-run` of the crates users depend on, once
#   3. for each major: the extension's #[pg_test]s (`cargo pgrx test`, run as the postgres OS
#      user); install the extension into that major, then against one throwaway cluster of it
#      (`rendezvous cluster run`): the SQL suites under pg_test/ (pg_regress and isolation
#      specs), the same suites against the portable edition (installed by a database owner
#      that is not superuser) and its upgrade in both forms, the upgrade test (pg_test/upgrade/) and the Rust integration
#      tests under tests/;
#      on 15, also the CLI's tests (a short `rendezvous fleet --chaos` that must PASS, the fleet
#      across a pg_auto_failover failover, TLS, the dashboard)
# Every cluster it starts is stopped and removed on exit, failure included.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"

main() {
  local majors=("$@")
  "$ROOT_DIR/scripts/setup.sh"

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

  # The crates applications depend on must build from their packaged sources alone, with
  # versioned dependencies (target/package), as they would from a registry.
  log "the crates users depend on package and build (cargo publish --dry-run)"
  cargo publish --dry-run --quiet --allow-dirty -p rendezvous-hrw -p rendezvous-client

  # Built once, before any cluster starts; this also builds the rendezvous command.
  log "building the rendezvous command, the integration tests and the CLI's tests"
  cargo test --no-run --quiet -p rendezvous-tests -p rendezvous-cli

  for major in "${majors[@]}"; do
    major_leg "$major"
  done
  log "all tests passed on PostgreSQL ${majors[*]}"
}

# Steps 3 and 4 on one major: its #[pg_test]s, then the extension installed into it and the
# SQL, upgrade and integration layers against a throwaway cluster of it.
major_leg() {
  use_pg_major "$1"
  log "PostgreSQL $1: $("$PG_CONFIG" --version) ($PG_CONFIG)"

  log "extension #[pg_test]s on PostgreSQL $PG_MAJOR"
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
  portable_suites
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

# The portable edition (SQL and PL/pgSQL only): installed with psql by a database owner that is
# not superuser, then the same SQL suites against it (but install, which is about CREATE
# EXTENSION), expecting the native outputs except where pg_test/portable/expected/ has its own:
# the differences docs/operations.md lists.
portable_suites() {
  local version script out=$RENDEZVOUS_CLUSTER_DIR/portable inputs=$RENDEZVOUS_CLUSTER_DIR/portable_inputs schedule
  version=$(extension_version)
  script=$ROOT_DIR/target/package-dev-pg$PG_MAJOR/portable/pg_rendezvous-$version-portable.sql
  log "the portable edition: $(basename "$script") installed by a database owner, the SQL suites against it"
  # The owner a managed service gives: CREATEROLE, and the grants operations.md recommends
  # (a claim ends with its holder's session; a silent leader's session can be ended).
  cluster_psql -d postgres -c "CREATE ROLE rendezvous_owner LOGIN CREATEROLE" \
    -c "GRANT pg_read_all_stats, pg_signal_backend TO rendezvous_owner" \
    -c "CREATE DATABASE rendezvous_portable OWNER rendezvous_owner"
  cluster_psql -d rendezvous_portable -U rendezvous_owner -f "$script"
  if [ "$(cluster_psql -d rendezvous_portable -Atc "SELECT count(*) FROM pg_catalog.pg_proc p
        JOIN pg_catalog.pg_language l ON l.oid = p.prolang
       WHERE p.pronamespace = 'rendezvous'::regnamespace AND l.lanname NOT IN ('sql', 'plpgsql')")" != 0 ]; then
    echo "the portable edition made a function in another language than SQL and PL/pgSQL" >&2
    exit 1
  fi
  rm -rf "$inputs" && mkdir -p "$out" && cp -r pg_test "$inputs"
  cp pg_test/portable/expected/*.out "$inputs/expected/"
  schedule=$(sed -n 's/^test: *//p' pg_test/schedule | grep -vx install | tr '\n' ' ')
  if [ "$PG_MAJOR" != "$DEBIAN_PG_MAJOR" ]; then schedule=${schedule/lint /}; fi
  # shellcheck disable=SC2086 # one argument per suite
  if ! "$(pgxs_dir)/test/regress/pg_regress" --bindir="$(pg_bindir)" --host="$PGHOST" --port="$PGPORT" \
       --user="$PGUSER" --inputdir="$inputs" --outputdir="$out" --dbname=rendezvous_portable --use-existing \
       $schedule; then
    cat "$out/regression.diffs" >&2 || true
    exit 1
  fi
  # Its own helpers that write are the owner's alone: a host cannot record a term without the lock.
  cluster_psql -d postgres -c "CREATE ROLE rendezvous_portable_host LOGIN IN ROLE rendezvous_host"
  local refused
  refused=$(cluster_psql -d rendezvous_portable -U rendezvous_portable_host \
              -c "SELECT rendezvous._record_new_term('g', 'intruder', 1)" 2>&1 || true)
  if [[ $refused != *"permission denied for function _record_new_term"* ]]; then
    echo "a member of rendezvous_host calling the portable edition's _record_new_term was not refused: $refused" >&2
    exit 1
  fi
  pg_tle_form "${script%-portable.sql}-pg_tle.sql"
  portable_upgrade_test "$script"
}

# The portable edition's upgrade, as sqlgen makes it (the native migration, the portable one,
# then every definition of the new version's portable script made again), from each released
# portable version (extension/portable/released/, frozen), filled through its own API, to this
# one: by the owner with psql, then the data checked and the catalog compared with a fresh
# portable install; and again in the pg_tle form (ALTER EXTENSION UPDATE). Releasing X adds
# X's scripts there and a fill_X.sql (sql/README.md).
portable_upgrade_test() {
  local script=$1 version released from upgrades
  version=$(extension_version)
  upgrades=$(dirname "$script")
  for released in extension/portable/released/pg_rendezvous-*-portable.sql; do
    from=$(basename "$released" -portable.sql); from=${from#pg_rendezvous-}
    [[ $from != *--* ]] || continue
    portable_upgrade_check "$released" "$upgrades/pg_rendezvous-$from--$version-portable.sql" "$from" "$script"
    pg_tle_upgrade_check "${released%-portable.sql}-pg_tle.sql" "$upgrades/pg_rendezvous-$from--$version-pg_tle.sql" "$from" \
      "${script%-portable.sql}-pg_tle.sql"
  done
}

# pg_tle_upgrade_check INSTALL UPDATE FILL CURRENT: the pg_tle forms' contents as an extension
# that is not superuser-only (as pg_tle_form does), created at INSTALL's version by the owner,
# filled, updated along UPDATE's content, then check_FILL.sql and the catalog against a fresh
# CREATE EXTENSION of CURRENT (this version's pg_tle form).
pg_tle_upgrade_check() {
  local extdir name=rendezvous_tle_upgrade from to dir=$RENDEZVOUS_CLUSTER_DIR status=0
  extdir=$("$PG_CONFIG" --sharedir)/extension
  from=$(sed -n "s/^SELECT pgtle.install_update_path('[^']*', '\([^']*\)', .*/\1/p" "$2")
  to=$(sed -n "s/^SELECT pgtle.install_update_path('[^']*', '[^']*', '\([^']*\)', .*/\1/p" "$2")
  log "portable upgrade test, pg_tle form: $name $from filled, ALTER EXTENSION UPDATE along $(basename "$2")"
  pg_tle_content "$1" >"$dir/$name--$from.sql"
  pg_tle_content "$2" >"$dir/$name--$from--$to.sql"
  pg_tle_content "$4" >"$dir/$name--$to.sql"
  pg_tle_control "$from" >"$dir/$name.control"
  as_root install -m 0644 "$dir/$name.control" "$dir/$name--$from.sql" "$dir/$name--$from--$to.sql" "$dir/$name--$to.sql" "$extdir/"
  {
    cluster_psql -d postgres -c "CREATE DATABASE rendezvous_tle_upgraded OWNER rendezvous_owner" \
      -c "CREATE DATABASE rendezvous_tle_fresh OWNER rendezvous_owner" &&
    cluster_psql -d rendezvous_tle_fresh -U rendezvous_owner -c "CREATE EXTENSION $name VERSION '$to'" &&
    sed "s/^CREATE EXTENSION pg_rendezvous .*/CREATE EXTENSION $name;/" "pg_test/upgrade/fill_$3.sql" >"$dir/tle_fill.sql" &&
    cluster_psql -d rendezvous_tle_upgraded -U rendezvous_owner -o /dev/null -f "$dir/tle_fill.sql" &&
    cluster_psql -d rendezvous_tle_upgraded -U rendezvous_owner -c "ALTER EXTENSION $name UPDATE TO '$to'" &&
    cluster_psql -d rendezvous_tle_upgraded -U rendezvous_owner -f "pg_test/upgrade/check_$3.sql" &&
    sed "s/extname = 'pg_rendezvous'/extname = '$name'/" pg_test/upgrade/catalog.sql >"$dir/tle_catalog.sql" &&
    cluster_psql -d rendezvous_tle_fresh -f "$dir/tle_catalog.sql" | sed "s/^extension $name $to /extension $name VERSION /" >"$dir/catalog.tle_fresh" &&
    cluster_psql -d rendezvous_tle_upgraded -f "$dir/tle_catalog.sql" | sed "s/^extension $name $to /extension $name VERSION /" >"$dir/catalog.tle_upgraded" &&
    diff -u "$dir/catalog.tle_fresh" "$dir/catalog.tle_upgraded" >&2
  } || status=$?
  for db in rendezvous_tle_upgraded rendezvous_tle_fresh; do
    cluster_psql -d "$db" -U rendezvous_owner -c "DROP EXTENSION IF EXISTS $name CASCADE" >/dev/null 2>&1 || true
  done
  as_root rm -f "$extdir/$name.control" "$extdir/$name--$from.sql" "$extdir/$name--$from--$to.sql" "$extdir/$name--$to.sql"
  for db in rendezvous_tle_upgraded rendezvous_tle_fresh; do
    cluster_psql -d postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  done
  if [ "$status" != 0 ]; then
    echo "the pg_tle form's upgrade failed or left a catalog unlike a fresh install's (- fresh, + upgraded)" >&2
    exit 1
  fi
  log "pg_tle form upgraded: its catalog equals a fresh install's ($(grep -c '^member ' "$dir/catalog.tle_fresh") members)"
}

# portable_upgrade_check INSTALL UPGRADE FILL CURRENT: INSTALL (a portable script) by the owner,
# filled by pg_test/upgrade/fill_FILL.sql (its CREATE EXTENSION left out), UPGRADE applied,
# then check_FILL.sql and the catalog against a fresh install of CURRENT (this version's).
portable_upgrade_check() {
  local install=$1 upgrade=$2 fill=$3 current=$4 dir=$RENDEZVOUS_CLUSTER_DIR db fresh
  db=rendezvous_portable_from_${fill//./_}; fresh=rendezvous_portable_fresh_${fill//./_}
  log "portable upgrade test: $(basename "$install") filled, $(basename "$upgrade") applied, equal to a fresh install"
  cluster_psql -d postgres -c "CREATE DATABASE $db OWNER rendezvous_owner" -c "CREATE DATABASE $fresh OWNER rendezvous_owner"
  cluster_psql -d "$fresh" -U rendezvous_owner -o /dev/null -f "$current"
  cluster_psql -d "$db" -U rendezvous_owner -o /dev/null -f "$install"
  grep -v '^CREATE EXTENSION' "pg_test/upgrade/fill_$fill.sql" >"$dir/portable_fill.sql"
  cluster_psql -d "$db" -U rendezvous_owner -o /dev/null -f "$dir/portable_fill.sql"
  cluster_psql -d "$db" -U rendezvous_owner -o /dev/null -f "$upgrade"
  cluster_psql -d "$db" -U rendezvous_owner -f "pg_test/upgrade/check_$fill.sql"
  cluster_psql -d "$fresh" -f pg_test/upgrade/catalog.sql >"$dir/catalog.portable_fresh"
  cluster_psql -d "$db" -f pg_test/upgrade/catalog.sql >"$dir/catalog.portable_upgraded"
  if ! diff -u "$dir/catalog.portable_fresh" "$dir/catalog.portable_upgraded" >&2; then
    echo "the portable catalog after $(basename "$upgrade") differs from a fresh install (- fresh, + upgraded)" >&2
    exit 1
  fi
  log "upgraded portable catalog equals a fresh install ($(grep -c '^function ' "$dir/catalog.portable_fresh") functions)"
}

# The content a pg_tle wrapper (sqlgen's -pg_tle.sql: pgtle.install_extension or
# install_update_path) hands to pg_tle, as an extension script.
pg_tle_content() {
  awk '/^SELECT pgtle\.install_(extension|update_path)\(/ {inside = 1; next} /^\$_pg_rendezvous_portable_\$\);$/ {inside = 0} inside' "$1"
}

# A control file as pg_tle makes one (not superuser-only) for default version $1.
pg_tle_control() {
  printf "comment = 'pg_rendezvous, portable edition, as pg_tle installs it'\ndefault_version = '%s'\nrelocatable = false\nsuperuser = false\n" "$1"
}

# The pg_tle form as pg_tle runs it: its content as the script of an extension that the owner
# (not superuser) creates, `superuser = false` as pg_tle's are (pg_tle itself is not packaged
# for this machine). Under another name, beside the native extension; removed afterwards.
pg_tle_form() {
  local extdir name=rendezvous_pg_tle_form version got status=0
  extdir=$("$PG_CONFIG" --sharedir)/extension
  version=$(extension_version)
  log "the portable edition's pg_tle form: CREATE EXTENSION by the database owner"
  pg_tle_content "$1" >"$RENDEZVOUS_CLUSTER_DIR/$name--$version.sql"
  pg_tle_control "$version" >"$RENDEZVOUS_CLUSTER_DIR/$name.control"
  as_root install -m 0644 "$RENDEZVOUS_CLUSTER_DIR/$name.control" "$RENDEZVOUS_CLUSTER_DIR/$name--$version.sql" "$extdir/"
  got=$(cluster_psql -d postgres -c "CREATE DATABASE rendezvous_pg_tle OWNER rendezvous_owner" \
        && cluster_psql -d rendezvous_pg_tle -U rendezvous_owner -c "CREATE EXTENSION $name" \
        && cluster_psql -d rendezvous_pg_tle -U rendezvous_owner -Atc "
    SELECT (SELECT edition || ' ' || version FROM rendezvous.edition()) || ', '
           || (SELECT count(*) FROM pg_catalog.pg_extension e, unnest(e.extconfig) c WHERE e.extname = '$name')
           || ' tables dumped with their rows, leader ' || (SELECT t.is_leader FROM rendezvous.try_lead('g', 'me') t)
           || ', winner ' || rendezvous.winner('k', ARRAY['a', 'b'])" 2>&1) || status=$?
  cluster_psql -d rendezvous_pg_tle -U rendezvous_owner -c "DROP EXTENSION IF EXISTS $name CASCADE" >/dev/null 2>&1 || true
  as_root rm -f "$extdir/$name.control" "$extdir/$name--$version.sql"
  if [ "$status" != 0 ] || [ "${got##*$'\n'}" != "portable $version, 8 tables dumped with their rows, leader true, winner b" ]; then
    echo "the pg_tle form installed as an extension answered: $got" >&2
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

# The version CREATE EXTENSION installs by default, from the installed control file.
extension_version() {
  sed -n "s/^default_version = '\(.*\)'/\1/p" "$("$PG_CONFIG" --sharedir)/extension/pg_rendezvous.control"
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
  if ! wait "$cli"; then
    cat "$cli_log" >&2
    exit 1
  fi
  cat "$cli_log"
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
