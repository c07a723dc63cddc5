#!/usr/bin/env python3
"""The outside world for spec/proxy_core_spec.lua and bench/proxy_bench.sh, run in the test's
"outside" network namespace. One process, several listeners:

  :443   TLS (test CA) for allowed.test / denied.test: GET any path -> "hello from <sni> <path>"
  :80    plain HTTP: answers JSON {method, path, headers} (what the proxy forwarded)
  :8443  TLS "model API" (model.test): /v1/echo -> JSON of the request headers and body;
         /v1/stream -> SSE: event 1 at once, event 2 after STREAM_GAP seconds, then the end;
         writes the time each event was sent to <state>/stream.log
  :9000  sink: accepts and never reads (a reader that does not read)
  :9001  flood: writes zeros as fast as the peer takes them
  :9002  hold: accepts, answers "hi\\n", keeps the connection until the peer closes
  :9003  echo
  :9004  source: sends N bytes (first line of the request: N) then closes (for the bench)
Usage: proxy_standin.py CERT KEY STATE_DIR
"""
import asyncio, json, os, resource, sys, time

from http_peer import read_request_async as read_head, tls_context

CERT, KEY, STATE = sys.argv[1], sys.argv[2], sys.argv[3]
SNI_SEEN = {}  # the server name each TLS connection asked for, by its SSL object
STREAM_GAP = float(os.environ.get("STREAM_GAP", "1.5"))
_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))


def respond(writer, status, body, ctype="text/plain", extra=""):
    writer.write(("HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
                  % (status, ctype, len(body), extra)).encode() + body)


def guarded(handler):
    """A connection handler whose errors (the peer going away, a malformed request) end only
    that connection, which is closed afterwards."""
    async def run(reader, writer):
        try:
            await handler(reader, writer)
        except Exception:
            pass
        writer.close()
    return run


async def respond_request(writer, method, path, headers, body):
    """Answers with the request the proxy forwarded, as JSON; the headers also hex-encoded, which
    the proxy's scrub of secrets in responses does not recognise (a test sees what arrived)."""
    respond(writer, 200, json.dumps({"method": method, "path": path, "headers": headers,
                                     "headers_hex": json.dumps(headers).encode().hex(),
                                     "body": body.decode("latin-1")}).encode(), "application/json")
    await writer.drain()


@guarded
async def tls_site(reader, writer):
    sni = SNI_SEEN.pop(id(writer.get_extra_info("ssl_object")), None)
    method, path, headers, body = await read_head(reader)
    respond(writer, 200, ("hello from %s %s\n" % (sni, path)).encode())
    await writer.drain()


@guarded
async def plain_site(reader, writer):
    await respond_request(writer, *(await read_head(reader)))


async def stream_events(writer):
    """/v1/stream: SSE event 1 at once, event 2 after STREAM_GAP seconds, each logged with its time."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                 b"Connection: close\r\n\r\n")
    log = open(os.path.join(STATE, "stream.log"), "a")
    for i in (1, 2):
        # as long as a model's text event: the proxy's scrub of the key always holds back the
        # key's length less one byte until the next event (SECURITY.md), so "n" is seen at once
        ev = ("event: message\ndata: {\"n\": %d, \"text\": \"%s\"}\n\n" % (i, "t" * 120)).encode()
        writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
        await writer.drain()
        log.write("sent %d %.6f\n" % (i, time.time()))
        log.flush()
        if i == 1:
            await asyncio.sleep(STREAM_GAP)
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    log.write("end %.6f\n" % time.time())
    log.close()


@guarded
async def model(reader, writer):
    method, path, headers, body = await read_head(reader)
    if path.startswith("/v1/stream"):
        await stream_events(writer)
    else:
        await respond_request(writer, method, path, headers, body)


async def sink(reader, writer):
    await asyncio.sleep(3600)


async def flood(reader, writer):
    chunk = b"\0" * 65536
    try:
        while True:
            writer.write(chunk)
            await writer.drain()
    except Exception:
        pass


@guarded
async def hold(reader, writer):
    writer.write(b"hi\n")
    await writer.drain()
    await reader.read()


@guarded
async def echo(reader, writer):
    while True:
        data = await reader.read(65536)
        if not data:
            break
        writer.write(data)
        await writer.drain()


@guarded
async def source(reader, writer):
    n = int((await reader.readline()).strip())
    chunk = b"x" * 262144
    while n > 0:
        k = min(n, len(chunk))
        writer.write(chunk[:k])
        await writer.drain()
        n -= k


# (handler, port, TLS?, backlog)
LISTENERS = [
    (tls_site, 443, True, 2048), (plain_site, 80, False, 2048), (model, 8443, True, 2048),
    (sink, 9000, False, 2048), (flood, 9001, False, 2048), (hold, 9002, False, 4096),
    (echo, 9003, False, 2048), (source, 9004, False, 2048),
]


async def main():
    ctx = tls_context(CERT, KEY, SNI_SEEN)
    servers = [await asyncio.start_server(handler, "0.0.0.0", port, ssl=ctx if tls else None, backlog=backlog)
               for handler, port, tls, backlog in LISTENERS]
    open(os.path.join(STATE, "standin.ready"), "w").close()
    await asyncio.gather(*(s.serve_forever() for s in servers))


asyncio.run(main())
