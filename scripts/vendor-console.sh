#!/usr/bin/env bash
# The gateway console's JavaScript (docs/gateway.md, "The console"): xterm.js and its fit addon
# at the versions web/package-lock.json pins, from npm, copied into web/console/vendor/ where
# the gateway serves them. Nothing is fetched from a CDN at run time, and nothing is built: the
# page loads these files as they are. The same `npm ci` installs the browser test's
# playwright-core and axe-core (web/node_modules, never served).
# The vendored files are generated, not committed (.gitignore): the lock file is what is reviewed.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
web=$top/web
command -v npm >/dev/null || { echo "vendor-console: npm is missing: apt-get install npm" >&2; exit 1; }
stamp=$web/node_modules/.sandstack-lock
# already done for this lock file: nothing to fetch (a CI run and every test run call this)
if ! cmp -s "$web/package-lock.json" "$stamp" 2>/dev/null; then
  (cd "$web" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$web/package-lock.json" "$stamp"
fi
vendor=$web/console/vendor
mkdir -p "$vendor"
cp "$web/node_modules/@xterm/xterm/lib/xterm.js" "$vendor/xterm.js"
cp "$web/node_modules/@xterm/xterm/css/xterm.css" "$vendor/xterm.css"
cp "$web/node_modules/@xterm/addon-fit/lib/addon-fit.js" "$vendor/addon-fit.js"
echo "vendor-console: $(cd "$web" && node -p 'const l=require("./package-lock.json").packages;
  ["@xterm/xterm","@xterm/addon-fit"].map(n=>n+"@"+l["node_modules/"+n].version).join(", ")') in web/console/vendor"
