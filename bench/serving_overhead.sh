#!/usr/bin/env bash
# Serving overhead (docs/benchmarks.md): throughput and p99 of the example service
# (examples/serve_http.py) under the same closed-loop load, with mlprof (CPU + memory profiling on)
# and without it (--no-profile: same load loop, same measurements, no preload). Alternates the two
# ROUNDS times and prints each run and the medians. Usage:
#   bench/serving_overhead.sh [ROUNDS=3] [REQUESTS=2000] [CONCURRENCY=2]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MLPROF_BUILD_DIR:-$root/build}/bin
rounds=${1:-3} requests=${2:-2000} conc=${3:-2}
port=${MLPROF_BENCH_PORT:-18090}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # $1 = label, rest = extra mlprof-run options
  local label=$1; shift
  "$bin/mlprof-run" -q --no-html -o "$tmp/$label.mlprof" "$@" --requests "$root/examples/requests.txt" \
    --url "http://127.0.0.1:$port/score" --max-requests "$requests" --warmup 100 --concurrency "$conc" -- \
    /usr/bin/python3 "$root/examples/serve_http.py" --port "$port"
  "$bin/mlprof" export "$tmp/$label.mlprof" --format json |
    python3 -c 'import json,sys; s=json.load(sys.stdin)["serving"]; print(s["measuredQueriesPerSecond"], s["latencyPercentile99InMs"])'
}
declare -a base prof
for ((i = 0; i < rounds; i++)); do
  b=$(run base --no-profile); p=$(run prof)
  echo "round $i  without: qps p99_ms = $b   with mlprof: $p"
  base+=("$b"); prof+=("$p")
done
printf '%s\n' "${base[@]}" >"$tmp/base.txt"; printf '%s\n' "${prof[@]}" >"$tmp/prof.txt"
python3 - "$tmp/base.txt" "$tmp/prof.txt" <<'PY'
import statistics, sys
def load(p):
    rows = [tuple(map(float, l.split())) for l in open(p) if l.strip()]
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
bq, bp = load(sys.argv[1]); pq, pp = load(sys.argv[2])
print(f"median without mlprof: {bq:.1f} req/s, p99 {bp:.2f} ms")
print(f"median with mlprof:    {pq:.1f} req/s, p99 {pp:.2f} ms")
print(f"throughput ratio {pq / bq:.3f} (target >= 0.97), p99 ratio {pp / bp:.3f} (target <= 1.05)")
PY
