#!/usr/bin/env bash
# `scripts/bench.sh loaded-failover`: failovers on a loaded machine (#43). Runs
# `rendezvous fleet --ha ENGINE --hogs HOGS` TRIALS times (default 10, 8 hogs: busy processes
# each in a session of its own, as other programs' load is) for the crash engine
# (pg_auto_failover), the partitioned primary that is fenced (promote-partitioned, root) and
# the one left writable (promote-unfenced, root), each trial on its own throwaway pair, and
# prints one markdown row per engine: how many trials passed, firings done of those due, what
# the failures said, the longest start lateness (a host that froze shows there), the failover
# times and the load average at the end (medians over the trials).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
trials=${TRIALS:-10}
hogs=${HOGS:-8}
duration=${DURATION:-30}
engines=${ENGINES:-pg-auto-failover promote-partitioned promote-unfenced}
rendezvous=${RENDEZVOUS_RELEASE:-${CARGO_TARGET_DIR:-$ROOT_DIR/target}/release/rendezvous}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

figure() { grep -m1 "^$2" "$1" | sed "s/^$2 *//" | awk '{print $1}'; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else print a[int((NR + 1) / 2)]}'; }
largest() { sort -n | tail -1; }

echo "| failover by, $hogs CPU hogs beside | trials | PASS | firings done / due (all trials) | longest start lateness: median / worst | read-write after (median) | a leader on the new primary after (median) | load average at the end (median) | what failed |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
for engine in $engines; do
  pass=0 done_=0 due=0 failed=""
  : >"$work/late"; : >"$work/rw"; : >"$work/leader"; : >"$work/load"
  for trial in $(seq "$trials"); do
    out="$work/$engine-$trial"
    "$rendezvous" fleet --hosts 4 --tasks 12 --duration "$duration" --seed "$trial" --ha "$engine" \
      --hogs "$hogs" --timeline "$work/timeline.svg" >"$out" 2>&1 || true
    grep -q '^verdict' "$out" || { cat "$out" >&2; exit 1; }
    if grep -q '^verdict *PASS' "$out"; then
      pass=$((pass + 1))
    else
      why=$(grep -m1 -E '^(lost |lost after failover|database failover|failed for good)' "$out" | head -c 160)
      failed="$failed trial $trial: $(figure "$out" "firings completed")/$(figure "$out" "firings due") done; ${why//|/\\|}."
    fi
    done_=$((done_ + $(figure "$out" "firings completed")))
    due=$((due + $(figure "$out" "firings due")))
    sed -n 's/^start lateness .*max \([0-9]*\) ms.*/\1/p' "$out" >>"$work/late"
    failover=$(grep -m1 '^database failover' "$out" || true)
    sed -n 's/.*read-write after \([0-9]*\) ms.*/\1/p' <<<"$failover" >>"$work/rw"
    sed -n 's/.*new primary after \([0-9]*\) ms.*/\1/p' <<<"$failover" >>"$work/leader"
    sed -n 's/^machine load .*load average \([0-9.]*\) at the end.*/\1/p' "$out" >>"$work/load"
    log "$engine trial $trial: $(grep -m1 '^verdict' "$out"), $(grep -m1 '^start lateness' "$out")"
  done
  name=$(grep -m1 '^database failover' "$work/$engine-1" | sed 's/^database failover *\([^:]*\):.*/\1/')
  echo "| $name | $trials | $pass | $done_ / $due | $(median <"$work/late") / $(largest <"$work/late") ms | $(median <"$work/rw") ms | $(median <"$work/leader") ms | $(median <"$work/load") | ${failed:-none} |"
done
