#!/usr/bin/env bash
# A newcomer's machine for spec/fresh_machine.t: a clean Debian 12 (debootstrap minbase from this
# machine's own apt mirror) in a container with its own dockerd, the checkout put in by
# `git archive`, and the README's main command run there as root.
#   fresh-machine.sh base          finds or builds the cached base image; prints its tag
#   fresh-machine.sh run DIR [REV] runs `bash examples/demo.sh` from `git archive REV` (default
#                                  HEAD) in a new container on that base and waits for it. DIR gets
#                                  log (each line "SECONDS<TAB>CPU<TAB>LINE": seconds since the
#                                  demo was let go, and the CPU seconds the machine had used by
#                                  then), rc (the demo's exit status) and base (how the base
#                                  image was had)
#   fresh-machine.sh clean-one NAME  removes one run's container, network and state directory
#   fresh-machine.sh clean         the same for every run (by label)
#
# The base holds nothing of the project, so it is kept between runs: a host image keyed by the
# suite, the package list and this recipe's version (a hash in its tag and a label).
#
# The container (the nested-engine technique of ../../../shared/reference/nested-engines.md, as
# in nested-engine.sh): --privileged fails on these machines, so every capability but
# CAP_SYS_RESOURCE, unconfined seccomp and system paths, every device, a private cgroup
# namespace, and /sys and the cgroup hierarchies remounted read-write by the entrypoint; its
# /var/lib/docker is a host directory, so overlay2 works. Its dockerd is NOT started here:
# bootstrap.sh starts one when none answers, as it would on a new machine.
# The host engine's socket is never mounted in. Network: a bridge network of its own, no DNS
# (its resolv.conf names 127.0.0.1), the mirror's address in /etc/hosts, and a filter in its
# network namespace that lets out only TCP to the mirror, so the demo's own traffic stays in
# the nested engine. Every host object made here carries io.sandstack.test=fresh-machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
state_root=${SANDSTACK_FRESH_DIR:-/var/lib/sandstack-fresh}
label=io.sandstack.test=fresh-machine
base_label=io.sandstack.test=fresh-base
suite=bookworm
# What a stock Debian 12 cloud image has that minbase lacks and a newcomer needs before the
# first command: ca-certificates, so apt and curl can use an https mirror or download (minbase
# has no CA bundle). Debootstrap itself writes the apt source (the mirror below, `bookworm main`),
# so apt-get works. Everything else (compiler, libraries, docker.io, socat, python3, iproute2...)
# is bootstrap.sh's to install: finding what it forgets is the point of the test.
# Left out although cloud images have them: systemd and cloud-init (nothing runs as a service
# here; bootstrap.sh starts dockerd itself), openssh-server, sudo (root), locales, editors, and the
# bookworm-updates/-security sources (the demo needs nothing from them; each adds an index).
packages=ca-certificates
recipe=1 # bump when the way the base is made changes

# shellcheck source=spec/support/apt-mirror.sh
. "$here/apt-mirror.sh" # apt_mirror: the Debian mirror this machine already uses

base_hash() { printf '%s %s minbase %s %s' "$recipe" "$suite" "$packages" "$(apt_mirror)" | sha256sum | cut -c1-16; }
base_tag() { echo "sandstack-fresh/$suite-minbase:$(base_hash)"; }

cmd_base() {
  local tag work mirror t0 t1
  tag=$(base_tag)
  if docker image inspect "$tag" >/dev/null 2>&1; then echo "$tag"; echo cached >&2; return 0; fi
  mkdir -p "$state_root"
  exec 8>"$state_root/.base.lock"
  flock 8
  if docker image inspect "$tag" >/dev/null 2>&1; then echo "$tag"; echo cached >&2; return 0; fi
  command -v debootstrap >/dev/null || { echo "fresh-machine: debootstrap is not installed" >&2; return 1; }
  mirror=$(apt_mirror)
  [ -n "$mirror" ] || { echo "fresh-machine: no Debian source in /etc/apt for debootstrap" >&2; return 1; }
  work=$(mktemp -d "$state_root/.base.XXXXXX")
  t0=$SECONDS
  if ! debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" "$mirror" \
      >"$work/debootstrap.log" 2>&1; then
    tail -20 "$work/debootstrap.log" >&2
    rm -rf "$work"
    return 1
  fi
  # as shipped: no downloaded packages, no package lists (the first apt-get update fetches them)
  rm -rf "$work"/root/var/cache/apt/archives/*.deb "$work"/root/var/lib/apt/lists/*
  # This machine's mirror serves a dated snapshot whose Release files may have expired; the
  # host's apt accepts them by configuration, and so does the base (a setting of the mirror, not
  # of the machine a newcomer has).
  if [ "$(apt-config dump Acquire::Check-Valid-Until 2>/dev/null)" = 'Acquire::Check-Valid-Until "false";' ]; then
    echo 'Acquire::Check-Valid-Until "false";' >"$work/root/etc/apt/apt.conf.d/99snapshot-mirror"
  fi
  t1=$SECONDS
  tar -C "$work/root" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c "LABEL $base_label" - "$tag" >/dev/null
  rm -rf "$work"
  # older bases (another recipe, package list or mirror) go: only the current one is kept
  local old
  for old in $(docker image ls --filter "label=$base_label" --format '{{.Repository}}:{{.Tag}}'); do
    [ "$old" = "$tag" ] || docker image rm "$old" >/dev/null 2>&1 || true
  done
  echo "$tag"
  echo "built (debootstrap $((t1 - t0)) s, import $((SECONDS - t1)) s)" >&2
}

# The entrypoint: waits until the host has put the egress filter in place (the file /run/go),
# remounts what the host engine mounted read-only, then runs the README's main command and, when
# it succeeded, spec/support/installed-check.sh.
# shellcheck disable=SC2016 # a script for the container's sh: it expands there, not here
entry='set -e
while [ ! -e /run/go ]; do sleep 0.1; done
mount -o remount,rw /sys 2>/dev/null || mount -o remount,bind,rw /sys
mount -o remount,rw /sys/fs/cgroup 2>/dev/null || true
for d in /sys/fs/cgroup/*; do
  [ -d "$d" ] && { mount -o remount,bind,rw "$d" 2>/dev/null || true; }
done
cd /root/sandstack
rc=0
bash examples/demo.sh 2>&1 || rc=$?
# what the demo left installed, tried from / as a user would (its lines start "installed: ")
if [ "$rc" = 0 ]; then sh spec/support/installed-check.sh 2>&1 || true; fi
exit "$rc"'

# mirror_endpoint: "HOST PORT" of the mirror's URL
mirror_endpoint() {
  local url=$1 hostport scheme port
  scheme=${url%%://*}
  hostport=${url#*://}; hostport=${hostport%%/*}
  port=80; [ "$scheme" = https ] && port=443
  case "$hostport" in *:*) port=${hostport##*:}; hostport=${hostport%:*} ;; esac
  echo "$hostport $port"
}

# The CPU time the container has used, from its cgroup on the host (it holds the nested engine
# and its containers too): on a loaded machine the wall times say little, this says what an idle
# one needs at least. cgroup v1 (cgroupfs or systemd driver) or v2; "-" when none is found.
cpu_file() {
  local id=$1 f
  for f in /sys/fs/cgroup/cpuacct/docker/"$id"/cpuacct.usage \
    /sys/fs/cgroup/cpuacct/system.slice/docker-"$id".scope/cpuacct.usage \
    /sys/fs/cgroup/docker/"$id"/cpu.stat /sys/fs/cgroup/system.slice/docker-"$id".scope/cpu.stat; do
    [ -r "$f" ] && { echo "$f"; return 0; }
  done
  echo -
}
cpu_seconds() { # tenths of a second, printed as seconds
  local v
  case "$1" in
    */cpuacct.usage) v=$(<"$1") && v=$((v / 100000000)) ;;
    */cpu.stat) v=$(sed -n 's/^usage_usec //p' "$1") && v=$((v / 100000)) ;;
    *) false ;;
  esac 2>/dev/null || { echo -; return 0; }
  printf '%d.%d\n' $((v / 10)) $((v % 10))
}

cmd_run() {
  local out=$1 rev=${2:-HEAD} tag name dir mirror mhost mport addrs a pid rc start
  mkdir -p "$out"
  tag=$(cmd_base 2>"$out/base")
  name=sandstack-fresh-$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
  dir=$state_root/$name
  echo "$name" >"$out/name"
  run_name=$name # global: the EXIT trap runs after this function's locals are gone
  trap 'cmd_clean_one "$run_name"' EXIT
  trap 'exit 130' INT TERM
  mkdir -p "$dir/docker"
  printf 'nameserver 127.0.0.1\n' >"$dir/resolv.conf"
  mirror=$(apt_mirror)
  read -r mhost mport < <(mirror_endpoint "$mirror")
  addrs=$(getent ahostsv4 "$mhost" | awk '{ print $1 }' | sort -u)
  [ -n "$addrs" ] || { echo "fresh-machine: cannot resolve the mirror $mhost" >&2; return 1; }
  local hosts=()
  case "$mhost" in *[!0-9.]*) for a in $addrs; do hosts+=(--add-host "$mhost:$a"); done ;; esac
  docker network create --label "$label" "$name" >/dev/null
  docker create --name "$name" --hostname fresh --label "$label" \
    --network "$name" --dns 127.0.0.1 "${hosts[@]}" \
    --cap-add ALL --cap-drop SYS_RESOURCE \
    --security-opt seccomp=unconfined --security-opt systempaths=unconfined \
    --device-cgroup-rule 'a *:* rwm' --cgroupns private \
    -v "$dir/docker:/var/lib/docker" -v "$dir/resolv.conf:/etc/resolv.conf:ro" \
    "$tag" /bin/sh -c "$entry" 2>&1 >/dev/null | { grep -v '^WARNING: Localhost DNS' >&2 || true; }
  # the committed tree only: what is not in REV cannot help
  git -C "$top" archive --format=tar --prefix=sandstack/ "$rev" | docker cp - "$name:/root/"
  docker start "$name" >/dev/null
  pid=$(docker inspect -f '{{.State.Pid}}' "$name")
  # Egress: out of eth0 only new TCP connections to the mirror and the packets of connections
  # made so (the host's iptables, nf_tables like the container's own, in its namespace only).
  local ipt=(nsenter -t "$pid" -n iptables -w)
  "${ipt[@]}" -t mangle -N FRESH-EGRESS
  "${ipt[@]}" -t mangle -A FRESH-EGRESS -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
  for a in $addrs; do "${ipt[@]}" -t mangle -A FRESH-EGRESS -p tcp -d "$a" --dport "$mport" -j RETURN; done
  "${ipt[@]}" -t mangle -A FRESH-EGRESS -j DROP
  "${ipt[@]}" -t mangle -A POSTROUTING -o eth0 -j FRESH-EGRESS
  nsenter -t "$pid" -n ip6tables -w -t mangle -A POSTROUTING -o eth0 -j DROP
  # Seconds from here (a bare machine, let go) for each line the demo prints.
  start=$EPOCHREALTIME
  docker exec "$name" touch /run/go
  local line t cpu cpufile follow=0
  cpufile=$(cpu_file "$(docker inspect -f '{{.Id}}' "$name")")
  # the container ends when the demo does; a demo that hangs is stopped after 20 minutes
  timeout 1200 docker logs -f "$name" 2>&1 | while IFS= read -r line; do
    t=$(( (${EPOCHREALTIME/./} - ${start/./}) / 100000 )) # tenths of a second
    cpu=$(cpu_seconds "$cpufile")
    printf '%d.%d\t%s\t%s\n' $((t / 10)) $((t % 10)) "$cpu" "$line"
  done >"$out/log" || follow=$?
  if [ "$follow" -ne 0 ]; then
    echo "fresh-machine: stopped after 20 minutes ($follow)" >&2
    docker kill "$name" >/dev/null 2>&1 || true
  fi
  rc=$(docker wait "$name")
  echo "$rc" >"$out/rc"
  docker cp "$name:/var/log/sandstack-dockerd.log" "$out/dockerd.log" >/dev/null 2>&1 || true
  cmd_clean_one "$name"
}

# removes one run's container, network and state (by label and our own name only)
cmd_clean_one() {
  local name=$1 ids
  case "$name" in sandstack-fresh-[0-9a-f]*) ;; *) return 2 ;; esac
  mapfile -t ids < <(docker ps -aq --filter "label=$label" --filter "name=^/$name\$")
  [ ${#ids[@]} -eq 0 ] || docker rm -f "${ids[@]}" >/dev/null
  mapfile -t ids < <(docker network ls -q --filter "label=$label" --filter "name=^$name\$")
  [ ${#ids[@]} -eq 0 ] || docker network rm "${ids[@]}" >/dev/null
  # the nested engine's mounts died with the container's mount namespace
  rm -rf "${state_root:?}/$name"
}

cmd_clean() {
  local ids n
  mapfile -t ids < <(docker ps -aq --filter "label=$label")
  [ ${#ids[@]} -eq 0 ] || docker rm -f "${ids[@]}" >/dev/null
  mapfile -t ids < <(docker network ls -q --filter "label=$label")
  [ ${#ids[@]} -eq 0 ] || docker network rm "${ids[@]}" >/dev/null
  for n in "$state_root"/sandstack-fresh-*; do [ -d "$n" ] && rm -rf "$n"; done
  return 0
}

case "${1:-}" in
  base) cmd_base ;;
  run) cmd_run "${2:?output directory}" "${3:-HEAD}" ;;
  clean-one) cmd_clean_one "${2:?name}" ;;
  clean) cmd_clean ;;
  *) echo "usage: $0 base | run DIR [REV] | clean-one NAME | clean" >&2; exit 2 ;;
esac
