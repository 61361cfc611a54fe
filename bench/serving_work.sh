#!/usr/bin/env bash
# The example service's per-request CPU cost under mlprof, without the network (docs/benchmarks.md,
# issue 6): bench/serving_work.py handles examples/requests.txt's bodies in-process (the /score
# handler's work: json, normalize, TF-IDF, predict_proba) and prints that loop's thread CPU time.
# Configurations run interleaved, the starting one rotating each round; prints every run and, per
# configuration, the median of its per-round ratios to the unprofiled run (min-max) and the ratio of
# its fastest run to the fastest unprofiled one. Usage:
#   bench/serving_work.sh [ROUNDS=8] [PASSES=15] [CONFIGS]
# CONFIGS is a comma-separated subset, in order, of: unprofiled, passthrough (a wrapper of the MEM
# and OBJ allocator domains that only forwards: the floor of wrapping), cpu (--no-memory), memory
# (the defaults), nosamples (memory on, interval 2^40: the wrappers without samples), nocopy
# (memory on, copies not sampled), 512K, 64K. Default: all but 512K and 64K. A name ending in "@b"
# runs that configuration with the mlprof build in $MLPROF_BUILD_DIR_B (an A/B of two builds).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-8} passes=${2:-15}
IFS=, read -r -a configs <<<"${3:-unprofiled,passthrough,cpu,memory,nosamples,nocopy}"
py=${MLPROF_BENCH_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The pass-through wrapper is compiled only when asked for (a GPU host may have no compiler).
joined=" ${configs[*]} "  # each name stands between spaces
case $joined in
  *" passthrough "*) cc -O2 -shared -fPIC "$root/bench/py_alloc_passthrough.c" -o "$tmp/passthrough.so" ;;
esac
echo "# $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), git $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
. "$root/bench/mlprof_configs.sh"
one() {  # $1 = configuration; prints "label seconds"
  local wrap pre
  mlprof_config "$1" "$tmp/run.mlprof" || exit 2
  local t
  t=$("${pre[@]}" "$py" "$root/bench/serving_work.py" "$wrap" "$tmp/passthrough.so" "$passes" 2>&1 >/dev/null |
      awk '/^T /{print $2}')
  [ -n "$t" ] || { echo "serving_work.sh: configuration $1 printed no time" >&2; exit 1; }
  echo "$1 $t"
}
. "$root/bench/rounds.sh"
run_rounds "$rounds" "$tmp/runs.txt" "${configs[@]}"
python3 - "$tmp/runs.txt" "${configs[@]}" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r, label, s = line.split()
    t[label][int(r)] = float(s)
base = t["unprofiled"]
print(f"unprofiled: median {statistics.median(base.values()):.3f} s of thread CPU, fastest {min(base.values()):.3f} s")
for label in sys.argv[2:]:
    if label == "unprofiled":
        continue
    q = [t[label][r] / base[r] for r in t[label] if r in base]
    # The median of per-round ratios, and the ratio of the fastest runs (noise on a shared machine
    # only ever adds time, so the minimum is the steadiest estimate of a configuration's own cost).
    print(f"{label:12s} {statistics.median(q):.3f}x ({min(q):.3f}-{max(q):.3f}), "
          f"fastest runs {min(t[label].values()) / min(base.values()):.3f}x")
PY
