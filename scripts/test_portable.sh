#!/usr/bin/env bash
# The portable edition's tests, against the throwaway cluster `scripts/test.sh` runs on each
# major (inside `rendezvous cluster run`, which exports PGHOST, PGPORT, PGUSER and
# RENDEZVOUS_CLUSTER_DIR; PG_CONFIG and PG_MAJOR name the major, whose extension
# scripts/install.sh built and installed):
#   1. the portable script installed by a database owner that is not superuser, every pg_regress
#      suite but install against it (pg_test/portable/expected/ holds the documented
#      differences), and its writing helpers refused to a host;
#   2. the pg_tle form's content installed as an extension (superuser = false, as pg_tle's are);
#   3. the upgrade from each released portable version, in both forms.
# Every database and file it makes lives in the cluster's directory or is removed at the end.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"

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
  # Nor can it attach the hash keepers to a table of its own (0.3.0 let it, and they ran as the
  # owner: #39); and on any table but rendezvous.hosts they refuse to run, whoever attaches them.
  refused=$(cluster_psql -d rendezvous_portable -U rendezvous_portable_host \
              -c "CREATE TEMP TABLE mine (host_id text)" \
              -c "CREATE TRIGGER planted AFTER INSERT ON mine FOR EACH ROW EXECUTE FUNCTION rendezvous._host_joined()" 2>&1 || true)
  if [[ $refused != *"permission denied for function"*"_host_joined"* ]]; then
    echo "a member of rendezvous_host attached the portable edition's _host_joined to its own table: $refused" >&2
    exit 1
  fi
  refused=$(cluster_psql -d rendezvous_portable -U rendezvous_owner \
              -c "CREATE TEMP TABLE mine (host_id text)" \
              -c "CREATE TRIGGER planted AFTER INSERT ON mine FOR EACH ROW EXECUTE FUNCTION rendezvous._host_joined()" \
              -c "INSERT INTO mine VALUES ('x')" 2>&1 || true)
  if [[ $refused != *"runs on rendezvous.hosts only"* ]]; then
    echo "the portable edition's _host_joined ran on another table than rendezvous.hosts: $refused" >&2
    exit 1
  fi
  # A parsed schedule kept in a session setting is trusted only with the install's MAC: 0.3.0
  # trusted whatever the caller SET there, and a host made a yearly task fire every minute (#39).
  local forged planned
  forged=$(cluster_psql -d rendezvous_portable -U rendezvous_owner -Atc "SELECT rendezvous._cron_parse('* * * * *', 'UTC')")
  cluster_psql -d rendezvous_portable -U rendezvous_portable_host -o /dev/null \
    -c "SELECT set_config('rendezvous_cron.p' || md5('0 0 1 1 *' || chr(1) || 'UTC'), '$forged', false)" \
    -c "SELECT set_config('rendezvous_cron.p' || md5('0 0 1 2 *' || chr(1) || 'UTC'), repeat('0', 64) || ':$forged', false)" \
    -c "SELECT rendezvous.schedule_task('forged_jan', '0 0 1 1 *'), rendezvous.schedule_task('forged_feb', '0 0 1 2 *')"
  planned=$(cluster_psql -d rendezvous_portable -Atc "SELECT string_agg(t.task_id || ' ' || (t.next_fire_at =
      (SELECT min(f) FROM rendezvous.fire_times(t.schedule, 'UTC', t.created_at, t.created_at + interval '400 days') f))::text,
      ',' ORDER BY t.task_id) FROM rendezvous.tasks t WHERE t.task_id LIKE 'forged_%'")
  if [ "$planned" != "forged_feb true,forged_jan true" ]; then
    echo "a host's planted parse of a schedule changed when the owner's code planned its task: $planned" >&2
    exit 1
  fi
  cluster_psql -d rendezvous_portable -c "SELECT rendezvous.unschedule_task(t) FROM unnest(ARRAY['forged_jan', 'forged_feb']) t" >/dev/null
  headers_diff "$script"
  pg_tle_form "${script%-portable.sql}-pg_tle.sql"
  portable_upgrade_test "$script"
  planted_objects_test "$script"
}

# The portable scripts run no one else's code (hardening #63, item 1): a role with CREATE on
# `public` and on the database plants, in `public` and in the schema named after the installer
# (`"$user"`), a twin of every pg_catalog function and operator that an unqualified call could
# prefer (pg_test/portable/planted.sql). Each form then runs as the owner with the default
# search_path: the psql install, the pg_tle form's CREATE EXTENSION, the psql upgrade from each
# released portable version and its pg_tle update. Each must succeed with no twin run and no
# object of ours depending on one. 0.4.0 before its path was pinned ran the planted
# convert_to(text, text) as the owner and stored its answer as _cron_key.
planted_objects_test() {
  local script=$1 version released from upgrades extdir tle=rendezvous_tle_planted dir=$RENDEZVOUS_CLUSTER_DIR/planted
  version=$(extension_version)
  upgrades=$(dirname "$script")
  extdir=$("$PG_CONFIG" --sharedir)/extension
  mkdir -p "$dir"
  log "the portable scripts under planted objects: no function or operator of another role runs"
  cluster_psql -d postgres -c "CREATE ROLE rendezvous_intruder LOGIN"
  pg_tle_content "${script%-portable.sql}-pg_tle.sql" >"$dir/$tle--$version.sql"
  for from in $(released_portable_versions); do
    released=extension/portable/released/pg_rendezvous-$from-portable.sql
    pg_tle_content "${released%-portable.sql}-pg_tle.sql" >"$dir/$tle--$from.sql"
    pg_tle_content "$upgrades/pg_rendezvous-$from--$version-pg_tle.sql" >"$dir/$tle--$from--$version.sql"
  done
  pg_tle_control "$version" >"$dir/$tle.control"
  as_root install -m 0644 "$dir/$tle.control" "$dir/$tle"--*.sql "$extdir/"
  local status=0
  {
    planted_check psql_install -f "$script" &&
    planted_check pg_tle_install -c "CREATE EXTENSION $tle" &&
    for from in $(released_portable_versions); do
      released=extension/portable/released/pg_rendezvous-$from-portable.sql
      planted_check "psql_upgrade_${from//./_}" -f "$upgrades/pg_rendezvous-$from--$version-portable.sql" -f "$released" &&
      planted_check "pg_tle_upgrade_${from//./_}" -c "ALTER EXTENSION $tle UPDATE TO '$version'" \
        -c "CREATE EXTENSION $tle VERSION '$from'" || return 1
    done
  } || status=$?
  as_root rm -f "$extdir/$tle.control" "$extdir/$tle"--*.sql
  [ "$status" = 0 ] || exit 1
  log "no planted object ran or is used by the install, the pg_tle form, or the upgrades"
}

# planted_check NAME FLAG ARG [FLAG ARG]: in a new database, the owner runs the second pair (psql
# arguments: -f FILE or -c SQL), if given, the intruder plants, the owner runs the first; fails unless
# that step succeeded, no twin warned or wrote a row, and no object depends on a twin.
planted_check() {
  local db=rendezvous_planted_$1 out=$RENDEZVOUS_CLUSTER_DIR/planted/$1.log used
  local -a step=("$2" "$3") before=()
  [ $# -lt 5 ] || before=("$4" "$5")
  # (Called where errexit does not hold: every step says when it failed.)
  cluster_psql -d postgres -c "CREATE DATABASE $db OWNER rendezvous_owner" \
    -c "GRANT CREATE ON DATABASE $db TO rendezvous_intruder" || return 1
  cluster_psql -d "$db" -c "GRANT CREATE ON SCHEMA public TO rendezvous_intruder" || return 1
  if [ ${#before[@]} != 0 ]; then cluster_psql -d "$db" -U rendezvous_owner -o /dev/null "${before[@]}" || return 1; fi
  cluster_psql -d "$db" -U rendezvous_intruder -o /dev/null -v installer=rendezvous_owner \
    -f pg_test/portable/planted.sql || return 1
  if ! cluster_psql -d "$db" -U rendezvous_owner -o /dev/null "${step[@]}" >"$out" 2>&1 || grep -q "planted object" "$out"; then
    cat "$out" >&2
    echo "$1: the step failed or ran an object another role planted on the installer's search_path" >&2
    return 1
  fi
  used=$(cluster_psql -d "$db" -Atc "
    SELECT (SELECT count(*) FROM public.planted_calls) || ' calls, ' || count(*) || ' dependencies'
      FROM pg_catalog.pg_depend d
     WHERE ((d.refclassid = 'pg_catalog.pg_proc'::regclass
             AND d.refobjid IN (SELECT p.oid FROM pg_catalog.pg_proc p WHERE p.proowner = 'rendezvous_intruder'::regrole))
         OR (d.refclassid = 'pg_catalog.pg_operator'::regclass
             AND d.refobjid IN (SELECT o.oid FROM pg_catalog.pg_operator o WHERE o.oprowner = 'rendezvous_intruder'::regrole)))
       AND NOT (d.classid = 'pg_catalog.pg_operator'::regclass
             AND d.objid IN (SELECT o.oid FROM pg_catalog.pg_operator o WHERE o.oprowner = 'rendezvous_intruder'::regrole))") ||
    return 1
  cluster_psql -d postgres -c "DROP DATABASE $db" >/dev/null || return 1
  if [ "$used" != "0 calls, 0 dependencies" ]; then
    echo "$1: planted objects were called or are used by the install: $used" >&2
    return 1
  fi
}

# The drift net of the two editions' headers: every function of schema rendezvous, as callers
# see it (pg_test/portable/headers.sql), in a fresh native install and a fresh portable one
# (the script $1), matched by name and arguments. What differs must be exactly
# pg_test/portable/headers.allowed (rows of operations.md's "What differs"). Not differences: the
# portable edition's own helpers (named _…, which only it has), and a pinned search_path on a
# portable twin (the rule for every SQL body; a C function resolves no names).
headers_diff() {
  local dir=$RENDEZVOUS_CLUSTER_DIR/headers
  log "the editions' function headers: alike but for pg_test/portable/headers.allowed"
  mkdir -p "$dir"
  cluster_psql -d postgres -c "CREATE DATABASE rendezvous_headers_native" \
    -c "CREATE DATABASE rendezvous_headers_portable OWNER rendezvous_owner"
  cluster_psql -d rendezvous_headers_native -c "CREATE EXTENSION pg_rendezvous"
  cluster_psql -d rendezvous_headers_portable -U rendezvous_owner -o /dev/null -f "$1"
  cluster_psql -d rendezvous_headers_native -f pg_test/portable/headers.sql >"$dir/native"
  cluster_psql -d rendezvous_headers_portable -f pg_test/portable/headers.sql >"$dir/portable"
  awk '
    function key(line) { return substr(line, 1, index(line, " -> ") - 1) }
    FNR == NR { native[key($0)] = $0; next }
    {
      k = key($0); seen[k] = 1; line = $0
      if (k in native && index(native[k], " SET search_path") == 0) sub(/ SET search_path=pg_catalog, pg_temp/, "", line)
      if (k in native) { if (native[k] != line) print "- " native[k] "\n+ " line }
      else if (substr(k, 1, 1) != "_") print "+ " line
    }
    END { for (k in native) if (!(k in seen)) print "- " native[k] }
  ' "$dir/native" "$dir/portable" >"$dir/differ"
  if ! diff -u <(grep -v '^#' pg_test/portable/headers.allowed | grep .) "$dir/differ" >&2; then
    echo "the editions' function headers differ otherwise than pg_test/portable/headers.allowed says" \
         "(- allowed, + found; each pair: - native, + portable)" >&2
    exit 1
  fi
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
  for from in $(released_portable_versions); do
    released=extension/portable/released/pg_rendezvous-$from-portable.sql
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
  # The databases go with their extension (its files are removed next).
  for db in rendezvous_tle_upgraded rendezvous_tle_fresh; do
    cluster_psql -d postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  done
  as_root rm -f "$extdir/$name.control" "$extdir/$name--$from.sql" "$extdir/$name--$from--$to.sql" "$extdir/$name--$to.sql"
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

# The released portable versions (extension/portable/released/, install scripts only), one a line.
released_portable_versions() {
  local released from
  for released in extension/portable/released/pg_rendezvous-*-portable.sql; do
    from=$(basename "$released" -portable.sql); from=${from#pg_rendezvous-}
    [[ $from == *--* ]] || echo "$from"
  done
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
  if [ "$status" != 0 ] || [ "${got##*$'\n'}" != "portable $version, 17 tables dumped with their rows, leader true, winner b" ]; then
    echo "the pg_tle form installed as an extension answered: $got" >&2
    exit 1
  fi
}

portable_suites
