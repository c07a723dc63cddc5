#!/usr/bin/env python3
"""A keep-alive HTTPS origin for spec/proxy_keepalive_spec.lua and bench/proxy_bench.sh, run in
the test's "outside" network namespace: several requests per connection, chunked request bodies
decoded as RFC 9112 says, and one JSON line per request it received in <state>/requests.log
({conn, n, method, path, body, te, cl}), so a test can see which requests reached it and on
which connection. Paths:
  /v1/close     answers with "Connection: close" and closes
  /v1/drop      answers as if keeping alive, then closes without saying so
  /v1/chunked   a chunked answer (two chunks and a trailer)
  /v1/nolen     an answer without length: its end is the close
  /v1/continue  a 100 Continue first, then the answer
  anything else JSON {conn, n, method, path, body} with Content-Length (HEAD: the length only)
Usage: keepalive_origin.py CERT KEY STATE_DIR PORT
"""
import json, os, socket, ssl, sys, threading

CERT, KEY, STATE, PORT = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
LOG = open(os.path.join(STATE, "requests.log"), "a", buffering=1)
LOCK = threading.Lock()


class Reader:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError
        self.buf += d

    def until(self, sep):
        while sep not in self.buf:
            self.fill()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def exactly(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def chunked_body(r):
    body = b""
    while True:
        size = int(r.until(b"\r\n")[:-2].split(b";")[0], 16)
        if size == 0:
            while r.until(b"\r\n") != b"\r\n":
                pass
            return body
        body += r.exactly(size)
        r.exactly(2)


def serve(sock, conn_id):
    r, n = Reader(sock), 0
    while True:
        head = r.until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        method, path, _ = head[0].split(" ", 2)
        headers = {}
        for line in head[1:]:
            if line:
                k, v = line.split(":", 1)
                headers.setdefault(k.strip().lower(), []).append(v.strip())
        te, cl = headers.get("transfer-encoding"), headers.get("content-length")
        if path == "/v1/continue":
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = chunked_body(r) if te else r.exactly(int(cl[0])) if cl else b""
        n += 1
        with LOCK:
            LOG.write(json.dumps({"conn": conn_id, "n": n, "method": method, "path": path,
                                  "body": body.decode("latin-1"), "te": te, "cl": cl}) + "\n")
        if path == "/v1/close":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nclose\n")
            return
        if path == "/v1/chunked":
            sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"6\r\nchunk \r\n4;x=y\r\none\n\r\n0\r\nX-Trailer: t\r\n\r\n")
            continue
        if path == "/v1/nolen":
            sock.sendall(b"HTTP/1.1 200 OK\r\n\r\nuntil the close\n")
            return
        out = json.dumps({"conn": conn_id, "n": n, "method": method, "path": path,
                          "body": body.decode("latin-1")}).encode()
        close = "close" in ",".join(headers.get("connection", [])).lower()  # as a compliant server does
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
                     % (len(out), b"Connection: close\r\n" if close else b"") + (b"" if method == "HEAD" else out))
        if path == "/v1/drop" or close:
            return


def handle(raw, conn_id, ctx):
    try:
        sock = ctx.wrap_socket(raw, server_side=True)
        serve(sock, conn_id)
        sock.close()
    except Exception:
        pass
    raw.close()


def main():
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(CERT, KEY)
    srv = socket.create_server(("0.0.0.0", PORT), backlog=512)
    open(os.path.join(STATE, "origin.ready"), "w").close()
    conn_id = 0
    while True:
        c, _ = srv.accept()
        conn_id += 1
        threading.Thread(target=handle, args=(c, conn_id, ctx), daemon=True).start()


main()
