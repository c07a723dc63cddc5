#!/usr/bin/env python3
"""Peers for spec/proxy_hostile_spec.lua: the servers the attacks of a sandboxed agent on
sandstack-proxy's CONNECT tunnels and address checks need (the attacks themselves are commands of
spec/support/proxy_client.py). They run until they are killed.

  proxy_hostile.py peer CERT KEY READY_FILE        outside: the servers an attack needs
      :8444  a lenient TLS server: it skips records before the ClientHello (a warning alert), as
             Go and BoringSSL servers do, then answers "hello from <sni>" (test certificate)
      :2222  an SSH-like server: speaks first ("SSH-2.0-sandstack-test"), then echoes
      [::]:8081  plain HTTP over IPv6: "v6 <local address>" (the embedded-IPv4 controls)
  proxy_hostile.py local READY_FILE                 proxy side: 127.0.0.1:9080 and :9999 answer
                                                    plain HTTP "local <port>"
"""
import socket, struct, sys, threading

from http_peer import read_request, serve, tls_context


def recv_exact(c, n):
    out = b""
    while len(out) < n:
        d = c.recv(n - len(out))
        if not d:
            raise EOFError
        out += d
    return out


SNI_SEEN = {}  # the server name each TLS connection asked for, by its socket


def lenient_tls(ctx):
    def handle(c, _port):
        c.settimeout(10)
        while True:  # drop whole records until the handshake record that holds the hello
            head = c.recv(5, socket.MSG_PEEK)
            if len(head) < 5:
                return
            if head[0] == 0x16:
                break
            recv_exact(c, 5 + struct.unpack("!H", head[3:5])[0])
        t = ctx.wrap_socket(c, server_side=True)
        t.recv(65536)
        body = ("hello from %s\n" % SNI_SEEN.pop(id(t), None)).encode()
        t.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        t.close()
    return handle


def ssh_like(c, _port):
    c.sendall(b"SSH-2.0-sandstack-test\r\n")
    while True:
        d = c.recv(65536)
        if not d:
            return
        c.sendall(d)


def http_answer(text):
    def handle(c, _port):
        c.settimeout(10)
        if b"\r\n\r\n" not in read_request(c):
            return
        body = (text(c) + "\n").encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    return handle


def cmd_peer(cert, key, ready):
    serve(8444, lenient_tls(tls_context(cert, key, SNI_SEEN)))
    serve(2222, ssh_like)
    serve(8081, http_answer(lambda c: "v6 " + c.getsockname()[0]), addr="::")
    open(ready, "w").close()
    threading.Event().wait()


def cmd_local(ready):
    for port in (9080, 9999):
        serve(port, http_answer(lambda c: "local %d" % c.getsockname()[1]), addr="127.0.0.1")
    open(ready, "w").close()
    threading.Event().wait()


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1]](*sys.argv[2:])
