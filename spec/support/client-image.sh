#!/usr/bin/env bash
# sandstack-test/client:local: a sandbox image with real HTTP clients, for the stack-level proxy
# tests (spec/docker_proxy_spec.lua): busybox, the test agent, this machine's curl and python3
# (with its standard library and the shared libraries both load). Like build-images.sh it needs
# no registry: a root assembled here and `docker import`ed, rebuilt only when its inputs change.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tag=sandstack-test/client:local
# Debian's python3 (bootstrap.sh installs it), never one a PATH shim leads to
py=$(readlink -f /usr/bin/python3)
pylib=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
curl_bin=$(command -v curl)
hash=$( (cat "$0" "$here/images/agent.c" /bin/busybox "$py" "$curl_bin"; ldd "$curl_bin" "$py" 2>&1; ls -R "$pylib") | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{ index .Config.Labels "io.sandstack.test.hash" }}' "$tag" 2>/dev/null || true)" = "$hash" ]; then
  echo "image $tag is up to date"
  exit 0
fi
work=$(mktemp -d /tmp/sandstack-client-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,usr/bin,etc,tmp,root,home/agent,proc,sys,dev}
chmod 1777 "$root/tmp"
cp /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list); do [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"; done
cc -O2 -static -Wall -Wextra -Werror -pthread -o "$root/bin/agent" "$here/images/agent.c" 2>/dev/null \
  || cc -O2 -static -Wall -Wextra -Werror -pthread -o "$root/bin/agent" "$here/images/agent.c"
printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"

copy_with_libs() { # copy_with_libs FILE...: each file at its own path, and what ldd names for it
  local f lib
  for f in "$@"; do
    mkdir -p "$root$(dirname "$f")"
    [ -e "$root$f" ] || cp -L "$f" "$root$f"
    for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*' || true); do
      [ -e "$root$lib" ] && continue
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done
  done
}
copy_with_libs "$curl_bin" "$py"
ln -sf "$(basename "$py")" "$root/usr/bin/python3"
# the standard library without what a client never imports (tests, IDLE, the build config)
mkdir -p "$root$pylib"
tar -C "$pylib" --exclude=./test --exclude=./idlelib --exclude=./tkinter --exclude=./lib2to3 \
  --exclude='./config-*' --exclude=./ensurepip --exclude=__pycache__ -c . | tar -C "$root$pylib" -x
copy_with_libs "$pylib"/lib-dynload/*.so
tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c "LABEL io.sandstack.test.hash=$hash" -c 'CMD ["/bin/sh"]' - "$tag" >/dev/null
echo "image $tag built"
