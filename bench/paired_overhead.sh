#!/usr/bin/env bash
# Overhead in concurrent pairs (unprofiled and profiled at once, one CPU each): see bench/paired_overhead.py.
#   bench/paired_overhead.sh [--rounds N] [--workloads py_pure,py_numpy] [--configs A,B] [--out FILE]
set -euo pipefail
exec python3 "$(dirname "$0")/paired_overhead.py" "$@"
