#!/usr/bin/env bash
# Serving overhead (docs/benchmarks.md): throughput and p50/p99 latency of the example service
# (examples/serve_http.py) under the same closed-loop load, with mlprof (CPU + memory profiling on,
# the default), with mlprof --no-memory (CPU only), and without it (--no-profile: same load loop,
# same measurements, no preload). Each round runs the three in turn, the starting one rotating;
# prints each run (label, req/s, p50 ms, p99 ms, service CPU ms per steady-state request) and the
# medians of the per-round ratios. Usage:
#   bench/serving_overhead.sh [ROUNDS=5] [REQUESTS=3000] [CONCURRENCY=2]
# The service runs on $MLPROF_BENCH_PYTHON (default /usr/bin/python3, Debian's, with python3-sklearn).
# MLPROF_BENCH_RPS=R replays in open loop at R requests/s instead (--rps; CONCURRENCY is then
# unused): the latency a service running below its capacity sees, where the throughput ratio is
# ~1 by construction and the latency ratios are the figures to read.
# MLPROF_BENCH_SERVICE_CPUS=LIST runs the service under `taskset -c LIST`, MLPROF_BENCH_LOAD_CPUS=LIST
# mlprof-run (the load loop and the collector) under its own list: on a machine with cores to spare,
# the service then has its CPUs to itself, as in a container with a CPU set, and the load loop and
# the collector run beside it, as they would on another machine or core.
# MLPROF_BENCH_PARALLEL="SVC:LOAD SVC:LOAD ..." (one CPU list pair per configuration) runs a round's
# configurations at the same time instead of one after the other, each service on its own CPUs
# with its own load loop and port, the slots rotating from round to round: on a many-core host
# whose speed drifts by tens of percent within minutes, every configuration of a round then sees
# the same drift, which the per-round ratios cancel.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MLPROF_BUILD_DIR:-$root/build}/bin
rounds=${1:-5} requests=${2:-3000} conc=${3:-2}
port=${MLPROF_BENCH_PORT:-18090}
if [ -n "${MLPROF_BENCH_RPS:-}" ]; then load=(--rps "$MLPROF_BENCH_RPS"); else load=(--concurrency "$conc"); fi
svc_pin=() load_pin=()
if [ -n "${MLPROF_BENCH_SERVICE_CPUS:-}" ]; then svc_pin=(taskset -c "$MLPROF_BENCH_SERVICE_CPUS"); fi
if [ -n "${MLPROF_BENCH_LOAD_CPUS:-}" ]; then load_pin=(taskset -c "$MLPROF_BENCH_LOAD_CPUS"); fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # $1 = label, rest = extra mlprof-run options; prints "label qps p50_ms p99_ms"
  local label=$1; shift
  "${load_pin[@]}" "${run_bin:-$bin}/mlprof-run" -q --no-html -o "$tmp/$label.mlprof" "$@" --requests "$root/examples/requests.txt" \
    --url "http://127.0.0.1:$port/score" --max-requests "$requests" --warmup 100 "${load[@]}" -- \
    "${svc_pin[@]}" "${MLPROF_BENCH_PYTHON:-/usr/bin/python3}" "$root/examples/serve_http.py" --port "$port" 2>/dev/null
  "$bin/mlprof" export "$tmp/$label.mlprof" --format json |
    python3 -c '
import json, sys
s = json.load(sys.stdin)["serving"]
# The service'"'"'s CPU per steady-state request: its /proc CPU timeline (cores, every ~100 ms)
# integrated over the window, / the window'"'"'s requests. Less noisy than throughput on a shared VM.
t, res = s["times_ms"], s["resources"]
cpu_ms = sum(r["cpu_cores"] * (r["t_ms"] - q["t_ms"]) for q, r in zip(res, res[1:])
             if r["t_ms"] > t["window_start"] and r["t_ms"] <= t["window_end"])
print(sys.argv[1], s["measuredQueriesPerSecond"], s["latencyPercentile50InMs"], s["latencyPercentile99InMs"],
      cpu_ms / max(1, s["window_queries"]))' "$label"
}
# MLPROF_BENCH_CONFIGS adds configurations to the three: nosamples (memory on, interval 2^40: the
# allocator wrappers without samples), nocopy (copies not sampled), 512K, rate1 (--no-memory at one
# sample a second: what CPU profiling costs besides its samples), full@b (the defaults with the
# build in $MLPROF_BUILD_DIR_B: an A/B of two builds in the same rounds).
# MLPROF_BENCH_ONLY="base full ..." replaces the list (it must hold base, which the ratios divide by).
# With MLPROF_BENCH_PARALLEL="1:1 1:1" on a 2-core machine two configurations share one core at the
# same time, each with its own load loop and collector: both see the machine's state of the moment,
# and the service CPU per request ratio is then the low-noise figure (their throughputs pull
# towards each other: they share the core, and the last to finish runs its tail alone).
IFS=' ' read -r -a labels <<<"${MLPROF_BENCH_ONLY:-base full cpu ${MLPROF_BENCH_CONFIGS:-}}"
[[ " ${labels[*]} " == *" base "* ]] || { echo "serving_overhead.sh: MLPROF_BENCH_ONLY must include base" >&2; exit 2; }
n=${#labels[@]}
run_config() {  # $1 = label
  case $1 in
    base) run base --no-profile ;;
    full) run full ;;
    cpu) run cpu --no-memory ;;
    nosamples) run nosamples --mem-interval 1099511627776 ;;
    nocopy) MLPROF_COPY_INTERVAL=0 run nocopy ;;
    512K) run 512K --mem-interval 512K ;;
    rate1) run rate1 --no-memory --rate 1 ;;
    full@b) run_bin=${MLPROF_BUILD_DIR_B:?"full@b needs MLPROF_BUILD_DIR_B"}/bin run full@b ;;
    *) echo "serving_overhead.sh: unknown configuration '$1'" >&2; exit 2 ;;
  esac
}
slots=()
if [ -n "${MLPROF_BENCH_PARALLEL:-}" ]; then
  IFS=' ' read -r -a slots <<<"$MLPROF_BENCH_PARALLEL"
  for s in "${slots[@]}"; do
    [[ $s == *:* ]] || { echo "serving_overhead.sh: MLPROF_BENCH_PARALLEL: '$s' is not SERVICE_CPUS:LOAD_CPUS" >&2; exit 2; }
  done
  ((${#slots[@]} >= n)) || { echo "serving_overhead.sh: MLPROF_BENCH_PARALLEL has ${#slots[@]} slots for $n configurations" >&2; exit 2; }
fi
for ((i = 0; i < rounds; i++)); do
  if ((${#slots[@]} > 0)); then
    for ((k = 0; k < n; k++)); do
      slot=${slots[$(((i + k) % n))]}
      (port=$((port + k)) svc_pin=(taskset -c "${slot%%:*}") load_pin=(taskset -c "${slot#*:}")
       run_config "${labels[$k]}" >"$tmp/slot.$k") &
    done
    wait
    cat "$tmp"/slot.*
    rm -f "$tmp"/slot.*
  else
    for ((k = 0; k < n; k++)); do run_config "${labels[$(((i + k) % n))]}"; done
  fi | sort | tee -a "$tmp/runs.txt" | sed "s/^/round $i: /"
done
python3 - "$tmp/runs.txt" <<'PY'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)
for r in rows: by[r[0]].append(tuple(map(float, r[1:])))
n = len(by["base"])
def ratios(label, k): return [by[label][i][k] / by["base"][i][k] for i in range(n)]
med = lambda xs: statistics.median(xs)
def mean_se(xs):  # "mean M +- standard error"
    se = statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else float("nan")
    return f"mean {statistics.mean(xs):.3f} +- {se:.3f}"
print(f"median without mlprof: {med(r[0] for r in by['base']):.1f} req/s, p50 {med(r[1] for r in by['base']):.2f} ms, "
      f"p99 {med(r[2] for r in by['base']):.2f} ms, service CPU {med(r[3] for r in by['base']):.3f} ms/request")
names = {"full": "mlprof (CPU + memory)", "full@b": "mlprof (CPU + memory), build B", "cpu": "mlprof --no-memory",
         "nosamples": "mlprof, interval 2^40",
         "nocopy": "mlprof, copies not sampled", "512K": "mlprof --mem-interval 512K",
         "rate1": "mlprof --no-memory --rate 1"}
for label in [l for l in names if l in by]:
    name = names[label]
    q, p50, p99, c = ratios(label, 0), ratios(label, 1), ratios(label, 2), ratios(label, 3)
    print(f"{name}: throughput ratio {med(q):.3f} ({min(q):.3f}-{max(q):.3f}, {mean_se(q)}, target >= 0.97), "
          f"p50 ratio {med(p50):.3f}, p99 ratio {med(p99):.3f} ({min(p99):.3f}-{max(p99):.3f}, target <= 1.05), "
          f"service CPU per request ratio {med(c):.3f} ({min(c):.3f}-{max(c):.3f}, {mean_se(c)})")
PY
