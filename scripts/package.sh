#!/usr/bin/env bash
# Builds installable packages of pg_rendezvous into target/packages/:
#   scripts/package.sh [--profile dev] [MAJOR ...]     (default: release builds, 15 16 17 18)
# For each PostgreSQL major:
#   postgresql-<major>-pg-rendezvous_<version>_amd64.deb   a Debian package in PGDG's naming and
#       layout (/usr/lib/postgresql/<major>/lib, /usr/share/postgresql/<major>/extension),
#       depending on that major's server package (postgresql-<major>, as Debian and
#       apt.postgresql.org name it) and on rendezvous-cli of the same version;
#   pg_rendezvous-<version>-pg<major>-linux-x86_64.tar.gz  the same files with install.sh
#       (scripts/install-package.sh), which installs them into any PostgreSQL of that major by
#       writing each file under a temporary name and renaming it into place.
# Once:
#   rendezvous-cli_<version>_amd64.deb and rendezvous-<version>-linux-x86_64.tar.gz: the
#       `rendezvous` command (/usr/bin/rendezvous; bin/ in the tarball), a package of its own
#       so that packages of several majors install side by side, as PGDG's
#       pg-auto-failover-cli, with the portable edition's install and upgrade scripts in
#       share/rendezvous/portable/ for `rendezvous install --portable`;
#   pg_rendezvous-<version>-portable.sql (psql) and pg_rendezvous-<version>-pg_tle.sql: the
#       portable edition, for servers that load no library (docs/operations.md).
# `--profile dev` packages the debug builds (what scripts/test_package.sh installs and checks).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
profile=release
if [ "${1:-}" = --profile ]; then
  profile=${2:?--profile needs dev or release}
  shift 2
fi
case "$profile" in dev | release) ;; *) echo "package.sh: --profile dev or release" >&2; exit 2 ;; esac
majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=("${PG_MAJORS_ALL[@]}")
"$ROOT_DIR/scripts/setup.sh"
out_dir=target/packages
mkdir -p "$out_dir"

# deb_depends FILE...: the shared libraries' packages the files need (dpkg-shlibdeps).
deb_depends() {
  local dir depends
  dir=$(mktemp -d)
  mkdir "$dir/debian"
  printf 'Source: pg-rendezvous\n\nPackage: pg-rendezvous\nArchitecture: any\n' >"$dir/debian/control"
  depends=$(cd "$dir" && dpkg-shlibdeps -O "$@" | sed -n 's/^shlibs:Depends=//p')
  rm -rf "$dir"
  [ -n "$depends" ] || { echo "package.sh: dpkg-shlibdeps found no dependencies for $*" >&2; return 1; }
  echo "$depends"
}

# make_deb ROOT PACKAGE VERSION DEPENDS SUMMARY DESCRIPTION: ROOT (the files at their installed
# paths) as $out_dir/PACKAGE_VERSION_amd64.deb.
make_deb() {
  local root=$1 package=$2 version=$3 depends=$4 summary=$5 description=$6
  mkdir -p "$root/DEBIAN"
  cat >"$root/DEBIAN/control" <<EOF
Package: $package
Version: $version
Architecture: amd64
Maintainer: pg_rendezvous developers <pg-rendezvous@users.noreply.github.com>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends
Section: database
Priority: optional
Description: $summary
$(echo "$description" | fold -s -w 78 | sed 's/^/ /; s/ *$//')
EOF
  dpkg-deb --root-owner-group -Zxz --build "$root" "$out_dir/${package}_${version}_amd64.deb" >/dev/null
  log "$out_dir/${package}_${version}_amd64.deb"
}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
portable=""
rm -f "$out_dir"/pg_rendezvous-*-portable.sql "$out_dir"/pg_rendezvous-*-pg_tle.sql
for major in "${majors[@]}"; do
  use_pg_major "$major"
  out=$(package_extension "$profile")
  libdir=$("$PG_CONFIG" --pkglibdir)
  extdir=$("$PG_CONFIG" --sharedir)/extension
  ext_version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$out$extdir/pg_rendezvous.control")
  [ "$ext_version" = "$version" ] || { echo "package.sh: extension $ext_version, workspace $version" >&2; exit 1; }

  # The Debian package: PGDG's paths for this major, whatever this build's pg_config says.
  root=$stage/pg$major
  install -D -m 0644 "$out$libdir/pg_rendezvous.so" "$root/usr/lib/postgresql/$major/lib/pg_rendezvous.so"
  mkdir -p "$root/usr/share/postgresql/$major/extension"
  install -m 0644 sql/pg_rendezvous--*.sql "$root/usr/share/postgresql/$major/extension/"
  install -m 0644 "$out$extdir"/pg_rendezvous* "$root/usr/share/postgresql/$major/extension/"
  libs=$(deb_depends "$root/usr/lib/postgresql/$major/lib/pg_rendezvous.so")
  make_deb "$root" "postgresql-$major-pg-rendezvous" "$version" "postgresql-$major, rendezvous-cli (= $version), $libs" \
    "coordination for a fleet of hosts through PostgreSQL $major" \
    "pg_rendezvous: rendezvous (HRW) dispatch over a live host set, idempotent run admission by dispatch key, leader claims with fencing epochs, exactly-once firings, and runs executed exactly once. CREATE EXTENSION pg_rendezvous in each database; docs/operations.md says which roles a host needs."

  # The tarball: the same files as the Debian package's, and install.sh.
  name=pg_rendezvous-$version-pg$major-linux-x86_64
  mkdir -p "$stage/$name/lib"
  cp "$root/usr/lib/postgresql/$major/lib/pg_rendezvous.so" "$stage/$name/lib/"
  cp -r "$root/usr/share/postgresql/$major/extension" "$stage/$name/"
  cp scripts/install-package.sh "$stage/$name/install.sh"
  echo "$major" >"$stage/$name/PG_MAJOR"
  tar -czf "$out_dir/$name.tar.gz" -C "$stage" "$name"
  log "$out_dir/$name.tar.gz"
  # The portable edition (no library, any major): from the first major's install script.
  if [ -z "$portable" ]; then
    portable=$stage/portable
    cp -r "$out/portable" "$portable"
    cp "$portable/pg_rendezvous-$version-portable.sql" "$portable/pg_rendezvous-$version-pg_tle.sql" "$out_dir/"
    log "$out_dir/pg_rendezvous-$version-portable.sql and -pg_tle.sql"
  fi
done

# The rendezvous command, once, with the portable edition's scripts (this version's install
# script and the upgrade scripts to it) where `rendezvous install --portable` looks for them.
log "building the rendezvous command ($profile)"
if [ "$profile" = release ]; then cargo build --quiet --release -p rendezvous-cli; else cargo build --quiet -p rendezvous-cli; fi
cli=$TARGET_DIR/$([ "$profile" = release ] && echo release || echo debug)/rendezvous
[ "$("$cli" --version | awk '{print $2}')" = "$version" ] || { echo "package.sh: the command is not $version" >&2; exit 1; }
install -D -m 0755 "$cli" "$stage/cli/usr/bin/rendezvous"
install -D -m 0644 README.md "$stage/cli/usr/share/doc/rendezvous-cli/README.md"
mkdir -p "$stage/cli/usr/share/rendezvous/portable"
install -m 0644 "$portable/pg_rendezvous-$version-portable.sql" "$portable"/pg_rendezvous-*--"$version"-portable.sql \
  "$stage/cli/usr/share/rendezvous/portable/"
libs=$(deb_depends "$stage/cli/usr/bin/rendezvous")
make_deb "$stage/cli" rendezvous-cli "$version" "$libs" \
  "the rendezvous command for pg_rendezvous" \
  "Shows a database's coordination status (rendezvous status, dashboard, check), steers it (rendezvous admin), installs or upgrades the portable edition as a database's owner (rendezvous install --portable), and runs a fleet of hosts under chaos against a throwaway PostgreSQL (rendezvous fleet, cluster run)."
# The same as a plain binary: bin/rendezvous and share/rendezvous/portable/.
tarball=rendezvous-$version-linux-x86_64
mkdir -p "$stage/tar/$tarball/bin" "$stage/tar/$tarball/share"
cp "$cli" "$stage/tar/$tarball/bin/"
cp README.md "$stage/tar/$tarball/"
cp -r "$stage/cli/usr/share/rendezvous" "$stage/tar/$tarball/share/"
tar -czf "$out_dir/$tarball.tar.gz" -C "$stage/tar" "$tarball"
log "$out_dir/$tarball.tar.gz"
