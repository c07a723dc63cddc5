#!/usr/bin/env python3
"""A stand-in "model API" in plain HTTP for spec/docker_proxy_spec.lua (the credential route of
the proxy sandstack adds goes to it as SANDSTACK_UPSTREAM). Every request's head is appended to
STATE/requests.jsonl, so the test can show what reached the upstream (the real key, never the
token).
  /v1/stream  SSE, chunked: event 1 at once, event 2 after GAP seconds, then the end; the time
              each is sent goes to STATE/stream.log
  otherwise   JSON {"ok": true, "path": ...}
Usage: model_standin.py ADDRESS PORT STATE_DIR [GAP]"""
import asyncio, json, os, sys, time

from http_peer import read_request_async

ADDR, PORT, STATE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
GAP = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0


def log(name, line):
    with open(os.path.join(STATE, name), "a") as f:
        f.write(line + "\n")


async def serve(reader, writer):
    try:
        method, path, headers, _ = await read_request_async(reader)
        log("requests.jsonl", json.dumps({"method": method, "path": path, "headers": headers}))
        if path.startswith("/v1/stream"):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            for i in (1, 2):
                # as long as a model's text event: the proxy's scrub of the key always holds back
                # the key's length less one byte until the next event (SECURITY.md)
                ev = ('event: message\ndata: {"n": %d, "text": "%s"}\n\n' % (i, "t" * 120)).encode()
                writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                await writer.drain()
                log("stream.log", "sent %d %.6f" % (i, time.time()))
                if i == 1:
                    await asyncio.sleep(GAP)
            writer.write(b"0\r\n\r\n")
        else:
            body = json.dumps({"ok": True, "path": path}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
    except Exception:
        pass
    writer.close()


async def main():
    server = await asyncio.start_server(serve, ADDR, PORT)
    open(os.path.join(STATE, "model.ready"), "w").close()
    await server.serve_forever()


asyncio.run(main())
