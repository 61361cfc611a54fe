#!/usr/bin/env bash
# The HTML report on a large profile (docs/benchmarks.md, "HTML report on a large profile"):
# generates a synthetic profile of 1,000,000 samples over 100,000 distinct stacks
# (bench/html_gen.cpp), times `mlprof report --html` on it (best of 3), prints the page's size,
# then, when the browser test tools are installed (ctest -L browser installs them), loads the
# page in headless Chromium and prints load + first draw, search and view-switch times.
# Usage: bench/html_gen.sh [BUILD_DIR=build] [SAMPLES=1000000] [DISTINCT=100000]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
samples=${2:-1000000} distinct=${3:-100000}
work=$(mktemp -d "${TMPDIR:-/tmp}/mlprof-html-bench-XXXXXX")
trap 'rm -rf "$work"' EXIT
cmake --build "$build" --target mlprof mlprof_html_gen >/dev/null
"$build/bin/mlprof_html_gen" "$work/large.mlprof" "$samples" "$distinct"
echo "profile: $(stat -c %s "$work/large.mlprof") bytes"
best=""
for i in 1 2 3; do
  start=$(date +%s.%N)
  "$build/bin/mlprof" report "$work/large.mlprof" --html "$work/large.html" >/dev/null 2>&1
  t=$(echo "$(date +%s.%N) - $start" | bc)
  echo "mlprof report --html: run $i: ${t} s"
  if [[ -z "$best" ]] || (( $(echo "$t < $best" | bc) )); then best=$t; fi
done
echo "generation: best ${best} s; html size: $(stat -c %s "$work/large.html") bytes"
node_dir="$build/browser-node"
if [[ -d "$node_dir/node_modules/playwright-core" ]] && command -v node >/dev/null; then
  MLPROF_BROWSER_NODE_DIR=$node_dir node "$root/tests/browser/report_test.js" large --html "$work/large.html" \
    --artifacts "$build/test-artifacts/browser" | grep -E '^\{|loaded|FAIL'
else
  echo "browser timing skipped: run 'ctest -L browser' once to install playwright-core into $node_dir"
fi
