#!/usr/bin/env bash
# Newer container engines, run nested inside a container of the host's engine, for the CI engine
# matrix (spec/engines.t, docs/results/engines.md). Every engine comes from Debian's packages: the root
# filesystem is debootstrapped from this machine's own apt mirror and imported as an image.
#   nested-engine.sh build NAME   builds the rootfs image NAME runs from (skipped when up to date)
#   nested-engine.sh start NAME   starts it contained; prints PID= SOCK= VERSION= API= ENGINE=
#   nested-engine.sh stop NAME    removes its container, its network and its state directory
#   nested-engine.sh stop-all     the same for every nested engine (by label)
#   nested-engine.sh start NAME KIND   an instance of engine KIND under a name of the caller's
#                                 (several engines of one kind at once, e.g. the scale-out
#                                 spec's sstest-h8-gw1..3); its container and network are NAME
#   nested-engine.sh stop-prefix P   stops the instances whose names start with P, and only those
# NAME: docker20 (bookworm docker.io, the host's own engine, nested so that its host resolver
# can be a loopback address a test controls), docker26 (trixie docker.io), docker28 (sid
# docker.io), docker28-v6 (the same with IPv6 on by default for new networks), podman (trixie
# podman + netavark), docker26-criu (trixie docker.io with sid's CRIU, the daemon experimental:
# an engine that checkpoints and restores a container's processes; design/session.md says what
# each Debian's CRIU can do on which kernel).
#
# Containment (docs/results/engines.md, "Running the matrix"): the engine sits on an internal
# network of the host engine, resolves through 127.0.0.1 (nothing listens there, so its own
# look-ups fail locally) and its default route is deleted. A test reaches it only through the
# socket on a bind-mounted directory and by entering its network namespace (nsenter -t PID -n).
# Every host-engine object made here carries io.sandstack.test=nested-engine, never
# io.sandstack.project: that label is what the leftover check counts.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state_root=${SANDSTACK_NESTED_DIR:-/var/lib/sandstack-nested}
label=io.sandstack.test=nested-engine
test_images=(sandstack-test/agent:local sandstack-test/socat:local sandstack-test/base:local)

# Which rootfs an engine runs from, and how it is started. One trixie rootfs holds both
# docker.io 26 and podman 5.4 (started one or the other): one debootstrap less per CI run.
engine_rootfs() {
  case "$1" in
    docker20) echo bookworm ;;
    docker26 | podman) echo trixie ;;
    docker26-criu) echo trixie-criu ;;
    docker28 | docker28-v6) echo sid ;;
    *) echo "nested-engine: unknown engine '$1' (docker20, docker26, docker26-criu, docker28, docker28-v6, podman)" >&2; return 2 ;;
  esac
}
rootfs_suite() { echo "${1%-criu}"; }
rootfs_packages() {
  local common=iptables,nftables,ca-certificates,procps,iproute2
  case "$1" in
    trixie) echo "$common,docker.io,podman,netavark,aardvark-dns,crun,conmon" ;;
    bookworm | sid) echo "$common,docker.io" ;;
    trixie-criu) echo "$common,docker.io,criu" ;;
  esac
}
# Packages taken from sid on top of the suite's own: trixie's CRIU 4.1 cannot dump an inet
# socket on kernels 6.16 and later (they refuse SO_PASSCRED there); sid's 4.2 can. Docker 26
# stays: sid's Docker 28 (containerd 2) cannot restore a checkpoint.
rootfs_from_sid() {
  case "$1" in
    trixie-criu) echo criu ;;
  esac
}
rootfs_tag() { echo "sandstack-test/engine-$1:local"; }

# shellcheck source=spec/support/apt-mirror.sh
. "$here/apt-mirror.sh" # apt_mirror: the Debian mirror this machine already uses

cmd_build() {
  local rootfs suite tag hash work mirror t0
  rootfs=$(engine_rootfs "$1")
  suite=$(rootfs_suite "$rootfs") tag=$(rootfs_tag "$rootfs")
  # Rebuilt only when the suite or package list changes (a hash in a label).
  hash=$(printf '%s %s %s' "$suite" "$(rootfs_packages "$rootfs")" "$(rootfs_from_sid "$rootfs")" | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{ index .Config.Labels "io.sandstack.test.hash" }}' "$tag" 2>/dev/null || true)" = "$hash" ]; then
    echo "nested-engine: image $tag is up to date" >&2
    return 0
  fi
  command -v debootstrap >/dev/null || { echo "nested-engine: debootstrap is not installed" >&2; return 1; }
  mirror=$(apt_mirror)
  [ -n "$mirror" ] || { echo "nested-engine: no Debian source in /etc/apt for debootstrap" >&2; return 1; }
  # A lock per rootfs: engines.t may build while run-tests.sh pre-builds in the background.
  mkdir -p "$state_root"
  exec 9>"$state_root/.build-$rootfs.lock"
  flock 9
  if [ "$(docker image inspect -f '{{ index .Config.Labels "io.sandstack.test.hash" }}' "$tag" 2>/dev/null || true)" = "$hash" ]; then
    echo "nested-engine: image $tag is up to date" >&2
    return 0
  fi
  work=$(mktemp -d "$state_root/.rootfs-$rootfs.XXXXXX")
  t0=$(date +%s)
  if ! debootstrap --variant=minbase --include="$(rootfs_packages "$rootfs")" "$suite" "$work/root" "$mirror" \
      >"$work/debootstrap.log" 2>&1; then
    tail -20 "$work/debootstrap.log" >&2
    rm -rf "$work"
    return 1
  fi
  local sid_pkgs; sid_pkgs=$(rootfs_from_sid "$rootfs")
  if [ -n "$sid_pkgs" ]; then
    printf 'deb %s sid main\n' "$mirror" >"$work/root/etc/apt/sources.list.d/sid.list"
    # apt in the chroot resolves the mirror as this machine does; a mirror's sid Release may be
    # past its Valid-Until on a machine whose clock is ahead of the mirror
    cp -L /etc/resolv.conf "$work/root/etc/resolv.conf"
    # shellcheck disable=SC2086 # a list of package names, split on purpose
    if ! chroot "$work/root" sh -c "apt-get -o Acquire::Check-Valid-Until=false update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends -t sid $sid_pkgs" >>"$work/debootstrap.log" 2>&1; then
      tail -20 "$work/debootstrap.log" >&2
      rm -rf "$work"
      return 1
    fi
    rm -f "$work/root/etc/apt/sources.list.d/sid.list" "$work/root/etc/resolv.conf"
  fi
  rm -rf "$work"/root/var/cache/apt/archives/*.deb "$work"/root/var/lib/apt/lists/*
  local t1; t1=$(date +%s)
  tar -C "$work/root" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c "LABEL $label" -c "LABEL io.sandstack.test.hash=$hash" - "$tag" >/dev/null
  rm -rf "$work"
  echo "nested-engine: image $tag built (debootstrap $((t1 - t0)) s, import $(($(date +%s) - t1)) s)" >&2
}

# The entrypoint: the host engine mounts /sys and the cgroup hierarchies read-only in a
# non-privileged container; the nested engine has to create cgroups and bridges, so they are
# remounted read-write (allowed by the capabilities and the unconfined profiles below).
# shellcheck disable=SC2016 # the entrypoint is expanded by the container's shell, not here
entry='set -e
mount -o remount,rw /sys 2>/dev/null || mount -o remount,bind,rw /sys
mount -o remount,rw /sys/fs/cgroup 2>/dev/null || true
for d in /sys/fs/cgroup/*; do
  [ -d "$d" ] && { mount -o remount,bind,rw "$d" 2>/dev/null || true; }
done
case "$1" in
  docker*) exec dockerd --host=unix:///run/ext/docker.sock --config-file=/run/ext/daemon.json \
             --pidfile=/run/docker.pid >/run/ext/engine.log 2>&1 ;;
  podman) exec podman --cgroup-manager=cgroupfs --events-backend=file system service --time=0 \
            unix:///run/ext/docker.sock >/run/ext/engine.log 2>&1 ;;
esac'

daemon_json() {
  # A caller's own daemon.json (spec/support/swarm-cluster.sh: no-new-privileges on every node)
  if [ -n "${SANDSTACK_NESTED_DAEMON_JSON:-}" ]; then printf '%s\n' "$SANDSTACK_NESTED_DAEMON_JSON"; return; fi
  case "$1" in
    docker26-criu) echo '{ "experimental": true }' ;;
    # IPv6 on for every new bridge network, as a user may configure Engine 27+: "ipv6" covers
    # only the default bridge (with its fixed-cidr-v6); "default-network-opts" turns it on for
    # networks created without EnableIPv6, which take their v6 subnet from the v6 default pool.
    docker28-v6) cat <<'EOF' ;;
{ "ipv6": true, "fixed-cidr-v6": "fd53:5353:0:1::/64",
  "default-network-opts": { "bridge": { "com.docker.network.enable_ipv6": "true" } },
  "default-address-pools": [ { "base": "10.231.0.0/16", "size": 24 },
                             { "base": "fd53:5353:1::/48", "size": 64 } ] }
EOF
    *) echo '{}' ;;
  esac
}

ping_ok() { curl -sf --max-time 2 --unix-socket "$1" http://d/_ping >/dev/null 2>&1; }

# An instance name: lowercase words and dashes, never one of the engine kinds' own names (whose
# objects are ssne-KIND), so that stopping an instance cannot touch the matrix's engines.
instance_name() {
  case "$1" in
    "" | *[!a-z0-9-]* | -*) echo "nested-engine: instance name '$1' must be [a-z0-9-]+" >&2; return 2 ;;
  esac
  if engine_rootfs "$1" >/dev/null 2>&1; then
    echo "nested-engine: '$1' is an engine kind, not an instance name" >&2; return 2
  fi
}

cmd_start() {
  local name=$1 kind=${2:-$1} rootfs dir ctr net pid sock ver api extra=()
  rootfs=$(engine_rootfs "$kind")
  ctr=ssne-$name net=ssne-$name
  if [ "$kind" != "$name" ]; then instance_name "$name"; ctr=$name net=$name; fi
  cmd_build "$kind"
  cmd_stop "$name" >/dev/null 2>&1 || true
  dir=$state_root/$name
  mkdir -p "$dir/lib" "$dir/run"
  daemon_json "$kind" >"$dir/run/daemon.json"
  # The engine host's resolver is 127.0.0.1 in its own namespace, where nothing listens unless
  # a test starts a logging resolver there (spec/docker_dns_spec.lua); mounted, because on a
  # user-defined network the host engine would write its own 127.0.0.11 into resolv.conf.
  printf 'nameserver 127.0.0.1\n' >"$dir/resolv.conf"
  docker network create --internal --label "$label" --label "io.sandstack.nested=$name" "$net" >/dev/null
  local lib=/var/lib/docker
  [ "$kind" = podman ] && lib=/var/lib/containers
  [ "$kind" = docker28-v6 ] && extra+=(--sysctl net.ipv6.conf.all.disable_ipv6=0 --sysctl net.ipv6.conf.default.disable_ipv6=0)
  docker run -d --name "$ctr" --hostname "$ctr" --label "$label" --label "io.sandstack.nested=$name" \
    --network "$net" --dns 127.0.0.1 \
    --cap-add ALL --cap-drop SYS_RESOURCE \
    --security-opt seccomp=unconfined --security-opt systempaths=unconfined \
    --device-cgroup-rule 'a *:* rwm' --cgroupns private \
    -v "$dir/lib:$lib" -v "$dir/run:/run/ext" -v "$dir/resolv.conf:/etc/resolv.conf:ro" "${extra[@]}" \
    "$(rootfs_tag "$rootfs")" /bin/sh -c "$entry" sh "$kind" >/dev/null
  pid=$(docker inspect -f '{{.State.Pid}}' "$ctr")
  # The host engine (20.10) gives internal networks a default route; the nested engine must
  # have none, so nothing it or its containers send can leave this machine.
  nsenter -t "$pid" -n ip route del default 2>/dev/null || true
  nsenter -t "$pid" -n ip -6 route del default 2>/dev/null || true
  sock=$dir/run/docker.sock
  for _ in $(seq 1 120); do ping_ok "$sock" && break; sleep 0.5; done
  if ! ping_ok "$sock"; then
    echo "nested-engine: $name did not answer on $sock:" >&2
    tail -20 "$dir/run/engine.log" >&2 || docker logs --tail 20 "$ctr" >&2 || true
    return 1
  fi
  local img
  for img in "${test_images[@]}"; do
    docker save "$img" | DOCKER_HOST=unix://$sock docker load -q >/dev/null \
      || { echo "nested-engine: loading $img into $name failed" >&2; return 1; }
  done
  ver=$(curl -s --unix-socket "$sock" http://d/version)
  api=$(printf '%s' "$ver" | sed -n 's/.*"ApiVersion":"\([0-9.]*\)".*/\1/p')
  engine=Docker
  case "$ver" in *'"Name":"Podman'*) engine=Podman ;; esac
  ver=$(printf '%s' "$ver" | sed -n 's/.*"Version":"\([^"]*\)","ApiVersion".*/\1/p')
  printf 'PID=%s\nSOCK=%s\nVERSION=%s\nAPI=%s\nENGINE=%q\n' "$pid" "$sock" "$ver" "$api" "$engine"
}

cmd_stop() {
  local name=$1 ids
  ids=$(docker ps -aq --filter "label=$label" --filter "label=io.sandstack.nested=$name")
  # shellcheck disable=SC2086 # $ids is a list of ids, split on purpose
  [ -z "$ids" ] || docker rm -f $ids >/dev/null
  ids=$(docker network ls -q --filter "label=$label" --filter "label=io.sandstack.nested=$name")
  # shellcheck disable=SC2086 # the same
  [ -z "$ids" ] || docker network rm $ids >/dev/null
  # Only our own directory; the engine's mounts died with its container's mount namespace.
  case "$name" in *[!a-z0-9-]* | "") return 2 ;; esac
  rm -rf "${state_root:?}/$name"
}

cmd_stop_all() {
  local ids
  ids=$(docker ps -aq --filter "label=$label")
  # shellcheck disable=SC2086 # $ids is a list of ids, split on purpose
  [ -z "$ids" ] || docker rm -f $ids >/dev/null
  ids=$(docker network ls -q --filter "label=$label")
  # shellcheck disable=SC2086 # the same
  [ -z "$ids" ] || docker network rm $ids >/dev/null
  local n
  for n in docker20 docker26 docker26-criu docker28 docker28-v6 podman; do rm -rf "${state_root:?}/$n"; done
}

# The instances named P..., found by their io.sandstack.nested label (the engine kinds' are
# never matched: instance_name refuses those names).
cmd_stop_prefix() {
  local prefix=$1 n
  case "$prefix" in ??*) instance_name "$prefix" ;; *) echo "nested-engine: prefix too short" >&2; return 2 ;; esac
  for n in $( { docker ps -a --filter "label=$label" --format '{{.Label "io.sandstack.nested"}}'
                docker network ls --filter "label=$label" --format '{{.Label "io.sandstack.nested"}}'
                ls "$state_root" 2>/dev/null; } | sort -u); do
    case "$n" in "$prefix"*) instance_name "$n" 2>/dev/null && cmd_stop "$n" ;; esac
  done
  return 0
}

case "${1:-}" in
  build) cmd_build "${2:?engine}" ;;
  start) cmd_start "${2:?engine}" "${3:-$2}" ;;
  stop) { engine_rootfs "${2:?engine}" >/dev/null 2>&1 || instance_name "$2"; } && cmd_stop "$2" ;;
  stop-prefix) cmd_stop_prefix "${2:?prefix}" ;;
  stop-all) cmd_stop_all ;;
  *) echo "usage: $0 build|start|stop NAME | start NAME KIND | stop-prefix PREFIX | stop-all" >&2; exit 2 ;;
esac
