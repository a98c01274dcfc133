# Shared shell helpers for pg_rendezvous's scripts: sourced, not run.
# Throwaway clusters are not made here: `rendezvous cluster run -- COMMAND` (cli/src/cluster.rs)
# starts one, runs COMMAND against it, and stops and removes it however COMMAND ends.

PG_MAJOR=15
# The one place the scripts choose PostgreSQL: every program comes from `$PG_CONFIG --bindir`.
# Exported, so that the rendezvous command (which reads PG_CONFIG too) uses the same one.
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}
export PG_CONFIG
ROOT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The rendezvous command as cargo builds it (`cargo build -p rendezvous-cli`).
RENDEZVOUS=${CARGO_TARGET_DIR:-$ROOT_DIR/target}/debug/rendezvous

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# PostgreSQL's binary directory, and its pgxs directory (pg_regress, pg_isolation_regress).
pg_bindir() { "$PG_CONFIG" --bindir; }
pgxs_dir() { dirname "$(dirname "$("$PG_CONFIG" --pgxs)")"; }

# psql against the cluster in PGHOST/PGPORT/PGUSER (what `rendezvous cluster run` exports).
cluster_psql() {
  "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 "$@"
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
