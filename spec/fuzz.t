#!/usr/bin/env bash
# Runs every libFuzzer target in build-fuzz/ briefly (FUZZ_SECONDS each, default 15), all at
# once, seeded from csrc/fuzz/corpus/<target>/ (copied: the seeds in the tree stay as they are).
# One TAP line per target: ok when the fuzzer exits 0 (no crash, leak or failed check); and one
# line saying every target in csrc/fuzz/ was built (a target missing from build-fuzz/, such as
# fuzz_proxy_events with its own link line in CMakeLists.txt, would otherwise go unnoticed).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
secs=${FUZZ_SECONDS:-15}
targets=()
for f in "$top"/build-fuzz/fuzz_*; do
  [ -x "$f" ] && [ -f "$f" ] && targets+=("$f")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "1..1"
  echo "not ok 1 - no fuzz targets in build-fuzz/ (cmake -DSANDSTACK_FUZZ=ON -DCMAKE_C_COMPILER=clang)"
  exit 0
fi
missing=()
for src in "$top"/csrc/fuzz/fuzz_*.c; do
  name=$(basename "$src" .c)
  [ -x "$top/build-fuzz/$name" ] || missing+=("$name")
done
work=$(mktemp -d /tmp/sandstack-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "1..$((${#targets[@]} + 1))"
if [ ${#missing[@]} -eq 0 ]; then
  echo "ok 1 - every target in csrc/fuzz/ is built (${#targets[@]})"
else
  echo "not ok 1 - not built in build-fuzz/: ${missing[*]}"
fi
pids=()
for t in "${targets[@]}"; do
  name=$(basename "$t")
  mkdir -p "$work/$name/corpus" "$work/$name/crash"
  if [ -d "$top/csrc/fuzz/corpus/$name" ]; then cp -r "$top/csrc/fuzz/corpus/$name/." "$work/$name/corpus/"; fi
  timeout $((secs * 3 + 60)) "$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=1024 \
    -artifact_prefix="$work/$name/crash/" "$work/$name/corpus" >"$work/$name/log" 2>&1 &
  pids+=($!)
done
n=1
for i in "${!targets[@]}"; do
  n=$((n + 1))
  name=$(basename "${targets[$i]}")
  if wait "${pids[$i]}"; then
    runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$work/$name/log" | tail -1)
    echo "ok $n - $name (${runs:-?} runs in ${secs}s)"
  else
    echo "not ok $n - $name crashed or failed a check"
    tail -25 "$work/$name/log" | sed 's/^/# /'
  fi
done
