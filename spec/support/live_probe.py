#!/usr/bin/env python3
"""Probes spec/docker_live_egress_spec.lua runs inside the sandbox (python3 - CMD ARGS < this file);
its tunnels through the proxy are spec/support/proxy_client.py's.

  scan HOST              connects to every TCP port 1..65535 of HOST: JSON list of those that accept
  unix PATH...           connect(2) to each unix socket path ("@name": the abstract namespace):
                         JSON {path: "connected" | errno name}
  find                   every unix socket in this filesystem and every name holding "control":
                         JSON {sockets: [...], control: [...]}
  procs                  JSON list of the command lines this sandbox can see in /proc
  send HOST PORT TEXT    sends TEXT (\\n for newlines), then reads until EOF: the answer's first line
"""
import asyncio, errno, json, os, socket, sys


async def scan(host):
    addr = socket.gethostbyname(host)
    sem = asyncio.Semaphore(400)
    open_ports = []

    async def one(port):
        async with sem:
            try:
                _, w = await asyncio.wait_for(asyncio.open_connection(addr, port), 3)
                open_ports.append(port)
                w.close()
            except (OSError, asyncio.TimeoutError):
                pass

    await asyncio.gather(*(one(p) for p in range(1, 65536)))
    print(json.dumps(sorted(open_ports)))


def unix(paths):
    out = {}
    for p in paths:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect("\0" + p[1:] if p.startswith("@") else p)
            out[p] = "connected"
        except OSError as e:
            out[p] = errno.errorcode.get(e.errno, str(e))
        finally:
            s.close()
    print(json.dumps(out))


def find():
    import stat
    socks, named = [], []
    for root, dirs, files in os.walk("/", onerror=lambda e: None):
        if root == "/" and "proc" in dirs:
            dirs.remove("proc")
        if root == "/" and "sys" in dirs:
            dirs.remove("sys")
        for n in dirs + files:
            p = os.path.join(root, n)
            if "control" in n:
                named.append(p)
            try:
                if stat.S_ISSOCK(os.lstat(p).st_mode):
                    socks.append(p)
            except OSError:
                pass
    # the abstract namespace and every unix socket this network namespace has open
    try:
        with open("/proc/net/unix") as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if len(parts) >= 8:
                    socks.append(parts[7])
    except OSError:
        pass
    print(json.dumps({"sockets": socks, "control": named}))


def procs():
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out.append(f.read().replace(b"\0", b" ").decode("latin-1").strip())
            except OSError:
                pass
    print(json.dumps(out))


def send(host, port, text):
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(text.replace("\\n", "\n").encode())
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    print(json.dumps({"first_line": data.split(b"\r\n")[0].decode("latin-1"), "bytes": len(data)}))


cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "scan":
    asyncio.run(scan(args[0]))
elif cmd == "unix":
    unix(args)
elif cmd == "find":
    find()
elif cmd == "procs":
    procs()
elif cmd == "send":
    send(*args)
else:
    sys.exit("unknown command " + cmd)
