#!/usr/bin/env bash
# Keep-alive clients through an inspected CONNECT tunnel against the same clients through a
# plain tunnel, in one run: each client opens one tunnel and sends REQUESTS small GETs
# on it, one after another, each answer read whole before the next request. Both tunnels reach
# the same keep-alive origin (spec/support/keepalive_origin.py, test CA): "api.test" has method
# and path rules, so the proxy terminates TLS, frames every answer and checks every request;
# "tunnel.test" has none, so the bytes are relayed as they are. Best of ROUNDS interleaved
# rounds. Prints both request rates, their ratio, the load average and a goal line
# (inspected/tunnel >= 0.80). bench/proxy_bench.sh runs it after its own lines.
#   bash bench/proxy_keepalive_bench.sh [BUILD_DIR] [REQUESTS]  (root; default build, 2000)
#   ROUNDS (default 3), CLIENTS (parallel keep-alive connections per mode, default 4)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
n=${2:-2000}
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
ip netns exec "$P" env ROUNDS="${ROUNDS:-3}" CLIENTS="${CLIENTS:-4}" PYTHONPATH="$top/bench" PYTHONDONTWRITEBYTECODE=1 \
  python3 - "$n" "$token" "$work/ca/bundle.pem" <<'PY'
import os, socket, ssl, sys, threading, time
from proxy_bench_common import open_tunnel, proxy_auth
n, token, bundle = int(sys.argv[1]), sys.argv[2], sys.argv[3]
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

load0 = os.getloadavg()[0]
client("api.test", 20, [])  # warm-up: the leaf is signed and cached
client("tunnel.test", 20, [])
best = {"inspected": 0.0, "tunnel": 0.0}
rows = []
for _ in range(rounds):
    for mode, host in (("tunnel", "tunnel.test"), ("inspected", "api.test")):
        r = rate(host)
        rows.append("%s %.0f" % (mode, r))
        best[mode] = max(best[mode], r)
load1 = os.getloadavg()[0]
ratio = best["inspected"] / best["tunnel"]
print("keep-alive requests, %d per round over %d connections, best of %d interleaved rounds (load average %.2f -> %.2f):"
      % (n, clients, rounds, load0, load1))
print("  plain tunnel %.0f req/s, inspected %.0f req/s (rounds: %s)" % (best["tunnel"], best["inspected"], "; ".join(rows)))
print("  goal %s: inspected/tunnel keep-alive request rate %.2f (goal >= 0.80)" % ("met" if ratio >= 0.8 else "NOT met", ratio))
PY
lines=$(grep -c '"route":"inspect"' "$work/proxy.out" || true)
echo "  inspected audit lines: $lines (one per request)"
bench_results_end proxy-keepalive "Results: keep-alive requests through an inspected tunnel against a plain one"
