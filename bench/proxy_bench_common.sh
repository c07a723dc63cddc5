# shellcheck shell=bash
# shellcheck disable=SC2154 # $top is set by the bench that sources this file
# Sourced by the bench/proxy_*_bench.sh: the proxy binary check, the two network namespaces the
# benches run in ($P holds the proxy and the clients at 198.51.100.1, $O the outside at
# 198.51.100.30) with their cleanup on exit, and the writing of the run to docs/results/.

# bench_proxy BUILD_DIR: sets $proxy to the build's sandstack-proxy, or exits
bench_proxy() {
  proxy="$top/$1/sandstack-proxy"
  [ -x "$proxy" ] || { echo "no $proxy: build the sandstack-proxy target" >&2; exit 1; }
}

# bench_netns NS_PREFIX VETH_PREFIX WORK_TEMPLATE: sets $P, $O and $work, creates the namespaces
# joined by a veth pair and arranges for everything to be removed on exit
bench_netns() {
  local sfx
  sfx=$(head -c3 /dev/urandom | od -An -tx1 | tr -d ' \n')
  P=$1p$sfx O=$1o$sfx
  work=$(mktemp -d "$3")
  trap bench_cleanup EXIT
  ip netns add "$P" && ip netns add "$O"
  ip link add "$2c$sfx" netns "$P" type veth peer name "$2d$sfx" netns "$O"
  ip netns exec "$P" sh -c "ip addr add 198.51.100.1/24 dev $2c$sfx && ip link set $2c$sfx up && ip link set lo up"
  ip netns exec "$O" sh -c "ip addr add 198.51.100.30/24 dev $2d$sfx && ip link set $2d$sfx up && ip link set lo up"
  mkdir -p "/etc/netns/$P"
}

# the stand-ins run in the namespaces: end exactly the processes in them, by pid
bench_cleanup() {
  for ns in $P $O; do for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "/etc/netns/$P" "$work" "${results_out:-}"
}

# bench_standin CERT KEY: spec/support/proxy_standin.py in $O, waited for
bench_standin() {
  ip netns exec "$O" setsid python3 "$top/spec/support/proxy_standin.py" "$1" "$2" "$work" </dev/null >/dev/null 2>&1 &
  for _ in $(seq 100); do [ -f "$work/standin.ready" ] && break; sleep 0.05; done
}

# bench_results_begin ARGS...: notes the load and the command line, and from here on keeps a copy
# of everything the bench prints on stdout (a tee), for bench_results_end
bench_results_begin() {
  results_load=$(cut -d' ' -f1-3 /proc/loadavg)
  results_command="bash bench/$(basename "$0")${*:+ $*}"
  results_out=$(mktemp /tmp/bench-results.XXXXXX)
  exec 3>&1 > >(tee "$results_out")
  results_tee=$!
}

# bench_results_end NAME TITLE [LINES]: stops the copy and makes it docs/results/NAME.md (or,
# with BENCH_SECTION set, that section of it) through bench/write_results.lua (the Lua benches'
# writer): date, machine, load before and after, commit, command line. LINES (an extended regular
# expression) keeps only the lines it matches on the page: the runs and the goals, since docs/
# has a size budget. These benches run on network namespaces of this host, no engine.
bench_results_end() {
  exec 1>&3 3>&-
  # the tee ends once every writer of its pipe has closed it; a stand-in holding it is not waited for
  for _ in $(seq 50); do kill -0 "$results_tee" 2>/dev/null || break; sleep 0.1; done
  (cd "$top" && { grep -E "${3:-^}" "$results_out" || true; } | BENCH_LOAD_BEFORE=$results_load BENCH_COMMAND=$results_command \
    BENCH_ENGINE="no engine: network namespaces, kernel $(uname -r)" \
    lua5.4 bench/write_results.lua "$1" "$2")
  rm -f "$results_out"
}
