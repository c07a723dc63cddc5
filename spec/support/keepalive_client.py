#!/usr/bin/env python3
"""A raw TLS client through the proxy's CONNECT, for spec/proxy_keepalive_spec.lua: it sends the
bytes it is given inside TLS exactly as told and prints what came back as JSON ({reply, end}),
so a test controls pipelining, framing and where a client stops.
  keepalive_client.py PROXY_HOST PROXY_PORT HOST:PORT CAFILE TOKEN MODE PAYLOAD_FILE
MODE: "one"     the payload in one write (one TLS record)
      "bytes"   one TLS record per byte
      "cuts"    for every N from 0 to the payload's length, a connection that sends the first
                N bytes in one record and then closes (close_notify, then the socket): one
                JSON line per N
"""
import json, socket, ssl, sys

import proxy_client  # its CONNECT (this script's directory is on sys.path)

ph, pp, target, cafile, token, mode, payload_file = sys.argv[1:8]
payload = open(payload_file, "rb").read()
ctx = ssl.create_default_context(cafile=cafile)


def connect():
    s, _ = proxy_client.connect(ph, int(pp), target, token)
    return ctx.wrap_socket(s, server_hostname=target.split(":")[0])


def read_all(t, limit_s):
    raw, end = b"", "timeout"
    t.settimeout(limit_s)
    try:
        while True:
            d = t.recv(65536)
            if not d:
                end = "close_notify"
                break
            raw += d
    except socket.timeout:
        pass
    except (ssl.SSLError, OSError) as e:
        end = "error: " + str(e)
    return raw, end


def cut(n):
    t = connect()
    if n:
        t.sendall(payload[:n])
    try:
        t.unwrap().close()  # close_notify, then the socket
        end = "closed"
    except (ssl.SSLError, OSError) as e:
        end = "error: " + str(e)
    return {"cut": n, "end": end}


if mode == "cuts":
    for n in range(len(payload) + 1):
        print(json.dumps(cut(n)), flush=True)
    sys.exit(0)
t = connect()
if mode == "bytes":
    for i in range(len(payload)):
        t.sendall(payload[i:i + 1])
else:
    t.sendall(payload)
raw, end = read_all(t, 10)
print(json.dumps({"reply": raw.decode("latin-1"), "end": end}))
