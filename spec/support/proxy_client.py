#!/usr/bin/env python3
"""The proxy specs' one client for sandstack-proxy: what curl cannot show (its raw answers, a
ClientHello or TLS records of our choosing, slow, flooding and pipelining peers, many tunnels) and
Python's own clients (urllib, http.client) as an agent runs them. Run in the proxy's network
namespace, or in a sandbox as `python3 - COMMAND ARGS... < proxy_client.py`; imported by
splice_client.py for its CONNECT. Every command prints JSON (one object, or a line per answer
where it says so). Escaped text arguments (DATA, REQUEST) use Python's string escapes (\\r\\n).

  proxy_client.py COMMAND PROXY_HOST PROXY_PORT ARGS...

Raw requests and tunnels
  raw DATA [SECONDS]          DATA as it is; the answer read until the end or SECONDS (5)
  gets TOKEN URL...           a plain-HTTP GET of each URL, a connection each: {URL: {status, body}}
  tunnel_plain TARGET TOKEN DATA      CONNECT, then DATA unencrypted: {connect_status, connect, reply}
  banner TARGET TOKEN EARLY   CONNECT (EARLY in the same packet unless "-"), read what the peer says
                              unasked, write "ping\\n", read again: {connect_status, first, then}
  slowloris INTERVAL          a request head one byte per INTERVAL: {closed_after, sent, reply}
  flood_up / flood_down TARGET TOKEN SECONDS   a sender the sink never slows / a reader that never reads
  many TARGET TOKEN N HOLD SIGNAL_FILE   N tunnels ("hi" read on each), SIGNAL_FILE "<ok> <greeted>",
                              HOLD seconds, then a byte on each: {ok, greeted, alive}
  fill TARGET TOKEN N BYTES DONE   N tunnels, each read until BYTES came; DONE holds our pid; 60 s idle
  race TOKEN HOST N STOP      GET http://HOST/a/<i> and /b/<i>, 16 at a time, until N are answered
                              and STOP exists: [{path, status, rule}]
  sse TOKEN [PATH]            the credential route's event stream: {first_event_at, end_at, start, response}
TLS through a tunnel (CAFILE: what the client trusts, "default" what SSL_CERT_FILE names; SNI "-": none)
  tunnel_tls TARGET SNI CAFILE TOKEN   one GET /tunnel: {connect_status, tls, reply | error}
  tunnel_requests TARGET SNI CAFILE TOKEN HOST...   one GET /r<i> per Host, on one connection:
                              {connect (its body when refused), answers, error}
  peek TARGET SNI CAFILE TOKEN PATH ALPN   one GET: {connect, issuer, subject, alpn, reply | error}
  alert_tls TARGET SNI CAFILE TOKEN RECORD_HEX   RECORD_HEX raw before the handshake, then GET /
  hello TARGET SNI TOKEN EXT  a hand-made TLS 1.2 ClientHello (EXT: ech, esni, none): {connect_status, answer}
  inner TARGET TOKEN CAFILE MODE REQUEST   REQUEST inside TLS, the answer read whole: {connect, reply};
                              MODE "early" adds the bytes that came in the 0.7 s after the first
  pieces TARGET TOKEN CAFILE STEP REQUEST  REQUEST inside TLS in pieces of STEP bytes, 3 ms apart
                              (STEP 0: the CONNECT's answer only): {connect (its status line), reply}
  payload TARGET CAFILE TOKEN MODE FILE    FILE's bytes inside TLS: MODE one (one record), bytes (a
                              record a byte): {reply, end}; cuts: a connection per prefix, closed
                              with close_notify: a line {cut, end} each
  split_records TARGET CAFILE TOKEN METHOD PATH SIZE MARK   head and SIZE-byte body as two TLS
                              records in one send (memory BIOs); MARK touched once sent:
                              {connect, sha, status, reply | error}
  requests CAFILE TOKEN FILE  the requests of FILE ([{target, sni, data}]), a connection each:
                              data as it is (target "-") or inside TLS after CONNECT target:
                              [{connect, status, responses, body}]
Python's own clients
  keepalive TARGET CAFILE TOKEN SECONDS FILE   http.client through one CONNECT tunnel, the
                              requests of FILE ([{method, path, headers, body}]) in turn:
                              [{status, body} | {error}]
  stdlib_tunnel HOST PORT TOKEN        http.client's CONNECT (no TLS), then GET /:
                              {status, phrase, header, body} | {error_type, error}
  urllib SECONDS METHOD URL [METHOD URL...]   (no proxy arguments: urllib takes the proxy from
                              the environment, CAFILE or SSL_CERT_FILE the trust) a line each:
                              {url, method, status, header, body} | {url, method, error_type, error}
  hold HOST SECONDS [PORT raw]  (the proxy and token from $HTTPS_PROXY) a tunnel to HOST:443, TLS
                              naming HOST, "open", then "eof <s>" when the proxy ends it or
                              "timeout"; with PORT and raw: no TLS, "open" after the peer's first line
"""
import base64, hashlib, http.client, json, os, resource, select, socket, ssl, struct, sys, threading, time
import urllib.error, urllib.parse, urllib.request

_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))


# ---- the shared pieces -------------------------------------------------------------------

def basic(token):
    return "Basic " + base64.b64encode(("sandstack:" + token).encode()).decode()


def unescape(text):
    """An argument written with Python's string escapes, as bytes."""
    return text.encode("latin-1").decode("unicode_escape").encode("latin-1")


def receive(s, seconds=None, limit=None):
    """What s sends until it ends the stream, `seconds` pass (None: the socket's own timeout) or
    `limit` bytes came: (data, end), end "eof", "limit", "timeout" or the OSError that cut it."""
    if seconds is not None:
        s.settimeout(seconds)
    out = b""
    try:
        while limit is None or len(out) < limit:
            d = s.recv(65536)
            if not d:
                return out, "eof"
            out += d
        return out, "limit"
    except socket.timeout:
        return out, "timeout"
    except OSError as e:
        return out, e


def read_all(s, timeout=5.0, limit=1 << 20):
    """receive's bytes; an error other than a reset is raised."""
    data, end = receive(s, timeout, limit)
    if isinstance(end, OSError) and not isinstance(end, ConnectionResetError):
        raise end
    return data


def read_for(s, seconds, limit=1 << 16):
    """receive's bytes, whatever ended them."""
    return receive(s, seconds, limit)[0]


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


def connect(ph, pp, target, token=None, early=b"", extra="", timeout=10):
    """A CONNECT to target (with the token as Basic unless None; extra: more header lines; early:
    bytes in the same write, before the answer). The answer's head is read byte by byte, so the
    tunnel's first bytes stay in the socket: (socket, parse_response(head) with "line")."""
    s = socket.create_connection((ph, int(pp)), timeout=timeout)
    auth = "Proxy-Authorization: %s\r\n" % basic(token) if token else ""
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s%s\r\n" % (target, target, auth, extra)).encode() + early)
    head = b""
    while b"\r\n\r\n" not in head:
        d = s.recv(1)
        if not d:
            break
        head += d
    answer = parse_response(head)
    answer["line"] = head.split(b"\r\n", 1)[0].decode("latin-1")
    return s, answer


def tls(s, cafile, sni, alpn=None):
    """TLS over s trusting cafile ("default": what SSL_CERT_FILE or the system names), naming sni
    (None or "-": no name, and no name check)."""
    ctx = ssl.create_default_context(cafile=None if cafile == "default" else cafile)
    if sni in (None, "-"):
        ctx.check_hostname = False
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx.wrap_socket(s, server_hostname=None if sni in (None, "-") else sni)


def host_of(target):
    return target.rsplit(":", 1)[0]


# ---- raw requests and tunnels --------------------------------------------------------------

def cmd_raw(ph, pp, data, timeout="5"):
    s = socket.create_connection((ph, int(pp)), timeout=10)
    s.sendall(unescape(data))
    print(json.dumps(parse_response(read_all(s, float(timeout)))))


def cmd_gets(ph, pp, token, *urls):
    out = {}
    for url in urls:
        s = socket.create_connection((ph, int(pp)), timeout=10)
        s.sendall(("GET %s HTTP/1.1\r\nProxy-Authorization: %s\r\n\r\n" % (url, basic(token))).encode())
        r = parse_response(read_for(s, 15))
        out[url] = {"status": r["status"], "body": r["body"]}
        s.close()
    print(json.dumps(out))


def cmd_tunnel_plain(ph, pp, target, token, data):
    s, r = connect(ph, pp, target, token)
    out = {"connect_status": r["status"], "connect": r}
    if r["status"] == 200:
        s.sendall(unescape(data))
        out["reply"] = parse_response(read_all(s))
    print(json.dumps(out))


def cmd_banner(ph, pp, target, token, early):
    s, r = connect(ph, pp, target, token, b"" if early == "-" else early.encode())
    out = {"connect_status": r["status"]}
    if r["status"] == 200:
        out["first"] = read_for(s, 1.0).decode("latin-1")
        try:
            s.sendall(b"ping\n")
        except OSError:
            pass
        out["then"] = read_for(s, 1.0).decode("latin-1")
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
    s, r = connect(ph, pp, target, token)
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
    s, r = connect(ph, pp, target, token)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    time.sleep(float(seconds))  # never reads
    print(json.dumps({"connect_status": r["status"]}))


def cmd_many(ph, pp, target, token, n, hold, signal_file="-"):
    socks, ok, greeted = [], 0, 0
    for i in range(int(n)):
        try:
            s, r = connect(ph, pp, target, token)
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


def cmd_fill(ph, pp, target, token, n, nbytes, done):
    socks = []
    for _ in range(int(n)):
        s, _ = connect(ph, pp, target, token, timeout=20)
        got = 0
        while got < int(nbytes):
            d = s.recv(65536)
            if not d:
                raise SystemExit("tunnel ended early after %d bytes" % got)
            got += len(d)
        socks.append(s)
    with open(done + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(done + ".tmp", done)
    time.sleep(60)


def cmd_race(ph, pp, token, host, n, stop):
    n, results, lock, counter = int(n), [], threading.Lock(), [0]

    def one(i):
        path = ("/a/%d" if i % 2 == 0 else "/b/%d") % i
        s = socket.create_connection((ph, int(pp)), timeout=30)
        s.sendall(("GET http://%s%s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\nConnection: close\r\n\r\n"
                   % (host, path, host, basic(token))).encode())
        data, end = receive(s)
        if end != "eof":
            raise end if isinstance(end, OSError) else socket.timeout("timed out")
        s.close()
        r = parse_response(data)
        rule = None
        if r["status"] == 403:
            try:
                rule = json.loads(r["body"]).get("policy", {}).get("rule")
            except ValueError:
                pass
        return {"path": path, "status": r["status"], "rule": rule}

    def worker():
        while True:
            with lock:
                i = counter[0]
                if i >= n and os.path.exists(stop):
                    return
                counter[0] += 1
            r = one(i)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(results))


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


# ---- TLS through a tunnel ------------------------------------------------------------------

def cmd_tunnel_tls(ph, pp, target, sni, cafile, token):
    s, r = connect(ph, pp, target, token)
    out = {"connect_status": r["status"]}
    if r["status"] == 200:
        try:
            t = tls(s, cafile, sni)
            t.sendall(b"GET /tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            out["reply"] = parse_response(read_all(t))
            out["tls"] = "ok"
        except OSError as e:  # ssl.SSLError, a reset
            out["tls"] = "error"
            out["error"] = str(e)
    print(json.dumps(out))


def cmd_tunnel_requests(ph, pp, target, sni, cafile, token, *hosts):
    s, r = connect(ph, pp, target, token)
    del r["line"]
    out = {"connect": r, "answers": []}
    if r["status"] != 200:
        r["body"] = read_all(s).decode("latin-1")
    else:
        try:
            t = tls(s, cafile, sni)
            for i, host in enumerate(hosts):
                t.sendall(("GET /r%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (i, host)).encode())
                resp = http.client.HTTPResponse(t)
                resp.begin()
                out["answers"].append({"status": resp.status, "body": resp.read().decode("latin-1")})
        except (OSError, http.client.HTTPException) as e:
            out["error"] = str(e)
    print(json.dumps(out))


def cmd_peek(ph, pp, target, sni, cafile, token, path, alpn):
    s, r = connect(ph, pp, target, token)
    out = {"connect": r["line"]}
    try:
        t = tls(s, cafile, sni, alpn.split(","))
        cert = t.getpeercert()
        out["issuer"] = dict(x[0] for x in cert["issuer"])
        out["subject"] = dict(x[0] for x in cert.get("subject", ()))
        out["alpn"] = t.selected_alpn_protocol()
        t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, sni)).encode())
        data, end = receive(t)
        if end != "eof":
            raise end if isinstance(end, OSError) else socket.timeout("timed out")
        out["reply"] = data.decode("latin-1")
    except Exception as e:
        out["error"] = str(e)
    print(json.dumps(out))


def cmd_alert_tls(ph, pp, target, sni, cafile, token, record_hex):
    s, r = connect(ph, pp, target, token)
    out = {"connect_status": r["status"]}
    if r["status"] == 200:
        s.sendall(bytes.fromhex(record_hex))
        try:
            t = tls(s, cafile, sni)
            t.sendall(b"GET / HTTP/1.1\r\nHost: " + sni.encode() + b"\r\nConnection: close\r\n\r\n")
            out["reply"] = read_for(t, 5).decode("latin-1")
            out["tls"] = "ok"
        except OSError as e:
            out["tls"] = "error"
            out["error"] = str(e)
    print(json.dumps(out))


def ext(kind, body):
    return struct.pack("!HH", kind, len(body)) + body


def client_hello(sni, extra):
    """A TLS 1.2 ClientHello that an OpenSSL server answers (ECDHE, AES-GCM, RSA signatures)."""
    name = sni.encode()
    exts = ext(0x0000, struct.pack("!HBH", len(name) + 3, 0, len(name)) + name)
    exts += ext(0x000a, struct.pack("!HHH", 4, 0x001d, 0x0017))           # supported_groups
    exts += ext(0x000b, b"\x01\x00")                                       # ec_point_formats
    exts += ext(0x000d, struct.pack("!HHHH", 6, 0x0804, 0x0401, 0x0403))   # signature_algorithms
    if extra == "ech":  # outer ECH (RFC 9849): type outer, HPKE suite, config id, enc, payload
        exts += ext(0xfe0d, b"\x00" + struct.pack("!HH", 0x0001, 0x0001) + b"\x07"
                    + struct.pack("!H", 32) + os.urandom(32) + struct.pack("!H", 64) + os.urandom(64))
    elif extra == "esni":  # draft ESNI: suite, key share, record digest, encrypted name
        exts += ext(0xffce, struct.pack("!H", 0x1301) + struct.pack("!HH", 0x001d, 32) + os.urandom(32)
                    + struct.pack("!H", 32) + os.urandom(32) + struct.pack("!H", 48) + os.urandom(48))
    suites = struct.pack("!HHHH", 0xc02f, 0xc030, 0xc02b, 0x009c)
    body = (b"\x03\x03" + os.urandom(32) + b"\x00" + struct.pack("!H", len(suites)) + suites + b"\x01\x00"
            + struct.pack("!H", len(exts)) + exts)
    msg = b"\x01" + struct.pack("!I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack("!H", len(msg)) + msg


def cmd_hello(ph, pp, target, sni, token, extra):
    s, r = connect(ph, pp, target, token)
    out = {"connect_status": r["status"]}
    if r["status"] == 200:
        s.sendall(client_hello(sni, extra))
        out["answer"] = read_for(s, 2).hex()
    print(json.dumps(out))


def cmd_inner(ph, pp, target, token, cafile, mode, req):
    req = unescape(req)
    s, answer = connect(ph, pp, target, token)
    s.settimeout(20)
    out = {"connect": answer["status"]}
    if answer["status"] == 200:
        t = tls(s, cafile, host_of(target))
        t.sendall(req)
        raw, first = b"", None
        try:
            while True:
                if mode == "early" and first is not None and "early" not in out:
                    left = first + 0.7 - time.monotonic()
                    if left <= 0:
                        out["early"] = len(raw)
                        continue
                    t.settimeout(left)
                else:
                    t.settimeout(20)
                try:
                    d = t.recv(65536)
                except socket.timeout:
                    continue
                if not d:
                    break
                if first is None:
                    first = time.monotonic()
                raw += d
        except OSError as e:
            out["recv_error"] = str(e)
        out["reply"] = raw.decode("latin-1")
    print(json.dumps(out))


def cmd_pieces(ph, pp, target, token, cafile, step, req):
    req = unescape(req)
    s, answer = connect(ph, pp, target, token, timeout=20)
    out = {"connect": answer["line"]}
    if step == "0":  # the CONNECT's answer only
        out["reply"] = read_for(s, 2, 65536).decode("latin-1")
    elif answer["status"] == 200:
        t = tls(s, cafile, host_of(target))
        step = int(step)
        try:
            for i in range(0, len(req), step):
                t.sendall(req[i:i + step])
                time.sleep(0.003)
        except OSError as e:
            out["send_error"] = str(e)
        raw, end = receive(t)
        if end != "eof":
            out["recv_error"] = "timed out" if end == "timeout" else str(end)
        out["reply"] = raw.decode("latin-1")
    else:
        out["reply"] = s.recv(65536).decode("latin-1")
    print(json.dumps(out))


def cmd_payload(ph, pp, target, cafile, token, mode, payload_file):
    payload = open(payload_file, "rb").read()

    def opened():
        return tls(connect(ph, pp, target, token)[0], cafile, host_of(target))

    if mode == "cuts":  # for every N, the first N bytes in one record, then close_notify and the close
        for n in range(len(payload) + 1):
            t = opened()
            if n:
                t.sendall(payload[:n])
            try:
                t.unwrap().close()
                end = "closed"
            except OSError as e:
                end = "error: " + str(e)
            print(json.dumps({"cut": n, "end": end}), flush=True)
        return
    t = opened()
    if mode == "bytes":
        for i in range(len(payload)):
            t.sendall(payload[i:i + 1])
    else:
        t.sendall(payload)
    raw, end = receive(t, 10)
    end = {"eof": "close_notify", "timeout": "timeout"}.get(end) or "error: " + str(end)
    print(json.dumps({"reply": raw.decode("latin-1"), "end": end}))


def cmd_split_records(ph, pp, target, cafile, token, method, path, size, mark):
    size = int(size)
    body = bytes((i * 7 + len(path)) % 251 for i in range(size))
    s, r = connect(ph, pp, target, token)
    out = {"connect": r["line"], "sha": hashlib.sha256(body).hexdigest()}
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(["http/1.1"])
    inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
    t = ctx.wrap_bio(inc, outg, server_hostname=host_of(target))

    def pump():
        d = outg.read()
        if d:
            s.sendall(d)
    try:
        while True:
            try:
                t.do_handshake()
                break
            except ssl.SSLWantReadError:
                pump()
                d = s.recv(65536)
                if not d:
                    raise EOFError("proxy closed during the handshake")
                inc.write(d)
        pump()
        head = "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n" % (method, path, host_of(target), size)
        t.write(head.encode())
        t.write(body)
        s.sendall(outg.read())  # head and body records in one send: one read at the proxy
        open(mark, "w").close()
        raw = b""
        while True:
            try:
                d = t.read(65536)
                if not d:
                    break
                raw += d
                continue
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            pump()
            d = s.recv(65536)
            if not d:
                break
            inc.write(d)
        out["reply"] = raw.decode("latin-1")
        out["status"] = int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else None
    except Exception as e:
        out["error"] = repr(e)
    open(mark, "w").close()
    print(json.dumps(out))


def cmd_requests(ph, pp, cafile, token, reqs):
    def one(req):
        out = {}
        if req["target"] != "-":
            s, r = connect(ph, pp, req["target"], token)
            out["connect"] = r["line"]
            s = tls(s, cafile, req["sni"])
        else:
            s = socket.create_connection((ph, int(pp)), timeout=10)
        s.sendall(req["data"].encode("latin-1"))
        raw = receive(s)[0]
        s.close()
        r = parse_response(raw)
        out["status"] = r["status"]
        out["responses"] = raw.count(b"HTTP/1.1 ")
        out["body"] = r["body"]
        return out

    print(json.dumps([one(r) for r in json.load(open(reqs))]))


# ---- Python's own clients ------------------------------------------------------------------

def cmd_keepalive(ph, pp, target, cafile, token, seconds, reqs):
    host, port = target.rsplit(":", 1)
    conn = http.client.HTTPSConnection(ph, int(pp), context=ssl.create_default_context(cafile=cafile),
                                       timeout=float(seconds))
    conn.set_tunnel(host, int(port), headers={"Proxy-Authorization": basic(token)})
    out = []
    for req in json.load(open(reqs)):
        try:
            body = req.get("body")
            conn.request(req["method"], req["path"], body=body and body.encode("latin-1"),
                         headers=req.get("headers") or {})
            r = conn.getresponse()
            out.append({"status": r.status, "body": r.read().decode("latin-1")})
        except Exception as e:
            out.append({"error": str(e)})
    print(json.dumps(out))


def cmd_stdlib_tunnel(ph, pp, host, port, token):
    out = {}
    try:
        c = http.client.HTTPConnection(ph, int(pp), timeout=15)
        c.set_tunnel(host, int(port), headers={"Proxy-Authorization": basic(token)})
        c.request("GET", "/")
        r = c.getresponse()
        out.update(status=r.status, phrase=r.reason, header=r.getheader("X-Sandstack-Deny-Reason"),
                   body=r.read().decode("latin-1"))
    except Exception as e:
        out.update(error_type=type(e).__name__, error=str(e))
    print(json.dumps(out))


def cmd_urllib(seconds, *pairs):
    ctx = ssl.create_default_context(cafile=os.environ.get("CAFILE"))  # without: SSL_CERT_FILE
    for method, url in zip(pairs[0::2], pairs[1::2]):
        out = {"url": url, "method": method}
        try:
            req = urllib.request.Request(url, method=method, data=b"x" if method == "POST" else None)
            r = urllib.request.urlopen(req, context=ctx, timeout=float(seconds))
            out.update(status=r.status, header=r.headers.get("X-Sandstack-Deny-Reason"),
                       body=r.read().decode("latin-1"))
        except urllib.error.HTTPError as e:
            out.update(status=e.code, error=str(e), header=e.headers.get("X-Sandstack-Deny-Reason"),
                       body=e.read().decode("latin-1"))
        except Exception as e:
            out.update(error_type=type(e).__name__, error=str(e))
        print(json.dumps(out), flush=True)


def cmd_hold(host, seconds, port="443", mode="tls"):
    u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    s, r = connect(u.hostname, u.port, "%s:%s" % (host, port), urllib.parse.unquote(u.password or ""))
    if r["status"] != 200:
        print("refused " + r["line"], flush=True)
        return
    if mode == "raw":
        t, got = s, b""
        while b"\n" not in got:
            got += s.recv(4096)
    else:
        t = tls(s, os.environ.get("SSL_CERT_FILE"), host)
    print("open", flush=True)
    start = time.time()
    _, end = receive(t, float(seconds))  # a reset or an unclean TLS end is an end too
    if end == "timeout":
        print("timeout", flush=True)
        return
    print("eof %.1f" % (time.time() - start), flush=True)


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1]](*sys.argv[2:])
