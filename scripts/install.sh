#!/usr/bin/env bash
# Builds pg_rendezvous and installs it into a PostgreSQL (15 to 18; Debian's 15 unless
# PG_CONFIG names another's pg_config):
#   scripts/install.sh [--release]        (default: the dev build)
#   PG_CONFIG=/usr/lib/postgresql/17/bin/pg_config scripts/install.sh --release
# Every file is written beside its destination under a temporary name and renamed into place,
# so a running server that has the old pg_rendezvous.so loaded keeps its (unlinked) copy:
# overwriting a loaded shared library in place, as `cp` does, crashes its backends (SIGBUS).
# Installs the current version's generated install script, the frozen install scripts of
# released versions and every upgrade script under sql/.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

profile=dev
flags=(--debug)
case "${1:-}" in
  --release) profile=release; flags=() ;;
  "") ;;
  *) echo "usage: scripts/install.sh [--release]" >&2; exit 2 ;;
esac

log "building pg_rendezvous ($profile) for PostgreSQL $PG_MAJOR"
out=$ROOT_DIR/target/package-$profile-pg$PG_MAJOR
(cd "$ROOT_DIR/extension" && cargo pgrx package --pg-config "$PG_CONFIG" "${flags[@]}" --out-dir "$out" >/dev/null)

libdir=$("$PG_CONFIG" --pkglibdir)
extdir=$("$PG_CONFIG" --sharedir)/extension

# install_file SOURCE DESTINATION: copy under a temporary name, then rename over DESTINATION.
install_file() {
  local tmp
  tmp="$(dirname "$2")/.$(basename "$2").new.$$"
  as_root install -m 0644 "$1" "$tmp"
  as_root mv -f "$tmp" "$2"
}

install_file "$out$libdir/pg_rendezvous.so" "$libdir/pg_rendezvous.so"
for f in "$out$extdir"/pg_rendezvous* "$ROOT_DIR"/sql/pg_rendezvous--*.sql; do
  install_file "$f" "$extdir/$(basename "$f")"
done
log "installed pg_rendezvous $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$out$extdir/pg_rendezvous.control") into $extdir"
