#!/usr/bin/env bash
# sandstack-proxy against a direct connection and a socat relay, in one run (ratios are the
# result; absolute numbers depend on the machine). Two network namespaces joined by a veth pair,
# as in spec/proxy_core_spec.lua; the outside runs spec/support/proxy_standin.py.
#   bash bench/proxy_bench.sh [BUILD_DIR] [MIB]     (root; BUILD_DIR default build, MIB default 1024)
# Prints: CONNECT throughput between the two ends in bench/bulk_transfer.c (built here with cc)
# directly, through the proxy, through the proxy with the host's congestion control toward the
# client (SANDSTACK_PROXY_CLIENT_CONGESTION=host, a second proxy) and through socat: each of REPS
# interleaved runs, default 3, with its load average and ratios, then the best of each path, the
# relay the proxy used and a goal line (proxy/direct >= 0.8); time to first byte and per-request latency p50/p99 for small plain-HTTP
# requests (proxy vs direct vs socat), the same against the nginx example proxy
# (examples/egress-proxy; needs Debian's nginx and its Lua module and a LuaJIT core.so,
# SANDSTACK_CORE_SO, default build-luajit's), RSS and fds per idle tunnel (a goal line: <= 12 KiB).
#   SMALL_N (default 2000): requests per path in the nginx comparison; BENCH_NS: namespace prefix;
#   KEEPALIVE=0 leaves out bench/proxy_keepalive_bench.sh, which runs last otherwise
# The runs and the goal lines become the "connect" section of docs/results/proxy.md.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
mib=${2:-1024}
. "$top/bench/proxy_bench_common.sh"
bench_proxy "$build"
bench_netns "${BENCH_NS:-ssh2b}" ssh2 /tmp/ssh2-bench.XXXXXX
bench_results_begin "$@"
printf '127.0.0.1 localhost\n198.51.100.30 outside.test\n' >"/etc/netns/$P/hosts"
(cd "$work" && openssl req -x509 -newkey rsa:2048 -nodes -keyout k -out c -days 1 -subj /CN=outside.test >/dev/null 2>&1)
bench_standin "$work/c" "$work/k"
token=bench-token-0123456789abcdef
# raw rules for the peers the tunnels reach (source, hold): a tunnel elsewhere must start with TLS
policy='{"allow":["198.51.100.30","outside.test",{"host":"198.51.100.30","port":9002,"raw":true},{"host":"198.51.100.30","port":9005,"raw":true}]}'
ip netns exec "$P" setsid env SANDSTACK_SESSION_TOKEN=$token ANTHROPIC_API_KEY=unused SANDSTACK_UPSTREAM=http://outside.test \
  SANDSTACK_EGRESS_POLICY="$policy" "$proxy" --listen 198.51.100.1 --port 3128 \
  </dev/null >"$work/proxy.out" 2>&1 &
ip netns exec "$P" setsid env SANDSTACK_SESSION_TOKEN=$token ANTHROPIC_API_KEY=unused SANDSTACK_UPSTREAM=http://outside.test \
  SANDSTACK_EGRESS_POLICY="$policy" SANDSTACK_PROXY_CLIENT_CONGESTION=host "$proxy" --listen 198.51.100.1 --port 3129 \
  </dev/null >"$work/proxy-hostcc.out" 2>&1 &
# the throughput runs' ends: the sender outside, the client in $P
cc -O2 -Wall -Wextra -Werror -o "$work/bulk_transfer" "$top/bench/bulk_transfer.c"
ip netns exec "$O" setsid "$work/bulk_transfer" serve 198.51.100.30 9005 </dev/null >"$work/bulk.out" 2>&1 &
for _ in $(seq 100); do grep -q listening "$work/bulk.out" 2>/dev/null && break; sleep 0.05; done
# the baseline relay: socat in the same namespace, one process per connection
ip netns exec "$P" setsid socat TCP-LISTEN:4004,bind=198.51.100.1,fork,reuseaddr TCP:198.51.100.30:9005 </dev/null >/dev/null 2>&1 &
ip netns exec "$P" setsid socat TCP-LISTEN:4080,bind=198.51.100.1,fork,reuseaddr TCP:198.51.100.30:80 </dev/null >/dev/null 2>&1 &
# The nginx example proxy as its image runs it: the host's nginx and Lua module (the image copies
# exactly these), the example's nginx.conf.in and Lua, sandstack's LuaJIT core, uid 1000; here in
# the same namespace as sandstack-proxy, with the same token and the same policy JSON.
core=${SANDSTACK_CORE_SO:-$top/build-luajit/sandstack/core.so}
nginx_port=0
if [ -x /usr/sbin/nginx ] && [ -f /usr/lib/nginx/modules/ngx_http_lua_module.so ] && [ -f "$core" ]; then
  ex=$top/examples/egress-proxy ng=$work/nginx
  mkdir -p "$ng/lib/sandstack" && cp "$core" "$ng/lib/sandstack/core.so"
  # targets are address literals, so the resolver is never asked
  sed -e "s/@RESOLVER@/127.0.0.1/" -e "s/@PORT@/8080/" -e "s#/tmp/#$ng/#" -e "s#/etc/sandstack-proxy/#$ex/#" \
    -e "s#/usr/local/lib/lua/5.1/#$ng/lib/#" "$ex/nginx.conf.in" >"$ng/nginx.conf"
  touch "$ng/out" && chown -R 1000:1000 "$ng" && chmod 711 "$work"   # nginx reopens /dev/stdout as uid 1000
  ip netns exec "$P" setsid env SANDSTACK_SESSION_TOKEN=$token ANTHROPIC_API_KEY=unused SANDSTACK_UPSTREAM=http://outside.test \
    SANDSTACK_EGRESS_POLICY="$policy" \
    setpriv --reuid 1000 --regid 1000 --clear-groups /usr/sbin/nginx -p "$ng/" -c "$ng/nginx.conf" -e stderr \
    </dev/null >>"$ng/out" 2>&1 &
  for _ in $(seq 100); do ip netns exec "$P" bash -c 'exec 3<>/dev/tcp/198.51.100.1/8080' 2>/dev/null && nginx_port=8080 && break
    sleep 0.05; done
  [ "$nginx_port" != 0 ] || { echo "the nginx example proxy did not start:" >&2; cat "$ng/out" >&2; }
else
  echo "no nginx with its Lua module, or no $core: the nginx example comparison is skipped" >&2
fi
for _ in $(seq 100); do grep -q listening "$work/proxy.out" 2>/dev/null && grep -q listening "$work/proxy-hostcc.out" 2>/dev/null && break
  sleep 0.05; done
sleep 0.3
pid=$(pgrep -f -n "^$proxy --listen 198.51.100.1 --port 3128" || true)
ip netns exec "$P" env SMALL_N="${SMALL_N:-2000}" REPS="${REPS:-3}" PROXY_OUT="$work/proxy.out" BULK="$work/bulk_transfer" PYTHONPATH="$top/bench" PYTHONDONTWRITEBYTECODE=1 python3 - "$mib" "$token" "$pid" "$nginx_port" <<'PY'
import json, os, socket, statistics, subprocess, sys, time
from proxy_bench_common import cpu_seconds, open_tunnel, proxy_auth, read_to_close
mib, token, pid, nginx_port = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
auth = proxy_auth(token)
N = mib * 1024 * 1024

def rss():
    return int([l for l in open("/proc/%s/status" % pid) if l.startswith("VmRSS")][0].split()[1])

def tunnel(target):
    s = socket.create_connection(("198.51.100.1", 3128))
    open_tunnel(s, target, auth)
    return s

# One transfer of N bytes from the C sender outside, read by the C client: through a proxy port
# (CONNECT) or straight to host:port. MB/s.
def pull(host, port, proxy_port=None):
    args = [os.environ["BULK"], "pull", host, str(port), str(N)]
    if proxy_port:
        args += ["198.51.100.1", str(proxy_port), auth.rstrip("\r\n")]
    return float(subprocess.run(args, check=True, capture_output=True, text=True).stdout)

def congestion():
    return open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()

def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])

def relay_of_last_tunnel():
    lines = [l for l in open(os.environ["PROXY_OUT"]) if '"kind":"connect"' in l]
    return json.loads(lines[-1]).get("relay", "uv (no relay field)") if lines else "?"

# The three paths take turns, REPS rounds, and each keeps its best: they share the machine's noise
# (on a loaded machine a single round says more about the neighbours than about the relay).
reps = int(os.environ.get("REPS", "3"))
rounds = {"direct": [], "proxy": [], "hostcc": [], "socat": []}
loads = []
proxy_cpu = 0.0  # the proxy's CPU time relaying, which the neighbours do not change as they do the rates
for _ in range(reps):
    rounds["direct"].append(pull("198.51.100.30", 9005))
    c0 = cpu_seconds(pid)
    rounds["proxy"].append(pull("198.51.100.30", 9005, 3128))
    proxy_cpu += cpu_seconds(pid) - c0
    rounds["hostcc"].append(pull("198.51.100.30", 9005, 3129))
    rounds["socat"].append(pull("198.51.100.1", 4004))
    loads.append(load().split()[0])
direct, viaproxy, hostcc, viasocat = (max(rounds[k]) for k in ("direct", "proxy", "hostcc", "socat"))
print("CONNECT throughput, %d MiB, %d interleaved runs (the proxy's relay: %s; the host's congestion control: %s):"
      % (mib, reps, relay_of_last_tunnel(), congestion()))
for i in range(reps):
    d, p, c, s = rounds["direct"][i], rounds["proxy"][i], rounds["hostcc"][i], rounds["socat"][i]
    print("  run %d (load %s): direct %.0f, proxy %.0f, socat %.0f MB/s; proxy/direct %.2f (host's control toward the client: %.2f)"
          % (i + 1, loads[i], d, p, s, p / d, c / d))
print("  best of %d: direct %.0f, proxy %.0f (host's control %.0f), socat %.0f MB/s; proxy/direct %.2f (%.2f),"
      " socat/direct %.2f, proxy/socat %.2f"
      % (reps, direct, viaproxy, hostcc, viasocat, viaproxy / direct, hostcc / direct, viasocat / direct, viaproxy / viasocat))
print("  cpu: the proxy %.2f s per GiB relayed; the host's congestion control: %s"
      % (proxy_cpu / (reps * mib / 1024.0), congestion()))
print("  goal %s: CONNECT throughput proxy/direct %.3f, best of %d (goal >= 0.80)"
      % ("met" if viaproxy / direct >= 0.8 else "NOT met", viaproxy / direct, reps))

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

# The nginx example proxy against sandstack-proxy and direct: the same absolute-form GET (an
# address literal, so neither proxy resolves; one policy rule admits it in both), the same client
# and token header (Bearer, which both accept), the same stand-in. Each request is connect, send,
# whole answer (the stand-in closes); the three paths take turns, so they share the noise.
def whole(port, target, host="198.51.100.1", extra=""):
    t0 = time.perf_counter()
    s = socket.create_connection((host, port))
    s.sendall(("GET %s HTTP/1.1\r\nHost: 198.51.100.30\r\nConnection: close\r\n%s\r\n" % (target, extra)).encode())
    got = read_to_close(s)
    dt = time.perf_counter() - t0
    s.close()
    assert got.startswith(b"HTTP/1.1 200") and b'"path": "/x"' in got, got[:300]
    return dt

if nginx_port:
    bearer = "Proxy-Authorization: Bearer %s\r\n" % token
    paths = (("direct", lambda: whole(80, "/x", "198.51.100.30")),
             ("sandstack-proxy", lambda: whole(3128, "http://198.51.100.30/x", extra=bearer)),
             ("nginx example", lambda: whole(nginx_port, "http://198.51.100.30/x", extra=bearer)))
    for port in (3128, nginx_port):  # the policy is live in both: a host outside it is refused
        s = socket.create_connection(("198.51.100.1", port))
        s.sendall(("GET http://203.0.113.9/x HTTP/1.1\r\nHost: 203.0.113.9\r\nConnection: close\r\n%s\r\n" % bearer).encode())
        assert s.recv(65536).startswith(b"HTTP/1.1 403"), port
        s.close()
    for _ in range(50):
        for _, fn in paths:
            fn()
    n = int(os.environ["SMALL_N"])
    lat = {name: [] for name, _ in paths}
    for i in range(n):
        for k in range(3):
            name, fn = paths[(i + k) % 3]
            lat[name].append(fn())
    print("small plain-HTTP request through each proxy, whole answer, %d each, interleaved:" % n)
    for name, _ in paths:
        added = "" if name == "direct" else "   added p50 %+.3f ms, p99 %+.3f ms" % (
            pct(lat[name], .5) - pct(lat["direct"], .5), pct(lat[name], .99) - pct(lat["direct"], .99))
        print("  %-16s p50 %.3f ms  p99 %.3f ms%s" % (name, pct(lat[name], .5), pct(lat[name], .99), added))
    for p, label in ((.5, "p50"), (.99, "p99")):
        d, s_, g = pct(lat["direct"], p), pct(lat["sandstack-proxy"], p), pct(lat["nginx example"], p)
        print("  %s ratios: sandstack-proxy/direct %.2f   nginx/direct %.2f   sandstack-proxy/nginx %.2f"
              "   added sandstack-proxy/nginx %.2f" % (label, s_ / d, g / d, s_ / g, (s_ - d) / (g - d)))

def fds():
    return len(os.listdir("/proc/%s/fd" % pid))

before, fds_before = rss(), fds()
held = [tunnel("198.51.100.30:9002") for _ in range(500)]
for s in held:
    s.recv(16)
after, fds_after = rss(), fds()
for s in held:
    s.close()
time.sleep(1)  # their audit lines are written as the proxy closes them
per = (after - before) / 500
print("RSS per idle tunnel: %.1f KiB (500 tunnels, %d -> %d KiB); fds per idle tunnel %.1f (relay: %s)"
      % (per, before, after, (fds_after - fds_before) / 500, relay_of_last_tunnel()))
print("  goal %s: idle-tunnel memory %.1f KiB (goal <= 12 KiB)" % ("met" if per <= 12 else "NOT met", per))
PY
BENCH_SECTION=connect bench_results_end proxy "CONNECT throughput" '^(  run|  cpu|  goal .*CONNECT)' 
# The keep-alive request rate through an inspected tunnel against a plain one, with its
# own namespaces, proxy and origin: bench/proxy_keepalive_bench.sh.
[ "${KEEPALIVE:-1}" = 0 ] || bash "$top/bench/proxy_keepalive_bench.sh" "$build"
