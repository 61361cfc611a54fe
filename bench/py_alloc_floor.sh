#!/usr/bin/env bash
# The floor of wrapping CPython's allocator (docs/benchmarks.md, issue 4): bench/py_pure.py with
# no wrapper, with a pass-through wrapper of the MEM and OBJ domains (bench/py_alloc_passthrough.c:
# forwards only), and under mlprof with memory on and off, interleaved; prints the mean of the
# workload's own time (perf_counter around the loop, the wrapper installed before it) and each
# configuration's ratio to the unwrapped run. Usage:
#   bench/py_alloc_floor.sh [ROUNDS=7] [ITERATIONS=3000000] [PYTHON=/usr/bin/python3]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MLPROF_BUILD_DIR:-$root/build}/bin
rounds=${1:-7} iters=${2:-3000000} py=${3:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -shared -fPIC "$root/bench/py_alloc_passthrough.c" -o "$tmp/passthrough.so"
cat > "$tmp/run.py" <<PY
import ctypes, sys, time
if int(sys.argv[1]): ctypes.PyDLL("$tmp/passthrough.so").install(3)
sys.argv = ["py_pure.py", sys.argv[2]]
source = open("$root/bench/py_pure.py").read()
t = time.perf_counter()
exec(compile(source, "py_pure.py", "exec"))
print("T", time.perf_counter() - t, file=sys.stderr)
PY
one() {  # $1 label, $2 wrap (0/1), rest: command prefix
  local label=$1 wrap=$2; shift 2
  local t
  t=$("$@" "$py" "$tmp/run.py" "$wrap" "$iters" 2>&1 >/dev/null | awk '/^T /{print $2}')
  echo "$label $t"
}
for ((i = 0; i < rounds; i++)); do
  one unwrapped 0
  one passthrough 1
  one mlprof-memory 0 "$bin/mlprof-run" -q --no-html -o "$tmp/m.mlprof" --
  one mlprof-no-memory 0 "$bin/mlprof-run" -q --no-html --no-memory -o "$tmp/c.mlprof" --
done | tee "$tmp/runs.txt" | sed 's/^/  /'
awk '{s[$1] += $2; n[$1]++} END {
  base = s["unwrapped"] / n["unwrapped"]
  split("unwrapped passthrough mlprof-no-memory mlprof-memory", order, " ")
  for (k = 1; k <= 4; k++) { l = order[k]; printf "%-17s mean %.3f s  %.3fx\n", l, s[l] / n[l], s[l] / n[l] / base }
}' "$tmp/runs.txt"
