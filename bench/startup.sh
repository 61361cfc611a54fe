#!/usr/bin/env bash
# What mlprof adds to starting and ending processes (docs/benchmarks.md, *Start-up*): three
# workloads, each run under every configuration in turn, the starting one rotating each round.
#   true100  a shell loop starting 100 /bin/true (every child profiled): the loop's wall seconds
#   pypass   python3 -c pass: the interpreter process's wall seconds, fork to exit
#   imports  python3 importing numpy and scikit-learn (and torch when installed): the importing
#            thread's wall seconds and, after "/", its own CPU seconds (wall - CPU = time it waited)
#   forks    python3 loading a large library (libLLVM, else libtorch_cpu; skipped if neither),
#            then forking (the child exits at once) for 1 s: the slowest fork() call, in seconds
# Configurations: unprofiled, cpu (--no-memory), memory (the defaults), and each with "@b" for the
# build in $MLPROF_BUILD_DIR_B (an A/B of two builds in the same rounds). Prints every run and the
# median per configuration. Usage:
#   bench/startup.sh [ROUNDS=5] [CONFIGS=unprofiled,cpu,memory] [WORKLOADS=true100,pypass,imports,forks]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MLPROF_BUILD_DIR:-$root/build}/bin
rounds=${1:-5}
IFS=, read -r -a configs <<<"${2:-unprofiled,cpu,memory}"
IFS=, read -r -a workloads <<<"${3:-true100,pypass,imports,forks}"
py=${MLPROF_BENCH_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mods="numpy, sklearn.linear_model"
"$py" -c "import torch" 2>/dev/null && mods="torch, $mods"
cat >"$tmp/imports.py" <<EOF
import time
t0, c0 = time.perf_counter(), time.thread_time()
import $mods
print("%.3f/%.3f" % (time.perf_counter() - t0, time.thread_time() - c0))
EOF
# LLVM first: its load is quick (libtorch_cpu's static constructors run for long enough that the
# tables are often parsed before its dlopen returns).
biglib=$( (ls -S /usr/lib/x86_64-linux-gnu/libLLVM-*.so.*; ls -S /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.*) 2>/dev/null | head -1 || true)
cat >"$tmp/forks.py" <<EOF
import ctypes, os, time
ctypes.CDLL("$biglib")
worst, t_end = 0.0, time.perf_counter() + 1.0
while time.perf_counter() < t_end:
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    worst = max(worst, time.perf_counter() - t0)
    os.waitpid(pid, 0)
print("%.4f" % worst)
EOF
cat >"$tmp/true100.sh" <<'EOF'
for i in $(seq 100); do /bin/true; done
EOF
echo "# $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), git $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), imports: $mods, forks after loading: ${biglib:-none found, skipped}"
run() {  # $1 = configuration, $2 = workload; prints the workload's figure
  local b=$bin pre=()
  case $1 in *@b) b=${MLPROF_BUILD_DIR_B:?"$1 needs MLPROF_BUILD_DIR_B"}/bin ;; esac
  case ${1%@b} in
    unprofiled) ;;
    cpu) pre=("$b/mlprof-run" -q --no-html --no-memory -o "$tmp/run.mlprof" --) ;;
    memory) pre=("$b/mlprof-run" -q --no-html -o "$tmp/run.mlprof" --) ;;
    *) echo "startup.sh: unknown configuration '$1'" >&2; exit 2 ;;
  esac
  case $2 in
    true100)
      local t0=$EPOCHREALTIME
      "${pre[@]}" bash "$tmp/true100.sh"
      python3 -c "import sys; print('%.4f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$EPOCHREALTIME" ;;
    pypass)  # the interpreter alone: timed inside the profiled command by the shell that starts it
      "${pre[@]}" bash -c 't0=$EPOCHREALTIME; "$0" -c pass; t1=$EPOCHREALTIME; echo "$t0 $t1"' "$py" |
        python3 -c "import sys; a, b = map(float, sys.stdin.read().split()); print('%.4f' % (b - a))" ;;
    imports) "${pre[@]}" "$py" "$tmp/imports.py" ;;
    forks) "${pre[@]}" "$py" "$tmp/forks.py" ;;
  esac
}
for ((i = 0; i < rounds; i++)); do
  for w in "${workloads[@]}"; do
    [ "$w" = forks ] && [ -z "$biglib" ] && continue
    n=${#configs[@]}
    for ((k = 0; k < n; k++)); do
      c=${configs[$(((i + k) % n))]}
      echo "$w $c $(run "$c" "$w")"
    done
  done
done | tee "$tmp/runs.txt" | sed 's/^/run: /'
python3 - "$tmp/runs.txt" <<'PY'
import collections, statistics, sys
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    w, c, v = line.split()
    by[(w, c)].append([float(x) for x in v.split("/")])
for (w, c), vs in sorted(by.items()):
    med = [statistics.median(v[k] for v in vs) for k in range(len(vs[0]))]
    extra = " (own CPU %.3f s: waited %.3f s)" % (med[1], med[0] - med[1]) if len(med) > 1 else ""
    worst = ", worst of the runs %.4f s" % max(v[0] for v in vs) if w == "forks" else ""
    print("%-8s %-14s median %.4f s over %d runs%s%s" % (w, c, med[0], len(vs), extra, worst))
PY
