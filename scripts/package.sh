#!/usr/bin/env bash
# Builds installable release packages of pg_rendezvous, one per PostgreSQL major:
#   scripts/package.sh [MAJOR ...]        (default: 15 16 17 18)
# Each is target/packages/pg_rendezvous-<version>-pg<major>-linux-x86_64.tar.gz holding the
# library, the control file, every install and upgrade script, and install.sh
# (scripts/install-package.sh), which installs them into an operator's PostgreSQL of that
# major by writing each file under a temporary name and renaming it into place. Beside them,
# the portable edition for servers that load no library (docs/operations.md):
# pg_rendezvous-<version>-portable.sql (psql) and pg_rendezvous-<version>-pg_tle.sql.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=("${PG_MAJORS_ALL[@]}")
"$ROOT_DIR/scripts/setup.sh"
mkdir -p target/packages
rm -f target/packages/pg_rendezvous-*-portable.sql target/packages/pg_rendezvous-*-pg_tle.sql
for major in "${majors[@]}"; do
  use_pg_major "$major"
  out=$(package_extension release)
  libdir=$("$PG_CONFIG" --pkglibdir)
  extdir=$("$PG_CONFIG" --sharedir)/extension
  version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$out$extdir/pg_rendezvous.control")
  name=pg_rendezvous-$version-pg$major-linux-x86_64
  stage=$(mktemp -d)
  mkdir -p "$stage/$name/lib" "$stage/$name/extension"
  cp "$out$libdir/pg_rendezvous.so" "$stage/$name/lib/"
  cp sql/pg_rendezvous--*.sql "$stage/$name/extension/"
  cp -f "$out$extdir"/pg_rendezvous* "$stage/$name/extension/"
  cp scripts/install-package.sh "$stage/$name/install.sh"
  echo "$major" >"$stage/$name/PG_MAJOR"
  tar -czf "target/packages/$name.tar.gz" -C "$stage" "$name"
  rm -rf "$stage"
  log "target/packages/$name.tar.gz"
  # The portable edition (no library, any major): from the first major's install script.
  if [ ! -e "target/packages/pg_rendezvous-$version-portable.sql" ]; then
    cp "$out/portable/pg_rendezvous-$version-portable.sql" "$out/portable/pg_rendezvous-$version-pg_tle.sql" target/packages/
    log "target/packages/pg_rendezvous-$version-portable.sql and -pg_tle.sql"
  fi
done
