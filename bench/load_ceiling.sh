#!/usr/bin/env bash
# The serving load loop's own ceiling (docs/benchmarks.md, "The load loop's own ceiling"): mlprof-run
# --no-profile replays a one-line request file against the native test server, which does no work
# per request, so requests/s is what the load loop (libcurl multi, one thread) drives on this
# machine, client and server sharing its cores. Usage:
#   bench/load_ceiling.sh [REQUESTS=20000] [CONCURRENCIES="1 8"]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MLPROF_BUILD_DIR:-$root/build}/bin
server=${MLPROF_BUILD_DIR:-$root/build}/fixtures/fixture_http_server
requests=${1:-20000}
conc=${2:-1 8}
port=${MLPROF_BENCH_PORT:-18095}
[ -x "$server" ] || { echo "load_ceiling.sh: $server not built (cmake --build build)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo '{"text": "ceiling"}' >"$tmp/one.txt"
echo "# $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), git $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "concurrency  requests/s  p50_ms  p99_ms"
for c in $conc; do
  "$bin/mlprof-run" -q --no-profile --no-html -o "$tmp/c.mlprof" --requests "$tmp/one.txt" \
    --url "http://127.0.0.1:$port/" --max-requests "$requests" --concurrency "$c" -- "$server" "$port" 2>/dev/null
  "$bin/mlprof" export "$tmp/c.mlprof" --format json | python3 -c '
import json, sys
s = json.load(sys.stdin)["serving"]
assert s["successQueries"] == s["totalQueries"], "failed requests: the figure would not be the ceiling"
print("%11s  %10.0f  %6.3f  %6.3f" % (sys.argv[1], s["measuredQueriesPerSecond"], s["latencyPercentile50InMs"],
                                     s["latencyPercentile99InMs"]))' "$c"
done
