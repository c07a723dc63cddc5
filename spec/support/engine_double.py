#!/usr/bin/env python3
"""The specs' stand-in for dockerd at the wire: the Docker Engine API on a unix socket (or TLS),
in one of three modes. spec/support/engine_double.lua starts and stops it.

    engine_double.py faults DIR               scripted answers (below) on DIR/engine.sock
    engine_double.py lists DIR                the same, with the label lists a spec writes
    engine_double.py record DIR ENGINE_SOCK   a pass-through to a real engine
    engine_double.py tls DIR CERT_DIR         faults over TLS on 127.0.0.1, the port in DIR/port;
                                              CERT_DIR holds ca.pem, server.pem, server-key.pem,
                                              and a client certificate signed by ca.pem is required

In every mode each request (method, target, path without its /vX.Y prefix, body) is appended to
DIR/requests.jsonl as one JSON line, in the order the requests arrived.

faults: what a real daemon cannot be made to do on cue, chosen by the path (/vX.Y is ignored):
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
  /containers/C/exec  201 {"Id": C} (after 1.5 s when C is "slowcreate"); then /exec/C/start
                      streams frames by C: good, trunc (ends inside a frame), badframe
                      (stream 9), slowcreate (stdout "started")
                      echoing with Upgrade: tcp: 101, each byte read back as a stdout frame,
                      "eof-seen" after the client's half-close
                      endedpid0 (stdout "reached"), notrun (the engine's text on stdout);
                      slowrun and slowhang: a loaded daemon that runs the process 1.5 s after
                      the start (its /json: Running, Pid 0 until then, Pid 42 after); slowrun
                      writes "ran" 0.3 s after it runs and ends, slowhang "partial", then
                      never ends; slowecho: hijacked (Upgrade: tcp), runs 1.5 s after the
                      start, then echoes as echoing does and ends
  /exec/C/json        {"Running": false, "ExitCode": 5}; slowrun, slowhang: as above (then
                      Running false, ExitCode 0 once slowrun's stream ended); endedpid0: ExitCode 0 and Pid 0 (Podman
                      reports Pid 0 for an exec that ended); notrun: ExitCode 126, Pid 0 (Docker:
                      the program could not be run)
  /archive?n=N        200 application/x-tar of N bytes; /archive?drop=1 drops mid-body
  /tree?mib=N         200 a real tar: t/, t/big (N MiB, byte i is i % 251), t/small ("small");
                      drop=1: the connection drops inside t/big
  PUT /tarlist        the request's tar (chunked or not) read and kept; GET /tarlist: its
                      members, a JSON list of {name, type, size, mode, linkname, sum} (sum:
                      the data's byte sum)
  DELETE /containers/NAME   container removal, scripted by words in NAME, counted per NAME:
                      "busy": 409 "removal ... already in progress" twice, then 204;
                      "flaky": 500 twice, then 204; "stuck": 409 always; any other: 204.
                      After a 204 the container is gone: 404.
  GET /containers/json, /networks, /volumes   empty lists (a project with nothing left)
  /removals           200 JSON {NAME: removal attempts so far}

lists: GET /containers/json, /networks and /volumes answer 200 with the bytes of DIR/containers,
DIR/networks and DIR/volumes, read at each request (a spec changes an answer between calls by
rewriting the file) and narrowed by the request's label filters as the engine narrows them; a
missing file gives the faults answer (empty lists).

record: bytes go both ways unchanged; only the client's side is parsed (request heads, and
Content-Length or chunked bodies), so keep-alive, streamed answers and hijacked connections pass
as they are. DIR/hold, read at each request, holds "WORD SECONDS": a request whose target holds
WORD goes on to the engine SECONDS late, whether or not its client still waits (as a slow engine
takes a request the client has given up on), on a connection of its own; once the engine has
answered it, its target is appended to DIR/held, a line each."""
import http.client
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
MODE, DIR = sys.argv[1], sys.argv[2]
LISTS = {"/containers/json": "containers", "/networks": "networks", "/volumes": "volumes"}


# The slow-running execs' state: when each was started, and whether it ended.
SLOW_RUN = {"slowrun": None, "slowhang": None, "slowecho": None}
SLOW_RUN_DELAY = 1.5


def slow_run_state(kind):
    st = SLOW_RUN[kind]
    if st is None or time.monotonic() - st["start"] < SLOW_RUN_DELAY:
        return {"Running": True, "Pid": 0, "ExitCode": None}
    if st["ended"]:
        return {"Running": False, "Pid": 42, "ExitCode": 0}
    return {"Running": True, "Pid": 42, "ExitCode": None}


def frame(stream, payload):
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def unversioned(target):
    path = urlsplit(target).path
    parts = path.split("/")
    if len(parts) > 1 and parts[1].startswith("v1."):
        return "/" + "/".join(parts[2:])
    return path


def record(method, target, body):
    line = json.dumps({"method": method, "target": target, "path": unversioned(target),
                       "body": body.decode("utf-8", "replace")})
    with LOCK:
        with open(os.path.join(DIR, "requests.jsonl"), "a", encoding="utf-8") as f:
            f.write(line + "\n")


def read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def labelled(entry, wanted):
    labels = entry.get("Labels") if isinstance(entry, dict) else None
    if not isinstance(labels, dict):
        return not isinstance(entry, dict)  # what is not an object stays, for the shape tests
    for w in wanted:
        k, _, v = w.partition("=")
        if k not in labels or ("=" in w and labels[k] != v):
            return False
    return True


def filtered(answer, target, path):
    """The answer narrowed by the request's label filters, as the engine does; an answer not of
    the engine's shape (a list; for /volumes {"Volumes": list}) is left as it is."""
    q = parse_qs(urlsplit(target).query)
    try:
        wanted = json.loads(q["filters"][0]).get("label", [])
        doc = json.loads(answer)
    except (KeyError, ValueError, AttributeError):
        return answer
    if isinstance(doc, list) and path != "/volumes":
        return json.dumps([e for e in doc if labelled(e, wanted)]).encode()
    if isinstance(doc, dict) and isinstance(doc.get("Volumes"), list) and len(doc) <= 2:
        doc["Volumes"] = [e for e in doc["Volumes"] if labelled(e, wanted)]
        return json.dumps(doc).encode()
    return answer


class Handler(socketserver.BaseRequestHandler):
    """Reads requests off the connection; answer() says what comes back."""

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

    def read_request(self):
        """(method, target, headers, body, the request's bytes as sent), or None at the end."""
        head = self.read_until(b"\r\n\r\n")
        if head is None:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        raw = head + b"\r\n\r\n"
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size_line = self.read_until(b"\r\n")
                data = size_line is not None and self.read_n(int(size_line.split(b";")[0], 16) + 2)
                if not data:
                    return None
                raw += size_line + b"\r\n" + data
                body += data[:-2]
                if len(data) == 2:
                    break
        else:
            n = int(headers.get("content-length", "0") or "0")
            body = self.read_n(n) if n else b""
            if body is None:
                return None
            raw += body
        return method, target, headers, body, raw

    def handle(self):
        while True:
            req = self.read_request()
            if req is None:
                return
            method, target, headers, body, raw = req
            record(method, target, body)
            if not self.answer(method, target, headers, body, raw):
                return


class Recorder(Handler):
    """record: each request goes on to the engine as it came; the engine's bytes come back."""

    def setup(self):
        super().setup()
        self.engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.engine.connect(sys.argv[3])
        self.back = threading.Thread(target=pipe, args=(self.engine, self.request), daemon=True)
        self.back.start()

    def answer(self, method, target, headers, body, raw):
        word, _, seconds = (read_text(os.path.join(DIR, "hold")) or "").strip().partition(" ")
        if word and word in target:
            time.sleep(float(seconds))
            return self.held_answer(target, raw)
        self.engine.sendall(raw)
        if headers.get("upgrade"):  # hijacked: the rest is a raw stream
            if self.buf:
                self.engine.sendall(self.buf)
            pipe(self.request, self.engine)
            return False
        return True

    def held_answer(self, target, raw):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(sys.argv[3])
            conn.sendall(raw)
            answer = http.client.HTTPResponse(conn)
            answer.begin()
            body = answer.read()
        head = "HTTP/1.1 %d %s\r\n" % (answer.status, answer.reason)
        head += "".join("%s: %s\r\n" % (k, v) for k, v in answer.getheaders()
                        if k.lower() not in ("content-length", "transfer-encoding"))
        head += "Content-Length: %d\r\n\r\n" % len(body)
        with LOCK:
            with open(os.path.join(DIR, "held"), "a", encoding="utf-8") as f:
                f.write(target + "\n")
        try:
            self.request.sendall(head.encode("latin-1") + body)
        except OSError:
            return False  # the client gave up on it
        return True

    def finish(self):
        # the client is done sending: so is the engine's side, whose answer still comes back
        # before the connection closes
        try:
            self.engine.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.back.join()


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class Scripted(Handler):
    """faults, lists and tls: the answers of the table in the header."""

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

    def slow_run(self, kind):
        # Docker answers the start's header at once and runs the process when runc gets to it.
        SLOW_RUN[kind] = {"start": time.monotonic(), "ended": False}
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                             b"Connection: close\r\n\r\n")
        time.sleep(SLOW_RUN_DELAY + 0.3)
        if kind == "slowrun":
            self.request.sendall(frame(1, b"ran"))
            SLOW_RUN[kind]["ended"] = True
            return False
        self.request.sendall(frame(1, b"partial"))
        while self.request.recv(65536):  # until the client gives up
            pass
        return False

    def echo_hijacked(self, late=None):
        # A hijacked exec (Upgrade: tcp): 101, then every byte read comes back as a stdout frame;
        # the client's half-close (the end of stdin) is answered by an "eof-seen" frame and the end.
        # late: a slow-running kind, whose process reads nothing until the daemon has run it.
        self.request.sendall(b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                             b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
        if late:
            SLOW_RUN[late] = {"start": time.monotonic(), "ended": False}
            time.sleep(SLOW_RUN_DELAY + 0.3)
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
        if late:
            SLOW_RUN[late]["ended"] = True
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

    def listed(self, target, path):
        """lists: the spec's answer for a label list, or None for the faults answer."""
        try:
            with open(os.path.join(DIR, LISTS[path]), "rb") as f:
                answer = f.read()
        except OSError:
            return None
        self.send(200, filtered(answer, target, path))
        return True

    def send_tree(self, mib, drop):
        import io
        import tarfile
        big = bytes(i % 251 for i in range(251)) * (mib * 1024 * 1024 // 251 + 1)
        big = big[:mib * 1024 * 1024]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            d = tarfile.TarInfo("t")
            d.type, d.mode = tarfile.DIRTYPE, 0o750
            t.addfile(d)
            for name, data, mode in (("t/big", big, 0o644), ("t/small", b"small", 0o755)):
                f = tarfile.TarInfo(name)
                f.size, f.mode = len(data), mode
                t.addfile(f, io.BytesIO(data))
        tar = buf.getvalue()
        if drop:
            cut = len(tar) // 2
            self.request.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\n"
                                 f"Content-Length: {len(tar)}\r\n\r\n".encode() + tar[:cut])
            return False
        self.send(200, tar, "application/x-tar")
        return True

    def tar_members(self, method, body):
        import io
        import tarfile
        if method == "GET":
            with LOCK:
                return self.send(200, json.dumps(STATE.get("tar", [])))
        out = []
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as t:
            for m in t.getmembers():
                data = t.extractfile(m).read() if m.isfile() else b""
                out.append({"name": m.name, "type": m.type.decode(), "size": m.size, "mode": m.mode,
                            "linkname": m.linkname, "sum": sum(data)})
        with LOCK:
            STATE["tar"] = out
        return self.send(200, "")

    def answer(self, method, target, headers, body, raw):
        path = unversioned(target)
        parts = path.split("/")
        q = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
        if MODE == "lists" and method == "GET" and path in LISTS and self.listed(target, path):
            pass
        elif path == "/version":
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
            self.remove_container(parts[2])
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
            return self.events(q.get("since", "ok"))
        elif len(parts) >= 4 and path.startswith("/containers/") and path.endswith("/exec"):
            if parts[2] == "slowcreate":  # a loaded daemon: the create alone takes longer than the command may run
                time.sleep(1.5)
            self.send(201, json.dumps({"Id": parts[2]}))
        elif path.startswith("/exec/") and path.endswith("/start"):
            return self.exec_start(parts[2], headers)
        elif path.startswith("/exec/") and path.endswith("/json") and parts[2] in SLOW_RUN:
            self.send(200, json.dumps(slow_run_state(parts[2])))
        elif path.startswith("/exec/") and path.endswith("/json"):
            self.send(200, json.dumps({"endedpid0": {"Running": False, "ExitCode": 0, "Pid": 0},
                                       "notrun": {"Running": False, "ExitCode": 126, "Pid": 0}}.get(
                parts[2], {"Running": False, "ExitCode": 5})))
        elif path == "/tree":
            return self.send_tree(int(q.get("mib", "1")), q.get("drop"))
        elif path == "/tarlist":
            self.tar_members(method, body)
        elif path == "/archive":
            if q.get("drop"):
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\n"
                                     b"Content-Length: 5000\r\n\r\n" + b"t" * 100)
                return False
            self.send(200, b"t" * int(q.get("n", "100")), "application/x-tar")
        else:
            self.send(404, json.dumps({"message": "no route " + path}))
        return True

    def events(self, mode):
        if mode == "ok":
            ev = [json.dumps({"Type": "container", "Action": a, "n": i}).encode()
                  for i, a in enumerate(["create", "start", "die"])]
            stream = ev[0] + b"\n\n" + ev[1] + b"\r\n" + ev[2]  # the last line has no newline
            self.send_chunked(200, "application/json", [stream[i:i + 5] for i in range(0, len(stream), 5)])
        elif mode == "long":
            self.send_chunked(200, "application/json", [b"x" * 16384] * 40, end=False)
            return False
        elif mode == "badjson":
            self.send_chunked(200, "application/json", [b"{\"ok\":1}\nnot json\n"])
        elif mode == "error":
            self.send(500, json.dumps({"message": "events broken"}))
        return True

    def exec_start(self, kind, headers):
        if kind == "echoing" and headers.get("upgrade") == "tcp":
            return self.echo_hijacked()
        if kind == "slowecho" and headers.get("upgrade") == "tcp":
            return self.echo_hijacked(late=kind)
        if kind in SLOW_RUN:
            return self.slow_run(kind)
        if kind == "good":
            payload = (frame(1, b"out\x00\xff") + frame(2, b"") + frame(2, b"err") +
                       frame(1, bytes(range(256))) + frame(0, b"in"))
        elif kind == "slowcreate":
            payload = frame(1, b"started")
        elif kind == "endedpid0":
            payload = frame(1, b"reached")
        elif kind == "notrun":
            payload = frame(1, b"OCI runtime exec failed: exec: \"nope\": executable file not found")
        elif kind == "trunc":
            payload = frame(1, b"whole") + frame(1, b"cut short")[:10]
        else:
            payload = frame(1, b"fine") + frame(9, b"what")
        return self.send_raw_stream(payload)


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 128  # a batch opens many connections at once: a full backlog refuses them


class TLSServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # failed handshakes are what some tests are about


def serve_tls(cert_dir):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(cert_dir, "server.pem"), os.path.join(cert_dir, "server-key.pem"))
    ctx.verify_mode = ssl.CERT_REQUIRED
    # As Go's TLS server: a FIN at a record boundary is the end of what the client sends, and the
    # answer can still be written (OpenSSL 3 otherwise fails the whole connection on it).
    ctx.options |= getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
    ctx.load_verify_locations(os.path.join(cert_dir, "ca.pem"))
    srv = TLSServer(("127.0.0.1", 0), Scripted)
    srv.tls = ctx
    port_file = os.path.join(DIR, "port")
    with open(port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    srv.serve_forever()


def main():
    if MODE == "tls":
        return serve_tls(sys.argv[3])
    path = os.path.join(DIR, "engine.sock")
    if os.path.exists(path):
        os.unlink(path)
    Server(path, Recorder if MODE == "record" else Scripted).serve_forever()


if __name__ == "__main__":
    main()
