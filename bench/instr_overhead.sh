#!/usr/bin/env bash
# Instructions per request that mlprof adds to a Python request loop (docs/benchmarks.md,
# "Instruction counts"): valgrind's callgrind counts every instruction the main thread executes, so
# unlike time on this shared VM the figure does not move between runs. Each configuration runs
# bench/instr_work.py twice, with 2 and with 12 passes of 200 requests; the difference / 2000 is
# the cost of one request, start-up and imports cancelled. Usage:
#   bench/instr_overhead.sh [CONFIGS]
# CONFIGS: comma-separated configurations of bench/mlprof_configs.sh (unprofiled, passthrough: a
# CPython allocator wrapper that only forwards, the floor of wrapping; cpu; memory; ...; "@b" for
# the build in $MLPROF_BUILD_DIR_B); default unprofiled,passthrough,cpu,memory. ~1 minute each.
# MLPROF_INSTR_WORK=service counts the example service's own request work instead
# (bench/instr_service.py: bench/serving_work.py under valgrind, 1 and 4 passes of its 200 bodies;
# json, normalize, TF-IDF, predict_proba): ~3 minutes each.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
command -v valgrind >/dev/null || { echo "instr_overhead.sh: valgrind not found (apt install valgrind)" >&2; exit 1; }
IFS=, read -r -a configs <<<"${1:-unprofiled,passthrough,cpu,memory}"
py=${MLPROF_BENCH_PYTHON:-/usr/bin/python3}
case ${MLPROF_INSTR_WORK:-python} in
  python) work=$root/bench/instr_work.py lo=2 hi=12 ;;  # passes of 200 requests
  service) work=$root/bench/instr_service.py lo=1 hi=4 ;;
  *) echo "instr_overhead.sh: MLPROF_INSTR_WORK must be python or service, not '$MLPROF_INSTR_WORK'" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -shared -fPIC "$root/bench/py_alloc_passthrough.c" -o "$tmp/passthrough.so"
echo "# git $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $($py --version 2>&1), ${work##*/}"
. "$root/bench/mlprof_configs.sh"
complete=50000000  # a run that executed fewer instructions was killed while starting (below)
instr() {  # $1 = configuration, $2 = passes; prints the instructions the main thread executed
  local wrap pre
  mlprof_config "$1" "$tmp/run.mlprof" || exit 2
  # Under valgrind the profiler's first timer signal sometimes arrives while the process is still
  # loading libraries and valgrind cannot deliver it ("Can't extend stack ... during signal
  # delivery": a valgrind limit, the program is killed after ~0.5M instructions); such a run is
  # repeated (a real one executes >100M and exits with 0).
  # Only the main thread (the request loop, with the hooks and signal handlers it runs) is counted:
  # mlprof's writer thread cycles every 10-40 ms of wall time, which valgrind stretches ~50 times,
  # so its count follows the run's duration rather than the requests (±1% of the total between
  # runs of the service's work); it runs on another core in a real run.
  local n=0 try
  for try in 1 2 3 4 5 6 7 8 9 10; do
    rm -f "$tmp"/cg.out*
    n=0
    if "${pre[@]}" valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$tmp/cg.out" "$py" "$work" \
      "$wrap" "$tmp/passthrough.so" "$2" >/dev/null 2>&1; then
      n=$(awk '/^totals:/ {print $2}' "$tmp/cg.out-01" 2>/dev/null)
    fi
    [ "${n:-0}" -gt "$complete" ] && break
  done
  echo "$n"
}
base=0
for c in "${configs[@]}"; do
  a=$(instr "$c" "$lo") b=$(instr "$c" "$hi")
  [ "${a:-0}" -gt "$complete" ] && [ "${b:-0}" -gt "$complete" ] ||
    { echo "instr_overhead.sh: $c: no complete run under valgrind in 10 tries" >&2; exit 1; }
  per=$(( (b - a) / ((hi - lo) * 200) ))
  [ "$c" = unprofiled ] && base=$per
  if [ "$base" -gt 0 ]; then
    printf '%-14s %8d instructions per request  %.3fx\n' "$c" "$per" "$(echo "$per / $base" | bc -l)"
  else
    printf '%-14s %8d instructions per request\n' "$c" "$per"
  fi
done
