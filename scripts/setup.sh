#!/usr/bin/env bash
# Installs everything pg_rendezvous needs on a fresh Debian 12 machine, and skips what is
# already there: Debian packages (pinned to the installed server's version), sudo (pgrx's
# --runas needs it), the cargo-pgrx that matches the pinned pgrx, and `cargo pgrx init`
# against the system pg_config (nothing is downloaded from outside the package registries).
set -euo pipefail
# PG_MAJOR and PG_CONFIG (the one place they are chosen), as_root.
source "$(dirname "$0")/lib.sh"

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
# pg_auto_failover (monitor extension and pg_autoctl): `rendezvous fleet --ha` and its test.
for p in libclang-dev clang pkg-config libssl-dev build-essential sudo pgbouncer postgresql-$PG_MAJOR-plpgsql-check \
         postgresql-$PG_MAJOR-cron chromium fonts-dejavu-core postgresql-$PG_MAJOR-auto-failover pg-auto-failover-cli; do
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

# 2. An unprivileged OS user for PostgreSQL (the server refuses to run as root).
id postgres >/dev/null 2>&1 || as_root useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres

# 3. cargo-pgrx, exactly the pinned version.
if cargo pgrx --version 2>/dev/null | grep -qx "cargo-pgrx $PGRX_VERSION"; then
  log "cargo-pgrx $PGRX_VERSION present"
else
  log "installing cargo-pgrx $PGRX_VERSION (a few minutes)"
  cargo install cargo-pgrx --version "=$PGRX_VERSION" --locked --quiet
fi

# 4. pgrx init against the system PostgreSQL; never downloads sources.
if grep -qs "pg$PG_MAJOR = \"$PG_CONFIG\"" "$HOME/.pgrx/config.toml"; then
  log "pgrx already initialised for pg$PG_MAJOR"
else
  cargo pgrx init --pg$PG_MAJOR "$PG_CONFIG" >/dev/null
fi

# 5. The extension's install directories must be writable by whoever runs `cargo pgrx install`.
log "done"
