#!/usr/bin/env bash
# Fails with a clear message when what the browser tests need is missing.
# Usage: check_tools.sh NODE_DIR
node_dir=$1
missing=()
command -v node >/dev/null || missing+=("node (apt-get install nodejs)")
[[ -x /usr/lib/chromium/chromium || -x /usr/bin/chromium || -n "${MLPROF_CHROMIUM:-}" ]] || missing+=("chromium (apt-get install chromium)")
[[ -d "$node_dir/node_modules/playwright-core" ]] || missing+=("playwright-core in $node_dir (tests/browser/setup.sh installs it with npm)")
if ((${#missing[@]})); then
  echo "browser tests cannot run, missing: ${missing[*]}." >&2
  echo "Install them (scripts/install-deps.sh does), or set MLPROF_SKIP_BROWSER=1 to skip these tests." >&2
  exit 1
fi
