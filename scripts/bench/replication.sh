#!/usr/bin/env bash
# `scripts/bench.sh replication`: what a database failover costs, by replication mode. Runs
# `rendezvous fleet --ha ENGINE` TRIALS times (default 3) for each engine — pg_auto_failover
# (synchronous), a plain synchronous pair promoted by the controller, and an asynchronous pair
# whose standby is cut off a second before the primary dies — each on its own throwaway pair,
# and prints one markdown row per engine: the work acknowledged to hosts and then missing from
# the promoted database (from the hosts' own ledgers), fencing numbers given twice, firings
# executed twice, and the failover times (primary killed → read-write → a leader on the new
# primary), medians over the trials.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
trials=${TRIALS:-3}
duration=${DURATION:-30}
rendezvous=${RENDEZVOUS_RELEASE:-${CARGO_TARGET_DIR:-$ROOT_DIR/target}/release/rendezvous}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

figure() { grep -m1 "^$2" "$1" | sed "s/^$2 *//" | awk '{print $1}'; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else print a[int((NR + 1) / 2)]}'; }

echo "| replication (failover by) | trials | acknowledged to hosts | lost after failover: runs / completions / run completions / terms / fenced writes | epochs given to two leaders | executed twice | read-write after (median) | a leader on the new primary after (median) |"
echo "|---|---:|---:|---|---:|---:|---:|---:|"
for engine in pg-auto-failover promote promote-async; do
  acked=0 runs=0 completions=0 run_completions=0 terms=0 actions=0 twice_leader=0 twice_run=0
  : >"$work/rw" ; : >"$work/leader"
  for trial in $(seq "$trials"); do
    out="$work/$engine-$trial"
    "$rendezvous" fleet --hosts 4 --tasks 12 --duration "$duration" --seed "$trial" --ha "$engine" \
      --timeline "$work/timeline.svg" >"$out" 2>&1 || true
    line=$(grep -m1 '^lost after failover' "$out") || { cat "$out" >&2; exit 1; }
    acked=$((acked + $(sed 's/.*(of \([0-9]*\) .*/\1/' <<<"$line")))
    runs=$((runs + $(sed 's/.*runs \([0-9]*\),.*/\1/' <<<"$line")))
    completions=$((completions + $(sed 's/.*runs [0-9]*, completions \([0-9]*\),.*/\1/' <<<"$line")))
    run_completions=$((run_completions + $(sed 's/.*run completions \([0-9]*\),.*/\1/' <<<"$line")))
    terms=$((terms + $(sed 's/.*terms \([0-9]*\),.*/\1/' <<<"$line")))
    actions=$((actions + $(sed 's/.*fenced writes \([0-9]*\)).*/\1/' <<<"$line")))
    twice_leader=$((twice_leader + $(grep -m1 '^leader terms' "$out" | sed 's/.*acting: \([0-9]*\)).*/\1/')))
    twice_run=$((twice_run + $(figure "$out" "executed twice")))
    failover=$(grep -m1 '^database failover' "$out")
    sed -n 's/.*read-write after \([0-9]*\) ms.*/\1/p' <<<"$failover" >>"$work/rw"
    sed -n 's/.*new primary after \([0-9]*\) ms.*/\1/p' <<<"$failover" >>"$work/leader"
    log "$engine trial $trial: $line"
  done
  name=$(grep -m1 '^database failover' "$work/$engine-1" | sed 's/^database failover *\([^:]*\):.*/\1/')
  echo "| $name | $trials | $acked | $((runs + completions + run_completions + terms + actions)): $runs / $completions / $run_completions / $terms / $actions | $twice_leader | $twice_run | $(median <"$work/rw") ms | $(median <"$work/leader") ms |"
done
