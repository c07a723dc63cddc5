#!/usr/bin/env bash
# The test command (README, .ci/run): sets the machine up, then runs every test file in each
# build mode and closes with one line "tests: N passed, N failed".
#   run-tests.sh [FILE...]        SANDSTACK_TEST_MODES="lua54 luajit asan" (default: all three)
#   lua54   every spec and .t file, Lua 5.4 build
#   luajit  the unit specs (no engine) with LuaJIT and the LuaJIT build
#   asan    every spec but the nginx ones, under AddressSanitizer + UBSan with leak checking
# The files of all modes run in lanes (spec/support/lanes.py): SANDSTACK_TEST_JOBS lanes (default
# 4) take the longest ready job first, by spec/support/test-times.txt. The LuaJIT, ASan and fuzz
# builds and the nested engines' root filesystems are jobs too, which the files needing them wait
# for. spec/zz_leftovers.t runs last and alone. SANDSTACK_TEST_TIMES_OUT=FILE writes the times
# this run measured, in test-times.txt's format.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
started=$SECONDS
bash spec/support/bootstrap.sh --test --builds-later || { echo "tests: 0 passed, 1 failed"; exit 1; }
echo "=== bootstrap: $((SECONDS - started)) s"

if [ $# -gt 0 ]; then files=("$@"); else
  files=()
  for f in spec/*_spec.lua spec/*.t; do [ -e "$f" ] && files+=("$f"); done
  [ ${#files[@]} -eq 0 ] || mapfile -t files < <(printf '%s\n' "${files[@]}" | sort)
fi
modes=${SANDSTACK_TEST_MODES:-lua54 luajit asan}
# Debian's python3, which bootstrap.sh installs, for every python3 a test runs: a version
# manager's shim earlier on PATH (pyenv's is a chain of bash scripts) costs about 0.6 s of CPU a
# call, and the proxy and engine specs call python3 hundreds of times.
tools=$(mktemp -d)
ln -s /usr/bin/python3 "$tools/python3"
PATH=$tools:$PATH
SANDSTACK_TAP_DIR=$(mktemp -d)
export SANDSTACK_TAP_DIR
lane_dir=$(mktemp -d)
# what the machine had before this run (another checkout's run, a session killed mid-test):
# spec/zz_leftovers.t counts only what this run leaves
SANDSTACK_LEFTOVER_BASELINE=$lane_dir/leftover-baseline
export SANDSTACK_LEFTOVER_BASELINE
. spec/support/leftovers.sh
for kind in $leftover_kinds; do leftovers_of "$kind" | sed "s/^/$kind /"; done >"$SANDSTACK_LEFTOVER_BASELINE"
[ ! -s "$SANDSTACK_LEFTOVER_BASELINE" ] ||
  echo "=== before the run: $(wc -l <"$SANDSTACK_LEFTOVER_BASELINE") sandstack objects not this run's (spec/zz_leftovers.t does not count them)"
passed=0 failed=0 ran=0
if [ ${#files[@]} -gt 0 ]; then
  /usr/bin/python3 spec/support/lanes.py --modes "$modes" --log-dir "$lane_dir" "${files[@]}"
  read -r passed failed ran <"$lane_dir/counts" || { passed=0 failed=1 ran=0; }
fi
rm -rf "$lane_dir"
# what failed, with busted's diagnostics: the lanes show only which file and how many
if grep -l -E '^not ok' "$SANDSTACK_TAP_DIR"/*.tap >/dev/null 2>&1; then
  echo "=== failures"
  grep -l -E '^not ok' "$SANDSTACK_TAP_DIR"/*.tap | while IFS= read -r t; do
    echo "--- $(basename "$t" .tap)"
    awk '/^not ok/ {show = 1; n = 0} /^ok / {show = 0} show && n < 25 {print; n++}' "$t"
  done
fi
rm -rf "$SANDSTACK_TAP_DIR" "$tools"
echo "=== the whole run: $((SECONDS - started)) s"
if [ "$((passed + failed))" -eq 0 ] || [ "${ran:-0}" -eq 0 ]; then
  echo "no tests ran"
  echo "tests: 0 passed, 1 failed"
  exit 1
fi
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
