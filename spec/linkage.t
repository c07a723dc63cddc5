#!/usr/bin/env bash
# The Lua module links exactly libcurl, cJSON and libc: `readelf -d` of core.so in the
# non-ASan builds (Lua 5.4: build/, LuaJIT: build-luajit/; SANDSTACK_BUILD and
# SANDSTACK_BUILD_LUAJIT override them) lists no other NEEDED library, and nothing in it calls
# into libuv, which only the egress proxy program runs. The control: the same parse sees libuv
# in sandstack-proxy's NEEDED list, so a libuv in core.so could not pass unseen.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
b54=${SANDSTACK_BUILD:-$top/build}
bjit=${SANDSTACK_BUILD_LUAJIT:-$top/build-luajit}
echo "1..5"
n=0

# The NEEDED libraries of an ELF file, by base name without the version ("libcurl"), sorted.
needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(lib[^.]*\)\.so.*\]/\1/p' | sort | tr '\n' ' '; }

check_module() { # build-dir label
  n=$((n + 1))
  local so="$1/sandstack/core.so"
  if [ ! -f "$so" ]; then echo "not ok $n - $2: $so is not built"; return; fi
  local got; got=$(needed "$so")
  if [ "$got" = "libc libcjson libcurl " ]; then echo "ok $n - $2: core.so NEEDED is exactly libcurl, libcjson, libc"
  else echo "not ok $n - $2: core.so NEEDED is '$got', not 'libc libcjson libcurl'"; fi
}
check_module "$b54" "Lua 5.4 build"
check_module "$bjit" "LuaJIT build"

for b in "$b54" "$bjit"; do
  n=$((n + 1))
  uv=$(nm -D --undefined-only "$b/sandstack/core.so" 2>/dev/null | grep -c ' uv_' || true)
  if [ -f "$b/sandstack/core.so" ] && [ "$uv" = 0 ]; then echo "ok $n - $(basename "$b"): core.so calls no uv_ function"
  else echo "not ok $n - $(basename "$b"): core.so missing or referencing $uv uv_ symbols"; fi
done

n=$((n + 1))
proxy="$b54/sandstack-proxy"
if [ ! -x "$proxy" ]; then echo "not ok $n - control: $proxy is not built"
elif [[ " $(needed "$proxy")" == *" libuv "* ]]; then echo "ok $n - control: the parse sees libuv in sandstack-proxy's NEEDED list"
else echo "not ok $n - control: libuv not seen in sandstack-proxy's NEEDED list ('$(needed "$proxy")')"; fi
