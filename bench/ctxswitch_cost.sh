#!/usr/bin/env bash
# What a sampling clock costs per context switch (docs/benchmarks.md, "The sampling clock and
# context switches"): bench/ctxswitch.c (two threads, one byte back and forth through pipes, both
# pinned to one core) unprofiled and under mlprof-run --no-memory with each clock, interleaved;
# prints the median microseconds per round trip (two switches) and the cost per switch over the
# unprofiled run. Usage:
#   bench/ctxswitch_cost.sh [ROUNDS=5] [ROUND_TRIPS=200000] [CPU=0]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MLPROF_BUILD_DIR:-$root/build}/bin
rounds=${1:-5} trips=${2:-200000} cpu=${3:-0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -pthread "$root/bench/ctxswitch.c" -o "$tmp/ctxswitch"
one() {  # $1 label, rest: command prefix
  local label=$1; shift
  echo "$label $("$@" taskset -c "$cpu" "$tmp/ctxswitch" "$trips")"
}
ml=("$bin/mlprof-run" -q --no-html --no-memory -o "$tmp/p.mlprof" --)
for ((i = 0; i < rounds; i++)); do
  one unprofiled
  one "auto(default)" "${ml[@]}"
  one timer env MLPROF_TIMER=timer "${ml[@]}"
  one perf env MLPROF_TIMER=perf "${ml[@]}"
done | tee "$tmp/runs.txt" | sed 's/^/  /'
python3 - "$tmp/runs.txt" <<'PY'
import collections, statistics, sys
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, us = line.split()
    by[label].append(float(us))
base = statistics.median(by["unprofiled"])
for label in ("unprofiled", "auto(default)", "timer", "perf"):
    m = statistics.median(by[label])
    print(f"{label:14} {m:7.3f} us per round trip (min {min(by[label]):.3f}, max {max(by[label]):.3f}), "
          f"{(m - base) / 2:+.3f} us per context switch")
PY
