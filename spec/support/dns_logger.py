#!/usr/bin/env python3
"""A resolver that answers nothing and writes down every name it is asked for.

    dns_logger.py ADDR PORT LOGFILE

Listens on ADDR:PORT over UDP and TCP; each query's name goes to LOGFILE on a line of its own,
and the answer is REFUSED. Used as the engine host's upstream resolver, to see which look-ups
Docker's embedded DNS forwards out of a stack (spec/docker_dns_spec.lua)."""
import socket
import socketserver
import sys
import threading


def qname(msg):
    labels, i = [], 12
    while i < len(msg):
        n = msg[i]
        if n == 0 or n & 0xC0:
            break
        labels.append(msg[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    return ".".join(labels)


def refused(msg):
    if len(msg) < 12:
        return b""
    flags = 0x8000 | (msg[2] & 0x79) << 8 | 0x0005  # QR, opcode and RD kept, RCODE=REFUSED
    return msg[:2] + flags.to_bytes(2, "big") + msg[4:6] + b"\0\0\0\0\0\0" + msg[12:]


class Log:
    def __init__(self, path):
        self.lock, self.path = threading.Lock(), path

    def add(self, name):
        with self.lock, open(self.path, "a") as f:
            f.write(name + "\n")


def main():
    addr, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    log = Log(path)

    class UDP(socketserver.BaseRequestHandler):
        def handle(self):
            data, sock = self.request
            log.add(qname(data))
            sock.sendto(refused(data), self.client_address)

    class TCP(socketserver.BaseRequestHandler):
        def handle(self):
            head = self.request.recv(2)
            if len(head) < 2:
                return
            data = self.request.recv(int.from_bytes(head, "big"))
            log.add(qname(data))
            out = refused(data)
            self.request.sendall(len(out).to_bytes(2, "big") + out)

    socketserver.UDPServer.allow_reuse_address = True
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    udp = socketserver.UDPServer((addr, port), UDP)
    tcp = socketserver.ThreadingTCPServer((addr, port), TCP)
    threading.Thread(target=tcp.serve_forever, daemon=True).start()
    open(path, "a").close()
    print("listening", flush=True)
    udp.serve_forever()


if __name__ == "__main__":
    main()
