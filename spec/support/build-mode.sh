#!/usr/bin/env bash
# build-mode.sh DIR CMAKE-ARGS...: configures and builds one of the test builds (build-luajit,
# build-asan, build-fuzz) in DIR under the checkout; spec/support/lanes.py runs it as the job the
# mode's files wait for, beside the Lua 5.4 files that need no such build.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
dir=$1; shift
cmake -S "$top" -B "$top/$dir" "$@" >/dev/null
cmake --build "$top/$dir" -j"$(nproc)" >/dev/null
echo "built $dir"
