#!/usr/bin/env bash
# A newcomer's machine, as a test: the README's main command, `bash examples/demo.sh`,
# run as root on a clean Debian 12 (debootstrap minbase from this machine's mirror, plus what a
# cloud image has that a newcomer needs first: see spec/support/fresh-machine.sh), with the
# checkout put in as `git archive HEAD`, in a container with its own dockerd that the demo starts
# itself. Nothing the host has built or installed can help, so this is the first-run path.
# It passes only if the demo exits 0 and its output shows each claim of the README's demo:
# the agent answered through the forwarder, every host address was unreachable from the sandbox
# (while the sidecars were reachable), the allowed CONNECT got 200 and the refused one 403, and
# 0 objects were left; and what it installed works from / (the module, `sandstack` and
# sandstack-proxy on PATH: spec/support/installed-check.sh, run there after it). It prints, as comments, the time from the bare machine to the agent's
# first answer and each step bootstrap.sh timed (the apt install is "bootstrap: packages").
# Then the test command's needs: each command it runs is on the clean rootfs already
# or comes with a package of bootstrap.sh's lists (main and --test) or their dependencies.
# Knobs: SANDSTACK_FRESH_MACHINE=none skips it; SANDSTACK_FRESH_REV=REV runs `git archive REV`;
# SANDSTACK_FRESH_LOG=DIR keeps the run's files (the demo's output with time stamps) there.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
fm="bash $top/spec/support/fresh-machine.sh"
if [ "${SANDSTACK_FRESH_MACHINE:-}" = none ]; then echo "1..0 # SKIP SANDSTACK_FRESH_MACHINE=none"; exit 0; fi
if [ "$(id -u)" != 0 ]; then echo "1..0 # SKIP the fresh machine needs root"; exit 0; fi
rev=${SANDSTACK_FRESH_REV:-HEAD}
if ! git rev-parse --verify -q "$rev^{tree}" >/dev/null 2>&1; then
  echo "1..0 # SKIP not a git checkout (the fresh machine gets \`git archive $rev\`)"; exit 0
fi

out=$(mktemp -d /tmp/sandstack-fresh.XXXXXX)
cleanup() {
  # the run cleans up after itself; this catches a run killed before its own trap ran
  if [ -s "$out/name" ]; then $fm clean-one "$(cat "$out/name")" >/dev/null 2>&1 || true; fi
  if [ -n "${SANDSTACK_FRESH_LOG:-}" ]; then mkdir -p "$SANDSTACK_FRESH_LOG" && cp -r "$out"/. "$SANDSTACK_FRESH_LOG"/; fi
  rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "1..10"
n=0
tap() { # tap OK|NOT DESCRIPTION [DIAGNOSTIC...]
  n=$((n + 1))
  if [ "$1" = OK ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
  shift 2
  local d
  for d in "$@"; do [ -z "$d" ] || printf '%s\n' "$d" | sed 's/^/#   /'; done
  return 0
}
# the demo's lines without the stamps; say LINE-PATTERN prints the matching lines
demo() { cut -f3- "$out/log" 2>/dev/null; }
say() { demo | grep -E -- "$1"; }
# the stamps of the first line matching a pattern: seconds since the start, and CPU seconds
stamp() { awk -F'\t' -v re="$1" '$3 ~ re { print $1; exit }' "$out/log" 2>/dev/null; }
cpu_at() { awk -F'\t' -v re="$1" '$3 ~ re { print $2; exit }' "$out/log" 2>/dev/null; }

t0=$SECONDS
echo "# running examples/demo.sh on a fresh Debian 12 from git archive $rev ($(git rev-parse --short "$rev"))"
$fm run "$out" "$rev" >"$out/run.log" 2>&1
run_rc=$?
echo "# base image: $(cat "$out/base" 2>/dev/null)"
rc=$(cat "$out/rc" 2>/dev/null || echo none)

# 1: the demo ran to its end and exited 0
if [ "$run_rc" -eq 0 ] && [ "$rc" = 0 ]; then tap OK "examples/demo.sh exits 0 on the fresh machine"
else
  tap NOT "examples/demo.sh exits 0 on the fresh machine (demo: $rc, run: $run_rc)" \
    "$(tail -n 15 "$out/run.log" 2>/dev/null)" "$(demo | tail -n 40)"
fi

# 2: its engine is its own: the host's socket is not in the container, bootstrap.sh started one
if say '^bootstrap: starting dockerd' >/dev/null; then
  tap OK "bootstrap.sh started the machine's own dockerd"
else tap NOT "bootstrap.sh started the machine's own dockerd (no 'bootstrap: starting dockerd')"; fi

# 3: the agent answered through the forwarder: /health says ok, /v1/messages echoes the body
# (the echo is the request as the agent got it, over several lines, up to the next step)
health=$(say '^  GET /health -> ' | head -n 1)
answer=$(demo | awk '/^  POST \/v1\/messages -> / { on = 1 } /^== / { on = 0 } on')
if [ "$health" = "  GET /health -> ok" ] && [[ "$answer" == *'{"hello":"agent"}'* ]]; then
  tap OK "the agent answered through the forwarder"
else tap NOT "the agent answered through the forwarder" "health: $health" "answer: $answer"; fi

# 4: the control for 5: from the sandbox, the sidecars are reachable (the probe can succeed)
control=$(say '^  (reachable|unreachable) +the (db|proxy) sidecar, by name')
if [ "$(printf '%s\n' "$control" | grep -c '^  reachable ')" -eq 2 ]; then
  tap OK "control: the sandbox reaches the db and proxy sidecars by name"
else tap NOT "control: the sandbox reaches the db and proxy sidecars by name" "$control"; fi

# 5: every host address unreachable from the sandbox: the gateway and each interface's address
hostp=$(say '^  (reachable|unreachable) +host on ')
nhost=$(printf '%s\n' "$hostp" | grep -c '^  unreachable ')
if [ "$nhost" -ge 2 ] && ! printf '%s\n' "$hostp" | grep -q '^  reachable '; then
  tap OK "every host address ($nhost) was unreachable from the sandbox"
else tap NOT "every host address was unreachable from the sandbox" "$hostp"; fi

# 6 and 7: the egress proxy's answers to a CONNECT it admits and to one no rule admits
# (what came back through the tunnel is a comment: demo.sh reads it for 1 s only, which a
# loaded machine can miss)
allowed=$(say '^  198\.51\.100\.2:8099 ' | head -n 1)
if [[ "$allowed" =~ HTTP/1\.1\ 200 ]]; then tap OK "the allowed CONNECT got 200"
else tap NOT "the allowed CONNECT got 200" "$allowed"; fi
echo "# through the tunnel: $(say '^    through the tunnel: ' | sed 's/^ *through the tunnel: //' | head -n 1)"
refused=$(say '^  example\.com:443 ' | head -n 1)
if [[ "$refused" =~ HTTP/1\.1\ 403 ]]; then tap OK "the refused CONNECT got 403"
else tap NOT "the refused CONNECT got 403" "$refused"; fi

# 8: sandstack down left nothing
left=$(say '^  objects left with label io\.sandstack\.project=' | head -n 1)
if [[ "$left" =~ :\ 0$ ]]; then tap OK "0 objects were left"
else tap NOT "0 objects were left" "$left"; fi

# 9: what the demo left installed, tried from / with no LUA_PATH (spec/support/installed-check.sh,
# run in the machine after the demo): the module loads, `sandstack --help` and sandstack-proxy
# run from PATH
inst=$(say '^installed: ')
if [ "$(printf '%s\n' "$inst" | grep -c '^installed: ok ')" -ge 3 ] && ! printf '%s\n' "$inst" | grep -q '^installed: not ok'; then
  tap OK "installed: require \"sandstack\" from /, sandstack --help and sandstack-proxy on PATH"
  printf '%s\n' "$inst" | sed 's/^/# /'
else tap NOT "installed: require \"sandstack\" from /, sandstack --help and sandstack-proxy on PATH" "${inst:-no installed: line}"; fi

# The times: from the bare machine (the container let go) to the agent's first answer, the
# demo's own count, and each step bootstrap.sh timed (its apt install is "packages"), each with
# the CPU seconds the machine used in it (both cores; on a loaded host the wall time says little).
first=$(stamp '^  GET /health -> ')
echo "# bare machine to the agent's first answer: ${first:-none} s (CPU $(cpu_at '^  GET /health -> ') s)"
say '^  first answer ' | sed 's/^ */# demo.sh: /'
awk -F'\t' '$3 ~ /^bootstrap: [a-z].* [0-9]+ s$/ { c = $2 - prev; prev = $2
    printf "# %s (CPU %.0f s)\n", $3, c }' "$out/log" 2>/dev/null
# apt's download ends where dpkg starts (its first line: debconf, as minbase has no apt-utils)
apt0=$(stamp '^bootstrap: installing ') apt1=$(stamp '^debconf: ') apt2=$(stamp '^bootstrap: packages ')
if [ -n "$apt0" ] && [ -n "$apt1" ] && [ -n "$apt2" ]; then
  awk -v a="$apt0" -v b="$apt1" -v c="$apt2" -v cb="$(cpu_at '^debconf: ')" -v cc="$(cpu_at '^bootstrap: packages ')" \
    'BEGIN { printf "# apt: update and download %.0f s, unpack and configure %.0f s (CPU %.0f s)\n", b - a, c - b, cc - cb }'
fi
echo "# demo total: $(awk -F'\t' 'END { print $1 " s, CPU " $2 }' "$out/log" 2>/dev/null) s; this test: $((SECONDS - t0)) s"

# 10: the test command's needs. The commands it runs (run-tests.sh, tap-runner, the .t files,
# the specs and their helpers); runsc is left out: runsc-setup.sh installs it from backports.
needs=(
  prove                         # run-tests.sh runs every file through prove (perl)
  busted lua5.4 luajit          # tap-runner
  luarocks                      # spec/rockspec.t
  cmake make cc clang pkg-config # the builds, spec/fuzz.t
  readelf                       # spec/linkage.t
  nginx                         # the OpenResty specs
  docker dockerd docker-compose # the engine specs, the compose specs
  debootstrap                   # the Debian test image, the nested engines, this test's base
  shellcheck                    # spec/shellcheck.t
  strace                        # the fsync-order specs
  socat curl python3 openssl busybox # stand-ins, probes, the inspection CA, the test images
  ip ss iptables nsenter unshare setsid flock timeout mkfifo # namespaces and probes
  git                           # spec/shellcheck.t (git ls-files), spec/rockspec.t, this test
)
# bootstrap.sh's package lists, main and --test: the words of each "packages=(" / "packages+=("
lists=$(awk '/packages\+?=\(/ { on = 1; sub(/.*\(/, "") }
  on { sub(/#.*/, ""); done = sub(/\).*/, ""); print; if (done) on = 0 }' spec/support/bootstrap.sh |
  tr -s '[:blank:]' '\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | sort -u)
base=$($fm base 2>/dev/null)
absent=$(docker run --rm --network none "$base" sh -c \
  'for c; do command -v "$c" >/dev/null || echo "$c"; done' sh "${needs[@]}" 2>&1)
base_rc=$?
# what bootstrap.sh's packages bring with them (this machine has run it: its apt knows them)
closure=$(printf '%s\n' "$lists" | xargs -r apt-cache depends --recurse --no-recommends --no-suggests \
  --no-conflicts --no-breaks --no-replaces --no-enhances 2>/dev/null | grep -v '^ ' | tr -d '<>' | sort -u)
# Which package ships each absent command on this machine: its path in Debian's directories (not
# /usr/local or a shim), as named and resolved, in both spellings of merged /usr; one dpkg -S.
declare -A cands=() owner=()
paths=()
for c in $absent; do
  for d in /usr/sbin /usr/bin /sbin /bin; do
    [ -x "$d/$c" ] || continue
    r=$(readlink -f "$d/$c")
    cands[$c]="$d/$c $r ${r#/usr} /usr$r"
    read -ra ps <<<"${cands[$c]}"; paths+=("${ps[@]}")
    break
  done
done
while IFS= read -r line; do
  case "$line" in diversion*) continue ;; *": /"*) ;; *) continue ;; esac
  pk=${line%%: /*} pth=${line#*: }
  owner[$pth]=${pk%%,*}
done < <([ ${#paths[@]} -eq 0 ] || dpkg -S "${paths[@]}" 2>/dev/null)
bad=() notes=()
for c in $absent; do
  pkg=""
  for q in ${cands[$c]:-}; do [ -n "${owner[$q]:-}" ] && { pkg=${owner[$q]%%:*}; break; }; done
  if [ -z "$pkg" ]; then bad+=("$c: no Debian package ships it on this machine either"); continue; fi
  if printf '%s\n' "$closure" | grep -qxF -- "$pkg"; then notes+=("$c ($pkg)")
  else bad+=("$c: its package $pkg is in no bootstrap.sh list nor their dependencies"); fi
done
if [ "$base_rc" -ne 0 ] || [ -z "$lists" ] || [ -z "$closure" ]; then
  tap NOT "the test command's needs: minbase or bootstrap.sh's packages" "base: $base_rc $absent" \
    "lists: $(echo "$lists" | wc -w) packages, closure: $(echo "$closure" | wc -w)"
elif [ ${#bad[@]} -eq 0 ]; then
  tap OK "every command the test command runs is in minbase or comes with bootstrap.sh's packages"
  echo "# not in minbase: ${notes[*]}"
else tap NOT "every command the test command runs is in minbase or comes with bootstrap.sh's packages" "${bad[@]}"; fi
