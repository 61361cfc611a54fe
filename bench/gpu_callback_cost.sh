#!/usr/bin/env bash
# The GPU launch callback's cost per CUDA API call, without a GPU (docs/gpu.md, "Cost"): the fake
# libcuda / stub libcupti fixture under mlprof-run, with the stub invoking mlprof's ENTER callbacks
# (stack capture + ring) and without (STUB_CUPTI_MODE=no-callbacks: activity only). The fixture times
# its own loop (6 outermost API calls per iteration, 4 of them wrapping a nested driver call).
#   bench/gpu_callback_cost.sh [ITERATIONS (default 20000)] [RUNS (default 5)]
# Needs a build with the CUPTI headers (./scripts/build.sh; MLPROF_BUILD_DIR for another tree).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MLPROF_BUILD_DIR:-$root/build}
iters=${1:-20000}
runs=${2:-5}
stub=$build/fixtures/gpu/libcupti.so
[ -f "$stub" ] || { echo "no $stub: build with the CUPTI headers (MLPROF_CUDA_ROOT)" >&2; exit 2; }
best() {  # best (lowest) ns per iteration of $runs runs in mode $1
  local mode=$1 b=
  for _ in $(seq "$runs"); do
    v=$(MLPROF_CUPTI_PATH=$stub STUB_CUPTI_MODE=$mode "$build/bin/mlprof-run" -q --no-html -o /tmp/gpu_cost.$$.mlprof -- \
        "$build/fixtures/fixture_gpu_app" "$build/fixtures/gpu/libcuda.so.1" "$iters" --wait --time |
        sed -n 's/^ns_per_iteration=//p')
    if [ -z "$b" ] || [ "$v" -lt "$b" ]; then b=$v; fi
  done
  rm -f /tmp/gpu_cost.$$.mlprof
  echo "$b"
}
base=$(best no-callbacks)
with=$(best "")
echo "ns per iteration: without callbacks $base, with callbacks $with"
echo "callback cost per outermost API call: $(( (with - base) / 6 )) ns"
