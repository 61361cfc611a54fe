#!/usr/bin/env bash
# One browser test case: profile a fixture with mlprof-run (ground truth known by construction),
# then check its HTML report in headless Chromium (report_test.js).
# Usage: run_case.sh CASE BIN_DIR FIXTURE_DIR NODE_DIR ARTIFACT_DIR
# Exit 77 (skipped) only when MLPROF_SKIP_BROWSER=1; a missing node or chromium is a failure.
set -euo pipefail
case_name=$1 bin=$2 fixtures=$3 node_dir=$4 artifacts=$5
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
if [[ "${MLPROF_SKIP_BROWSER:-}" == 1 ]]; then
  echo "skipped: MLPROF_SKIP_BROWSER=1"
  exit 77
fi
"$here/check_tools.sh" "$node_dir"
work=$(mktemp -d "${TMPDIR:-/tmp}/mlprof-browser-XXXXXX")
trap 'rm -rf "$work"' EXIT
python=${MLPROF_BROWSER_PYTHON:-/usr/bin/python3}
marker_line() { grep -n -- "$2" "$1" | head -1 | cut -d: -f1; }
run() { "$bin/mlprof-run" -q -o "$work/p.mlprof" --html "$work/report.html" "$@"; }
extra=()
case "$case_name" in
  python)
    run -- "$python" "$here/fixtures/hot.py"
    extra=(--hot-file "$here/fixtures/hot.py" --hot-line "$(marker_line "$here/fixtures/hot.py" '# HOT-LINE')"
           --hot-marker '# HOT-LINE' --hot-function hot_loop) ;;
  native)
    run --no-memory -- "$fixtures/fixture_cpu_ratio" 400 10
    f="$src/tests/fixtures/cpu_ratio.cpp"
    extra=(--hot-file "$f" --hot-line "$(marker_line "$f" 'hot-line: fifty')" --hot-marker 'hot-line: fifty'
           --hot-function hot_fifty) ;;
  memory)
    # 2.5 s at 512 KiB: ~12 MB/s for 2.5 s is ~60 sampling intervals, which the growth detector
    # always finds (at 1.5 s, ~36 intervals, ~7 runs of 8). At the 1 MiB default it would be ~30
    # intervals, between the 20 found two times in three and the 40 always found (docs/report.md,
    # leak candidates): this case checks the page, not the detector.
    run --mem-interval 512K -- "$python" "$src/tests/fixtures/python/mem_leak.py" 2.5 ;;
  inject)
    run -- "$python" "$here/fixtures/inject.py" ;;
  multiproc)
    run --no-memory -- "$python" "$src/tests/fixtures/python/multiproc.py" fork 0.3 ;;
  serving)
    # The native test server failing every 10th request and keeping 10000 bytes per request.
    # A free port below the ephemeral range: one the kernel picks can become another test's
    # connection's source port before the server binds it.
    port=$("$python" -c '
import random, socket
for _ in range(200):
    p = random.randrange(20000, 32000)
    try:
        socket.socket().bind(("127.0.0.1", p))
    except OSError:
        continue
    print(p)
    break')
    run --requests "$src/examples/requests.txt" --url "http://127.0.0.1:$port/score" --max-requests 300 \
        --warmup 20 --concurrency 2 --mem-interval 16K -- "$fixtures/fixture_http_server" "$port" --fail-every 10 \
        --leak-bytes 10000
    extra=(--requests 300) ;;
  gpu)
    # The GPU fixture against the stub CUPTI and the fake libcuda (no GPU needed; tests/fixtures/gpu).
    if [[ ! -e "$fixtures/gpu/libcupti.so" ]]; then
      echo "skipped: built without the CUPTI headers (no stub libcupti)"; exit 77
    fi
    MLPROF_CUPTI_PATH="$fixtures/gpu/libcupti.so" run -- "$fixtures/fixture_gpu_app" "$fixtures/gpu/libcuda.so.1" 20 --wait ;;
  wall)
    run --mode wall --no-memory -- "$python" "$src/tests/fixtures/python/cpu_split.py" 0.1 3 ;;
  *) echo "unknown case $case_name" >&2; exit 2 ;;
esac
MLPROF_BROWSER_NODE_DIR=$node_dir node "$here/report_test.js" "$case_name" --html "$work/report.html" \
  --artifacts "$artifacts" "${extra[@]}"
