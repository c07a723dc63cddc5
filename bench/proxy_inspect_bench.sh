#!/usr/bin/env bash
# TLS inspection in sandstack-proxy against a plain CONNECT tunnel and a direct TLS
# connection, in one run (ratios are the result; absolute numbers depend on the machine and on
# the Python stand-in, which is the same server for all three). Network namespaces as in
# spec/proxy_inspect_spec.lua; the outside runs spec/support/proxy_standin.py with a test CA.
#   bash bench/proxy_inspect_bench.sh [BUILD_DIR] [REQUESTS]   (root; default build-h7, 300)
# Each request is a new TCP+TLS connection with one small GET (inspected connections carry one
# request each). Prints requests/s and p50/p99 per mode, and the client-side TLS handshake
# time through the proxy with a cached leaf against a freshly signed one (a new host name under
# a wildcard rule each time).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-h7}
n=${2:-300}
. "$top/bench/proxy_bench_common.sh"
bench_proxy "$build"
bench_netns ssh7b ssh7 /tmp/ssh7-bench.XXXXXX
bench_results_begin "$@"
{ printf '127.0.0.1 localhost\n198.51.100.30 api.test tunnel.test\n'
  for i in $(seq "$n"); do printf '198.51.100.30 f%d.fresh.test\n' "$i"; done; } >"/etc/netns/$P/hosts"
(cd "$work" && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=ssh7-bench-ca >/dev/null 2>&1 \
  && openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=api.test >/dev/null 2>&1 \
  && printf 'subjectAltName=DNS:api.test,DNS:tunnel.test,DNS:*.fresh.test\n' >ext \
  && openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 1 -extfile ext >/dev/null 2>&1)
bench_standin "$work/srv.pem" "$work/srv.key"
mkdir -p "$work/ca"
token=bench-token-0123456789abcdef
policy='{"allow":[{"host":"api.test","methods":["GET"],"paths":["/v1/*"]},"tunnel.test:443",{"host":"*.fresh.test","methods":["GET"]}]}'
ip netns exec "$P" setsid env SANDSTACK_SESSION_TOKEN=$token ANTHROPIC_API_KEY=unused SANDSTACK_UPSTREAM=http://api.test \
  SANDSTACK_EGRESS_POLICY="$policy" SANDSTACK_UPSTREAM_CA="$(cat "$work/ca.pem")" SANDSTACK_CA_DIR="$work/ca" \
  SANDSTACK_CA_ROOTS="$work/ca.pem" "$proxy" --listen 198.51.100.1 --port 3128 </dev/null >"$work/proxy.out" 2>&1 &
disown -a # the cleanup kills them; no job-control notices
for _ in $(seq 100); do grep -q listening "$work/proxy.out" 2>/dev/null && break; sleep 0.05; done
grep -q '"inspect":true' "$work/proxy.out" || { echo "the proxy did not start with inspection" >&2; cat "$work/proxy.out" >&2; exit 1; }
ip netns exec "$P" env PYTHONPATH="$top/bench" PYTHONDONTWRITEBYTECODE=1 python3 - "$n" "$token" "$work/ca/bundle.pem" <<'PY'
import socket, ssl, statistics, sys, time
from proxy_bench_common import open_tunnel, proxy_auth, read_to_close
n, token, bundle = int(sys.argv[1]), sys.argv[2], sys.argv[3]
auth = proxy_auth(token)
ctx = ssl.create_default_context(cafile=bundle)

def dial(addr):
    s = socket.create_connection(addr)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as the proxy does: no Nagle stalls
    return s

def connect(target):
    s = dial(("198.51.100.1", 3128))
    open_tunnel(s, target, auth)
    return s

def request(mode, host="api.test", path="/v1/x"):
    """one new connection, one GET; returns (total seconds, handshake seconds)"""
    t0 = time.perf_counter()
    if mode == "direct":
        s = dial(("198.51.100.30", 443))
    else:
        s = connect("%s:443" % host)
    h0 = time.perf_counter()
    t = ctx.wrap_socket(s, server_hostname=host)
    h1 = time.perf_counter()
    t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, host)).encode())
    raw = read_to_close(t)
    t.close()
    assert raw.startswith(b"HTTP/1.1 200"), raw[:200]
    return time.perf_counter() - t0, h1 - h0

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]

res = {}
for mode, host in (("direct", "api.test"), ("tunnel", "tunnel.test"), ("inspected", "api.test")):
    for _ in range(10):  # warm-up (and the inspected host's leaf gets signed and cached)
        request(mode, host)
    t0 = time.perf_counter()
    lat = [request(mode, host)[0] for _ in range(n)]
    res[mode] = (n / (time.perf_counter() - t0), pct(lat, 50) * 1000, pct(lat, 99) * 1000)
    print("%-10s %7.0f req/s   p50 %6.2f ms   p99 %6.2f ms" % ((mode,) + res[mode]))
d, tu, ins = res["direct"], res["tunnel"], res["inspected"]
print("ratios: inspected/direct req/s %.2f, inspected/tunnel req/s %.2f, tunnel/direct req/s %.2f" % (ins[0] / d[0], ins[0] / tu[0], tu[0] / d[0]))
print("        p50 inspected/direct %.2f, inspected/tunnel %.2f; p99 inspected/direct %.2f, inspected/tunnel %.2f"
      % (ins[1] / d[1], ins[1] / tu[1], ins[2] / d[2], ins[2] / tu[2]))
cached, fresh = [], []
for i in range(n):  # interleaved, so drift in the machine's load hits both alike
    cached.append(request("inspected", "api.test")[1])
    fresh.append(request("inspected", "f%d.fresh.test" % (i + 1), "/")[1])
c50, f50 = statistics.median(cached) * 1000, statistics.median(fresh) * 1000
print("client TLS handshake via the proxy: cached leaf p50 %.2f ms, fresh leaf p50 %.2f ms, fresh/cached %.2f"
      % (c50, f50, f50 / c50))
PY
fresh=$(grep -c '"leaf":"fresh"' "$work/proxy.out" || true)
echo "leaves signed during the run: $fresh (expected $((n + 1)): api.test once, each fN.fresh.test once)"
bench_results_end proxy-inspect "Results: TLS inspection against a plain tunnel and a direct connection"
