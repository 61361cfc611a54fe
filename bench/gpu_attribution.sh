#!/usr/bin/env bash
# Issue 7's real-GPU proof (docs/gpu.md): a PyTorch script with a matmul line, an elementwise line
# and a host-to-device copy line; mlprof's GPU time per line against CUDA-event timings (+-5 pp),
# kernel names against torch.profiler's, iterations/s with and without mlprof-run (<= 1.05x).
#   bench/gpu_attribution.sh [--iterations N] [--python PYTHON]
# Needs an NVIDIA GPU, torch with CUDA, and a build with the CUPTI headers (./scripts/build.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MLPROF_BUILD_DIR:-$root/build}
exec python3 "$root/tests/gpu/torch_lines.py" --mlprof-run "$build/bin/mlprof-run" --mlprof "$build/bin/mlprof" "$@"
