#!/usr/bin/env bash
# The README's second command (and CI's): install dependencies, build, run every test; then build
# the collector/profile/report unit tests with ASan+UBSan and run them too (the preload is never
# built with sanitizers: it runs inside other programs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
(cd "$root/build" && ctest --output-on-failure -j2 --timeout 300)
if [ "${MLPROF_SKIP_SANITIZERS:-0}" != 1 ]; then
  cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMLPROF_SANITIZE=ON >/dev/null
  cmake --build "$root/build-asan" --parallel "$(nproc)" --target mlprof_unit_tests
  (cd "$root/build-asan" && ctest --output-on-failure -j2 --timeout 300 -L unit)
fi
