#!/usr/bin/env python3
"""A client inside an inspected tunnel for spec/proxy_scrub_spec.lua: CONNECT through the proxy,
TLS trusting the proxy's bundle, the raw request sent as given (Python string escapes), the whole
answer read. Prints JSON: {"connect": the CONNECT's status, "reply": the answer (latin-1)}; with "early"
also the bytes received in the 0.7 s after the first byte of the answer arrived, which says
whether the proxy held back bytes depending on what they were.

    scrub_client.py PROXY_HOST PROXY_PORT TOKEN HOST:PORT BUNDLE MODE REQUEST     (MODE: all | early)
"""
import json
import socket
import ssl
import sys
import time

from proxy_client import connect

ph, pp, token, target, bundle, mode, req = sys.argv[1:8]
req = req.encode("latin-1").decode("unicode_escape").encode("latin-1")
s, answer = connect(ph, int(pp), target, token)
s.settimeout(20)
out = {"connect": answer["status"]}
if answer["status"] == 200:
    t = ssl.create_default_context(cafile=bundle).wrap_socket(s, server_hostname=target.split(":")[0])
    t.sendall(req)
    raw = b""
    first = None
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
