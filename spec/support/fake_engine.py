#!/usr/bin/env python3
"""A misbehaving stand-in for dockerd on a unix socket, for spec/engine_fault_spec.lua.

A real daemon cannot be made to drop a connection mid-body or never answer on cue, so this
server does exactly that, chosen by the request path (any /vX.Y prefix is ignored):

  /version            {"ApiVersion": "1.43", "MinAPIVersion": "1.12"}
  /_ping              OK (text/plain)
  /echo               200 JSON describing the request (method, target, headers, body)
  /stats              200 JSON {"connections": n} (connections accepted so far)
  /drop               Content-Length 100000, 10 bytes sent, connection closed
  /big?n=N            200 JSON-typed body of N bytes
  /garbage            200 application/json "{not json"
  /texterr            500 text/plain
  /htmlerr            502 text/html
  /jsonerr            409 {"message": "fake conflict"}
  /hang               reads the request, never answers
  /events?since=M     chunked line stream: ok (split lines, CRLF, blanks), long, badjson, error
  /containers/C/exec  201 {"Id": C}; then /exec/C/start streams frames by C:
                      good, trunc (ends inside a frame), badframe (stream 9)
                      echoing with Upgrade: tcp: 101, each byte read back as a stdout frame,
                      "eof-seen" after the client's half-close
  /exec/C/json        {"Running": false, "ExitCode": 5}
  /archive?n=N        200 application/x-tar of N bytes; /archive?drop=1 drops mid-body
  DELETE /containers/NAME   container removal, scripted by words in NAME, counted per NAME:
                      "busy": 409 "removal ... already in progress" twice, then 204;
                      "flaky": 500 twice, then 204; "stuck": 409 always; any other: 204.
                      After a 204 the container is gone: 404.
  GET /containers/json, /networks, /volumes   empty lists (a project with nothing left)
  /removals           200 JSON {NAME: removal attempts so far}

Usage: fake_engine.py SOCKET_PATH              (runs until killed)
       fake_engine.py --tls CERT_DIR PORT_FILE   the same over TLS on 127.0.0.1 (port written
                                                 to PORT_FILE); CERT_DIR holds ca.pem,
                                                 server.pem, server-key.pem; client certificates
                                                 signed by ca.pem are required
"""
import json
import os
import socket
import socketserver
import ssl
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

STATE = {"connections": 0, "removals": {}, "removed": set()}
LOCK = threading.Lock()


def frame(stream, payload):
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


class Handler(socketserver.BaseRequestHandler):
    def setup(self):
        with LOCK:
            STATE["connections"] += 1
        self.buf = b""
        ctx = getattr(self.server, "tls", None)
        if ctx is not None:
            self.request = ctx.wrap_socket(self.request, server_side=True)

    def read_until(self, marker):
        while marker not in self.buf:
            data = self.request.recv(65536)
            if not data:
                return None
            self.buf += data
        head, self.buf = self.buf.split(marker, 1)
        return head

    def read_n(self, n):
        while len(self.buf) < n:
            data = self.request.recv(65536)
            if not data:
                return None
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, status, body=b"", ctype="application/json", extra=()):
        if isinstance(body, str):
            body = body.encode()
        reason = {200: "OK", 201: "Created", 409: "Conflict", 500: "Internal Server Error",
                  502: "Bad Gateway"}.get(status, "X")
        head = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {ctype}",
                f"Content-Length: {len(body)}", "Api-Version: 1.43"] + list(extra)
        self.request.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)

    def send_chunked(self, status, ctype, pieces, end=True):
        self.request.sendall(f"HTTP/1.1 {status} OK\r\nContent-Type: {ctype}\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n".encode())
        for p in pieces:
            self.request.sendall(f"{len(p):x}\r\n".encode() + p + b"\r\n")
            time.sleep(0.01)
        if end:
            self.request.sendall(b"0\r\n\r\n")

    def send_raw_stream(self, payload):
        # The exec start answer: no length, no chunking, the body ends when the connection does.
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                             b"Connection: close\r\n\r\n")
        for i in range(0, len(payload), 7):  # small pieces split frame headers anywhere
            self.request.sendall(payload[i:i + 7])
        return False

    def echo_hijacked(self):
        # A hijacked exec (Upgrade: tcp): 101, then every byte read comes back as a stdout frame;
        # the client's half-close (the end of stdin) is answered by an "eof-seen" frame and the end.
        self.request.sendall(b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                             b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
        pending, self.buf = self.buf, b""
        while True:
            if pending:
                self.request.sendall(frame(1, pending))
            try:
                pending = self.request.recv(65536)
            except ssl.SSLEOFError:  # TLS: a FIN without close_notify, as Go's reader takes it: the end
                pending = b""
            if not pending:
                break
        self.request.sendall(frame(1, b"eof-seen"))
        return False

    def remove_container(self, name):
        with LOCK:
            n = STATE["removals"].get(name, 0) + 1
            STATE["removals"][name] = n
            gone = name in STATE["removed"]
        if gone:
            return self.send(404, json.dumps({"message": "No such container: " + name}))
        if "stuck" in name or ("busy" in name and n <= 2):
            return self.send(409, json.dumps(
                {"message": f"removal of container {name} is already in progress"}))
        if "flaky" in name and n <= 2:
            return self.send(500, json.dumps(
                {"message": f"driver failed to remove root filesystem for {name}: device or resource busy"}))
        with LOCK:
            STATE["removed"].add(name)
        self.request.sendall(b"HTTP/1.1 204 No Content\r\nApi-Version: 1.43\r\n\r\n")
        return None

    def handle(self):
        while True:
            head = self.read_until(b"\r\n\r\n")
            if head is None:
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0") or "0")
            body = self.read_n(n) if n else b""
            if body is None:
                return
            if not self.route(method, target, headers, body):
                return

    def route(self, method, target, headers, body):
        url = urlsplit(target)
        path = url.path
        parts = path.split("/")
        if len(parts) > 1 and parts[1].startswith("v1."):
            path = "/" + "/".join(parts[2:])
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if path == "/version":
            self.send(200, json.dumps({"ApiVersion": "1.43", "MinAPIVersion": "1.12", "Version": "fake"}))
        elif path == "/_ping":
            self.send(200, "OK", "text/plain; charset=utf-8")
        elif path == "/echo":
            self.send(200, json.dumps({"method": method, "target": target, "headers": headers,
                                       "body": body.decode("latin-1"), "body_hex": body.hex()}))
        elif path == "/stats":
            with LOCK:
                self.send(200, json.dumps({"connections": STATE["connections"]}))
        elif path == "/removals":
            with LOCK:
                self.send(200, json.dumps(STATE["removals"]))
        elif method == "DELETE" and len(parts) >= 3 and path.startswith("/containers/"):
            self.remove_container(path.split("/")[2])
        elif method == "GET" and path in ("/containers/json", "/networks"):
            self.send(200, "[]")
        elif method == "GET" and path == "/volumes":
            self.send(200, json.dumps({"Volumes": [], "Warnings": None}))
        elif path == "/drop":
            self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 100000\r\n\r\n{\"partial\":")
            return False
        elif path == "/big":
            self.send(200, b"[" + b"1," * (int(q.get("n", "1000")) // 2) + b"1]")
        elif path == "/garbage":
            self.send(200, "{not json")
        elif path == "/texterr":
            self.send(500, "plain failure\n", "text/plain; charset=utf-8")
        elif path == "/htmlerr":
            self.send(502, "<html><body>bad\x01gateway</body></html>", "text/html")
        elif path == "/jsonerr":
            self.send(409, json.dumps({"message": "fake conflict"}))
        elif path == "/hang":
            while self.request.recv(65536):
                pass
            return False
        elif path == "/events":
            mode = q.get("since", "ok")
            if mode == "ok":
                ev = [json.dumps({"Type": "container", "Action": a, "n": i}).encode()
                      for i, a in enumerate(["create", "start", "die"])]
                stream = ev[0] + b"\n\n" + ev[1] + b"\r\n" + ev[2]  # the last line has no newline
                pieces = [stream[i:i + 5] for i in range(0, len(stream), 5)]
                self.send_chunked(200, "application/json", pieces)
            elif mode == "long":
                self.send_chunked(200, "application/json", [b"x" * 16384] * 40, end=False)
                return False
            elif mode == "badjson":
                self.send_chunked(200, "application/json", [b"{\"ok\":1}\nnot json\n"])
            elif mode == "error":
                self.send(500, json.dumps({"message": "events broken"}))
            return True
        elif len(parts) >= 4 and path.startswith("/containers/") and path.endswith("/exec"):
            self.send(201, json.dumps({"Id": path.split("/")[2]}))
        elif path.startswith("/exec/") and path.endswith("/start"):
            kind = path.split("/")[2]
            if kind == "echoing" and headers.get("upgrade") == "tcp":
                return self.echo_hijacked()
            if kind == "good":
                payload = (frame(1, b"out\x00\xff") + frame(2, b"") + frame(2, b"err") +
                           frame(1, bytes(range(256))) + frame(0, b"in"))
            elif kind == "trunc":
                payload = frame(1, b"whole") + frame(1, b"cut short")[:10]
            else:
                payload = frame(1, b"fine") + frame(9, b"what")
            return self.send_raw_stream(payload)
        elif path.startswith("/exec/") and path.endswith("/json"):
            self.send(200, json.dumps({"Running": False, "ExitCode": 5}))
        elif path == "/archive":
            if q.get("drop"):
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\n"
                                     b"Content-Length: 5000\r\n\r\n" + b"t" * 100)
                return False
            self.send(200, b"t" * int(q.get("n", "100")), "application/x-tar")
        else:
            self.send(404, json.dumps({"message": "no route " + path}))
        return True


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class TLSServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # failed handshakes are what some tests are about


def main_tls(cert_dir, port_file):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(cert_dir, "server.pem"), os.path.join(cert_dir, "server-key.pem"))
    ctx.verify_mode = ssl.CERT_REQUIRED
    # As Go's TLS server: a FIN at a record boundary is the end of what the client sends, and the
    # answer can still be written (OpenSSL 3 otherwise fails the whole connection on it).
    ctx.options |= getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
    ctx.load_verify_locations(os.path.join(cert_dir, "ca.pem"))
    srv = TLSServer(("127.0.0.1", 0), Handler)
    srv.tls = ctx
    with open(port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    srv.serve_forever()


def main():
    if sys.argv[1] == "--tls":
        return main_tls(sys.argv[2], sys.argv[3])
    path = sys.argv[1]
    if os.path.exists(path):
        os.unlink(path)
    srv = Server(path, Handler)
    srv.serve_forever()


if __name__ == "__main__":
    main()
