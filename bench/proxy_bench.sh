#!/usr/bin/env bash
# sandstack-proxy against a direct connection and a socat relay, in one run (ratios are the
# result; absolute numbers depend on the machine). Two network namespaces joined by a veth pair,
# as in spec/proxy_core_spec.lua; the outside runs spec/support/proxy_standin.py.
#   bash bench/proxy_bench.sh [BUILD_DIR] [MIB]     (root; BUILD_DIR default build, MIB default 1024)
# Prints: CONNECT throughput (proxy/direct, socat/direct), time to first byte and per-request
# latency p50/p99 for small plain-HTTP requests (proxy vs direct vs socat), RSS per idle tunnel.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
mib=${2:-1024}
proxy="$top/$build/sandstack-proxy"
[ -x "$proxy" ] || { echo "no $proxy: build the sandstack-proxy target" >&2; exit 1; }
sfx=$(head -c3 /dev/urandom | od -An -tx1 | tr -d ' \n')
P=ssh2bp$sfx O=ssh2bo$sfx
work=$(mktemp -d /tmp/ssh2-bench.XXXXXX)
cleanup() {
  for ns in $P $O; do for p in $(ip netns pids $ns 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del $ns 2>/dev/null || true; done
  rm -rf "/etc/netns/$P" "$work"
}
trap cleanup EXIT
ip netns add $P && ip netns add $O
ip link add ssh2c$sfx netns $P type veth peer name ssh2d$sfx netns $O
ip netns exec $P sh -c "ip addr add 198.51.100.1/24 dev ssh2c$sfx && ip link set ssh2c$sfx up && ip link set lo up"
ip netns exec $O sh -c "ip addr add 198.51.100.30/24 dev ssh2d$sfx && ip link set ssh2d$sfx up && ip link set lo up"
mkdir -p /etc/netns/$P && printf '127.0.0.1 localhost\n198.51.100.30 outside.test\n' >/etc/netns/$P/hosts
(cd "$work" && openssl req -x509 -newkey rsa:2048 -nodes -keyout k -out c -days 1 -subj /CN=outside.test >/dev/null 2>&1)
ip netns exec $O setsid python3 "$top/spec/support/proxy_standin.py" "$work/c" "$work/k" "$work" </dev/null >/dev/null 2>&1 &
for _ in $(seq 100); do [ -f "$work/standin.ready" ] && break; sleep 0.05; done
token=bench-token-0123456789abcdef
ip netns exec $P setsid env SANDSTACK_SESSION_TOKEN=$token ANTHROPIC_API_KEY=unused SANDSTACK_UPSTREAM=http://outside.test \
  SANDSTACK_EGRESS_POLICY='{"allow":["198.51.100.30","outside.test"]}' "$proxy" --listen 198.51.100.1 --port 3128 \
  </dev/null >"$work/proxy.out" 2>&1 &
# the baseline relay: socat in the same namespace, one process per connection
ip netns exec $P setsid socat TCP-LISTEN:4004,bind=198.51.100.1,fork,reuseaddr TCP:198.51.100.30:9004 </dev/null >/dev/null 2>&1 &
ip netns exec $P setsid socat TCP-LISTEN:4080,bind=198.51.100.1,fork,reuseaddr TCP:198.51.100.30:80 </dev/null >/dev/null 2>&1 &
for _ in $(seq 100); do grep -q listening "$work/proxy.out" 2>/dev/null && break; sleep 0.05; done
sleep 0.3
pid=$(pgrep -f -n "^$proxy --listen 198.51.100.1 --port 3128" || true)
ip netns exec $P python3 - "$mib" "$token" "$pid" <<'PY'
import base64, socket, statistics, sys, time
mib, token, pid = int(sys.argv[1]), sys.argv[2], sys.argv[3]
auth = "Proxy-Authorization: Basic " + base64.b64encode(("b:" + token).encode()).decode() + "\r\n"
N = mib * 1024 * 1024

def rss():
    return int([l for l in open("/proc/%s/status" % pid) if l.startswith("VmRSS")][0].split()[1])

def tunnel(target):
    s = socket.create_connection(("198.51.100.1", 3128))
    s.sendall(("CONNECT %s HTTP/1.1\r\n%s\r\n" % (target, auth)).encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += s.recv(1)
    assert b" 200 " in head, head
    return s

def pull(s):
    t0 = time.time()
    s.sendall(b"%d\n" % N)
    got = 0
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        got += len(d)
    dt = time.time() - t0
    assert got == N, got
    return N / dt / 1e6

def best(f, k=2):
    return max(f() for _ in range(k))

direct = best(lambda: pull(socket.create_connection(("198.51.100.30", 9004))))
viaproxy = best(lambda: pull(tunnel("198.51.100.30:9004")))
viasocat = best(lambda: pull(socket.create_connection(("198.51.100.1", 4004))))
print("CONNECT throughput, %d MiB: direct %.0f MB/s, proxy %.0f MB/s, socat %.0f MB/s" % (mib, direct, viaproxy, viasocat))
print("  ratio proxy/direct %.2f   socat/direct %.2f   proxy/socat %.2f" % (viaproxy / direct, viasocat / direct, viaproxy / viasocat))

def small(host, port, target, extra=""):
    t0 = time.time()
    s = socket.create_connection((host, port))
    s.sendall(("GET %s HTTP/1.1\r\nHost: outside.test\r\n%s\r\n" % (target, extra)).encode())
    first = s.recv(65536)
    tf = time.time()
    while s.recv(65536):
        pass
    s.close()
    return tf - t0

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] * 1000

R = 400
for name, fn in (("direct", lambda: small("198.51.100.30", 80, "/x")),
                 ("proxy", lambda: small("198.51.100.1", 3128, "http://outside.test/x", auth)),
                 ("socat", lambda: small("198.51.100.1", 4080, "/x"))):
    for _ in range(20):
        fn()
    xs = [fn() for _ in range(R)]
    globals()["lat_" + name] = xs
    print("small request, time to first byte (%d): %-6s p50 %.3f ms  p99 %.3f ms" % (R, name, pct(xs, .5), pct(xs, .99)))
print("  added by the proxy: p50 %+.3f ms, p99 %+.3f ms; ratio p50 proxy/direct %.2f, proxy/socat %.2f" % (
    pct(lat_proxy, .5) - pct(lat_direct, .5), pct(lat_proxy, .99) - pct(lat_direct, .99),
    pct(lat_proxy, .5) / pct(lat_direct, .5), pct(lat_proxy, .5) / pct(lat_socat, .5)))

before = rss()
held = [tunnel("198.51.100.30:9002") for _ in range(500)]
for s in held:
    s.recv(16)
after = rss()
print("RSS per idle tunnel: %.1f KiB (500 tunnels, %d -> %d KiB)" % ((after - before) / 500, before, after))
for s in held:
    s.close()
PY
