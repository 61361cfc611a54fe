#!/usr/bin/env bash
# What a CUDA launch costs under mlprof when launches are all a program does (docs/benchmarks.md,
# "Launch-bound worst case"): bench/gpu_launch_bound.py's loop of tiny kernels, configurations run
# interleaved, the starting one rotating each round. Prints every run, then per configuration the
# median launches/s, its ratio to the unprofiled median and the CPU time it adds per launch.
#   bench/gpu_launch_bound.sh [LAUNCHES=30000] [ROUNDS=3] [CONFIGS]
# CONFIGS, comma-separated: unprofiled, mlprof (the defaults), native (MLPROF_GPU_STACKS=native: no
# Python frames), none (MLPROF_GPU_STACKS=none: CUPTI on, no stack), nogpu (--no-gpu), nomemory
# (--no-memory), torch-profiler (torch.profiler around the loop, no mlprof); "@b" after a name runs
# it with the mlprof build in $MLPROF_BUILD_DIR_B. Default: unprofiled,mlprof,native,none,nogpu,
# torch-profiler. Needs an NVIDIA GPU and torch with CUDA ($MLPROF_BENCH_PYTHON, default python3);
# MLPROF_BENCH_DEVICE=cpu checks the script on a machine without one (nothing GPU is measured).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
launches=${1:-30000} rounds=${2:-3}
IFS=, read -r -a configs <<<"${3:-unprofiled,mlprof,native,none,nogpu,torch-profiler}"
py=${MLPROF_BENCH_PYTHON:-python3}
device=${MLPROF_BENCH_DEVICE:-cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
one() {  # $1 = configuration; prints "name launches_per_s"
  local name=$1 b=${MLPROF_BUILD_DIR:-$root/build}/bin mode=plain
  case $name in *@b) b=${MLPROF_BUILD_DIR_B:?"$name needs MLPROF_BUILD_DIR_B"}/bin ;; esac
  local mr=("$b/mlprof-run" -q --no-html -o "$tmp/run.mlprof") pre=()
  case ${name%@b} in
    unprofiled) ;;
    mlprof) pre=("${mr[@]}" --) ;;
    native) pre=(env MLPROF_GPU_STACKS=native "${mr[@]}" --) ;;
    none) pre=(env MLPROF_GPU_STACKS=none "${mr[@]}" --) ;;
    nogpu) pre=("${mr[@]}" --no-gpu --) ;;
    nomemory) pre=("${mr[@]}" --no-memory --) ;;
    torch-profiler) mode=profiler ;;
    *) echo "gpu_launch_bound.sh: unknown configuration '$name'" >&2; exit 2 ;;
  esac
  local r
  r=$("${pre[@]}" "$py" "$root/bench/gpu_launch_bound.py" "$launches" "$mode" "$device" 2>/dev/null |
      sed -n 's/^{"launches_per_s": \([0-9.]*\)}$/\1/p' | tail -1)
  [ -n "$r" ] || { echo "gpu_launch_bound.sh: configuration $name printed no rate" >&2; exit 1; }
  echo "$name $r"
}
echo "# $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), git $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $launches launches"
. "$root/bench/rounds.sh"
run_rounds "$rounds" "$tmp/runs.txt" "${configs[@]}"
python3 - "$tmp/runs.txt" "${configs[@]}" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, name, rate = line.split()
    runs[name].append(float(rate))
base = statistics.median(runs["unprofiled"]) if runs.get("unprofiled") else None
for name in sys.argv[2:]:
    m = statistics.median(runs[name])
    line = f"{name:15s} {m:10.0f} launches/s  {1e6 / m:6.2f} us per launch"
    if base and name != "unprofiled":
        line += f"  {m / base:.3f}x of unprofiled, +{1e6 / m - 1e6 / base:.2f} us per launch"
    print(line)
PY
