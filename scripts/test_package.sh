#!/usr/bin/env bash
# The Debian packages install as a user installs them, into a clean Debian 12 root:
#   scripts/test_package.sh
# Builds the packages for Debian's PostgreSQL 15 (scripts/package.sh --profile dev 15: the debug
# builds the suite made already), makes a minimal Debian 12 root from Debian's own packages
# (debootstrap --variant=minbase), installs them there with `apt-get install ./….deb` (which
# brings postgresql-15 from Debian), then in that root: starts a server on a Unix socket only,
# creates the extension as a database user would, checks its version, runs `rendezvous check`
# from the package's binary, and installs the portable edition into another database as its
# owner (not a superuser) with the packaged `rendezvous install --portable`. Needs root (or
# sudo) for debootstrap and chroot, and Debian's mirror (DEBIAN_MIRROR, default
# http://deb.debian.org/debian). The root, its mounts and its server are gone on exit, failure
# included.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
major=$DEBIAN_PG_MAJOR
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

"$ROOT_DIR/scripts/package.sh" --profile dev "$major"
version=$("$RENDEZVOUS" --version | awk '{print $2}')
debs=("postgresql-$major-pg-rendezvous_${version}_amd64.deb" "rendezvous-cli_${version}_amd64.deb")

root=$(realpath "$(mktemp -d /var/tmp/rendezvous-debroot.XXXXXX)")
chmod 0755 "$root" # the root's /, which mktemp makes private
bin=/usr/lib/postgresql/$major/bin
# Runs a command in the root as the postgres user there; psql there, on the server it starts.
in_root_as_postgres() { as_root chroot "$root" su postgres -s /bin/sh -c "$1"; }
psql="$bin/psql -X -h /tmp -p 5999"
cleanup() {
  if [ -e "$root/tmp/pgdata/postmaster.pid" ]; then
    in_root_as_postgres "$bin/pg_ctl -D /tmp/pgdata -m immediate stop" >/dev/null 2>&1 || true
  fi
  as_root umount "$root/proc" 2>/dev/null || true
  as_root umount "$root/dev" 2>/dev/null || true
  if grep -qs " $root/" /proc/mounts; then
    echo "test_package.sh: $root still has mounts; left in place" >&2
  else
    as_root rm -rf --one-file-system "$root"
  fi
}
trap cleanup EXIT

log "a clean Debian 12 root (debootstrap --variant=minbase bookworm $mirror) in $root"
if ! as_root debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1; then
  tail -20 "$root.debootstrap.log" >&2
  exit 1
fi
rm -f "$root.debootstrap.log"
as_root mount --bind /dev "$root/dev"
as_root mount -t proc proc "$root/proc"
as_root cp /etc/resolv.conf "$root/etc/resolv.conf"
# No service starts in the root (the package scripts of postgresql-15 would start its cluster).
printf '#!/bin/sh\nexit 101\n' | as_root tee "$root/usr/sbin/policy-rc.d" >/dev/null
as_root chmod 0755 "$root/usr/sbin/policy-rc.d"
as_root mkdir -p "$root/tmp/packages"
for deb in "${debs[@]}"; do as_root cp "target/packages/$deb" "$root/tmp/packages/"; done

log "apt-get install ./${debs[0]} ./${debs[1]} in the clean root"
as_root chroot "$root" apt-get update -qq
if ! as_root chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
     "${debs[@]/#//tmp/packages/}" >"$root/tmp/apt.log" 2>&1; then
  cat "$root/tmp/apt.log" >&2
  exit 1
fi
for f in "/usr/lib/postgresql/$major/lib/pg_rendezvous.so" "/usr/share/postgresql/$major/extension/pg_rendezvous.control" /usr/bin/rendezvous; do
  [ -e "$root$f" ] || { echo "test_package.sh: the packages did not install $f" >&2; exit 1; }
done

log "the packaged extension in a server of the clean root, and the packaged rendezvous check"
in_root_as_postgres "$bin/initdb -D /tmp/pgdata -A trust -U postgres" >/dev/null
in_root_as_postgres "$bin/pg_ctl -D /tmp/pgdata -l /tmp/pgdata.log -w -o \"-c listen_addresses='' -k /tmp -p 5999\" start" >/dev/null
in_root_as_postgres "$psql -q -v ON_ERROR_STOP=1 -d postgres -c 'CREATE EXTENSION pg_rendezvous'"
got=$(in_root_as_postgres "$psql -At -d postgres -c \"SELECT extversion FROM pg_extension WHERE extname = 'pg_rendezvous'\"")
[ "$got" = "$version" ] || { echo "test_package.sh: CREATE EXTENSION made version '$got', not $version" >&2; exit 1; }
if ! in_root_as_postgres "rendezvous check --database-url 'host=/tmp port=5999 user=postgres dbname=postgres'"; then
  echo "test_package.sh: the packaged rendezvous check did not answer ready" >&2
  exit 1
fi
# The portable edition, as a managed service's database owner would install it: the packaged
# command and its scripts, no psql script run by hand.
in_root_as_postgres "$psql -q -v ON_ERROR_STOP=1 -d postgres -c 'CREATE ROLE app_owner LOGIN CREATEROLE' -c 'CREATE DATABASE app OWNER app_owner'"
got=$(in_root_as_postgres "rendezvous install --portable --database-url 'host=/tmp port=5999 user=app_owner dbname=app'")
echo "$got"
[[ $got == "installed pg_rendezvous $version (portable edition) in database app as app_owner"* ]] || {
  echo "test_package.sh: the packaged rendezvous install --portable did not install" >&2
  exit 1
}
log "the packages install into a clean Debian 12 and work: ${debs[*]}"
