#!/usr/bin/env python3
"""The destination for spec/proxy_splice_spec.lua, run in the test's outside namespace: raw TCP on
PORT, one thread per connection. The client's first line says what to do: "MODE N TAG". What the
peer sent and received (byte counts and sha256) goes to STATE_DIR/TAG.json when the connection is
done, so the spec can compare both ends even after a half-close left the peer no way to answer.

  swap N       send N random bytes and shutdown(SHUT_WR) while reading to EOF, at the same time
  first N      send N random bytes, shutdown(SHUT_WR), then read to EOF
  after_eof N  read to EOF, then send N random bytes and close
  cut N        send N random bytes and close, reading nothing more
  reset N      send N random bytes, then reset the connection (SO_LINGER 0)
  gen N        send N random bytes (STATE_DIR/TAG.progress: bytes sent so far), then close
  hold 0       send "hi\\n", read to EOF
Usage: splice_peer.py ADDRESS PORT STATE_DIR"""
import hashlib, json, os, socket, socketserver, struct, sys, threading

ADDRESS, PORT, STATE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
CHUNK = 65536


def send_random(sock, n, progress=None):
    h, sent = hashlib.sha256(), 0
    try:
        while sent < n:
            block = os.urandom(min(CHUNK, n - sent))
            sock.sendall(block)
            h.update(block)
            sent += len(block)
            if progress:
                with open(progress + ".tmp", "w") as f:
                    f.write(str(sent))
                os.replace(progress + ".tmp", progress)
        err = None
    except OSError as e:
        err = str(e)
    return {"sent": sent, "sent_sha": h.hexdigest(), "send_error": err}


def read_all(sock):
    h, got = hashlib.sha256(), 0
    try:
        while True:
            d = sock.recv(CHUNK)
            if not d:
                break
            h.update(d)
            got += len(d)
        err = None
    except OSError as e:
        err = str(e)
    return {"recv": got, "recv_sha": h.hexdigest(), "recv_error": err}


def record(tag, result):
    path = os.path.join(STATE, tag + ".json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        s = self.request
        line = b""
        while not line.endswith(b"\n"):
            d = s.recv(1)
            if not d:
                return
            line += d
        mode, n, tag = line.decode().split()
        n = int(n)
        result = {"mode": mode}
        if mode == "swap":
            out = {}
            sender = threading.Thread(target=lambda: (out.update(send_random(s, n)), s.shutdown(socket.SHUT_WR)))
            sender.start()
            result.update(read_all(s))
            sender.join()
            result.update(out)
        elif mode == "first":
            result.update(send_random(s, n))
            s.shutdown(socket.SHUT_WR)
            result.update(read_all(s))
        elif mode == "after_eof":
            result.update(read_all(s))
            result.update(send_random(s, n))
        elif mode in ("cut", "reset"):
            result.update(send_random(s, n))
            if mode == "reset":  # a close with linger 0 sends RST in place of FIN
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            record(tag, result)
            s.close()  # before socketserver's own shutdown(SHUT_WR), which would send a FIN first
            return
        elif mode == "gen":
            result.update(send_random(s, n, os.path.join(STATE, tag + ".progress")))
        elif mode == "hold":
            s.sendall(b"hi\n")
            result.update(read_all(s))
        record(tag, result)


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 1024


Server((ADDRESS, PORT), Handler).serve_forever()
