#!/usr/bin/env bash
# Keep-alive clients through an inspected CONNECT tunnel against the same clients through a
# plain tunnel, in one run: each client opens one tunnel and sends REQUESTS small GETs
# on it, one after another, each answer read whole before the next request. Both tunnels reach
# the same keep-alive origin (spec/support/keepalive_origin.py, test CA): "api.test" has method
# and path rules, so the proxy terminates TLS, frames every answer and checks every request;
# "tunnel.test" has none, so the bytes are relayed as they are. ROUNDS interleaved runs, each
# printed with both request rates, their ratio and the load average; then the best of each and a
# goal line (inspected/tunnel >= 0.80), which become the "keepalive" section of
# docs/results/proxy.md. bench/proxy_bench.sh runs it after its own lines.
#   bash bench/proxy_keepalive_bench.sh [BUILD_DIR] [REQUESTS]  (root; default build, 10000)
#   (10000 requests make a run about a second: with 2000, a run's ratio swung 0.52-1.14 with the
#   neighbours' noise; with 10000 it stayed 0.90-1.07 on the same machine)
#   ROUNDS (default 3), CLIENTS (parallel keep-alive connections per mode, default 4)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
n=${2:-10000}
. "$top/bench/proxy_bench_common.sh"
bench_proxy "$build"
bench_netns sskb sskb /tmp/sskb-bench.XXXXXX
bench_results_begin "$@"
printf '127.0.0.1 localhost\n198.51.100.30 api.test tunnel.test\n' >"/etc/netns/$P/hosts"
(cd "$work" && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=sskb-bench-ca >/dev/null 2>&1 \
  && openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=api.test >/dev/null 2>&1 \
  && printf 'subjectAltName=DNS:api.test,DNS:tunnel.test\n' >ext \
  && openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 1 -extfile ext >/dev/null 2>&1)
ip netns exec "$O" setsid python3 "$top/spec/support/keepalive_origin.py" "$work/srv.pem" "$work/srv.key" "$work" 443 \
  </dev/null >/dev/null 2>&1 &
for _ in $(seq 100); do [ -f "$work/origin.ready" ] && break; sleep 0.05; done
mkdir -p "$work/ca"
token=bench-token-0123456789abcdef
policy='{"allow":[{"host":"api.test","methods":["GET"],"paths":["/v1/*"]},"tunnel.test:443"]}'
ip netns exec "$P" setsid env SANDSTACK_SESSION_TOKEN=$token ANTHROPIC_API_KEY=unused SANDSTACK_UPSTREAM=http://api.test \
  SANDSTACK_EGRESS_POLICY="$policy" SANDSTACK_UPSTREAM_CA="$(cat "$work/ca.pem")" SANDSTACK_CA_DIR="$work/ca" \
  SANDSTACK_CA_ROOTS="$work/ca.pem" "$proxy" --listen 198.51.100.1 --port 3128 </dev/null >"$work/proxy.out" 2>&1 &
disown -a # the cleanup kills them; no job-control notices
for _ in $(seq 100); do grep -q listening "$work/proxy.out" 2>/dev/null && break; sleep 0.05; done
grep -q '"inspect":true' "$work/proxy.out" || { echo "the proxy did not start with inspection" >&2; cat "$work/proxy.out" >&2; exit 1; }
pid=$(pgrep -f -n "^$proxy --listen 198.51.100.1 --port 3128")
ip netns exec "$P" env ROUNDS="${ROUNDS:-3}" CLIENTS="${CLIENTS:-4}" PYTHONPATH="$top/bench" PYTHONDONTWRITEBYTECODE=1 \
  python3 - "$n" "$token" "$work/ca/bundle.pem" "$pid" <<'PY'
import os, socket, ssl, sys, threading, time
from proxy_bench_common import cpu_seconds, open_tunnel, proxy_auth
n, token, bundle, pid = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
rounds, clients = int(os.environ["ROUNDS"]), int(os.environ["CLIENTS"])
auth = proxy_auth(token)
ctx = ssl.create_default_context(cafile=bundle)

def client(host, count, out):
    s = socket.create_connection(("198.51.100.1", 3128))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    open_tunnel(s, host + ":443", auth)
    t = ctx.wrap_socket(s, server_hostname=host)
    req = ("GET /v1/x HTTP/1.1\r\nHost: %s\r\n\r\n" % host).encode()
    buf = b""
    for _ in range(count):
        t.sendall(req)
        while b"\r\n\r\n" not in buf:
            buf += t.recv(65536)
        head, _, buf = buf.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(buf) < length:
            buf += t.recv(65536)
        buf = buf[length:]
    t.close()
    out.append(count)

def rate(host):
    """requests/s of CLIENTS keep-alive connections sending n requests between them"""
    done, threads = [], []
    t0 = time.perf_counter()
    for _ in range(clients):
        threads.append(threading.Thread(target=client, args=(host, n // clients, done)))
        threads[-1].start()
    for th in threads:
        th.join()
    assert len(done) == clients, "a client failed"
    return sum(done) / (time.perf_counter() - t0)

client("api.test", 20, [])  # warm-up: the leaf is signed and cached
client("tunnel.test", 20, [])
best = {"inspected": 0.0, "tunnel": 0.0}
# CPU time per request, the proxy's and these clients' (TLS on both, the same in both modes): it
# says what each mode costs whatever the neighbours do, where the rates share their noise
cpu = {"inspected": [0.0, 0.0], "tunnel": [0.0, 0.0]}
print("keep-alive requests, %d per run over %d connections, %d interleaved runs:" % (n, clients, rounds))
for i in range(rounds):
    got = {}
    for mode, host in (("tunnel", "tunnel.test"), ("inspected", "api.test")):
        p0, c0 = cpu_seconds(pid), sum(os.times()[:2])
        got[mode] = rate(host)
        cpu[mode][0] += cpu_seconds(pid) - p0
        cpu[mode][1] += sum(os.times()[:2]) - c0
        best[mode] = max(best[mode], got[mode])
    print("  run %d (load %.2f): tunnel %.0f, inspected %.0f req/s; inspected/tunnel %.2f"
          % (i + 1, os.getloadavg()[0], got["tunnel"], got["inspected"], got["inspected"] / got["tunnel"]))
ratio = best["inspected"] / best["tunnel"]
per = {m: [1e6 * x / (n * rounds) for x in v] for m, v in cpu.items()}
print("  cpu per request, proxy / clients: tunnel %.0f / %.0f us, inspected %.0f / %.0f us"
      % (per["tunnel"][0], per["tunnel"][1], per["inspected"][0], per["inspected"][1]))
print("  best of %d: plain tunnel %.0f, inspected %.0f req/s" % (rounds, best["tunnel"], best["inspected"]))
print("  goal %s: inspected/tunnel keep-alive request rate %.3f, best of %d (goal >= 0.80)"
      % ("met" if ratio >= 0.8 else "NOT met", ratio, rounds))
PY
lines=$(grep -c '"route":"inspect"' "$work/proxy.out" || true)
echo "  inspected audit lines: $lines (one per request)"
BENCH_SECTION=keepalive bench_results_end proxy "Keep-alive requests" '^(  run|  cpu|  goal)' 
