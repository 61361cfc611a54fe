#!/usr/bin/env bash
# CPU-sampling overhead of mlprof vs unprofiled, gperftools and perf, as a markdown table.
#   bench/cpu_overhead.sh [--runs N] [--workloads cpu_ratio,native_inference,threads] [--quick] [--out FILE]
# Run on a quiet machine after ./scripts/build.sh; see bench/cpu_overhead.py for what is measured.
set -euo pipefail
CPU_OVERHEAD_ARGV0="$0" exec python3 "$(dirname "$0")/cpu_overhead.py" "$@"
