#!/usr/bin/env bash
# Builds the images the tests and the demo use, from this machine's own binaries: no registry
# is reachable, so each image is a rootfs assembled here and loaded with `docker import`.
# An image is rebuilt only when its inputs change (a hash stored in a label).
#   build-images.sh          agent and socat: what the demo and `sandstack conform` use
#   build-images.sh --test   also base and debian, which only the tests use (debian is a debootstrap)
#   sandstack-test/agent:local   busybox + the test agent (HTTP /health, /stream, /connect, /echo)
#   sandstack-test/socat:local   busybox + socat (the forwarder)
#   sandstack-test/base:local    busybox + bash, coreutils, util-linux tools, the agent; users root
#                                and agent (uid 1000): a general image and the sbx-sim's second template
#   sandstack-test/debian:local  Debian bookworm minbase (debootstrap from this machine's apt mirror):
#                                /bin/sh is dash, bash, coreutils, util-linux, procps as the distro
#                                ships them, user agent (uid 1000): the sbx-sim's default template,
#                                the shape of Docker's Ubuntu-based sbx shell template
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
with_test=0
[ "${1:-}" = "--test" ] && with_test=1
work=$(mktemp -d /tmp/sandstack-images.XXXXXX)
trap 'rm -rf "$work"' EXIT

cc -O2 -static -Wall -Wextra -Werror -pthread -o "$work/agent.bin" "$here/images/agent.c" 2>/dev/null \
  || cc -O2 -static -Wall -Wextra -Werror -pthread -o "$work/agent.bin" "$here/images/agent.c"

# copy_with_libs ROOT BINARY...: copies each binary and the shared libraries it loads.
copy_with_libs() {
  local root=$1; shift
  local f lib
  for f in "$@"; do
    mkdir -p "$root$(dirname "$f")"
    rm -f "$root$f" # may be a busybox applet link: replace the link, never its target
    cp -L "$f" "$root$f"
    for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*' || true); do
      [ -e "$root$lib" ] && continue
      mkdir -p "$root$(dirname "$lib")"
      rm -f "$root$lib"
      cp -L "$lib" "$root$lib"
    done
  done
}

# new_root NAME: a rootfs with busybox applets, /etc basics and the test agent.
new_root() {
  local root=$work/root-$1
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,root,home/agent,proc,sys,dev,run,var/tmp}
  chmod 1777 "$root/tmp" "$root/var/tmp"
  cp /bin/busybox "$root/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
  done
  cp "$work/agent.bin" "$root/bin/agent"
  printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n' >"$root/etc/group"
  chown 1000:1000 "$root/home/agent"
  echo "$root"
}

# import NAME TAG INPUTS...: imports the rootfs unless an image with the same input hash exists.
import() {
  local name=$1 tag=$2; shift 2
  local hash
  hash=$( (cat "$@" "$0"; /bin/busybox --list) | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{ index .Config.Labels "io.sandstack.test.hash" }}' "$tag" 2>/dev/null || true)" = "$hash" ]; then
    echo "image $tag is up to date"
    return 0
  fi
  tar -C "$work/root-$name" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c "LABEL io.sandstack.test.hash=$hash" -c 'CMD ["/bin/sh"]' - "$tag" >/dev/null
  echo "image $tag built"
}

root=$(new_root agent)
import agent sandstack-test/agent:local "$here/images/agent.c" /bin/busybox

root=$(new_root socat)
copy_with_libs "$root" /usr/bin/socat
import socat sandstack-test/socat:local /usr/bin/socat /bin/busybox

[ "$with_test" = 1 ] || exit 0

root=$(new_root base)
bins=(/bin/bash /usr/bin/unshare /usr/bin/setsid /bin/mount /bin/umount /usr/bin/nsenter /usr/bin/timeout /usr/bin/env)
while read -r f; do
  case "$f" in */bin/*) [ -f "$f" ] && [ ! -L "$f" ] && bins+=("$f") ;; esac
done < <(dpkg -L coreutils)
copy_with_libs "$root" "${bins[@]}"
# Tools a sandbox command may expect at the Debian paths.
for f in "${bins[@]}"; do
  case "$f" in /usr/bin/*) [ -e "$root/bin/$(basename "$f")" ] || ln -s "/usr/bin/$(basename "$f")" "$root/bin/$(basename "$f")" ;; esac
done
import base sandstack-test/base:local "${bins[@]}" /bin/busybox

# shellcheck source=spec/support/apt-mirror.sh
. "$here/apt-mirror.sh" # apt_mirror: the Debian mirror this machine already uses

# Rebuilt when this script changes (the package list is in it); debootstrap needs the mirror
# only then.
debian_tag=sandstack-test/debian:local
debian_hash=$(cat "$0" "$here/apt-mirror.sh" | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{ index .Config.Labels "io.sandstack.test.hash" }}' "$debian_tag" 2>/dev/null || true)" = "$debian_hash" ]; then
  echo "image $debian_tag is up to date"
else
  mirror=$(apt_mirror)
  [ -n "$mirror" ] || { echo "build-images: no Debian source in /etc/apt for debootstrap" >&2; exit 1; }
  command -v debootstrap >/dev/null || { echo "build-images: debootstrap is not installed" >&2; exit 1; }
  root=$work/root-debian
  # minbase is the Essential set (dash, bash, coreutils, util-linux); mount and procps are
  # required/important in Debian and present in Docker's Ubuntu templates.
  debootstrap --variant=minbase --include=mount,procps bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  chroot "$root" /bin/sh -c 'groupadd -g 1000 agent && useradd -m -u 1000 -g 1000 -s /bin/bash agent'
  [ "$(readlink "$root/bin/sh")" = dash ] || { echo "build-images: /bin/sh is not dash in $debian_tag" >&2; exit 1; }
  cp "$work/agent.bin" "$root/bin/agent"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c "LABEL io.sandstack.test.hash=$debian_hash" -c 'CMD ["/bin/sh"]' - "$debian_tag" >/dev/null
  echo "image $debian_tag built"
fi
