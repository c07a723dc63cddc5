#!/usr/bin/env python3
"""An origin that records the credential it was sent, for spec/docker_live_egress_spec.lua:
TLS (CERT, KEY) on ADDRESS:9443; each request's X-Token header is appended to STATE/tokens.log
(one line per request, "-" when absent) and answered 200 "seen". STATE/tokens.ready once up.
Usage: live_token_standin.py CERT KEY STATE ADDRESS"""
import os, socketserver, ssl, sys

CERT, KEY, STATE, ADDRESS = sys.argv[1:5]


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            line = self.rfile.readline(65536)
            if not line:
                return
            token, length = "-", 0
            while True:
                h = self.rfile.readline(65536)
                if h in (b"\r\n", b"\n", b""):
                    break
                name, _, value = h.decode("latin-1").partition(":")
                if name.strip().lower() == "x-token":
                    token = value.strip()
                elif name.strip().lower() == "content-length":
                    length = int(value.strip())
            if length:
                self.rfile.read(length)
            with open(os.path.join(STATE, "tokens.log"), "a") as f:
                f.write(token + "\n")
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nseen\n")
            self.wfile.flush()


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def get_request(self):
        sock, addr = super().get_request()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(CERT, KEY)
        return ctx.wrap_socket(sock, server_side=True), addr


srv = Server((ADDRESS, 9443), Handler)
open(os.path.join(STATE, "tokens.ready"), "w").close()
srv.serve_forever()
