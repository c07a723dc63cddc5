#!/usr/bin/env python3
"""A DNS server that holds its answer until told, for spec/proxy_live_spec.lua's pin test.

  live_dns.py ADDRESS NAME ANSWER STATE_DIR
UDP ADDRESS:53. An A query for NAME: writes STATE_DIR/asked, waits (at most 0.8 s, under the
resolver's 1 s timeout) for STATE_DIR/go, then answers ANSWER. Any other query: an empty NOERROR
answer at once. STATE_DIR/dns.ready once listening."""
import os, socket, struct, sys, time

ADDRESS, NAME, ANSWER, STATE = sys.argv[1], sys.argv[2].lower(), sys.argv[3], sys.argv[4]


def qname(pkt):
    i, labels = 12, []
    while pkt[i]:
        n = pkt[i]
        labels.append(pkt[i + 1:i + 1 + n].decode("latin-1"))
        i += 1 + n
    qtype = struct.unpack("!H", pkt[i + 1:i + 3])[0]
    return ".".join(labels).lower(), qtype, i + 5


s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((ADDRESS, 53))
open(os.path.join(STATE, "dns.ready"), "w").close()
while True:
    pkt, peer = s.recvfrom(512)
    name, qtype, end = qname(pkt)
    question = pkt[12:end]
    answers = b""
    count = 0
    if name == NAME and qtype == 1:
        open(os.path.join(STATE, "asked"), "w").close()
        deadline = time.time() + 0.8
        while time.time() < deadline and not os.path.exists(os.path.join(STATE, "go")):
            time.sleep(0.01)
        answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton(ANSWER)
        count = 1
    head = pkt[:2] + struct.pack("!HHHHH", 0x8180, 1, count, 0, 0)
    s.sendto(head + question + answers, peer)
