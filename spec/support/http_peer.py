"""What the specs' origins and stand-ins share (imported by them; this directory is on their
sys.path): a server TLS context, a request read off a socket or an asyncio stream, and a
listener serving each connection in a thread of its own."""
import socket, ssl, threading


def tls_context(cert, key, sni_seen=None):
    """A server context with the test certificate; sni_seen, when given, gets the name each
    connection's hello asked for, by its SSL object's id."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    if sni_seen is not None:
        ctx.sni_callback = lambda obj, name, _ctx: sni_seen.__setitem__(id(obj), name)
    return ctx


def read_request(c):
    """One request's bytes as they came: the head, then its Content-Length of body, or a chunked
    body read (not decoded) up to its last chunk; what there is when the peer ends early."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        d = c.recv(65536)
        if not d:
            return raw
        raw += d
    head, _, body = raw.partition(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v.strip())
        if k.strip().lower() == b"transfer-encoding":
            while not body.endswith(b"0\r\n\r\n"):
                d = c.recv(65536)
                if not d:
                    break
                body += d
    while len(body) < n:
        d = c.recv(65536)
        if not d:
            break
        body += d
    return head + b"\r\n\r\n" + body


async def read_request_async(reader):
    """One request off an asyncio stream: method, path, headers (lowercase name -> values), body."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    method, path, _ = head[0].split(" ", 2)
    headers = {}
    for line in head[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers.setdefault(k.strip().lower(), []).append(v.strip())
    body = b""
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"][0]))
    return method, path, headers, body


def serve(port, handler, ctx=None, addr="0.0.0.0", backlog=128):
    """Accepts on addr:port (an IPv6 address: IPv6 only) in a thread; each connection (wrapped in
    TLS with ctx, when given) goes to handler(conn, port) in a thread of its own and is closed
    after it, whatever it raised."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    srv = socket.create_server((addr, port), family=family, backlog=backlog)

    def one(c):
        try:
            if ctx:
                c = ctx.wrap_socket(c, server_side=True)
            handler(c, port)
        except Exception:
            pass
        try:
            c.close()
        except OSError:
            pass

    def accept():
        while True:
            c, _ = srv.accept()
            threading.Thread(target=one, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
