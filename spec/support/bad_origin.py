#!/usr/bin/env python3
"""A TLS server whose certificate (CERT, KEY) the proxy must refuse (a CA nobody trusts, or a name
that is not the host's), for spec/proxy_inspect_spec.lua and spec/docker_inspect_spec.lua: it
answers any request "bad!", which must never reach a client through the proxy. READY, when
given, appears once it listens.
  bad_origin.py CERT KEY PORT [READY]"""
import sys, threading

from http_peer import serve, tls_context


def bad(c, _port):
    c.recv(65536)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbad!\n")


serve(int(sys.argv[3]), bad, tls_context(sys.argv[1], sys.argv[2]), backlog=64)
if len(sys.argv) > 4:
    open(sys.argv[4], "w").close()
threading.Event().wait()
