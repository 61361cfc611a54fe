#!/usr/bin/env bash
# Memory-profiling overhead of mlprof vs unprofiled, heaptrack and valgrind massif, as a markdown table.
#   bench/mem_overhead.sh [--runs N] [--workloads churn,churn_short] [--configs A,B] [--quick] [--out FILE]
# Run on a quiet machine after ./scripts/build.sh; see bench/mem_overhead.py for what is measured.
set -euo pipefail
MEM_OVERHEAD_ARGV0="$0" exec python3 "$(dirname "$0")/mem_overhead.py" "$@"
