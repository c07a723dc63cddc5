#!/usr/bin/env python3
"""Peers and clients for spec/proxy_hostile_spec.lua (issue 23): the attacks a sandboxed agent
makes on sandstack-proxy's CONNECT tunnels and address checks. Every command prints one JSON
object (peers print nothing and run until they are killed).

  proxy_hostile.py peer CERT KEY READY_FILE        outside: the servers an attack needs
      :8444  a lenient TLS server: it skips records before the ClientHello (a warning alert), as
             Go and BoringSSL servers do, then answers "hello from <sni>" (test certificate)
      :2222  an SSH-like server: speaks first ("SSH-2.0-sandstack-test"), then echoes
      [::]:8081  plain HTTP over IPv6: "v6 <local address>" (the embedded-IPv4 controls)
  proxy_hostile.py local READY_FILE                 proxy side: 127.0.0.1:9080 and :9999 answer
                                                    plain HTTP "local <port>"
  proxy_hostile.py alert_tls PH PP TARGET SNI CAFILE TOKEN RECORD_HEX
      CONNECT, write RECORD_HEX as it is (may be empty), then a real TLS handshake naming SNI and
      GET /; prints {connect_status, tls, reply | error}
  proxy_hostile.py hello PH PP TARGET SNI TOKEN EXT
      CONNECT, then a hand-made TLS 1.2 ClientHello naming SNI, with EXT ("ech": an
      encrypted_client_hello extension, "esni": an encrypted_server_name one, "none"); prints
      {connect_status, answer (hex of what came back within 2 s)}
  proxy_hostile.py gets PH PP TOKEN URL...
      a plain-HTTP GET of each URL through the proxy, one connection each; prints
      {URL: {status, body}}
  proxy_hostile.py banner PH PP TARGET TOKEN EARLY
      CONNECT (with EARLY written in the same packet as the CONNECT when not "-"), read what the
      destination says without writing, then write "ping\\n" and read again; prints
      {connect_status, first, then}
"""
import base64, json, os, socket, ssl, struct, sys, threading


def basic(token):
    return "Basic " + base64.b64encode(("sandstack:" + token).encode()).decode()


def read_for(s, seconds, limit=1 << 16):
    s.settimeout(seconds)
    out = b""
    try:
        while len(out) < limit:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except (socket.timeout, ConnectionResetError, ssl.SSLError, OSError):
        pass
    return out


def connect(ph, pp, target, token, early=b""):
    s = socket.create_connection((ph, int(pp)), timeout=10)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n"
               % (target, target, basic(token))).encode() + early)
    head = b""
    while b"\r\n\r\n" not in head:
        d = s.recv(1)
        if not d:
            break
        head += d
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    status = int(line.split(" ")[1]) if line.startswith("HTTP/") else None
    return s, status, head


# ---- peers -------------------------------------------------------------------------------

def serve(sock, handler):
    while True:
        c, _ = sock.accept()
        threading.Thread(target=guarded, args=(handler, c), daemon=True).start()


def guarded(handler, c):
    try:
        handler(c)
    except Exception:
        pass
    try:
        c.close()
    except OSError:
        pass


def listener(family, addr, port):
    s = socket.socket(family)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((addr, port))
    s.listen(128)
    return s


def recv_exact(c, n):
    out = b""
    while len(out) < n:
        d = c.recv(n - len(out))
        if not d:
            raise EOFError
        out += d
    return out


SNI_SEEN = {}  # the server name each TLS connection asked for, by its socket


def lenient_tls(ctx):
    def handle(c):
        c.settimeout(10)
        while True:  # drop whole records until the handshake record that holds the hello
            head = c.recv(5, socket.MSG_PEEK)
            if len(head) < 5:
                return
            if head[0] == 0x16:
                break
            recv_exact(c, 5 + struct.unpack("!H", head[3:5])[0])
        t = ctx.wrap_socket(c, server_side=True)
        t.recv(65536)
        body = ("hello from %s\n" % SNI_SEEN.pop(id(t), None)).encode()
        t.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        t.close()
    return handle


def ssh_like(c):
    c.sendall(b"SSH-2.0-sandstack-test\r\n")
    while True:
        d = c.recv(65536)
        if not d:
            return
        c.sendall(d)


def http_answer(text):
    def handle(c):
        c.settimeout(10)
        got = b""
        while b"\r\n\r\n" not in got:
            d = c.recv(65536)
            if not d:
                return
            got += d
        body = (text(c) + "\n").encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    return handle


def run(servers, ready):
    for sock, handler in servers:
        threading.Thread(target=serve, args=(sock, handler), daemon=True).start()
    open(ready, "w").close()
    threading.Event().wait()


def cmd_peer(cert, key, ready):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    ctx.sni_callback = lambda obj, name, _ctx: SNI_SEEN.__setitem__(id(obj), name)
    run([(listener(socket.AF_INET, "0.0.0.0", 8444), lenient_tls(ctx)),
         (listener(socket.AF_INET, "0.0.0.0", 2222), ssh_like),
         (listener(socket.AF_INET6, "::", 8081), http_answer(lambda c: "v6 " + c.getsockname()[0]))], ready)


def cmd_local(ready):
    run([(listener(socket.AF_INET, "127.0.0.1", p), http_answer(lambda c: "local %d" % c.getsockname()[1]))
         for p in (9080, 9999)], ready)


# ---- clients -----------------------------------------------------------------------------

def cmd_alert_tls(ph, pp, target, sni, cafile, token, record_hex):
    s, status, _ = connect(ph, pp, target, token)
    out = {"connect_status": status}
    if status == 200:
        s.sendall(bytes.fromhex(record_hex))
        ctx = ssl.create_default_context(cafile=cafile)
        try:
            t = ctx.wrap_socket(s, server_hostname=sni)
            t.sendall(b"GET / HTTP/1.1\r\nHost: " + sni.encode() + b"\r\nConnection: close\r\n\r\n")
            out["reply"] = read_for(t, 5).decode("latin-1")
            out["tls"] = "ok"
        except (ssl.SSLError, OSError) as e:
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
    s, status, _ = connect(ph, pp, target, token)
    out = {"connect_status": status}
    if status == 200:
        s.sendall(client_hello(sni, extra))
        out["answer"] = read_for(s, 2).hex()
    print(json.dumps(out))


def cmd_gets(ph, pp, token, *urls):
    out = {}
    for url in urls:
        s = socket.create_connection((ph, int(pp)), timeout=10)
        s.sendall(("GET %s HTTP/1.1\r\nProxy-Authorization: %s\r\n\r\n" % (url, basic(token))).encode())
        head, _, body = read_for(s, 15).partition(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        out[url] = {"status": int(line.split(" ")[1]) if line.startswith("HTTP/") else None,
                    "body": body.decode("latin-1")}
        s.close()
    print(json.dumps(out))


def cmd_banner(ph, pp, target, token, early):
    s, status, _ = connect(ph, pp, target, token, b"" if early == "-" else early.encode())
    out = {"connect_status": status}
    if status == 200:
        out["first"] = read_for(s, 1.0).decode("latin-1")
        try:
            s.sendall(b"ping\n")
        except OSError:
            pass
        out["then"] = read_for(s, 1.0).decode("latin-1")
    print(json.dumps(out))


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1]](*sys.argv[2:])
