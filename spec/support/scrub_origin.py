#!/usr/bin/env python3
"""Hostile origins for spec/proxy_scrub_spec.lua: a credential's host that reflects what the proxy
sent it, in the shapes that defeat a scrub matching raw bytes, and a GET-only origin that never
reads a request body. Run in the spec's outside namespace:

    scrub_origin.py CERT KEY WORKDIR SECRET

WORKDIR/received.log gets every request the reflecting origin read (hex, one a line),
WORKDIR/notes.log every request line the GET-only origin parsed. WORKDIR/origin.ready appears
once both listen. SECRET is the credential's secret: the origin uses it only to choose where to
cut or split its reflection, as an attacker padding its request would.

On 8443 (TLS), for any path, the answer's body is the raw request the origin read, except:
  /gzip...        gzip-compressed, with Content-Encoding: gzip (whatever the request asked for)
  /chunks...      chunked, one chunk boundary in the middle of the secret ("<part>\\r\\n<n>\\r\\n<rest>")
  /cut...         cut short: the body ends one byte before the secret does (Content-Length framed)
  /pause/prefix   200 'A's then the secret's first 12 bytes, a 1.5 s pause, then 50 'B's
  /pause/other    the same with 12 bytes that start no secret in place of the secret's
  /slow...        the head at once; the reflection once WORKDIR/go exists (the spec rotates the
                  secret in between)
On 7000 (raw TCP) 70 KiB toward the client, then reading until it closes.
On 9443 (TLS) Python's http.server, HTTP/1.1 keep-alive, GET only, never reading a body: a
body it was sent is read as the next request (the CL.0 class of request smuggling).
"""
import gzip
import http.server
import os
import sys
import threading
import time

from http_peer import read_request, serve, tls_context

CERT, KEY, WORK, SECRET = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].encode()
LOCK = threading.Lock()


def log(name, line):
    with LOCK:
        with open(os.path.join(WORK, name), "a") as f:
            f.write(line + "\n")


def answer(c, raw):
    path = raw.split(b" ", 2)[1] if raw.count(b" ") >= 2 else b"/"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    at = raw.find(SECRET)
    if path.startswith(b"/gzip"):
        body = gzip.compress(raw)
        c.sendall(head + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    elif path.startswith(b"/chunks"):
        split = at + len(SECRET) // 2 if at >= 0 else len(raw) // 2
        a, b = raw[:split], raw[split:]
        c.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(a), a, len(b), b))
    elif path.startswith(b"/cut"):
        body = raw[:at + len(SECRET) - 1] if at >= 0 else raw
        c.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    elif path.startswith(b"/pause/"):
        tail = SECRET[:12] if path.startswith(b"/pause/prefix") else b"Z" * 12
        first = b"A" * 200 + tail
        c.sendall(head + b"Content-Length: %d\r\n\r\n" % (len(first) + 50) + first)
        time.sleep(1.5)
        c.sendall(b"B" * 50)
    elif path.startswith(b"/slow"):
        c.sendall(head + b"Content-Length: %d\r\n\r\n" % len(raw))
        go = os.path.join(WORK, "go")
        for _ in range(600):
            if os.path.exists(go):
                break
            time.sleep(0.05)
        c.sendall(raw)
    else:
        c.sendall(head + b"Content-Length: %d\r\n\r\n" % len(raw) + raw)


def reflect(c, _port):
    raw = read_request(c)
    if raw:
        log("received.log", raw.hex())
        answer(c, raw)


class Notes(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_one_request(self):
        super().handle_one_request()
        if self.raw_requestline:
            log("notes.log", self.raw_requestline.decode("latin-1").strip())

    def do_GET(self):  # a body, if any, is never read: it stays in the stream
        body = b"note\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_DELETE = do_GET


def sink(c, _port):
    c.sendall(b"r" * (70 * 1024))
    while c.recv(65536):
        pass


def main():
    ctx = tls_context(CERT, KEY)
    serve(8443, reflect, ctx)
    serve(7000, sink)
    notes = http.server.ThreadingHTTPServer(("0.0.0.0", 9443), Notes)
    notes.socket = ctx.wrap_socket(notes.socket, server_side=True)
    threading.Thread(target=notes.serve_forever, daemon=True).start()
    open(os.path.join(WORK, "origin.ready"), "w").close()
    time.sleep(3600)


if __name__ == "__main__":
    main()
