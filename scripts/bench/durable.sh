#!/usr/bin/env bash
# `scripts/bench.sh durable`: durable runs beside DBOS Transact (the Python `dbos` package, its
# self-hosted configuration: its system database on this cluster, no Conductor), the same
# workflow of three trivial steps on both. What it measures and how is at the top of
# client/benches/peers/durable.py: throughput from 4 host processes at 1, 4 and 16 workflows at
# once each (workflows/s, step checkpoint latency p50/p99), and recovery after a SIGKILL of a
# host in the middle of its workflows (time to resume, steps re-executed).
#
# The dbos package and its dependencies are pinned in client/benches/peers/requirements-dbos.txt
# and installed with pip into a venv in target/bench-dbos (reused while the file is the same),
# with Debian's python3 (python3-venv, which scripts/setup.sh does not install: this installs it
# when missing). `durable.sh throughput` or `durable.sh recovery` runs one part. Run under
# `rendezvous cluster run`, as scripts/bench.sh does.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
peers=$ROOT_DIR/client/benches/peers
cache=${CARGO_TARGET_DIR:-$ROOT_DIR/target}/bench-dbos
db=bench_durable

cleanup() { cluster_psql -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; }
trap cleanup EXIT

if ! /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
  log "durable: installing python3-venv"
  as_root apt-get install -y -q python3-venv >/dev/null
fi
if [ -x "$cache/venv/bin/python" ] && cmp -s "$peers/requirements-dbos.txt" "$cache/installed-requirements.txt"; then
  log "durable: reusing the dbos venv in $cache"
else
  log "durable: pip install of requirements-dbos.txt into $cache/venv"
  rm -rf "$cache/venv" "$cache/installed-requirements.txt"
  mkdir -p "$cache"
  /usr/bin/python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install -q --disable-pip-version-check -r "$peers/requirements-dbos.txt"
  cp "$peers/requirements-dbos.txt" "$cache/installed-requirements.txt"
fi
log "durable: building the benchmark's host (release)"
cargo build --quiet --release -p rendezvous-tests --bin durable_host
cluster_psql -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null
cluster_psql -d "$db" -c "CREATE EXTENSION pg_rendezvous" >/dev/null
log "durable: pg_rendezvous beside DBOS Transact $(sed -n 's/^dbos==//p' "$peers/requirements-dbos.txt") (4 hosts)"
"$cache/venv/bin/python" "$peers/durable.py" "postgresql://$PGUSER@$PGHOST:$PGPORT/$db" \
  "${CARGO_TARGET_DIR:-$ROOT_DIR/target}/release/durable_host" "$@"
