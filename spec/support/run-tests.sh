#!/usr/bin/env bash
# The test command (README, .ci/run): sets the machine up, then runs every test file through
# prove in each build mode and closes with one line "tests: N passed, N failed".
#   run-tests.sh [FILE...]        SANDSTACK_TEST_MODES="lua54 luajit asan" (default: all three)
#   lua54   every spec and .t file, Lua 5.4 build
#   luajit  the unit specs (no engine) with LuaJIT and the LuaJIT build
#   asan    every spec but the nginx ones, under AddressSanitizer + UBSan with leak checking
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
bash spec/support/bootstrap.sh --test || { echo "tests: 0 passed, 1 failed"; exit 1; }

if [ $# -gt 0 ]; then files=("$@"); else
  files=()
  for f in spec/*_spec.lua spec/*.t; do [ -e "$f" ] && files+=("$f"); done
  [ ${#files[@]} -eq 0 ] || mapfile -t files < <(printf '%s\n' "${files[@]}" | sort)
fi
modes=${SANDSTACK_TEST_MODES:-lua54 luajit asan}
# The engine matrix (spec/engines.t) needs three debootstrapped root filesystems: build them in
# the background now, so the downloads overlap with the other files (nested-engine.sh locks
# each build, so engines.t waits for one still running instead of starting it again).
case " ${files[*]} " in *" spec/engines.t "*)
  case " $modes " in *" lua54 "*)
    [ "${SANDSTACK_ENGINES:-}" = none ] || { for e in docker20 docker26 docker28; do
      bash spec/support/nested-engine.sh build "$e" || true; done >/tmp/sandstack-engine-build.log 2>&1 & } ;;
  esac ;;
esac
# hibernate{memory = true} runs on a nested engine with CRIU: its root filesystem too
case " ${files[*]} " in *" spec/docker_hibernate_memory_spec.lua "*)
  { bash spec/support/nested-engine.sh build docker26-criu >/tmp/sandstack-criu-build.log 2>&1 || true; } & ;;
esac
passed=0 failed=0 log=$(mktemp) beside_log=$(mktemp) late_log=$(mktemp)
# The LuaJIT files (no engine: the docker and nginx tags are left out; 283 s measured) run in
# the ASan mode's beside lane after its sbx specs (327 s), where the ASan main lane (1172 s)
# leaves room: a CI run is about 5 minutes shorter. They need a LuaJIT mode before the ASan one.
# ASan's zz_leftovers.t then counts what both left behind.
late=() late_mode=
seen_luajit=
for m in $modes; do
  [ "$m" = luajit ] && seen_luajit=1
  [ "$m" = asan ] && [ -n "$seen_luajit" ] && late_mode=luajit
done
SANDSTACK_TAP_DIR=$(mktemp -d)
export SANDSTACK_TAP_DIR
# count LOG: adds one prove run's numbers to passed/failed
count() {
  local total bad
  total=$(sed -n 's/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' "$1" | tail -1)
  bad=$(sed -n 's/.*Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' "$1" | awk '{s+=$1} END {print s+0}')
  total=${total:-0}
  if grep -q '^Result: FAIL' "$1" && [ "$bad" -eq 0 ]; then bad=1; fi # a file died outside a test
  passed=$((passed + total - (bad > total ? total : bad)))
  failed=$((failed + bad))
}
for mode in $modes; do
  sel=() beside=() beside_end=() last=()
  for f in "${files[@]}"; do
    case "$mode:$f" in
      # The fresh machine (about 5 minutes, mostly apt and image builds inside its own container
      # and dockerd) and the engine matrix (nested dockerds on root filesystems debootstrapped in
      # the background) share nothing with the other files but the host engine and their own
      # labels, so they run beside them (one after the other) rather than after them: a CI run
      # is about 10 minutes shorter. zz_leftovers.t counts what every file left behind, so it
      # runs alone, after both.
      lua54:spec/fresh_machine.t) beside=("$f" "${beside[@]}") ;;
      lua54:spec/engines.t) beside_end=("$f") ;;
      # Two more groups with nothing in common with the engine's other files: the three-node swarm
      # (its nested engines and networks carry its own prefix; it mostly waits on Swarm) and the
      # sbx specs (the simulator, no engine). Beside, they balance the two lanes (measured: 32 and 28
      # minutes, where they were 41 and 15).
      lua54:spec/swarm_cluster_spec.lua | lua54:spec/sbx_*_spec.lua) beside+=("$f") ;;
      # Under ASan the sbx specs (220 s of its 1314, measured; 60% of one core, mostly waiting on the
      # simulator's processes) run beside the engine's files for the same reason.
      asan:spec/sbx_*_spec.lua) beside+=("$f") ;;
      "$late_mode":*_spec.lua) late+=("$f") ;;
      lua54:*zz_*.t) last+=("$f") ;;
      lua54:*) sel+=("$f") ;;
      *:*zz_*.t) last+=("$f") ;;
      *:*_spec.lua) sel+=("$f") ;;
    esac
  done
  # engines.t goes last in its lane: the root filesystems it needs build in the background meanwhile
  beside+=("${beside_end[@]}")
  [ "$mode" = "$late_mode" ] && { echo "=== mode $mode: ${#late[@]} files, run beside the asan mode"; continue; }
  here_late=()
  [ "$mode" = asan ] && here_late=("${late[@]}")
  [ $((${#sel[@]} + ${#beside[@]} + ${#last[@]} + ${#here_late[@]})) -gt 0 ] || continue
  echo "=== mode $mode: $((${#sel[@]} + ${#beside[@]} + ${#last[@]})) files"
  beside_pid=
  : >"$beside_log"
  : >"$late_log"
  if [ $((${#beside[@]} + ${#here_late[@]})) -gt 0 ]; then
    echo "=== beside the others: ${beside[*]}${here_late[0]:+ and ${#here_late[@]} files of mode $late_mode} (its output follows theirs)"
    {
      [ ${#beside[@]} -eq 0 ] || prove --timer --exec "spec/support/tap-runner $mode" "${beside[@]}" >"$beside_log" 2>&1
      [ ${#here_late[@]} -eq 0 ] || prove --timer --exec "spec/support/tap-runner $late_mode" "${here_late[@]}" >"$late_log" 2>&1
    } &
    beside_pid=$!
  fi
  if [ ${#sel[@]} -gt 0 ]; then
    prove --timer --exec "spec/support/tap-runner $mode" "${sel[@]}" 2>&1 | tee "$log"
    count "$log"
    # where a mode's time goes (prove --timer's per-file wall time): the ten slowest files
    echo "=== mode $mode: slowest files"
    sed -n 's/^\[[0-9:]*\] \(spec\/[^ ]*\) .* \([0-9][0-9]*\) ms .*/\2 \1/p' "$log" | sort -rn |
      awk 'NR <= 10 {printf "  %6.1f s  %s\n", $1 / 1000, $2}'
  fi
  if [ -n "$beside_pid" ]; then
    wait "$beside_pid"
    if [ ${#beside[@]} -gt 0 ]; then
      echo "=== ${beside[*]}"
      cat "$beside_log"
      count "$beside_log"
    fi
    if [ ${#here_late[@]} -gt 0 ]; then
      echo "=== mode $late_mode, beside the $mode mode"
      cat "$late_log"
      count "$late_log"
      echo "=== mode $late_mode: slowest files"
      sed -n 's/^\[[0-9:]*\] \(spec\/[^ ]*\) .* \([0-9][0-9]*\) ms .*/\2 \1/p' "$late_log" | sort -rn |
        awk 'NR <= 10 {printf "  %6.1f s  %s\n", $1 / 1000, $2}'
    fi
  fi
  if [ ${#last[@]} -gt 0 ]; then
    prove --timer --exec "spec/support/tap-runner $mode" "${last[@]}" 2>&1 | tee "$log"
    count "$log"
  fi
done
rm -f "$log" "$beside_log" "$late_log"
# what failed, with busted's diagnostics: prove shows only which file and how many
if grep -l -E '^not ok' "$SANDSTACK_TAP_DIR"/*.tap >/dev/null 2>&1; then
  echo "=== failures"
  grep -l -E '^not ok' "$SANDSTACK_TAP_DIR"/*.tap | while IFS= read -r t; do
    echo "--- $(basename "$t" .tap)"
    awk '/^not ok/ {show = 1; n = 0} /^ok / {show = 0} show && n < 25 {print; n++}' "$t"
  done
fi
rm -rf "$SANDSTACK_TAP_DIR"
if [ $((passed + failed)) -eq 0 ]; then
  echo "no tests ran"
  echo "tests: 0 passed, 1 failed"
  exit 1
fi
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
