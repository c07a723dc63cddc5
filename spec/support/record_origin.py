#!/usr/bin/env python3
"""The origin of spec/proxy_headers_spec.lua, in its outside namespace: plain HTTP on :80, TLS
(CERT, KEY) on :443 and :8443. Per connection: one request (its head and Content-Length of body),
then whatever else arrives within 0.3 s (a pipelined request the proxy let through); one JSON
line per connection {port, line, headers ([name, value] in order), raw} in LOG, and the same JSON
as the answer. LOG.ready appears once it listens.
  record_origin.py CERT KEY LOG"""
import json, sys, threading

from http_peer import read_request, serve, tls_context

CERT, KEY, LOG = sys.argv[1:4]
LOCK = threading.Lock()


def record(c, port):
    c.settimeout(5)
    raw = read_request(c)
    if b"\r\n\r\n" not in raw:
        return
    c.settimeout(0.3)
    try:
        while True:
            d = c.recv(65536)
            if not d:
                break
            raw += d
    except OSError:
        pass
    lines = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = [[k.strip(), v.strip()] for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)]
    rec = {"port": port, "line": lines[0], "headers": headers, "raw": raw.decode("latin-1")}
    with LOCK:
        with open(LOG, "a") as f:
            f.write(json.dumps(rec) + "\n")
    body = json.dumps(rec).encode()
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
              b"Connection: close\r\n\r\n" % len(body) + body)


ctx = tls_context(CERT, KEY)
for port, tls in ((80, None), (443, ctx), (8443, ctx)):
    serve(port, record, tls, backlog=64)
open(LOG + ".ready", "w").close()
threading.Event().wait()
