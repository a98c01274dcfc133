#!/bin/sh
# Installs this pg_rendezvous package into a PostgreSQL of the major it was built for:
#   sudo ./install.sh                                   (the pg_config on PATH)
#   sudo PG_CONFIG=/usr/lib/postgresql/17/bin/pg_config ./install.sh
# Every file is written beside its destination under a temporary name and renamed into place,
# so a server that has the old pg_rendezvous.so loaded keeps running (overwriting a loaded
# library in place crashes its backends). Then run `ALTER EXTENSION pg_rendezvous UPDATE;` in
# each database that has it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
want=$(cat "$here/PG_MAJOR")
have=$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
if [ "$have" != "$want" ]; then
  echo "install.sh: this package is for PostgreSQL $want, but $PG_CONFIG is PostgreSQL $have: use the package for $have, or set PG_CONFIG" >&2
  exit 1
fi
libdir=$("$PG_CONFIG" --pkglibdir)
extdir=$("$PG_CONFIG" --sharedir)/extension
put() {
  tmp="$2/.$(basename "$1").new.$$"
  cp "$1" "$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$2/$(basename "$1")"
}
put "$here/lib/pg_rendezvous.so" "$libdir"
for f in "$here"/extension/*; do put "$f" "$extdir"; done
echo "installed pg_rendezvous into PostgreSQL $have ($libdir, $extdir)"
