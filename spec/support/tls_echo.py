# A TLS stand-in for the credentials specs: one listener on :443 for every name of the test
# certificate. Each request (its SNI, method, path, headers and body) is appended to
# STATE/requests.jsonl and sent back as the answer, so a secret sent back would reach the sandbox
# unless the proxy masks it. STATE/echo.ready appears once it listens.
#   python3 tls_echo.py CERT KEY STATE
import asyncio, json, os, sys

from http_peer import read_request_async, tls_context

CERT, KEY, STATE = sys.argv[1], sys.argv[2], sys.argv[3]
SNI = {}

async def serve(reader, writer):
    try:
        while True:
            method, path, headers, body = await read_request_async(reader)
            seen = {"sni": SNI.get(id(writer.get_extra_info("ssl_object"))), "method": method, "path": path,
                    "headers": headers, "body": body.decode("latin-1")}
            line = json.dumps(seen)
            with open(os.path.join(STATE, "requests.jsonl"), "a") as f:
                f.write(line + "\n")
            out = line.encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(out), out))
            await writer.drain()
    except Exception:
        pass
    writer.close()

async def main():
    server = await asyncio.start_server(serve, "0.0.0.0", 443, ssl=tls_context(CERT, KEY, SNI))
    open(os.path.join(STATE, "echo.ready"), "w").close()
    await server.serve_forever()

asyncio.run(main())
