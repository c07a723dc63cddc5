#!/usr/bin/env bash
# A Docker Swarm cluster on one machine, for the swarm specs (docs/scale-out.md): three
# nested engines (spec/support/nested-engine.sh, each in its own network namespace), joined by
# the host engine's bridge (an internal network of the host engine: veths into one bridge) into
# one swarm: the first is the manager, the others are workers.
#   swarm-cluster.sh up PREFIX         starts PREFIXn1..n3, prints NODE<i>_NAME/_PID/_SOCK/_IP,
#                                      MANAGER_SOCK and UP_SECONDS (shell assignments)
#   swarm-cluster.sh down PREFIX       removes every engine, network and directory named PREFIX...
#   swarm-cluster.sh stop-node PREFIX I   stops node I's dockerd (its container: the engine shuts
#                                      down as on a machine's shutdown, its containers with it)
#   swarm-cluster.sh start-node PREFIX I  starts it again (it rejoins the swarm by itself); prints
#                                      NODE<i>_PID
# Each node:
# - runs with "no-new-privileges": true in its daemon.json: Engine 20.10's API (1.41) has no
#   per-service no-new-privileges, so the node's daemon gives it (sandstack.swarm checks it);
# - holds the test images and the sandstack/* images (docker save | docker load: no registry);
# - carries the node label io.sandstack.engine=unix://<its socket>: how sandstack.swarm reaches
#   a node's own Engine API (exec, capture, the forwarder).
# Containment is nested-engine.sh's: internal host networks, no default route, a resolver on
# 127.0.0.1 where nothing listens. Swarm's own traffic (2377, 7946, VXLAN 4789) stays on the
# cluster network's bridge. Endpoints are dnsrr everywhere (the kernel has no IPVS).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state_root=${SANDSTACK_NESTED_DIR:-/var/lib/sandstack-nested}
kind=${SANDSTACK_SWARM_ENGINE:-docker20}
label=io.sandstack.test=nested-engine
nodes=3

check_prefix() {
  case "$1" in
    sstest-* | sandstack-swarm-*) ;;
    *) echo "swarm-cluster: prefix '$1' must start with sstest- or sandstack-swarm-" >&2; return 2 ;;
  esac
  case "$1" in *[!a-z0-9-]*) echo "swarm-cluster: prefix '$1' must be [a-z0-9-]+" >&2; return 2 ;; esac
}

sock_of() { echo "$state_root/$1/run/docker.sock"; }
ping_ok() { curl -sf --max-time 2 --unix-socket "$1" http://d/_ping >/dev/null 2>&1; }
pid_of() { docker inspect -f '{{.State.Pid}}' "$1"; }
ip_on() { docker inspect -f "{{with index .NetworkSettings.Networks \"$2\"}}{{.IPAddress}}{{end}}" "$1"; }

# The host engine (20.10) gives a container on an internal network a default route at every
# start; a node must have none, so nothing it or its containers send can leave this machine.
no_default_route() {
  nsenter -t "$1" -n ip route del default 2>/dev/null || true
  nsenter -t "$1" -n ip -6 route del default 2>/dev/null || true
}

wait_ready() { # wait_ready MANAGER_SOCK COUNT: every node Ready
  local i ready
  for i in $(seq 1 120); do
    ready=$(DOCKER_HOST=unix://$1 docker node ls --format '{{.Status}}' 2>/dev/null | grep -c '^Ready$' || true)
    [ "$ready" -ge "$2" ] && return 0
    sleep 0.5
  done
  echo "swarm-cluster: only $ready of $2 nodes are Ready" >&2
  DOCKER_HOST=unix://$1 docker node ls >&2 || true
  return 1
}

cmd_up() {
  local prefix=$1 t0 i name net images tar pids=() m ip msock token
  check_prefix "$prefix"
  t0=$(date +%s.%N)
  net=${prefix}net
  cmd_down "$prefix" >/dev/null 2>&1 || true
  bash "$here/nested-engine.sh" build "$kind" >&2
  # The engines in parallel (each loads the three test images itself).
  for i in $(seq 1 $nodes); do
    SANDSTACK_NESTED_DAEMON_JSON='{ "no-new-privileges": true }' \
      bash "$here/nested-engine.sh" start "${prefix}n$i" "$kind" >"$state_root/.${prefix}n$i.start" 2>&1 &
    pids+=($!)
  done
  local failed=0
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed=1; done
  for i in $(seq 1 $nodes); do
    if [ $failed = 1 ]; then cat "$state_root/.${prefix}n$i.start" >&2; fi
    rm -f "$state_root/.${prefix}n$i.start"
  done
  [ $failed = 0 ] || { echo "swarm-cluster: an engine did not start" >&2; return 1; }
  docker network create --internal --label "$label" --label "io.sandstack.nested=$net" "$net" >/dev/null
  for i in $(seq 1 $nodes); do
    name=${prefix}n$i
    docker network connect "$net" "$name"
    no_default_route "$(pid_of "$name")"
  done
  # The sandstack/* images (the default proxy and forwarder) next to the test images.
  mapfile -t images < <(docker images --format '{{.Repository}}:{{.Tag}}' 'sandstack/*')
  if [ ${#images[@]} -gt 0 ]; then
    tar=$(mktemp "$state_root/.${prefix}images.XXXXXX")
    docker save -o "$tar" "${images[@]}"
    pids=()
    for i in $(seq 1 $nodes); do
      DOCKER_HOST=unix://$(sock_of "${prefix}n$i") docker load -q -i "$tar" >/dev/null &
      pids+=($!)
    done
    for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed=1; done
    rm -f "$tar"
    [ $failed = 0 ] || { echo "swarm-cluster: loading ${images[*]} failed" >&2; return 1; }
  fi
  m=${prefix}n1
  msock=$(sock_of "$m")
  ip=$(ip_on "$m" "$net")
  DOCKER_HOST=unix://$msock docker swarm init --advertise-addr "$ip" --listen-addr "$ip:2377" \
    --data-path-addr "$ip" >/dev/null
  token=$(DOCKER_HOST=unix://$msock docker swarm join-token -q worker)
  pids=()
  for i in $(seq 2 $nodes); do
    name=${prefix}n$i
    local wip; wip=$(ip_on "$name" "$net")
    DOCKER_HOST=unix://$(sock_of "$name") docker swarm join --token "$token" --advertise-addr "$wip" \
      --listen-addr "$wip:2377" --data-path-addr "$wip" "$ip:2377" >/dev/null &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed=1; done
  [ $failed = 0 ] || { echo "swarm-cluster: a worker did not join" >&2; return 1; }
  wait_ready "$msock" $nodes
  for i in $(seq 1 $nodes); do
    name=${prefix}n$i
    DOCKER_HOST=unix://$msock docker node update --label-add "io.sandstack.engine=unix://$(sock_of "$name")" \
      "$name" >/dev/null
    printf 'NODE%d_NAME=%s\nNODE%d_PID=%s\nNODE%d_SOCK=%s\nNODE%d_IP=%s\n' "$i" "$name" "$i" "$(pid_of "$name")" \
      "$i" "$(sock_of "$name")" "$i" "$(ip_on "$name" "$net")"
  done
  printf 'MANAGER_SOCK=%s\nUP_SECONDS=%s\n' "$msock" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
}

cmd_down() {
  check_prefix "$1"
  bash "$here/nested-engine.sh" stop-prefix "$1"
  # the cluster network once its engines are gone (stop-prefix may have met it first)
  local ids
  ids=$(docker network ls -q --filter "label=$label" --filter "label=io.sandstack.nested=${1}net")
  [ -z "$ids" ] || docker network rm "$ids" >/dev/null
  rm -f "$state_root/.${1}"*
}

node_name() {
  check_prefix "$1"
  case "$2" in [1-9]) echo "${1}n$2" ;; *) echo "swarm-cluster: node index '$2'" >&2; return 2 ;; esac
}

cmd_stop_node() {
  local name; name=$(node_name "$1" "$2")
  # SIGTERM to dockerd (PID 1 of the container): it stops its containers and leaves; the grace
  # is the host engine's, 30 s, well above dockerd's own 15 s shutdown timeout.
  docker stop -t 30 "$name" >/dev/null
}

cmd_start_node() {
  local name pid sock i; name=$(node_name "$1" "$2")
  docker start "$name" >/dev/null
  pid=$(pid_of "$name")
  no_default_route "$pid"
  sock=$(sock_of "$name")
  for i in $(seq 1 120); do ping_ok "$sock" && break; sleep 0.25; done
  ping_ok "$sock" || { echo "swarm-cluster: $name did not answer after its start" >&2; return 1; }
  wait_ready "$(sock_of "${1}n1")" $nodes
  printf 'NODE%d_PID=%s\n' "$2" "$pid"
}

case "${1:-}" in
  up) cmd_up "${2:?prefix}" ;;
  down) cmd_down "${2:?prefix}" ;;
  stop-node) cmd_stop_node "${2:?prefix}" "${3:?node index}" ;;
  start-node) cmd_start_node "${2:?prefix}" "${3:?node index}" ;;
  *) echo "usage: $0 up|down PREFIX | stop-node|start-node PREFIX INDEX" >&2; exit 2 ;;
esac
