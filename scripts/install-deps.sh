#!/usr/bin/env bash
# Installs everything mlprof needs to build, test and benchmark, by Debian package name.
# Safe to run again: apt skips what is already installed.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build pkg-config git
  libunwind-dev      # unwinding in the preload's signal handler
  libdw-dev libelf-dev  # symbolization in the collector (elfutils)
  libfmt-dev         # formatting in collector/report/tools
  libcli11-dev       # command-line parsing for mlprof-run and mlprof
  nlohmann-json3-dev # JSON exports
  zlib1g-dev         # crc32 for profile trailers, gzip for pprof
  libgtest-dev libgmock-dev googletest
  binutils           # objcopy/strip for test fixtures
  python3 python3-numpy  # Python tests: Debian's interpreter with numpy (pyenv's builds use hashlib)
  golang-go          # `go tool pprof` reads the pprof export in the e2e tests
  libtcmalloc-minimal4 libjemalloc2  # memory tests: allocators a user preloads beside mlprof
  libcurl4-openssl-dev  # the serving workflow's load loop (mlprof-run --requests)
  python3-sklearn    # the example HTTP service's model (examples/serve_http.py)
  chromium           # browser tests of the HTML report (tests/browser: playwright-core from npm)
  patchelf           # scripts/bundle.sh: a relocatable copy of the tools for a machine without these libraries
)
# Node.js and npm for the browser tests: Debian's packages, unless a node with npm is already
# installed (e.g. NodeSource's nodejs, which bundles npm and conflicts with Debian's npm package).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  pkgs+=(nodejs npm)
fi
if [ "${MLPROF_BENCH_DEPS:-0}" = 1 ]; then
  pkgs+=(google-perftools libgoogle-perftools-dev linux-perf hyperfine)
  pkgs+=(heaptrack valgrind)  # bench/mem_overhead.sh baselines
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "mlprof: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
