# Shared shell helpers for pg_rendezvous's scripts: sourced, not run.
# A throwaway PostgreSQL cluster in a temp dir, on its own port, with its unix socket in that
# dir, run as an unprivileged user (PostgreSQL refuses root), stopped on exit even on failure.

PG_MAJOR=15
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PG_CONFIG=$PG_BIN/pg_config
PGXS_DIR=$($PG_CONFIG --pgxs | xargs dirname | xargs dirname)
ROOT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# Runs a command as the PostgreSQL OS user when we are root, else as ourselves.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# cluster_start [extra postgres -c settings...]
# Sets CLUSTER_DIR, CLUSTER_PORT, CLUSTER_DATA, DATABASE_URL; stops the cluster on EXIT.
cluster_start() {
  CLUSTER_DIR=$(mktemp -d /var/tmp/rendezvous-cluster.XXXXXX)
  [ "$(id -u)" = 0 ] && chown postgres: "$CLUSTER_DIR"
  CLUSTER_DATA=$CLUSTER_DIR/data
  CLUSTER_PORT=$(free_port)
  trap cluster_stop EXIT
  as_pg "$PG_BIN/initdb" -D "$CLUSTER_DATA" --auth=trust --username=postgres -E UTF8 \
    --locale=C.UTF-8 --no-sync >"$CLUSTER_DIR/initdb.log" 2>&1 \
    || { cat "$CLUSTER_DIR/initdb.log" >&2; return 1; }
  local opts="-p $CLUSTER_PORT -k $CLUSTER_DIR -c listen_addresses=127.0.0.1 -c max_connections=300"
  for setting in "$@"; do opts="$opts -c $setting"; done
  CLUSTER_OPTS=$opts
  as_pg "$PG_BIN/pg_ctl" -D "$CLUSTER_DATA" -l "$CLUSTER_DIR/server.log" -o "$opts" -w -s start \
    || { cat "$CLUSTER_DIR/server.log" >&2; return 1; }
  DATABASE_URL="postgresql://postgres@127.0.0.1:$CLUSTER_PORT/postgres"
  export CLUSTER_DIR CLUSTER_DATA CLUSTER_PORT CLUSTER_OPTS DATABASE_URL
  log "throwaway PostgreSQL $PG_MAJOR on port $CLUSTER_PORT (data in $CLUSTER_DATA)"
}

cluster_stop() {
  local rc=$?
  if [ -n "${CLUSTER_DATA:-}" ] && [ -f "$CLUSTER_DATA/postmaster.pid" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$CLUSTER_DATA" -m immediate -w -s stop >/dev/null 2>&1 || true
  fi
  [ -n "${CLUSTER_DIR:-}" ] && rm -rf "$CLUSTER_DIR"
  CLUSTER_DATA=
  return $rc
}

# psql against the throwaway cluster.
cluster_psql() {
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$CLUSTER_PORT" -U postgres "$@"
}

# Runs a command as root (through sudo when we are not root).
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Installs the extension into the system PostgreSQL (profile: dev or release), renaming each
# file into place (see scripts/install.sh).
install_extension() {
  if [ "${1:-dev}" = release ]; then "$ROOT_DIR/scripts/install.sh" --release; else "$ROOT_DIR/scripts/install.sh"; fi
}
