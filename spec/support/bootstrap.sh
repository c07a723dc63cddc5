#!/usr/bin/env bash
# Everything a fresh Debian 12 machine needs before sandstack runs, as root, idempotent:
# Debian packages, a Docker engine answering on /var/run/docker.sock, the local test images,
# and the module built for Lua 5.4 and LuaJIT (plus the ASan/UBSan and fuzz builds with --test).
#   bootstrap.sh [--test]
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
with_test=0
[ "${1:-}" = "--test" ] && with_test=1

packages=(
  ca-certificates openssl gcc make cmake pkg-config libc6-dev curl perl python3 iproute2 iptables
  docker.io busybox-static socat
  lua5.4 liblua5.4-dev luajit2 libluajit2-5.1-dev lua-busted luarocks
  libcurl4-openssl-dev libcjson-dev libuv1-dev
  nginx libnginx-mod-http-lua libnginx-mod-http-ndk lua-resty-core lua-resty-lrucache docker-compose
  debootstrap
)
[ "$with_test" = 1 ] && packages+=(clang libclang-rt-14-dev llvm valgrind)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# gVisor's runsc for `runtime = "runsc"` (issue 18): installed from bookworm-backports and
# registered in /etc/docker/daemon.json, before the engine starts (a running one is reloaded).
bash "$top/spec/support/runsc-setup.sh"

# The engine: start Debian's dockerd when nothing answers on the socket.
engine_up() { curl -sf --max-time 3 --unix-socket /var/run/docker.sock http://d/_ping >/dev/null 2>&1; }
if ! engine_up; then
  echo "bootstrap: starting dockerd"
  setsid nohup dockerd >/var/log/sandstack-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 60); do engine_up && break; sleep 0.5; done
  engine_up || { echo "bootstrap: dockerd did not come up:"; tail -20 /var/log/sandstack-dockerd.log; exit 1; }
fi

bash "$top/spec/support/build-images.sh"

build() { # build DIR CMAKE-ARGS...
  local dir=$1; shift
  cmake -S "$top" -B "$top/$dir" "$@" >/dev/null
  cmake --build "$top/$dir" -j"$(nproc)" >/dev/null
}
build build -DSANDSTACK_LUA=lua5.4
build build-luajit -DSANDSTACK_LUA=luajit
# The default images of a stack (sandstack/proxy:<version> from this build's sandstack-proxy,
# sandstack/socat:<version> from the host's socat), imported locally: no registry is needed.
LUA_CPATH="$top/build/?.so;;" "$top/bin/sandstack" images
if [ "$with_test" = 1 ]; then
  build build-asan -DSANDSTACK_LUA=lua5.4 -DSANDSTACK_SANITIZE=ON
  build build-fuzz -DSANDSTACK_LUA=lua5.4 -DSANDSTACK_FUZZ=ON -DCMAKE_C_COMPILER=clang
  bash "$top/spec/support/client-image.sh" # curl and python3 in a sandbox (spec/docker_proxy_spec.lua)
fi
echo "bootstrap: ready (engine $(curl -s --unix-socket /var/run/docker.sock http://d/version | sed -n 's/.*"ApiVersion":"\([0-9.]*\)".*/API \1/p'))"
