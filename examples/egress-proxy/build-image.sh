#!/usr/bin/env bash
# Builds sandstack-example/egress-proxy:local from this machine's binaries (no registry needed):
# Debian's nginx with its Lua module, lua-resty-core, busybox (for the entrypoint) and the
# sandstack core built for LuaJIT (the policy matcher the library itself uses), copied with
# the shared libraries they load into a rootfs and loaded with `docker import`.
#   build-image.sh [TAG]      SANDSTACK_CORE_SO=path/to/core.so to use a given LuaJIT build
# Rebuilds only when an input changed (a hash in the label io.sandstack.example.hash).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
tag=${1:-sandstack-example/egress-proxy:local}

core=${SANDSTACK_CORE_SO:-$repo/build-luajit/sandstack/core.so}
if [ ! -f "$core" ]; then
  cmake -S "$repo" -B "$repo/build-luajit" -DSANDSTACK_LUA=luajit >/dev/null
  cmake --build "$repo/build-luajit" -j2 >/dev/null
fi

work=$(mktemp -d /tmp/sandstack-proxy-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root

# copy_libs FILE: the shared libraries FILE loads, at their own paths.
copy_libs() {
  local lib
  for lib in $(ldd "$1" 2>/dev/null | grep -o '/[^ ]*' || true); do
    [ -e "$root$lib" ] && continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

# copy_with_libs FILE...: each file at the same path, with its libraries.
copy_with_libs() {
  local f
  for f in "$@"; do
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
    copy_libs "$f"
  done
}

mkdir -p "$root"/{bin,etc/sandstack-proxy,etc/ssl/certs,tmp,usr/share/lua/5.1,usr/local/lib/lua/5.1/sandstack}
chmod 1777 "$root/tmp"
cp /bin/busybox "$root/bin/busybox"
for applet in sh awk sed mkdir cat; do ln -s busybox "$root/bin/$applet"; done
copy_with_libs /usr/sbin/nginx /usr/lib/nginx/modules/ndk_http_module.so /usr/lib/nginx/modules/ngx_http_lua_module.so
# nginx looks up its user and group by name even when it runs unprivileged
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\nproxy:x:1000:1000:proxy:/tmp:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\nproxy:x:1000:\n' >"$root/etc/group"
# resty.core and its dependencies: the Lua module refuses to start without them
for pkg in lua-resty-core lua-resty-lrucache; do
  dpkg -L "$pkg" | while read -r f; do
    case "$f" in /usr/share/lua/5.1/*.lua) mkdir -p "$root$(dirname "$f")"; cp "$f" "$root$f" ;; esac
  done
done
cp -L "$core" "$root/usr/local/lib/lua/5.1/sandstack/core.so"
copy_libs "$core"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
cp "$here/nginx.conf.in" "$here/sandstack_proxy.lua" "$here/entrypoint.sh" "$root/etc/sandstack-proxy/"

inputs=("$core" "$here/nginx.conf.in" "$here/sandstack_proxy.lua" "$here/entrypoint.sh" "$0" /usr/sbin/nginx
  /usr/lib/nginx/modules/ngx_http_lua_module.so /bin/busybox)
hash=$(cat "${inputs[@]}" | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{ index .Config.Labels "io.sandstack.example.hash" }}' "$tag" 2>/dev/null || true)" = "$hash" ]; then
  echo "image $tag is up to date"
  exit 0
fi
tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'ENV SANDSTACK_PROXY_PORT=8080' \
  -c 'EXPOSE 8080' \
  -c 'USER 1000:1000' \
  -c "LABEL io.sandstack.example=egress-proxy io.sandstack.example.hash=$hash" \
  -c 'ENTRYPOINT ["/bin/sh", "/etc/sandstack-proxy/entrypoint.sh"]' - "$tag" >/dev/null
echo "image $tag built"
