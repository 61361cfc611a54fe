#!/usr/bin/env bash
# What a second thread costs glibc's malloc (docs/benchmarks.md, "A second thread and glibc's
# malloc"; docs/limits.md): bench/malloc_threaded.c, single-threaded, with an idle thread of its
# own, and under mlprof-run with memory profiling off and on, for a tcache size and a larger one;
# median nanoseconds per malloc/free pair over ROUNDS interleaved rounds. Usage:
#   bench/malloc_threaded.sh [ROUNDS=5] [PAIRS=10000000]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MLPROF_BUILD_DIR:-$root/build}/bin
rounds=${1:-5} pairs=${2:-10000000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -pthread "$root/bench/malloc_threaded.c" -o "$tmp/malloc_threaded"
for ((i = 0; i < rounds; i++)); do
  for size in 64 8192; do
    echo "$size single $("$tmp/malloc_threaded" "$pairs" "$size")"
    echo "$size threaded $("$tmp/malloc_threaded" "$pairs" "$size" threaded)"
    echo "$size mlprof--no-memory $("$bin/mlprof-run" -q --no-html --no-memory -o "$tmp/p.mlprof" -- "$tmp/malloc_threaded" "$pairs" "$size")"
    echo "$size mlprof $("$bin/mlprof-run" -q --no-html -o "$tmp/p.mlprof" -- "$tmp/malloc_threaded" "$pairs" "$size")"
  done
done > "$tmp/runs.txt"
python3 - "$tmp/runs.txt" <<'PY'
import collections, statistics, sys
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    size, label, ns = line.split()
    by[(int(size), label)].append(float(ns))
for size in (64, 8192):
    print(f"{size} B blocks: " + ", ".join(
        f"{label} {statistics.median(by[(size, label)]):.2f} ns" for label in ("single", "threaded", "mlprof--no-memory", "mlprof")))
PY
