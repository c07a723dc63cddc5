#!/usr/bin/env bash
# Everything a fresh Debian 12 machine needs before sandstack runs, as root, idempotent.
#   bootstrap.sh          the main job's set-up (examples/demo.sh): the packages the build and the
#                         demo need, a Docker engine answering on /var/run/docker.sock, the demo's
#                         agent image, the module built for Lua 5.4 and the stack's default images,
#                         and that build installed with LuaRocks (for LuaJIT too where nginx has
#                         its Lua module).
#   bootstrap.sh --test   all of that but the install (the tests run the checkout's own build;
#                         spec/rockspec.t installs into a tree of its own), plus what only the
#                         tests use: LuaJIT, busted, nginx with lua, clang/ASan and fuzzers,
#                         debootstrap, shellcheck, gVisor's runsc, the Debian and client test
#                         images, and the LuaJIT, ASan and fuzz builds (`--test --builds-later`:
#                         without those three builds, which the test command's lanes make as jobs
#                         of their own).
# Each step prints how long it took ("bootstrap: <step> <seconds> s"), so a first run shows what
# dominates.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
with_test=0 test_builds=1
[ "${1:-}" = "--test" ] && with_test=1
# --builds-later: the LuaJIT, ASan and fuzz builds are left to the test command's lanes
# (spec/support/lanes.py runs each as a job beside the Lua 5.4 files that do not need it)
[ "${2:-}" = "--builds-later" ] && test_builds=0
step_start=$SECONDS
took() { echo "bootstrap: $1 $((SECONDS - step_start)) s"; step_start=$SECONDS; }

# The main job, in two apt transactions so the module compiles on one core while dpkg (which uses
# one) unpacks the engine and the tools: first the compiler and the C core's libraries (libcurl,
# cJSON, libuv, and OpenSSL for sandstack-proxy) with Lua 5.4; then the engine and what demo.sh
# itself runs (curl, socat, python3 for a free port, iproute2/iptables for the outside stand-in,
# busybox for the images), and LuaRocks, which installs the build at the end.
build_packages=(
  ca-certificates gcc make cmake pkg-config libc6-dev
  lua5.4 liblua5.4-dev
  libcurl4-openssl-dev libcjson-dev libuv1-dev libssl-dev
)
packages=(
  openssl curl python3 iproute2 iptables
  docker.io busybox-static socat luarocks
)
# The tests: the list spec/fresh_machine.t checks against a minbase Debian 12.
[ "$with_test" = 1 ] && packages+=(
  perl luajit2 libluajit2-5.1-dev lua-busted luarocks
  nginx libnginx-mod-http-lua libnginx-mod-http-ndk lua-resty-core lua-resty-lrucache docker-compose
  git debootstrap shellcheck strace clang libclang-rt-14-dev llvm
  chromium
)

missing() { # missing PACKAGE...: those not installed, one a line
  local p
  for p; do
    # no `| grep -q`: under pipefail an early exit of the reader can fail the writer
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] || echo "$p"
  done
}
apt_updated=0
install() { # install STEP PACKAGE...: apt-get install of those missing, timed as STEP
  local todo
  mapfile -t todo < <(missing "${@:2}")
  if [ ${#todo[@]} -gt 0 ]; then
    echo "bootstrap: installing ${todo[*]}"
    [ "$apt_updated" = 1 ] || { apt-get update -qq; apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${todo[@]}" >/dev/null
  fi
  took "$1"
}

build() { # build DIR CMAKE-ARGS...
  local dir=$1; shift
  cmake -S "$top" -B "$top/$dir" "$@" >/dev/null
  cmake --build "$top/$dir" -j"$(nproc)" >/dev/null
}

install "build packages" "${build_packages[@]}"
# The module compiles while apt installs the rest (its log is shown when it fails).
build_log=/tmp/sandstack-build.$$.log
build build -DSANDSTACK_LUA=lua5.4 >"$build_log" 2>&1 &
build_pid=$!
# a failed apt-get ends the script: the build it started ends with it (our own child, by pid)
trap '[ -z "${build_pid:-}" ] || kill "$build_pid" 2>/dev/null || true' EXIT
build_start=$SECONDS
install "packages" "${packages[@]}"
# The console's browser test and its vendoring need node and npm: Debian's, unless the machine
# has them already (NodeSource's nodejs bundles npm and conflicts with Debian's npm package).
if [ "$with_test" = 1 ] && ! command -v npm >/dev/null; then install "node" nodejs npm; fi

# gVisor's runsc for `runtime = "runsc"`, tests only: installed from
# bookworm-backports and registered in /etc/docker/daemon.json before the engine starts.
if [ "$with_test" = 1 ]; then bash "$top/spec/support/runsc-setup.sh"; took "runsc"; fi

# The engine: start Debian's dockerd when nothing answers on the socket.
engine_up() { curl -sf --max-time 3 --unix-socket /var/run/docker.sock http://d/_ping >/dev/null 2>&1; }
if ! engine_up; then
  echo "bootstrap: starting dockerd"
  # SANDSTACK_DOCKERD_ARGS: more arguments for it (CI's wider address pool, .ci/run)
  # shellcheck disable=SC2086 # the arguments, split on purpose
  setsid nohup dockerd ${SANDSTACK_DOCKERD_ARGS:-} >/var/log/sandstack-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 60); do engine_up && break; sleep 0.5; done
  engine_up || { echo "bootstrap: dockerd did not come up:"; tail -20 /var/log/sandstack-dockerd.log; exit 1; }
  took "engine"
fi

# The images build while the module finishes compiling: both are a few seconds of one core each.
if [ "$with_test" = 1 ]; then images=(bash "$top/spec/support/build-images.sh" --test)
else images=(bash "$top/spec/support/build-images.sh"); fi
"${images[@]}" >/tmp/sandstack-build-images.$$.log 2>&1 &
images_pid=$!
build_rc=0; wait "$build_pid" || build_rc=$?
build_pid=
[ "$build_rc" -eq 0 ] || { echo "bootstrap: the build failed ($build_rc):"; tail -40 "$build_log"; exit 1; }
rm -f "$build_log"
echo "bootstrap: build (lua5.4) done, $((SECONDS - build_start)) s after it started beside apt"
took "build (lua5.4) wait"
images_rc=0; wait "$images_pid" || images_rc=$?
cat /tmp/sandstack-build-images.$$.log; rm -f /tmp/sandstack-build-images.$$.log
[ "$images_rc" -eq 0 ] || { echo "bootstrap: build-images.sh failed ($images_rc)"; exit 1; }
took "test images"
# The default images of a stack (sandstack/proxy:<version> from this build's sandstack-proxy,
# sandstack/socat:<version> from the host's socat), imported locally: no registry is needed.
LUA_CPATH="$top/build/?.so;;" "$top/bin/sandstack" images
took "stack images"
if [ "$with_test" = 1 ] && [ "$test_builds" = 1 ]; then
  build build-luajit -DSANDSTACK_LUA=luajit
  build build-asan -DSANDSTACK_LUA=lua5.4 -DSANDSTACK_SANITIZE=ON
  bash "$top/spec/support/build-mode.sh" build-fuzz --target fuzzers -DSANDSTACK_LUA=lua5.4 -DSANDSTACK_FUZZ=ON \
    -DCMAKE_C_COMPILER=clang >/dev/null
  took "test builds"
fi
# The install (docs/building.md, "By hand"): with LuaRocks, offline, into /usr/local, so
# that `require "sandstack"` works from any directory and `sandstack` and sandstack-proxy are on
# PATH: the module, the command and the proxy for Lua 5.4; and where nginx has its Lua module,
# the module for nginx's LuaJIT too (the gateway; nginx's default search path holds
# /usr/local/share/lua/5.1 and /usr/local/lib/lua/5.1). SANDSTACK_PREBUILT hands over the build
# made above (cmake/install.cmake), so nothing is compiled twice; LuaRocks replaces an earlier
# install of the rock, so a second run leaves one install, of this tree. The test command
# (--test) installs nothing: its specs load this checkout's lua/ and build dirs, and a shared
# /usr/local would otherwise follow whichever checkout ran its tests last.
rock() { # rock LUA-VERSION BUILD-DIR [VAR=VALUE...]
  local log=/tmp/sandstack-rock.$$.log
  if ! SANDSTACK_PREBUILT="$top/$2" luarocks --lua-version="$1" make --deps-mode=none \
      rockspec/sandstack-scm-1.rockspec CURL_INCDIR="/usr/include/$(gcc -print-multiarch)" "${@:3}" >"$log" 2>&1; then
    echo "bootstrap: luarocks make for Lua $1 failed:"; tail -20 "$log"; rm -f "$log"; exit 1
  fi
  rm -f "$log"
}
if [ "$with_test" = 0 ]; then
  rock 5.4 build
  took "install (lua5.4)"
fi
if [ "$with_test" = 0 ] && [ -e /usr/include/luajit-2.1/luajit.h ] && [ -e /usr/lib/nginx/modules/ngx_http_lua_module.so ]; then
  build build-luajit -DSANDSTACK_LUA=luajit
  rock 5.1 build-luajit LUA_INCDIR=/usr/include/luajit-2.1
  took "install (luajit)"
fi
if [ "$with_test" = 1 ]; then
  bash "$top/spec/support/client-image.sh" # curl and python3 in a sandbox (spec/docker_proxy_spec.lua)
  took "client image"
fi
# The gateway console's JavaScript from npm (xterm.js; with --test also the browser test's
# playwright-core and axe-core): the lock file's versions, into web/ (docs/building.md).
if command -v npm >/dev/null; then bash "$top/scripts/vendor-console.sh"; took "console vendoring"; fi
echo "bootstrap: ready (engine $(curl -s --unix-socket /var/run/docker.sock http://d/version | sed -n 's/.*"ApiVersion":"\([0-9.]*\)".*/API \1/p'))"
