#!/usr/bin/env python3
"""The origin of spec/proxy_credentials_spec.lua, in its outside namespace: plain HTTP on :80 and
TLS (CERT, KEY) on :8443, requests on a connection until the client closes it or asks to. Every
request it got is appended to LOG (hex, one a line); LOG.ready appears once it listens. The answer
echoes the request twice: as JSON text {method, path, headers, body, hex} (which the proxy scrubs
on the way back, so the client sees placeholders) and hex-encoded inside it (which no scrub
recognises, so the test sees the secret that arrived). /split... answers with the raw request as
its body, written a few bytes at a time (so any secret in it spans TLS records and reads).
  echo_origin.py CERT KEY LOG"""
import json, sys, threading, time

from http_peer import read_request, serve, tls_context

CERT, KEY, LOG = sys.argv[1:4]
LOCK = threading.Lock()


def answer(c):
    raw = read_request(c)
    if not raw:
        return False
    with LOCK:
        with open(LOG, "a") as f:
            f.write(raw.hex() + "\n")
    lines = raw.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.setdefault(k.strip().lower(), []).append(v.strip())
    keep = "close" not in [v.lower() for v in headers.get("connection", [])]
    conn = b"keep-alive" if keep else b"close"
    if path.startswith("/split"):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n"
                  % (len(raw), conn))
        for i in range(0, len(raw), 5):
            c.sendall(raw[i:i + 5])
            time.sleep(0.002)
    else:
        body = json.dumps({"method": method, "path": path, "headers": headers,
                           "body": raw.split(b"\r\n\r\n", 1)[1].decode("latin-1"), "hex": raw.hex()}).encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n"
                  % (len(body), conn) + body)
    return keep


def requests(c, _port):
    while answer(c):
        pass


serve(80, requests)
serve(8443, requests, tls_context(CERT, KEY))
open(LOG + ".ready", "w").close()
threading.Event().wait()
