#!/usr/bin/env bash
# The README's first command: install dependencies, build, and profile the bundled examples:
# a Python model server (numpy) into out/example.html, a native one into out/native.html, and the
# example HTTP service through a replayed request file (mlprof-run --requests) into out/serving.html.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
mkdir -p "$root/out"
"$root/build/bin/mlprof-run" -o "$root/out/example.mlprof" --html "$root/out/example.html" -- \
  /usr/bin/python3 "$root/examples/serve.py" 150
"$root/build/bin/mlprof-run" -q -o "$root/out/native.mlprof" --html "$root/out/native.html" -- \
  "$root/build/bin/native_inference" 600 2
# The serving workflow: the example HTTP service (scikit-learn) under a replayed request file;
# 3000 requests (~2 s here) give the steady window enough samples for its per-request lines.
port=${MLPROF_DEMO_PORT:-18080}
"$root/build/bin/mlprof-run" -o "$root/out/serving.mlprof" --html "$root/out/serving.html" \
  --requests "$root/examples/requests.txt" --url "http://127.0.0.1:$port/score" \
  --max-requests 3000 --warmup 100 --concurrency 2 -- \
  /usr/bin/python3 "$root/examples/serve_http.py" --port "$port"
echo
echo "Serving run (latency, recommendation, per-request tables): $root/out/serving.html"
echo "Open $root/out/example.html (Python server) or $root/out/native.html (native server) in a browser,"
echo "or: $root/build/bin/mlprof report $root/out/example.mlprof"
