#!/usr/bin/env python3
"""Clients for spec/proxy_splice_spec.lua: raw CONNECT tunnels through the proxy to
spec/support/splice_peer.py, moving random bytes and hashing them at both ends. Each command
prints one JSON object. splice_client.py COMMAND PROXY_HOST PROXY_PORT TARGET TOKEN ARGS...

  swap N TAG [EARLY]            N bytes each way at once, each side shuts down its sending half;
                                EARLY of them sent with the CONNECT head, before the 200
  first N TAG                   the peer sends N and shuts down first; then the client sends N
  after_eof UP DOWN TAG         the client sends UP and shuts down; then the peer sends DOWN
  read MODE N TAG               the peer sends N (cut, reset or gen); the client reads to the end
  leave N TAG AFTER HOW         the peer sends N; the client reads AFTER, then close or reset
  stall N TAG SECONDS PID STATE the peer sends N; the client reads nothing for SECONDS (the
                                proxy's RSS and the peer's progress sampled), then reads it all
  many K N PREFIX STATE         K concurrent swaps of N bytes, each checked against the peer's
  hold K DIR                    K idle tunnels ("hi" read on each); DIR/ready once all are
                                open, closed when DIR/release appears
  fill K N DIR                  K tunnels on which the peer sends N and the client reads
                                nothing; DIR/ready and DIR/release as for hold"""
import hashlib, json, os, socket, struct, sys, threading, time

import proxy_client  # its CONNECT (this script's directory is on sys.path)

CHUNK = 65536


def tunnel(ph, pp, target, token, early=b"", timeout=120):
    """A tunnel through the proxy; early: bytes sent with the CONNECT head, before the 200. The
    answer's head is read alone: the tunnel's first bytes stay in the socket."""
    s, answer = proxy_client.connect(ph, pp, target, token, early=early, timeout=timeout)
    return s, answer["status"]


def send_random(s, n, h=None, sent=0):
    h = h or hashlib.sha256()
    while sent < n:
        block = os.urandom(min(CHUNK, n - sent))
        s.sendall(block)
        h.update(block)
        sent += len(block)
    return {"sent": sent, "sent_sha": h.hexdigest()}


def read_all(s, limit=None):
    h, got, err = hashlib.sha256(), 0, None
    try:
        while limit is None or got < limit:
            d = s.recv(CHUNK if limit is None else min(CHUNK, limit - got))
            if not d:
                break
            h.update(d)
            got += len(d)
    except OSError as e:
        err = type(e).__name__
    return {"recv": got, "recv_sha": h.hexdigest(), "recv_error": err}


def opened(args, mode, n, tag):
    s, status = tunnel(*args)
    s.sendall(("%s %d %s\n" % (mode, n, tag)).encode())
    return s, {"status": status, "port": s.getsockname()[1]}


def swap(args, n, tag, early=0):
    if early:  # the peer's line and the first bytes go with the CONNECT head, in one write
        h, block = hashlib.sha256(), os.urandom(early)
        h.update(block)
        s, status = tunnel(*args, early=("swap %d %s\n" % (n, tag)).encode() + block)
        out = {"status": status, "port": s.getsockname()[1]}
    else:
        h, s, out = None, *opened(args, "swap", n, tag)
    sent = {}
    t = threading.Thread(target=lambda: (sent.update(send_random(s, n, h, early)), s.shutdown(socket.SHUT_WR)))
    t.start()
    out.update(read_all(s))
    t.join()
    out.update(sent)
    s.close()
    return out


def first(args, n, tag):
    s, out = opened(args, "first", n, tag)
    out.update(read_all(s))  # to the peer's FIN
    out.update(send_random(s, n))  # the other direction is still open
    s.shutdown(socket.SHUT_WR)
    s.close()
    return out


def after_eof(args, up, down, tag):
    s, out = opened(args, "after_eof", down, tag)
    out.update(send_random(s, up))
    s.shutdown(socket.SHUT_WR)
    out.update(read_all(s))  # the peer answers only after it saw our FIN
    s.close()
    return out


def read(args, mode, n, tag):
    s, out = opened(args, mode, n, tag)
    out.update(read_all(s))
    s.close()
    return out


def leave(args, n, tag, after, how):
    s, out = opened(args, "gen", n, tag)
    out.update(read_all(s, after))
    if how == "reset":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    return out


def rss_kb(pid):
    for line in open("/proc/%s/status" % pid):
        if line.startswith("VmRSS"):
            return int(line.split()[1])


def progress(state, tag):
    try:
        return int(open(os.path.join(state, tag + ".progress")).read())
    except (OSError, ValueError):
        return 0


def stall(args, n, tag, seconds, pid, state):
    before = rss_kb(pid)
    s, out = opened(args, "gen", n, tag)
    time.sleep(seconds / 2)
    early = progress(state, tag)
    time.sleep(seconds / 2)
    out.update(rss_before=before, rss_stalled=rss_kb(pid), progress_half=early, progress_stalled=progress(state, tag))
    out.update(read_all(s))
    s.close()
    return out


def wait_state(state, tag, seconds=120):
    path = os.path.join(state, tag + ".json")
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            return json.load(open(path))
        except (OSError, ValueError):
            time.sleep(0.05)
    return None


def many(args, k, n, prefix, state):
    results, threads = [None] * k, []

    def one(i):
        try:
            results[i] = swap(args, n, "%s-%d" % (prefix, i))
        except OSError as e:
            results[i] = {"error": str(e)}

    for i in range(k):
        threads.append(threading.Thread(target=one, args=(i,)))
        threads[-1].start()
    for t in threads:
        t.join()
    failures = []
    for i, r in enumerate(results):
        peer = wait_state(state, "%s-%d" % (prefix, i))
        good = (r.get("status") == 200 and peer is not None and r.get("recv") == n and peer["recv"] == n
                and r["recv_sha"] == peer["sent_sha"] and r["sent_sha"] == peer["recv_sha"])
        if not good:
            failures.append({"i": i, "client": r, "peer": peer})
    return {"ok": k - len(failures), "failures": failures[:3]}


def held_until_released(socks, d):
    """DIR/ready now; the sockets closed once DIR/release appears (or after 120 s)."""
    open(os.path.join(d, "ready"), "w").close()
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(d, "release")) and time.time() < deadline:
        time.sleep(0.05)
    for s in socks:
        s.close()


def hold(args, k, d):
    socks, hi = [], 0
    for i in range(k):
        s, _ = opened(args, "hold", 0, "hold-%d" % i)
        socks.append(s)
        hi += s.recv(16) == b"hi\n"
    held_until_released(socks, d)
    return {"opened": len(socks), "hi": hi}


def fill(args, k, n, d):
    socks = [opened(args, "gen", n, "fill-%d" % i)[0] for i in range(k)]
    held_until_released(socks, d)
    return {"opened": len(socks)}


def main():
    cmd, args, rest = sys.argv[1], sys.argv[2:6], sys.argv[6:]
    if cmd == "swap":
        out = swap(args, int(rest[0]), rest[1], int(rest[2]) if len(rest) > 2 else 0)
    elif cmd == "first":
        out = first(args, int(rest[0]), rest[1])
    elif cmd == "after_eof":
        out = after_eof(args, int(rest[0]), int(rest[1]), rest[2])
    elif cmd == "read":
        out = read(args, rest[0], int(rest[1]), rest[2])
    elif cmd == "leave":
        out = leave(args, int(rest[0]), rest[1], int(rest[2]), rest[3])
    elif cmd == "stall":
        out = stall(args, int(rest[0]), rest[1], float(rest[2]), rest[3], rest[4])
    elif cmd == "many":
        out = many(args, int(rest[0]), int(rest[1]), rest[2], rest[3])
    elif cmd == "fill":
        out = fill(args, int(rest[0]), int(rest[1]), rest[2])
    elif cmd == "hold":
        out = hold(args, int(rest[0]), rest[1])
    else:
        raise SystemExit("unknown command " + cmd)
    print(json.dumps(out))


main()
