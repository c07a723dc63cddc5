#!/usr/bin/env bash
# The CI engine matrix: the docker backend's live specs and `sandstack conform` on
# every engine sandstack claims, each started nested by spec/support/nested-engine.sh (the
# host's own engine is covered by the normal run). A test whose "host" is the engine's host runs
# in that engine's network namespace (nsenter -n): the host listener, the published 127.0.0.1
# port and the internet stand-in are then the nested engine's.
#   docker20            the host's own engine, nested so that its host resolver is a loopback
#                       address the DNS exfiltration test controls: the DNS and isolation
#                       specs, conform, the engine facts
#   docker26, docker28  every docker spec file, conform, the engine facts
#   docker28-v6         Docker 28 with IPv6 on for new networks: the IPv6 spec only
#   podman              start must be refused (engine/isolation_unsupported), conform must not
#                       pass, the engine facts
# Every nested engine's host resolver is 127.0.0.1 in its namespace (nested-engine.sh), so the
# specs run with SANDSTACK_TEST_ENGINE_RESOLVER=127.0.0.1 (spec/docker_dns_spec.lua).
# Then the engine x fact table and the results go to docs/results/engines.md (full matrix only).
# Knobs: SANDSTACK_ENGINES="docker26 docker28 podman" (a subset writes no doc unless
# SANDSTACK_ENGINES_DOC=FILE), SANDSTACK_ENGINES_BUILD=build (the module build to load),
# SANDSTACK_ENGINES_LUA=./lua (the Lua tree the refusal, conform and facts runs load),
# SANDSTACK_ENGINES_LOG=DIR (full outputs; default a temp dir, kept), SANDSTACK_ENGINES=none.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
default_engines="docker20 docker26 docker28 docker28-v6 podman"
engines=${SANDSTACK_ENGINES:-$default_engines}
build=${SANDSTACK_ENGINES_BUILD:-build}
luadir=${SANDSTACK_ENGINES_LUA:-./lua}
ne="bash $top/spec/support/nested-engine.sh"
if [ "$engines" = none ]; then echo "1..0 # SKIP SANDSTACK_ENGINES=none"; exit 0; fi
if [ "$(id -u)" != 0 ]; then echo "1..0 # SKIP the nested engines need root"; exit 0; fi
doc=${SANDSTACK_ENGINES_DOC:-}
[ -z "$doc" ] && [ "$engines" = "$default_engines" ] && doc=$top/docs/results/engines.md
logdir=${SANDSTACK_ENGINES_LOG:-$(mktemp -d /tmp/sandstack-engines.XXXXXX)}
mkdir -p "$logdir"

# The docker backend's spec files that use an engine (tagged #docker; the sbx and openresty
# ones drive other things). A file that does not exist in this checkout is left out.
spec_files=()
for f in spec/engine_spec.lua spec/docker_live_spec.lua spec/docker_conformance_spec.lua \
  spec/docker_capture_spec.lua spec/proxy_e2e_spec.lua spec/docker_isolation_spec.lua spec/docker_dns_spec.lua; do
  [ -f "$f" ] && spec_files+=("$f")
done
# which files an engine runs, and what it runs without (conform, facts)
files_for() {
  case "$1" in
    docker20) echo spec/docker_isolation_spec.lua spec/docker_dns_spec.lua ;;
    docker28-v6) echo spec/docker_ipv6_spec.lua ;;
    *) echo "${spec_files[@]}" ;;
  esac
}
only_specs() { [ "$1" = docker28-v6 ]; }

n=0 started=""
tap() { # tap OK|NOT DESCRIPTION [DIAGNOSTIC-FILE]
  n=$((n + 1))
  if [ "$1" = OK ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
  [ -n "${3:-}" ] && [ -s "$3" ] && sed 's/^/# /' "$3"
  return 0
}
cleanup() {
  local e
  for e in $started; do $ne stop "$e" >/dev/null 2>&1; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# failing_lines TAP-FILE: each "not ok" line of a busted TAP output with the first lines of its
# diagnostics, and any later diagnostic line that names a failure or a skip (a failure message
# may itself hold a TAP text, as the conformance spec's does).
failing_lines() {
  awk '/^not ok/ { show = 1; shown = 0; print; next }
       /^ok / { show = 0; next }
       show && (shown < 10 || /not ok|SKIP|[Ee]rror/) { print; shown++ }' "$1"
}

declare -A fact_val results secs
fact_keys=(product version api internal_default_route internal_gateway_reaches_host
  inhibit_ipv4_gateway_unreachable inhibit_ipv4_first_container_gets_dot1
  isolated_on_internal_honoured masquerade_false_honoured)
columns=()

# facts COLUMN [PREFIX...]: runs the probe (under PREFIX: nsenter and the engine's DOCKER_HOST)
# and records its FACT lines.
facts() {
  local col=$1; shift
  local out=$logdir/$col.facts
  columns+=("$col")
  if "$@" timeout 300 env LUA_PATH="$luadir/?.lua;$luadir/?/init.lua;;" LUA_CPATH="./$build/?.so;;" \
      lua5.4 spec/support/engine_matrix.lua facts >"$out" 2>"$out.err"; then
    tap OK "$col: engine facts measured ($(grep -c '^FACT' "$out") facts)"
  else
    tap NOT "$col: engine facts probe failed" "$out.err"
  fi
  local k v
  while read -r _ k v; do fact_val[$col:$k]=$v; done < <(grep '^FACT' "$out")
}

# What each engine is expected to do (measured, /work/shared/reference/nested-engines.md), by
# product and major version, in fact_keys order from internal_default_route on. A change means
# an engine upgrade moved something sandstack's isolation rests on: read it before updating.
declare -A expect=(
  ["Docker 20"]="yes yes yes no no yes"
  ["Docker 26"]="no yes yes no no yes"
  ["Docker 28"]="no yes yes yes yes yes"
  ["Podman 5"]="no yes no no no no"
)
check_facts() { # check_facts COLUMN
  local col=$1 product=${fact_val[$1:product]:-} major want k i=0 bad=""
  major=${fact_val[$1:version]:-}; major=${major%%.*}
  want=${expect["$product $major"]:-}
  if [ -z "$want" ]; then
    n=$((n + 1)); echo "ok $n - $col: engine facts as expected # SKIP no expectation for '$product $major'"; return
  fi
  read -r -a want <<<"$want"
  for k in "${fact_keys[@]:3}"; do
    [ "${fact_val[$col:$k]:-}" = "${want[$i]}" ] || bad="$bad$k=${fact_val[$col:$k]:-unmeasured} (expected ${want[$i]})"$'\n'
    i=$((i + 1))
  done
  if [ -z "$bad" ]; then tap OK "$col: engine facts as expected for $product $major"
  else printf '%s' "$bad" >"$logdir/$col.facts.bad"; tap NOT "$col: engine facts as expected for $product $major" "$logdir/$col.facts.bad"; fi
}

# The host engine's facts, for the table (its specs ran in the normal suite).
facts host env
check_facts host

for e in $engines; do
  t0=$(date +%s)
  if ! vars=$($ne start "$e" 2>"$logdir/$e.start.err"); then
    tap NOT "$e: build and start the nested engine" "$logdir/$e.start.err"
    results[$e]="not started"
    started="$started $e"
    $ne stop "$e" >/dev/null 2>&1
    continue
  fi
  started="$started $e"
  PID='' SOCK='' VERSION='' API='' ENGINE=''
  eval "$vars"
  secs[$e:start]=$(($(date +%s) - t0))
  tap OK "$e: started $ENGINE $VERSION (API $API) in ${secs[$e:start]} s"
  in_ns=(nsenter -t "$PID" -n -- env DOCKER_HOST="unix://$SOCK" SANDSTACK_TEST_ENGINE_RESOLVER=127.0.0.1)
  [ "$e" = docker28-v6 ] && in_ns+=(SANDSTACK_TEST_ENGINE_IPV6=1)
  lua_env=(LUA_PATH="$luadir/?.lua;$luadir/?/init.lua;;" LUA_CPATH="./$build/?.so;;")
  t1=$(date +%s)
  summary=""
  case "$e" in
    podman)
      # Podman drops inhibit_ipv4 and enable_ip_masquerade=false: sandstack must refuse it.
      out=$logdir/$e.refusal
      if "${in_ns[@]}" timeout 300 env "${lua_env[@]}" lua5.4 spec/support/engine_matrix.lua refusal >"$out" 2>&1; then
        tap OK "$e $VERSION: start is refused with engine/isolation_unsupported"; summary="refused"
      else
        tap NOT "$e $VERSION: start is refused with engine/isolation_unsupported" "$out"; summary="NOT refused"
      fi ;;
    *)
      for f in $(files_for "$e"); do
        out=$logdir/$e.$(basename "$f" .lua).tap
        "${in_ns[@]}" timeout 1200 lua5.4 /usr/bin/busted --cpath="./$build/?.so" -o TAP "$f" >"$out" 2>&1
        rc=$?
        # a skipped test counts as failed here: every engine of the matrix is set up for all of them
        p=$(grep '^ok ' "$out" | grep -vc '# SKIP') fl=$(($(grep -c '^not ok ' "$out") + $(grep '^ok ' "$out" | grep -c '# SKIP')))
        failing_lines "$out" >"$out.fail"
        if [ "$rc" -eq 0 ] && [ "$fl" -eq 0 ] && [ "$p" -gt 0 ]; then
          tap OK "$e $VERSION: $f ($p passed)"
        else
          [ -s "$out.fail" ] || tail -n 15 "$out" >"$out.fail"
          tap NOT "$e $VERSION: $f ($p passed, $fl failed, rc $rc)" "$out.fail"
        fi
        summary="$summary $(basename "$f" _spec.lua) $p/$((p + fl))"
      done ;;
  esac
  if only_specs "$e"; then
    secs[$e:run]=$(($(date +%s) - t1))
    results[$e]="$ENGINE $VERSION (API $API):$summary"
    $ne stop "$e" >/dev/null 2>&1 || tap NOT "$e: stopped and removed"
    started=${started/ $e/}
    continue
  fi
  # `sandstack conform` as a user runs it; its TAP goes into the log under the version line.
  out=$logdir/$e.conform
  "${in_ns[@]}" timeout 600 env "${lua_env[@]}" lua5.4 bin/sandstack conform --subnet-pool 10.213.0.0/16 >"$out" 2>&1
  rc=$?
  echo "# sandstack conform on $e: $ENGINE $VERSION (API $API)"
  sed 's/^/#   /' "$out"
  if [ "$e" = podman ]; then
    # it must not report isolation on an engine that cannot isolate
    if [ "$rc" -ne 0 ]; then tap OK "$e $VERSION: sandstack conform does not pass (rc $rc)"
    else tap NOT "$e $VERSION: sandstack conform does not pass (it passed)"; fi
    summary="$summary, conform rc $rc"
  else
    if [ "$rc" -eq 0 ]; then tap OK "$e $VERSION: sandstack conform passes"
    else tap NOT "$e $VERSION: sandstack conform passes (rc $rc)"; fi
    summary="$summary conform $(grep -c '^ok ' "$out")/$(grep -cE '^(not )?ok ' "$out")"
  fi
  facts "$e" "${in_ns[@]}"
  check_facts "$e"
  secs[$e:run]=$(($(date +%s) - t1))
  results[$e]="$ENGINE $VERSION (API $API):$summary"
  $ne stop "$e" >/dev/null 2>&1 || tap NOT "$e: stopped and removed"
  started=${started/ $e/}
done

echo "1..$n"

if [ -n "$doc" ]; then
  {
    cat <<'EOF'
# Engines: what sandstack was proven on

`spec/engines.t` (the CI engine matrix) starts Docker 20.10, 26.1 and 28.5 (also with
IPv6 on by default) and Podman 5.x as nested engines built from Debian's packages
(`spec/support/nested-engine.sh`), runs the docker backend's live specs and `sandstack conform`
inside each one's network namespace, measures the facts below with
`spec/support/engine_matrix.lua facts`, and writes this page. The host engine (Debian 12's
Docker 20.10) runs the whole suite directly; its column is measured the same way. The nested
20.10 runs the DNS and isolation specs only: its host resolver is a loopback address the DNS
exfiltration test owns, which the host's is not.
Do not edit the tables by hand: run `bash spec/engines.t` as root.

## Running the matrix

- `nested-engine.sh build NAME` debootstraps the engine's root filesystem from this machine's apt
  mirror (bookworm holds docker.io 20.10, trixie docker.io 26 and podman, sid docker.io 28) and imports it; it is
  skipped while the image is up to date. `start NAME` runs it contained (an internal network of
  the host engine, `--dns 127.0.0.1`, no default route; `--privileged` does not work on these
  machines, so: all capabilities but SYS_RESOURCE, unconfined seccomp and system paths, a private
  cgroup namespace, `/sys` remounted read-write), loads the test images and prints `PID=`,
  `SOCK=`, `VERSION=`, `API=`. `start docker28-v6` turns IPv6 on for new networks. `stop NAME`
  (or `stop-all`) removes what carries `io.sandstack.test=nested-engine`.
- `run-tests.sh` builds the two root filesystems in the background while the other files run.
- `SANDSTACK_ENGINES="docker28"` runs a subset; `SANDSTACK_ENGINES=none` skips the matrix.

## Facts by engine

A fact is measured by attempting it from a container on a fresh network: a TCP connect to a
listener on the engine host, or to the internet stand-in that answers only NATed traffic. The
probing container never holds the address it aims at, and "honoured"/"unreachable" count only
when the control (plain internal network; masquerading bridge) reached its target.

EOF
    printf '| fact |'; for c in "${columns[@]}"; do printf ' %s |' "$c"; done; echo
    printf '|---|'; for c in "${columns[@]}"; do printf -- '---|'; done; echo
    for k in "${fact_keys[@]}"; do
      printf '| %s |' "$k"
      for c in "${columns[@]}"; do printf ' %s |' "${fact_val[$c:$k]:-not measured}"; done
      echo
    done
    echo
    echo "## Results of the last run"
    echo
    echo "| engine | result (passed/run per spec file) | start s | run s |"
    echo "|---|---|---|---|"
    for e in $engines; do
      echo "| $e | ${results[$e]:-not run} | ${secs[$e:start]:-} | ${secs[$e:run]:-} |"
    done
    echo
    echo "Produced by spec/engines.t on $(date -u +%Y-%m-%d)."
  } >"$doc.tmp" && mv "$doc.tmp" "$doc"
fi
