#!/usr/bin/env bash
# Wall mode's wait against a known off-CPU time (docs/benchmarks.md, "Wall mode's wait under load"):
# bench/wall_loop.py (compute 7.3 ms, sleep 4.1 ms, 3 s) under `mlprof-run --mode wall`, on an idle
# machine and with HOGS busy processes beside it; prints, per run, the wait mlprof gave the SLEEP
# line and the loop's own measure of its sleeps' off-CPU time, and their ratio. Usage:
#   bench/wall_accuracy.sh [RUNS=3] [HOGS=2]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MLPROF_BUILD_DIR:-$root/build}/bin
runs=${1:-3} hogs=${2:-2}
py=${MLPROF_BENCH_PYTHON:-python3}
tmp=$(mktemp -d)
hog_pids=()
cleanup() { for p in "${hog_pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
line=$(grep -n '# SLEEP$' "$root/bench/wall_loop.py" | cut -d: -f1)
one() {  # $1 = label
  "$bin/mlprof-run" -q --mode wall --no-memory --no-html -o "$tmp/w.mlprof" -- "$py" "$root/bench/wall_loop.py" >"$tmp/truth.json"
  "$bin/mlprof" export "$tmp/w.mlprof" --format json | python3 -c '
import json, sys
truth = json.load(open(sys.argv[1]))
top = json.load(sys.stdin)["top"]["wait"]["lines"]
wait = sum(r["self"] for r in top if r["file"].endswith("wall_loop.py") and r["line"] == int(sys.argv[2])) / 1e6
off, slept = truth["sleep_off_cpu"], truth["sleep_wall"]
print(f"{sys.argv[3]:10s} wait {wait:.3f} s, off CPU {off:.3f} s (sleep wall {slept:.3f} s): {wait / off:.3f}x")' \
    "$tmp/truth.json" "$line" "$1"
}
for ((i = 0; i < runs; i++)); do one idle; done
for ((h = 0; h < hogs; h++)); do
  python3 -c 'while True: pass' &
  hog_pids+=($!)
done
for ((i = 0; i < runs; i++)); do one "$hogs hogs"; done
