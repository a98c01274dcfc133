#!/usr/bin/env bash
# Costs that must not grow with history (#25), run by `scripts/bench.sh scale` on its cluster
# (DATABASE_URL, with pg_rendezvous): the time of `rendezvous status --json` (what the
# dashboard reads every 2 s) and `--prometheus`, beside the same reads through the 0.2.0 view
# definitions (O(history): a stamped clock, per-task scans of the whole history, one pg_locks
# read per group), at growing sizes of history, hosts and leader groups. Each figure is the
# median of 3 runs, in milliseconds.
#   SCALE_FIRINGS="0 1000000 10000000"  firings (and as many runs) to grow to
#   SCALE_HOSTS="100 1000 10000"        hosts, SCALE_GROUPS="100 1000 5000" leader groups (held)
#   SCALE_FLEETS="1000 10000"           simulated Scheduler fleets for the membership part
#   SCALE_CHURN="0 0.5"                 % of their ticks on which those hosts return after a silence
#   SCALE_PARTS="status membership firings retention days claims leaders wal"  which parts to run
#   SCALE_CLAIM_HOSTS="11 1001 10001", SCALE_CLAIM_PENDING="2000 100000"  the claims part's sizes
#   SCALE_RETENTION=5000000             old finished rows (half firings, half runs) to prune
#   SCALE_WAL_TASKS=1000                per-second tasks of the wal part
# Membership: every simulated host heartbeats and looks at the live set every 2 s (pgbench at
# hosts / 2 transactions a second for 30 s, 8 clients each going round its eighth of the hosts,
# so each host ticks every 2 s): as 0.2.0's Scheduler did (the whole set each time), as
# 0.3.0's LiveView did (live_members_since: the whole set again on any change) and as a
# LiveView does now (live_members_delta: the changes); each client keeps its view for a
# heartbeat round, as old as a host's is at its next look; with SCALE_CHURN % of ticks a
# return after a silence. The database's CPU and the ticks served. First the tick's two calls
# apart, as 0.3.0 made them and as this version does: a heartbeat, and a look that finds nothing
# changed (membership_calls).
# Firings: the calls on one firing, as 0.3.0 made them and as this version does, each in a
# database of its own: 800 firings a second for 30 s from 4 clients, each claimed by
# claim_firing and then renewed, asserted and completed (half of them), released (a quarter) or
# failed (a quarter), one call a statement as a SQL user makes them; server CPU per firing and
# each sequence's latency. Then, with 200 per-second tasks scheduled and their firings made,
# next_due_at (what a scheduler asks when it polls) for 10 s on one session (firing_calls).
# Claims: claim_runs by a live host that ranks late for nearly every run (one of N live hosts),
# and by a host that is not live, with P fresh pending runs; then with 10,000 runs running
# (held by a live session) and none runnable. A host calls claim_runs again and again on one
# session: each figure is the median of 9 calls in one session after 6 untimed ones (the first
# plans the function's statements; from the sixth PL/pgSQL may keep a generic plan), each call
# rolled back to a savepoint, in a transaction where the hosts heartbeat first; then the
# maximum of the 9, in milliseconds.
# Leaders: a follower's try_lead (the lock held by another session) beside leader(), which
# reads pg_locks, with SCALE_GROUPS groups held by one session: milliseconds of one call, the
# mean over 200 calls in one session (a follower asks at every refresh); and a claim that takes
# a new group's lock (counting the lock table's entries: the guard) with its resign, the mean
# over 50. Natively, and in the portable edition when RENDEZVOUS_PORTABLE_SCRIPT names its script.
# Retention: admissions (spawn_run at 200 a second from 4 clients) timed before, during and
# after a retention pass over SCALE_RETENTION old finished rows made as a fleet makes it
# (prune(1000) steps, 50 ms apart), with the WAL it wrote; then the same rows again deleted as
# 0.2.0 could, by purge_runs and purge_firings (one statement each); then again by
# `rendezvous admin purge` (their bounded forms, 1,000 rows a step, 50 ms apart).
# Days: as many firings alone, of one day, which a retention pass empties with their partition
# (0.4.0), admissions timed as above.
# WAL: what a firing writes, per step of its life, as 0.3.0 wrote it and as this version does,
# each in a database of its own: SCALE_WAL_TASKS per-second tasks (overlap allowed), 12 seconds
# of their firings made by due_firings, claimed by claim_firings and completed by
# complete_firings in batches of 100 (each a transaction), as a Worker does; bytes of WAL per
# firing (pg_current_wal_lsn around each step, full-page images included), how many claims
# were HOT updates (wrote no index; a completion never is one: it leaves the unfinished
# firings' indexes), and the firings table's size.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$ROOT_DIR"
: "${DATABASE_URL:?run through scripts/bench.sh scale}"
firings_sizes=(${SCALE_FIRINGS:-0 1000000 10000000})
host_sizes=(${SCALE_HOSTS:-100 1000 10000})
group_sizes=(${SCALE_GROUPS:-100 1000 5000})
fleet_sizes=(${SCALE_FLEETS:-1000 10000})
churn_rates=(${SCALE_CHURN:-0 0.5})
parts=" ${SCALE_PARTS:-status membership firings retention days claims leaders wal} "
claim_hosts=(${SCALE_CLAIM_HOSTS:-11 1001 10001})
claim_pending=(${SCALE_CLAIM_PENDING:-2000 100000})
retention_rows=${SCALE_RETENTION:-5000000}
psql_() { "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL" "$@"; }

# CPU seconds the server has used so far: the postmaster's exited children and the live ones.
# After a second's pause: a backend still exiting when its client is done would be counted
# neither among the live children nor yet in the postmaster's exited ones.
server_cpu() {
  local pm hz ticks
  sleep 1
  hz=$(getconf CLK_TCK)
  pm=$(head -1 "$RENDEZVOUS_CLUSTER_DIR/data/postmaster.pid")
  ticks=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for c in $(cat "/proc/$pm/task/$pm/children"); do
    ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
  done
  echo "scale=2; $ticks / $hz" | bc
}

# From pgbench's report (its lines with tps and latency average, given as $1): transactions a
# second; and the latency averages in ms, one a line, all scripts' first, then each script's.
pgbench_tps() { echo "$1" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1; }
pgbench_latencies() { echo "$1" | sed -n 's/.*latency average = \([0-9.]*\) ms.*/\1/p'; }

# A host's look at the live set through FN, keeping its view for a round (:round ticks of a
# pgbench client): the whole set at the round's start, then the changes since.
look_step() {
  cat <<SQL
\if :i % :round = 1
SELECT version, read_at FROM rendezvous.$1('10 s', NULL, NULL) \gset
\else
SELECT version AS seen FROM rendezvous.$1('10 s', :version, :read_at::timestamptz);
\endif
SQL
}

membership() {
  local tx=$RENDEZVOUS_CLUSTER_DIR/tick_old.sql
  # Each simulated host returns after a silence on churn % of its ticks (its last heartbeat
  # aged past the staleness first: a change every reader must learn), and each pgbench client
  # keeps its view for a heartbeat round (2 s: 1,250 of its ticks at hosts / 2 ticks a second
  # over 8 clients... rounded to its own count below), as a real host's view is that old at
  # its next look.
  local churn_step='\set r random(1, 10000)
\if :r <= :churn100
UPDATE rendezvous.hosts SET last_seen = clock_timestamp() - interval '"'"'11 s'"'"' WHERE host_id = '"'"'host-'"'"' || :id;
\endif
SELECT rendezvous.heartbeat('"'"'host-'"'"' || :id);'
  cat >"$tx" <<SQL
\set i :i + 1
\set id 1 + (:i * 8 + :client_id) % :hosts
$churn_step
SELECT count(*) FROM rendezvous.live_members();
SQL
  local way fn
  for way in since delta; do
    fn=live_members_$way
    cat >"$RENDEZVOUS_CLUSTER_DIR/tick_$way.sql" <<SQL
\set i :i + 1
\set id 1 + (:i * 8 + :client_id) % :hosts
$churn_step
$(look_step "$fn")
SQL
  done
  echo
  echo "| simulated Scheduler hosts (a look every 2 s) | hosts returning after a silence | way | ticks/s asked / served | late > 1 s | latency average | server CPU (cores) |"
  echo "|---:|---:|---|---:|---:|---:|---:|"
  for n in "${fleet_sizes[@]}"; do
    for churn in "${churn_rates[@]}"; do
      for way in old since delta; do
        # Every host live at the start (a way that fell behind leaves hosts silent, and their
        # return would be a change for the next). The version row compacted: joins in one
        # statement left thousands of its versions, where a fleet's hosts join one a transaction.
        psql_ -c "DELETE FROM rendezvous.hosts" -c "SELECT count(rendezvous.heartbeat('host-' || i)) FROM generate_series(1, $n) i" \
              -c "VACUUM FULL rendezvous.membership_version" \
              -c "VACUUM rendezvous.hosts, rendezvous.membership_changes" >/dev/null
        local script=$RENDEZVOUS_CLUSTER_DIR/tick_$way.sql rate=$((n / 2)) before after out
        # A client's ticks in a heartbeat round: its share of the fleet's 2 s.
        local round=$(( n / 8 ))
        before=$(server_cpu)
        out=$("$(pg_bindir)/pgbench" -n -M prepared -c 8 -j 2 -T 30 -R "$rate" -D hosts="$n" -D i=0 -D version=0 \
                -D read_at=2000-01-01 -D round="$round" -D churn100="$(echo "$churn * 100 / 1" | bc)" -f "$script" \
                --latency-limit=1000 "$DATABASE_URL" 2>&1 \
              | grep -E "^tps|latency average|latency limit" || true)
        after=$(server_cpu)
        local tps avg late
        tps=$(pgbench_tps "$out")
        avg=$(pgbench_latencies "$out" | head -1)
        late=$(echo "$out" | sed -n 's/.*latency limit: [0-9]*\/[0-9]* (\([0-9.]*\)%).*/\1 %/p')
        local label="whole set (0.2.0)"
        [ $way = since ] && label="LiveView 0.3.0 (live_members_since)"
        [ $way = delta ] && label="LiveView (live_members_delta)"
        echo "| $(printf "%'d" "$n") | $churn % of ticks | $label | $rate / ${tps%.*} | ${late:-0 %} | ${avg:-?} ms | $(echo "scale=2; ($after - $before) / 30" | bc) |"
      done
    done
  done
}

# The two calls of a host's tick apart, as 0.3.0 made them and as this version does, each in a
# database of its own: a heartbeat (every host beats every 2 s, no look), then a look that finds
# nothing changed (every host live for an hour, no heartbeat; live_members_since in 0.3.0,
# live_members_delta now, each client keeping its view for a round as above). Server CPU and WAL per
# call, pgbench at hosts / 2 calls a second for 30 s on 8 clients.
membership_calls() {
  local db=bench_calls url v current n
  url=${DATABASE_URL%/*}/$db
  current=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT_DIR/Cargo.toml" | head -1)
  cat >"$RENDEZVOUS_CLUSTER_DIR/beat.sql" <<'SQL'
\set i :i + 1
\set id 1 + (:i * 8 + :client_id) % :hosts
SELECT rendezvous.heartbeat('host-' || :id);
SQL
  echo
  echo "| simulated hosts | version | call | server CPU per call | WAL per call | latency average |"
  echo "|---:|---|---|---:|---:|---:|"
  for n in "${fleet_sizes[@]}"; do
    for v in 0.3.0 "$current"; do
      local fn=live_members_delta
      [ "$v" = 0.3.0 ] && fn=live_members_since
      cat >"$RENDEZVOUS_CLUSTER_DIR/look.sql" <<SQL
\set i :i + 1
$(look_step "$fn")
SQL
      psql_ -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
      "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 "$url" \
        -c "CREATE EXTENSION pg_rendezvous VERSION '$v'" \
        -c "SELECT count(rendezvous.heartbeat('host-' || i)) FROM generate_series(1, $n) i" \
        -c "VACUUM FULL rendezvous.membership_version" -c "VACUUM ANALYZE rendezvous.hosts" -c "CHECKPOINT" >/dev/null
      local call script before after lsn wal out avg
      for call in heartbeat look; do
        script=$RENDEZVOUS_CLUSTER_DIR/beat.sql
        if [ $call = look ]; then
          script=$RENDEZVOUS_CLUSTER_DIR/look.sql
          "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 "$url" \
            -c "ALTER TABLE rendezvous.hosts DISABLE TRIGGER hosts_changed" \
            -c "UPDATE rendezvous.hosts SET last_seen = clock_timestamp() + interval '1 hour'" \
            -c "ALTER TABLE rendezvous.hosts ENABLE TRIGGER hosts_changed" -c "VACUUM rendezvous.hosts" >/dev/null
        fi
        lsn=$(psql_ -At -c "SELECT pg_current_wal_lsn()")
        before=$(server_cpu)
        out=$("$(pg_bindir)/pgbench" -n -M prepared -c 8 -j 2 -T 30 -R $((n / 2)) -D hosts="$n" -D i=0 \
                -D round=$((n / 8)) -f "$script" "$url" 2>&1 | grep -E "^tps|latency average" || true)
        after=$(server_cpu)
        wal=$(psql_ -At -c "SELECT round((pg_current_wal_lsn() - '$lsn') / (30 * $n / 2))")
        avg=$(pgbench_latencies "$out" | head -1)
        local label="heartbeat"
        [ $call = look ] && label="look, nothing changed ($fn)"
        echo "| $(printf "%'d" "$n") | $v | $label | $(echo "scale=3; ($after - $before) * 1000 / (30 * $n / 2)" | bc) ms | $wal B | ${avg:-?} ms |"
      done
    done
  done
  psql_ -c "DROP DATABASE $db" >/dev/null
}

# See "Firings" above.
firing_calls() {
  local db=bench_firings url v current at out before after next_due=()
  url=${DATABASE_URL%/*}/$db
  current=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT_DIR/Cargo.toml" | head -1)
  # A fire time of its own for each firing, in the past (a claim refuses none), of 20 tasks.
  at="'job-' || (:client_id % 20), timestamptz '2026-11-20 00:00:00+00' + :n * interval '1 ms'"
  cat >"$RENDEZVOUS_CLUSTER_DIR/fire_complete.sql" <<SQL
\set n random(1, 1000000000)
SELECT token FROM rendezvous.claim_firing($at, 'h' || :client_id, '30 s') \gset
SELECT rendezvous.renew_firing($at, :token, '30 s');
SELECT rendezvous.assert_firing($at, :token);
SELECT rendezvous.complete_firing($at, :token);
SQL
  cat >"$RENDEZVOUS_CLUSTER_DIR/fire_release.sql" <<SQL
\set n random(1, 1000000000)
SELECT token FROM rendezvous.claim_firing($at, 'h' || :client_id, '30 s') \gset
SELECT rendezvous.release_firing($at, :token);
SQL
  cat >"$RENDEZVOUS_CLUSTER_DIR/fire_fail.sql" <<SQL
\set n random(1, 1000000000)
SELECT token FROM rendezvous.claim_firing($at, 'h' || :client_id, '30 s') \gset
SELECT * FROM rendezvous.fail_firing($at, :token, 'boom');
SQL
  echo "SELECT rendezvous.next_due_at();" >"$RENDEZVOUS_CLUSTER_DIR/next_due.sql"
  echo
  echo "| version | firings a second asked / served | server CPU per firing | claim, renew, assert, complete | claim, release | claim, fail |"
  echo "|---|---:|---:|---:|---:|---:|"
  for v in 0.3.0 "$current"; do
    psql_ -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
    "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 "$url" -c "CREATE EXTENSION pg_rendezvous VERSION '$v'" -c "CHECKPOINT" >/dev/null
    before=$(server_cpu)
    out=$(cd "$RENDEZVOUS_CLUSTER_DIR" && "$(pg_bindir)/pgbench" -n -M prepared -c 4 -j 2 -T 30 -R 800 \
            -f fire_complete.sql@2 -f fire_release.sql@1 -f fire_fail.sql@1 "$url" 2>&1 \
          | grep -E "^tps|latency average" || true)
    after=$(server_cpu)
    local tps lat
    tps=$(pgbench_tps "$out")
    lat=($(pgbench_latencies "$out"))
    echo "| $v | 800 / ${tps%.*} | $(echo "scale=3; ($after - $before) * 1000 / (30 * ${tps:-1})" | bc) ms |" \
         "${lat[1]:-?} ms | ${lat[2]:-?} ms | ${lat[3]:-?} ms |"
    "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 "$url" \
      -c "SELECT count(rendezvous.schedule_task('t' || i, 'every 1 second', overlap => 'allow')) FROM generate_series(1, 200) i" \
      -c "SELECT count(*) FROM rendezvous.due_firings(10000)" -c "VACUUM ANALYZE" >/dev/null
    before=$(server_cpu)
    out=$("$(pg_bindir)/pgbench" -n -M prepared -c 1 -T 10 -f "$RENDEZVOUS_CLUSTER_DIR/next_due.sql" "$url" 2>&1 \
          | grep -E "^tps|latency average" || true)
    after=$(server_cpu)
    tps=$(pgbench_tps "$out")
    next_due+=("| $v | $(pgbench_latencies "$out" | head -1) ms |"\
" $(echo "scale=3; ($after - $before) * 1000 / (10 * ${tps:-1})" | bc) ms |")
  done
  echo
  echo "| version | next_due_at, 200 per-second tasks: latency average | server CPU per call |"
  echo "|---|---:|---:|"
  printf '%s\n' "${next_due[@]}"
  psql_ -c "DROP DATABASE $db" >/dev/null
}

old_history() {
  local half=$(($1 / 2))
  psql_ <<SQL
INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, claimed_at, completed_at, holder, day_mod_8)
SELECT 'old' || i, 'old', now() - interval '2 days' - i * interval '1 ms', 1, now() - interval '2 days',
       now() - interval '2 days', now() - interval '2 days', 'h', rendezvous._day_mod_8(now() - interval '2 days' - i * interval '1 ms')
  FROM generate_series(1, $half) i;
INSERT INTO rendezvous.runs (tenant_id, workflow_ref, input, dispatch_key, state, created_at, updated_at)
SELECT 'old', 'w', '{}', 'old' || i, 'succeeded', now() - interval '8 days', now() - interval '8 days'
  FROM generate_series(1, $half) i;
VACUUM ANALYZE rendezvous.firings, rendezvous.runs;
SQL
}

# Admissions for $1 seconds at 200 a second: "p50 / p99 / max ms (n)" from pgbench's log.
admissions() {
  local dir=$RENDEZVOUS_CLUSTER_DIR/spawn_log
  rm -rf "$dir" && mkdir -p "$dir"
  (cd "$dir" && "$(pg_bindir)/pgbench" -n -M prepared -c 4 -j 2 -T "$1" -R 200 -l -f "$spawn_sql" "$DATABASE_URL" \
    >/dev/null 2>&1)
  cat "$dir"/pgbench_log.* | awk '{print $3 / 1000}' | sort -n | awk '{v[NR] = $1} END {
    printf "%.1f / %.1f / %.1f ms (%d)", v[int(NR * 0.5) + 1], v[int(NR * 0.99) + 1], v[NR], NR }'
}

wal_lsn() { psql_ -At -c "SELECT pg_current_wal_lsn()"; }
wal_since() { psql_ -At -c "SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), '$1'))"; }

# As many old firings alone, of one UTC day two days ago, finished then: one partition of
# firings (0.4.0), what a retention pass empties whole.
day_history() {
  psql_ <<SQL
INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, claimed_at, completed_at, holder, day_mod_8)
SELECT 'day' || i, 'day', f, 1, f, f, f, 'h', rendezvous._day_mod_8(f)
  FROM generate_series(1, $1) i,
       LATERAL (SELECT date_trunc('day', now() - interval '2 days', 'UTC') + i * interval '1 day' / ($1 + 1) AS f) x;
VACUUM ANALYZE rendezvous.firings;
SQL
}

# deletion_row LABEL SECONDS DELAY COMMAND...: the old history made again, admissions timed
# for 20 s, then for SECONDS while COMMAND deletes it (started DELAY seconds in), then 20 s
# after; a table row with the WAL it wrote and how long it took.
deletion_row() {
  local label=$1 seconds=$2 delay=$3 before during after lsn start took wal deleter note=""
  local ended=$RENDEZVOUS_CLUSTER_DIR/deletion_ended
  shift 3
  ${history:-old_history} "$retention_rows"
  before=$(admissions 20)
  lsn=$(wal_lsn)
  start=$(date +%s%N)
  # Its own end, not the end of the admissions timed beside it.
  (sleep "$delay"; "$@" >/dev/null; date +%s%N >"$ended") &
  deleter=$!
  during=$(admissions "$seconds")
  wait "$deleter"
  took=$(awk -v e="$(cat "$ended")" -v s="$start" -v d="$delay" 'BEGIN { printf "%.2f", (e - s) / 1e9 - d }')
  wal=$(wal_since "$lsn")
  after=$(admissions 20)
  [ "$delay" = 0 ] || note=" ($seconds s around it)"
  echo "| $label | $before | $during$note | $after | $took s | $wal |"
}

# The admissions' script (what `admissions` runs) and a deletion table's head: its first column.
deletion_table() {
  spawn_sql=$RENDEZVOUS_CLUSTER_DIR/spawn.sql
  cat >"$spawn_sql" <<'SQL'
\set k random(1, 2000000000)
SELECT rendezvous.spawn_run('bench', 'w', '{}', 'k' || :client_id || '-' || :k);
SQL
  echo
  echo "| $1 | admissions before (p50 / p99 / max) | during | after | took | WAL written |"
  echo "|---|---|---|---|---|---|"
}

retention() {
  deletion_table "$(printf "%'d" "$retention_rows") old finished rows deleted by"
  # The fleet's way: bounded steps with pauses (as the Scheduler's retention pass runs them),
  # admissions timed for about as long as the pass takes (a step of 1,000 of each kind and its
  # pause: ~65 ms).
  local steps=$RENDEZVOUS_CLUSTER_DIR/prune.sql
  for _ in $(seq $((retention_rows / 2000 + 10))); do
    echo "SELECT sum(deleted) FROM rendezvous.prune(1000);"
    echo "SELECT pg_sleep(0.05);"
  done >"$steps"
  deletion_row "retention steps (prune(1000) every 50 ms)" $((retention_rows / 2000 * 65 / 1000 + 1)) 0 \
    psql_ -f "$steps"
  # 0.2.0's way: one statement per kind, 2 s into 20 s of admissions.
  deletion_row "purge_firings + purge_runs (one statement each, 0.2.0)" 20 2 \
    psql_ -c "SELECT rendezvous.purge_firings('1 day')" -c "SELECT rendezvous.purge_runs('7 days')"
  # An operator's purge now: the bounded purges, runs then firings, a step every 50 ms.
  deletion_row "rendezvous admin purge --older-than '1 day' (purge_runs/purge_firings(…, 1000) every 50 ms)" \
    $((retention_rows / 1000 * 60 / 1000 + 1)) 0 "$RENDEZVOUS" admin --database-url "$DATABASE_URL" purge --older-than '1 day'
  psql_ -c "DELETE FROM rendezvous.runs WHERE tenant_id = 'bench'" >/dev/null
}

# Firings alone (0.4.0): SCALE_RETENTION firings of one day, in its partition; one retention
# pass, 2 s into 10 s of admissions, empties it.
days() {
  deletion_table "$(printf "%'d" "$retention_rows") old finished firings of one day emptied by"
  history=day_history deletion_row "a retention pass (prune(1000)): their partition emptied" 10 2 \
    psql_ -c "SELECT * FROM rendezvous.prune(1000)"
  psql_ -c "DELETE FROM rendezvous.runs WHERE tenant_id = 'bench'" >/dev/null
}

claims() {
  local n p
  echo
  echo "| live hosts | pending runs | claim_runs max 1, a live host: median (max) ms | max 100, a live host | max 1, a host not live |"
  echo "|---:|---:|---:|---:|---:|"
  for n in "${claim_hosts[@]}"; do
    for p in "${claim_pending[@]}"; do
      psql_ -c "TRUNCATE rendezvous.runs CASCADE" -c "DELETE FROM rendezvous.hosts" >/dev/null 2>&1
      psql_ -c "SELECT count(*) FROM generate_series(1, greatest($p / 10000, 1)) g,
                  LATERAL rendezvous.spawn_runs('bench', (SELECT array_agg('wf'::text) FROM generate_series(1, least($p, 10000)))) s" >/dev/null
      local times=()
      for call in "'h-1', 1" "'h-1', 100" "'outsider', 1"; do
        times+=("$( {
          echo "BEGIN;"
          echo "SELECT count(rendezvous.heartbeat('h-' || i)) FROM generate_series(1, $n) i;"
          for _ in 1 2 3 4 5 6; do
            echo "SAVEPOINT call; SELECT count(*) FROM rendezvous.claim_runs($call, '30 s', NULL, '1 s'); ROLLBACK TO call;"
          done
          echo "\\timing on"
          for _ in 1 2 3 4 5 6 7 8 9; do
            echo "SAVEPOINT call; SELECT count(*) FROM rendezvous.claim_runs($call, '30 s', NULL, '1 s'); ROLLBACK TO call;"
          done
          echo "ROLLBACK;"
        } | psql_ -At | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | awk 'NR % 3 == 2' | sort -n |
          awk '{ t[NR] = $1 } END { printf "%.1f (%.1f)", t[5], t[9] }')")
      done
      echo "| $(printf "%'d" "$n") | $(printf "%'d" "$p") | ${times[0]} | ${times[1]} | ${times[2]} |"
    done
  done
  local running
  running=$(psql_ -At <<'SQL' | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | sort -n | sed -n 2p
TRUNCATE rendezvous.runs CASCADE;
DELETE FROM rendezvous.hosts;
SELECT count(*) FROM rendezvous.spawn_runs('bench', (SELECT array_agg('wf'::text) FROM generate_series(1, 10000)));
SELECT count(*) FROM rendezvous.claim_runs('holder', 10000, '1 hour', NULL, '0 s');
\timing on
SELECT count(*) FROM rendezvous.claim_runs('other', 1, '30 s', NULL, '1 s');
SELECT count(*) FROM rendezvous.claim_runs('other', 1, '30 s', NULL, '1 s');
SELECT count(*) FROM rendezvous.claim_runs('other', 1, '30 s', NULL, '1 s');
SQL
)
  echo
  echo "10,000 runs running (their holder's session live), none runnable: claim_runs ${running} ms (median of 3)"
  psql_ -c "TRUNCATE rendezvous.runs CASCADE" -c "DELETE FROM rendezvous.hosts" >/dev/null 2>&1
}

wal_in() { # VERSION: one row of the wal part
  local db=bench_wal url
  url=${DATABASE_URL%/*}/$db
  psql_ -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
  "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 -At -F ' ' "$url" <<SQL
CREATE EXTENSION pg_rendezvous VERSION '$1';
SELECT count(rendezvous.schedule_task('t' || i, 'every 1 second', overlap => 'allow')) FROM generate_series(1, ${SCALE_WAL_TASKS:-1000}) i \\g /dev/null
CREATE TEMP TABLE due (task_id text, fire_at timestamptz);
CREATE TEMP TABLE claimed (task_id text, fire_at timestamptz, token bigint);
CREATE TEMP TABLE wal (made numeric, claim numeric, complete numeric, firings bigint);
-- The firings table and, from 0.4.0, its partitions.
CREATE TEMP VIEW firings_parts AS
    SELECT 'rendezvous.firings'::regclass AS relid
    UNION ALL SELECT i.inhrelid::regclass FROM pg_inherits i WHERE i.inhparent = 'rendezvous.firings'::regclass;
CREATE TEMP TABLE hot_before AS
    SELECT coalesce(sum(n_tup_hot_upd), 0) AS hot FROM pg_stat_user_tables WHERE relid IN (SELECT relid FROM firings_parts);
DO \$\$
DECLARE l pg_lsn; made numeric := 0; claim numeric := 0; complete numeric := 0; n bigint := 0;
BEGIN
  FOR s IN 1..12 LOOP
    PERFORM pg_sleep(1);
    l := pg_current_wal_lsn();
    TRUNCATE due;
    INSERT INTO due SELECT d.task_id, d.fire_at FROM rendezvous.due_firings(10000) d;
    COMMIT;
    made := made + pg_wal_lsn_diff(pg_current_wal_lsn(), l);
    FOR k IN 0..(SELECT (count(*) - 1) / 100 FROM due) LOOP
      l := pg_current_wal_lsn();
      TRUNCATE claimed;
      INSERT INTO claimed
        SELECT x.task_id, x.fire_at, c.token
          FROM (SELECT array_agg(task_id ORDER BY task_id) ti, array_agg(fire_at ORDER BY task_id) fa
                  FROM (SELECT * FROM due ORDER BY task_id LIMIT 100 OFFSET k * 100) q) a
          CROSS JOIN LATERAL rendezvous.claim_firings(a.ti, a.fa, 'host-1', '30 seconds') c
          JOIN LATERAL unnest(a.ti, a.fa) WITH ORDINALITY x(task_id, fire_at, ord) ON x.ord = c.ord
         WHERE c.claimed;
      COMMIT;
      claim := claim + pg_wal_lsn_diff(pg_current_wal_lsn(), l);
      n := n + (SELECT count(*) FROM claimed);
      l := pg_current_wal_lsn();
      PERFORM rendezvous.complete_firings((SELECT array_agg(task_id) FROM claimed), (SELECT array_agg(fire_at) FROM claimed),
                                          (SELECT array_agg(token) FROM claimed));
      COMMIT;
      complete := complete + pg_wal_lsn_diff(pg_current_wal_lsn(), l);
    END LOOP;
  END LOOP;
  INSERT INTO wal VALUES (made, claim, complete, n);
END
\$\$;
SELECT pg_sleep(1) \\g /dev/null
SELECT round(made / firings), round(claim / firings), round(complete / firings), round((claim + complete) / firings),
       (SELECT round(100.0 * (sum(n_tup_hot_upd) - (SELECT hot FROM hot_before)) / firings) FROM pg_stat_user_tables
         WHERE relid IN (SELECT relid FROM firings_parts)),
       firings, (SELECT sum(pg_table_size(relid))::bigint / 1024 FROM firings_parts),
       (SELECT sum(pg_indexes_size(relid))::bigint / 1024 FROM firings_parts)
  FROM wal;
SQL
  psql_ -c "DROP DATABASE $db" >/dev/null
}
wal() {
  echo
  echo "| version | WAL per firing: made (with its task's update) | claimed | completed | claimed + completed | claims that were HOT | firings | table / indexes |"
  echo "|---|---|---|---|---|---|---|---|"
  local v current
  current=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT_DIR/Cargo.toml" | head -1)
  for v in 0.3.0 "$current"; do
    wal_in "$v" | while read -r made claim complete both hot n table indexes; do
      echo "| $v | $made B | $claim B | $complete B | **$both B** | $hot % | $(printf "%'d" "$n") | $table / $indexes kB |"
    done
  done
}

if [[ $parts == *" membership "* ]]; then membership_calls; membership; fi
if [[ $parts == *" firings "* ]]; then firing_calls; fi
if [[ $parts == *" wal "* ]]; then wal; fi
if [[ $parts == *" retention "* ]]; then retention; fi
if [[ $parts == *" days "* ]]; then days; fi
if [[ $parts == *" claims "* ]]; then claims; fi

# See "Leaders" above.
leaders_in() { # URL EDITION: the leaders table of one database
  local url=$1 edition=$2 holder=""
  for n in "${group_sizes[@]}"; do
    # One session takes every group's lock and keeps it (as leaders' sessions would).
    PGAPPNAME=bench-leader-holder "$(pg_bindir)/psql" -X -q "$url" \
      -c "SELECT count(*) FROM generate_series(1, $n) g, rendezvous.try_lead('lg-' || g, 'c')" \
      -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
    holder=$!
    until [ "$("$(pg_bindir)/psql" -X -q -At "$url" -c "SELECT count(*) FROM rendezvous.leader_locks WHERE granted AND group_name LIKE 'lg-%'")" -ge "$n" ]; do sleep 0.2; done
    local figures
    figures=$("$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 -At -F ' ' "$url" <<SQL
CREATE FUNCTION pg_temp.ms_per(stmt text, calls integer) RETURNS numeric LANGUAGE plpgsql AS \$\$
DECLARE started timestamptz := clock_timestamp();
BEGIN
    FOR i IN 1..calls LOOP EXECUTE format(stmt, 'lg-' || (1 + i % $n)); END LOOP;
    RETURN round((extract(epoch FROM clock_timestamp() - started) * 1000 / calls)::numeric, 3);
END \$\$;
SELECT pg_temp.ms_per('SELECT rendezvous.try_lead(%L, ''f'')', 200), pg_temp.ms_per('SELECT rendezvous.leader(%L)', 200),
       pg_temp.ms_per('SELECT rendezvous.try_lead(''new-'' || %1\$L, ''w''), rendezvous.resign(''new-'' || %1\$L)', 50);
SQL
)
    # Its session ends (a killed psql would leave the server's sleeping session holding them).
    "$(pg_bindir)/psql" -X -q "$url" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'bench-leader-holder'" >/dev/null
    wait "$holder" 2>/dev/null || true
    read -r follower leader won <<<"$figures"
    echo "| $edition | $(printf "%'d" "$n") | $follower ms | $won ms | $leader ms |"
  done
  "$(pg_bindir)/psql" -X -q "$url" -c "DELETE FROM rendezvous.leaders WHERE group_name LIKE 'lg-%' OR group_name LIKE 'new-%'" >/dev/null
}
leaders() {
  echo
  echo "| edition | leader groups held | a follower's try_lead | a claim that takes a lock, and its resign | leader() (reads pg_locks) |"
  echo "|---|---|---|---|---|"
  leaders_in "$DATABASE_URL" native
  # The portable edition, when its script is given (RENDEZVOUS_PORTABLE_SCRIPT), in a database of its own.
  if [ -n "${RENDEZVOUS_PORTABLE_SCRIPT:-}" ]; then
    psql_ -c "DROP DATABASE IF EXISTS bench_portable_leaders" -c "CREATE DATABASE bench_portable_leaders" >/dev/null
    local url=${DATABASE_URL%/*}/bench_portable_leaders
    "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 "$url" -f "$RENDEZVOUS_PORTABLE_SCRIPT" >/dev/null
    leaders_in "$url" portable
    psql_ -c "DROP DATABASE bench_portable_leaders" >/dev/null
  fi
}
if [[ $parts == *" leaders "* ]]; then leaders; fi
[[ $parts == *" status "* ]] || exit 0

# The 0.2.0 reads, as the baseline (views of its install script, in a scratch schema).
psql_ <<'SQL'
DROP SCHEMA IF EXISTS bench_v020 CASCADE;
CREATE SCHEMA bench_v020;
CREATE VIEW bench_v020.status_firings AS
    SELECT f.*, CASE WHEN f.completed_at IS NOT NULL THEN 'completed' WHEN f.failed_at IS NOT NULL THEN 'failed'
                     WHEN f.holder IS NULL THEN 'pending'
                     WHEN f.lease_until > clock_timestamp() THEN 'running' ELSE 'expired' END AS state
      FROM rendezvous.firings f;
CREATE VIEW bench_v020.status_leaders AS
    SELECT l.group_name, c.leader, l.epoch FROM rendezvous.leaders l CROSS JOIN LATERAL rendezvous.leader(l.group_name) c;
CREATE FUNCTION bench_v020.status() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM count(*) FILTER (WHERE completed_at IS NULL AND failed_at IS NULL), count(*) FILTER (WHERE completed_at IS NOT NULL),
            count(*) FILTER (WHERE failed_at IS NOT NULL) FROM bench_v020.status_firings;
    PERFORM * FROM bench_v020.status_firings WHERE completed_at IS NULL AND failed_at IS NULL ORDER BY fire_at LIMIT 20;
    PERFORM t.task_id, (SELECT count(*) FROM rendezvous.firings f WHERE f.task_id = t.task_id AND f.failed_at IS NOT NULL),
            (SELECT f.fire_at FROM rendezvous.firings f WHERE f.task_id = t.task_id AND f.failures > 0 ORDER BY f.fire_at DESC LIMIT 1)
       FROM rendezvous.tasks t;
    PERFORM * FROM bench_v020.status_leaders;
    PERFORM * FROM rendezvous.status_hosts ORDER BY host_id;
END
$$;
SQL

median_ms() { # command...: the median wall time of 3 runs, in ms
  local t=()
  for _ in 1 2 3; do
    local s e
    s=$(date +%s%N); "$@" >/dev/null; e=$(date +%s%N)
    t+=($(((e - s) / 1000000)))
  done
  printf '%s\n' "${t[@]}" | sort -n | sed -n 2p
}
ours_json() { median_ms "$RENDEZVOUS" status --json --database-url "$DATABASE_URL"; }
ours_prom() { median_ms "$RENDEZVOUS" status --prometheus --database-url "$DATABASE_URL"; }
v020() { median_ms psql_ -c "SET statement_timeout = '120s'; SELECT bench_v020.status()"; }

# 20 per-second tasks whose history the firings are (as a fleet of them leaves it).
psql_ -c "SELECT count(rendezvous.schedule_task('t' || i, '* * * * * *')) FROM generate_series(1, 20) i" >/dev/null

echo
echo "| history (firings + runs) | rendezvous status --json | --prometheus | 0.2.0 reads |"
echo "|---|---|---|---|"
have=0
for n in "${firings_sizes[@]}"; do
  if [ "$n" -gt "$have" ]; then
    psql_ <<SQL
INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, claimed_at, completed_at, holder, day_mod_8)
SELECT 'b' || i, 't' || (i % 20 + 1), now() - interval '1 hour' - i * interval '1 ms', 1, now() - interval '1 hour',
       now() - interval '1 hour', now() - interval '1 hour' + (i % 1000) * interval '1 ms', 'h',
       rendezvous._day_mod_8(now() - interval '1 hour' - i * interval '1 ms')
  FROM generate_series($have + 1, $n) i;
INSERT INTO rendezvous.runs (tenant_id, workflow_ref, input, dispatch_key, state, created_at, updated_at)
SELECT 't', 'w', '{}', 'k' || i, 'succeeded', now() - interval '1 hour', now() - interval '1 hour'
  FROM generate_series($have + 1, $n) i;
VACUUM ANALYZE rendezvous.firings, rendezvous.runs;
SQL
    have=$n
  fi
  echo "| $(printf "%'d" "$n") | $(ours_json) ms | $(ours_prom) ms | $(v020) ms |"
done

echo
echo "| hosts (all live) | rendezvous status --json | 0.2.0 reads |"
echo "|---|---|---|"
for n in "${host_sizes[@]}"; do
  psql_ -c "INSERT INTO rendezvous.hosts (host_id, first_seen, last_seen) SELECT 'host-' || i, now(), now()
              FROM generate_series(1, $n) i ON CONFLICT (host_id) DO UPDATE SET last_seen = now()" >/dev/null
  echo "| $(printf "%'d" "$n") | $(ours_json) ms | $(v020) ms |"
done

echo
echo "| leader groups (each held by a session's lock) | rendezvous status --json | 0.2.0 reads |"
echo "|---|---|---|"
holder_pid=""
cleanup() { [ -z "$holder_pid" ] || kill "$holder_pid" 2>/dev/null || true; }
trap cleanup EXIT
for n in "${group_sizes[@]}"; do
  cleanup
  # One session takes every group's lock and keeps it (as leaders' sessions would).
  psql_ -c "SELECT count(*) FROM generate_series(1, $n) g, rendezvous.try_lead('group-' || g, 'c')" -c "SELECT pg_sleep(3600)" &
  holder_pid=$!
  until [ "$(psql_ -At -c "SELECT count(*) FROM rendezvous.leader_locks WHERE granted")" -ge "$n" ]; do sleep 0.2; done
  echo "| $(printf "%'d" "$n") | $(ours_json) ms | $(v020) ms |"
done
cleanup
holder_pid=""
psql_ -c "DROP SCHEMA bench_v020 CASCADE" >/dev/null
