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
case "${1:-}" in
  --release) profile=release ;;
  "") ;;
  *) echo "usage: scripts/install.sh [--release]" >&2; exit 2 ;;
esac

out=$(package_extension "$profile")

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
