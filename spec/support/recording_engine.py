#!/usr/bin/env python3
"""A pass-through in front of the engine's socket that records every request it forwards.

    recording_engine.py LISTEN_SOCKET ENGINE_SOCKET LOG_FILE

Each request (method, target, body) becomes one JSON line in LOG_FILE, in the order the
requests reached it; bytes go both ways unchanged. Only the client's side is parsed (request
heads and Content-Length or chunked bodies), so keep-alive and streamed answers pass as they
are. Used by spec/docker_plan_spec.lua to compare what the engine received with the plan."""
import json
import os
import socket
import sys
import threading


def read_line(conn, buf):
    while b"\r\n" not in buf[0]:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        buf[0] += chunk
    line, buf[0] = buf[0].split(b"\r\n", 1)
    return line


def read_exact(conn, buf, n):
    while len(buf[0]) < n:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        buf[0] += chunk
    out, buf[0] = buf[0][:n], buf[0][n:]
    return out


def client_to_engine(client, engine, log, lock):
    buf = [b""]
    try:
        while True:
            start = read_line(client, buf)
            if start is None:
                break
            head = [start]
            headers = {}
            while True:
                line = read_line(client, buf)
                if line is None:
                    return
                head.append(line)
                if line == b"":
                    break
                k, _, v = line.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            body = b""
            raw_body = b""
            if "content-length" in headers:
                body = read_exact(client, buf, int(headers["content-length"])) or b""
                raw_body = body
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size_line = read_line(client, buf)
                    size = int(size_line.split(b";")[0], 16)
                    data = read_exact(client, buf, size + 2)
                    raw_body += size_line + b"\r\n" + data
                    body += data[:-2]
                    if size == 0:
                        break
            method, target, _ = start.decode("latin-1").split(" ", 2)
            with lock:
                log.write(json.dumps({"method": method, "target": target,
                                      "body": body.decode("utf-8", "replace")}) + "\n")
                log.flush()
            engine.sendall(b"\r\n".join(head) + b"\r\n" + raw_body)
    except OSError:
        pass
    finally:
        try:
            engine.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def engine_to_client(engine, client):
    try:
        while True:
            data = engine.recv(65536)
            if not data:
                break
            client.sendall(data)
    except OSError:
        pass
    finally:
        try:
            client.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def main():
    listen_path, engine_path, log_path = sys.argv[1:4]
    if os.path.exists(listen_path):
        os.unlink(listen_path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(listen_path)
    srv.listen(64)
    log = open(log_path, "a", encoding="utf-8")
    lock = threading.Lock()
    while True:
        client, _ = srv.accept()
        engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        engine.connect(engine_path)
        threading.Thread(target=client_to_engine, args=(client, engine, log, lock), daemon=True).start()
        threading.Thread(target=engine_to_client, args=(engine, client), daemon=True).start()


if __name__ == "__main__":
    main()
