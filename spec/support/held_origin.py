#!/usr/bin/env python3
"""The origin of spec/proxy_hostile_uaf_spec.lua, in its outside namespace: TLS (CERT, KEY) on
:443 that holds back its handshake until the file GO exists (so the proxy's handshake with it is
pending when the request arrives), then reads one request (Content-Length body) and appends it
as a JSON line to LOG: request line, method, target, body length and sha256, whether the head was
printable text; or the error, with "line" empty when no request came (a denied one). READY
appears once it listens.
  held_origin.py CERT KEY LOG READY GO"""
import hashlib, json, os, sys, threading, time

from http_peer import read_request, serve, tls_context

CERT, KEY, LOG, READY, GO = sys.argv[1:6]
CTX = tls_context(CERT, KEY)
LOCK = threading.Lock()


def held(c, _port):
    rec = {"line": ""}
    try:
        for _ in range(400):
            if os.path.exists(GO):
                break
            time.sleep(0.025)
        t = CTX.wrap_socket(c, server_side=True)
        t.settimeout(10)
        head, _, body = read_request(t).partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        rec["line"] = lines[0].decode("latin-1")
        rec["method"] = parts[0].decode("latin-1")
        rec["target"] = parts[1].decode("latin-1") if len(parts) > 1 else ""
        rec["clean"] = all(32 <= b < 127 for b in head.replace(b"\r\n", b""))
        rec["body_len"] = len(body)
        rec["body_sha"] = hashlib.sha256(body).hexdigest()
        t.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
        t.close()
    except Exception as e:
        rec["error"] = repr(e)
    with LOCK:
        with open(LOG, "a") as f:
            f.write(json.dumps(rec) + "\n")


serve(443, held, backlog=64)
open(READY, "w").close()
threading.Event().wait()
