#!/usr/bin/env python3
"""Socket-level clients for spec/proxy_core_spec.lua: what curl and urllib cannot show (the
proxy's raw answers, a ClientHello with a chosen SNI, slow and flooding peers, many tunnels).
Every command prints one JSON object.  proxy_client.py COMMAND PROXY_HOST PROXY_PORT ARGS..."""
import base64, http.client, json, os, resource, select, socket, ssl, sys, time

_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))


def basic(token):
    return "Basic " + base64.b64encode(("sandstack:" + token).encode()).decode()


def read_all(s, timeout=5.0, limit=1 << 20):
    s.settimeout(timeout)
    out = b""
    try:
        while len(out) < limit:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def parse_response(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1]) if lines and lines[0].startswith("HTTP/") else None
    headers = {}
    for l in lines[1:]:
        if ":" in l:
            k, v = l.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return {"status": status, "headers": headers, "body": body.decode("latin-1")}


def connect(ph, pp, target, token, extra=""):
    s = socket.create_connection((ph, pp), timeout=10)
    auth = "Proxy-Authorization: %s\r\n" % basic(token) if token else ""
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s%s\r\n" % (target, target, auth, extra)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        d = s.recv(1)
        if not d:
            break
        head += d
    return s, parse_response(head)


def cmd_raw(ph, pp, data, timeout="5"):
    s = socket.create_connection((ph, int(pp)), timeout=10)
    s.sendall(data.encode("latin-1").decode("unicode_escape").encode("latin-1"))
    print(json.dumps(parse_response(read_all(s, float(timeout)))))


def cmd_tunnel_tls(ph, pp, target, sni, cafile, token):
    s, r = connect(ph, int(pp), target, token)
    out = {"connect_status": r["status"]}
    if r["status"] == 200:
        ctx = ssl.create_default_context(cafile=cafile)
        if sni == "-":
            ctx.check_hostname = False
        try:
            t = ctx.wrap_socket(s, server_hostname=None if sni == "-" else sni)
            t.sendall(b"GET /tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            out["reply"] = parse_response(read_all(t))
            out["tls"] = "ok"
        except ssl.SSLError as e:
            out["tls"] = "error"
            out["error"] = str(e)
        except (ConnectionResetError, OSError) as e:
            out["tls"] = "error"
            out["error"] = str(e)
    print(json.dumps(out))


def cmd_tunnel_requests(ph, pp, target, sni, cafile, token, *hosts):
    """CONNECT target, TLS naming sni, then one GET /r<i> per Host given, each answer read whole
    on the same connection: {connect (its body too when refused), answers, error}"""
    s, r = connect(ph, int(pp), target, token)
    out = {"connect": r, "answers": []}
    if r["status"] != 200:
        r["body"] = read_all(s).decode("latin-1")
    else:
        try:
            t = ssl.create_default_context(cafile=cafile).wrap_socket(s, server_hostname=sni)
            for i, host in enumerate(hosts):
                t.sendall(("GET /r%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (i, host)).encode())
                resp = http.client.HTTPResponse(t)
                resp.begin()
                out["answers"].append({"status": resp.status, "body": resp.read().decode("latin-1")})
        except (ssl.SSLError, OSError, http.client.HTTPException) as e:
            out["error"] = str(e)
    print(json.dumps(out))


def cmd_tunnel_plain(ph, pp, target, token, data):
    s, r = connect(ph, int(pp), target, token)
    out = {"connect_status": r["status"], "connect": r}
    if r["status"] == 200:
        s.sendall(data.encode("latin-1").decode("unicode_escape").encode("latin-1"))
        out["reply"] = parse_response(read_all(s))
    print(json.dumps(out))


def cmd_slowloris(ph, pp, interval):
    s = socket.create_connection((ph, int(pp)), timeout=30)
    msg = b"GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nX-Slow: " + b"a" * 200
    t0, sent, closed = time.time(), 0, None
    got = b""
    s.setblocking(False)
    while time.time() - t0 < 20:
        r, _, _ = select.select([s], [], [], float(interval))
        if r:
            d = s.recv(65536)
            got += d
            if not d:
                closed = time.time() - t0
                break
        elif sent < len(msg):
            try:
                s.send(msg[sent:sent + 1])
                sent += 1
            except OSError:
                closed = time.time() - t0
                break
    print(json.dumps({"closed_after": closed, "sent": sent, "reply": parse_response(got)}))


def cmd_flood_up(ph, pp, target, token, seconds):
    s, r = connect(ph, int(pp), target, token)
    s.setblocking(False)
    chunk, sent, t0 = b"\0" * 65536, 0, time.time()
    while time.time() - t0 < float(seconds):
        _, w, _ = select.select([], [s], [], 0.2)
        if w:
            try:
                sent += s.send(chunk)
            except BlockingIOError:
                pass
    print(json.dumps({"connect_status": r["status"], "sent": sent}))


def cmd_flood_down(ph, pp, target, token, seconds):
    s, r = connect(ph, int(pp), target, token)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    time.sleep(float(seconds))  # never reads
    print(json.dumps({"connect_status": r["status"]}))


def cmd_many(ph, pp, target, token, n, hold, signal_file="-"):
    socks, ok, greeted = [], 0, 0
    for i in range(int(n)):
        try:
            s, r = connect(ph, int(pp), target, token)
        except OSError as e:
            print(json.dumps({"error": str(e), "opened": i}))
            return
        socks.append(s)
        ok += r["status"] == 200
    for s in socks:
        s.settimeout(10)
        try:
            greeted += s.recv(16) == b"hi\n"
        except OSError:
            pass
    if signal_file != "-":
        open(signal_file, "w").write("%d %d\n" % (ok, greeted))
    time.sleep(float(hold))
    alive = 0
    for s in socks:  # every tunnel still relays after the hold
        try:
            s.sendall(b"x")
            alive += 1
        except OSError:
            pass
        s.close()
    print(json.dumps({"ok": ok, "greeted": greeted, "alive": alive}))


def cmd_sse(ph, pp, token, path="/v1/stream"):
    s = socket.create_connection((ph, int(pp)), timeout=10)
    s.sendall(("GET %s HTTP/1.1\r\nHost: model\r\nx-api-key: %s\r\nAccept: text/event-stream\r\n\r\n"
               % (path, token)).encode())
    t0, raw, first = time.time(), b"", None
    s.settimeout(10)
    while True:
        d = s.recv(65536)
        if not d:
            break
        raw += d
        if first is None and b'"n": 1' in raw:
            first = time.time()
    print(json.dumps({"first_event_at": first, "end_at": time.time(), "start": t0,
                      "response": parse_response(raw)}))


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1]](*sys.argv[2:])
