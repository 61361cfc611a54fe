#!/usr/bin/env bash
# Installs playwright-core (version pinned in tests/browser/package.json) into NODE_DIR in the
# build tree with npm; node_modules never lives in the source tree. Chromium is Debian's.
# Usage: setup.sh NODE_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
node_dir=$1
if [[ "${MLPROF_SKIP_BROWSER:-}" == 1 ]]; then
  echo "skipped: MLPROF_SKIP_BROWSER=1"
  exit 77
fi
command -v npm >/dev/null || { echo "npm is missing (apt-get install npm), or set MLPROF_SKIP_BROWSER=1" >&2; exit 1; }
mkdir -p "$node_dir"
if ! cmp -s "$here/package.json" "$node_dir/package.json" || [[ ! -d "$node_dir/node_modules/playwright-core" ]]; then
  cp "$here/package.json" "$node_dir/package.json"
  (cd "$node_dir" && npm install --no-audit --no-fund --loglevel=error)
fi
"$here/check_tools.sh" "$node_dir"
echo "browser test tools ready in $node_dir"
