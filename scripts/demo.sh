#!/usr/bin/env bash
# The README's first command: install dependencies, build, and profile the bundled example
# (a small native inference server) into out/example.mlprof and out/example.html.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
mkdir -p "$root/out"
"$root/build/bin/mlprof-run" -o "$root/out/example.mlprof" --html "$root/out/example.html" -- \
  "$root/build/bin/native_inference" 600 2
echo
echo "Open $root/out/example.html in a browser, or: $root/build/bin/mlprof report $root/out/example.mlprof"
