#!/usr/bin/env python3
"""Hostile HTTP agents for the readiness specs (spec/docker_ready_spec.lua), on 127.0.0.1 only.

    hostile_http.py PORTS_FILE HITS_FILE [LIFETIME_SECONDS]

Starts one listener per behaviour on an ephemeral loopback port and, once all listen, writes
"name port" lines to PORTS_FILE (renamed into place, so a reader never sees half of it):

  ok        200 with a 3-byte body: the control that makes a readiness wait succeed
  drip      the answer ("HTTP/1.1 200 OK ..." then an endless body) one byte every 0.5 s; it
            gives up after DRIP_MAX seconds so that a client without a deadline ends the test
            (with a measurable overrun) instead of hanging it
  huge      a 200 header, then 512 MiB of 'x' (or until the client hangs up)
  redirect  302 to http://127.0.0.1:<control>/admin?action=wipe
  control   the redirect's target: appends every request line it gets to HITS_FILE, answers 200
  once      302 to its first request; every later one is read and never answered (HOLD_MAX at
            most, or until the client hangs up): an agent that answered once, then hung

The process exits by itself after LIFETIME_SECONDS (default 600), so a crashed spec leaves
nothing running; the spec ends it by pid in teardown.
"""
import os
import socket
import sys
import threading
import time

DRIP_MAX = 20.0
HOLD_MAX = 30.0
HUGE_TOTAL = 512 * 1024 * 1024
CHUNK = b"x" * 65536


def read_request(conn):
    """Reads up to the end of the request head (a readiness GET has no body)."""
    data = b""
    conn.settimeout(10)
    while b"\r\n\r\n" not in data and len(data) < 65536:
        part = conn.recv(4096)
        if not part:
            break
        data += part
    return data


def serve_ok(conn, _ctx):
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")


def serve_drip(conn, _ctx):
    read_request(conn)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
    end = time.monotonic() + DRIP_MAX
    i = 0
    while time.monotonic() < end:
        conn.sendall(head[i:i + 1] if i < len(head) else b"x")
        i += 1
        time.sleep(0.5)


def serve_huge(conn, _ctx):
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n" % HUGE_TOTAL)
    sent = 0
    while sent < HUGE_TOTAL:
        conn.sendall(CHUNK)
        sent += len(CHUNK)


def serve_redirect(conn, ctx):
    read_request(conn)
    loc = "http://127.0.0.1:%d/admin?action=wipe" % ctx["control"]
    conn.sendall(("HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n"
                  "Connection: close\r\n\r\n" % loc).encode())


def serve_once(conn, ctx):
    read_request(conn)
    with ctx["lock"]:
        first = not ctx.get("once_answered")
        ctx["once_answered"] = True
    if first:
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n"
                     b"Connection: close\r\n\r\n")
        return
    conn.settimeout(HOLD_MAX)
    conn.recv(1)  # returns when the client hangs up; raises after HOLD_MAX


def serve_control(conn, ctx):
    req = read_request(conn)
    line = req.split(b"\r\n", 1)[0].decode("latin-1")
    with ctx["lock"]:
        with open(ctx["hits"], "a") as f:
            f.write(line + "\n")
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")


def handle(fn, conn, ctx):
    try:
        fn(conn, ctx)
    except OSError:
        pass  # the client hung up: that is what a bounded client does
    finally:
        conn.close()


def accept_loop(srv, fn, ctx):
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(fn, conn, ctx), daemon=True).start()


def main():
    ports_file, hits_file = sys.argv[1], sys.argv[2]
    lifetime = float(sys.argv[3]) if len(sys.argv) > 3 else 600.0
    handlers = {"ok": serve_ok, "drip": serve_drip, "huge": serve_huge,
                "redirect": serve_redirect, "control": serve_control, "once": serve_once}
    ctx = {"hits": hits_file, "lock": threading.Lock()}
    ports = {}
    socks = {}
    for name in handlers:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        socks[name] = s
        ports[name] = s.getsockname()[1]
    ctx["control"] = ports["control"]
    open(hits_file, "a").close()
    for name, fn in handlers.items():
        threading.Thread(target=accept_loop, args=(socks[name], fn, ctx), daemon=True).start()
    tmp = ports_file + ".tmp"
    with open(tmp, "w") as f:
        for name, port in ports.items():
            f.write("%s %d\n" % (name, port))
    os.rename(tmp, ports_file)
    time.sleep(lifetime)


if __name__ == "__main__":
    main()
