#!/usr/bin/env bash
# build-mode.sh DIR [--target T] CMAKE-ARGS...: configures and builds one of the test builds
# (build-luajit, build-asan, build-fuzz) in DIR under the checkout, all of it or target T only;
# spec/support/lanes.py runs it as the job the mode's files wait for, beside the Lua 5.4 files
# that need no such build.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
dir=$1; shift
target=()
if [ "${1:-}" = "--target" ]; then target=(--target "$2"); shift 2; fi
cmake -S "$top" -B "$top/$dir" "$@" >/dev/null
cmake --build "$top/$dir" -j"$(nproc)" "${target[@]}" >/dev/null
echo "built $dir"
