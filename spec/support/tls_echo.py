# A TLS stand-in for the credentials specs: one listener on :443 for every name of the test
# certificate. Each request (its SNI, method, path, headers and body) is appended to
# STATE/requests.jsonl and sent back as the answer, so a secret sent back would reach the sandbox
# unless the proxy masks it. STATE/echo.ready appears once it listens.
#   python3 tls_echo.py CERT KEY STATE
import asyncio, json, os, ssl, sys
CERT, KEY, STATE = sys.argv[1], sys.argv[2], sys.argv[3]
SNI = {}

async def serve(reader, writer):
    try:
        while True:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, path, _ = head[0].split(" ", 2)
            headers = {}
            for line in head[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers.setdefault(k.strip().lower(), []).append(v.strip())
            body = b""
            if "content-length" in headers:
                body = await reader.readexactly(int(headers["content-length"][0]))
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
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(CERT, KEY)
    ctx.sni_callback = lambda obj, name, c: SNI.__setitem__(id(obj), name)
    server = await asyncio.start_server(serve, "0.0.0.0", 443, ssl=ctx)
    open(os.path.join(STATE, "echo.ready"), "w").close()
    await server.serve_forever()

asyncio.run(main())
