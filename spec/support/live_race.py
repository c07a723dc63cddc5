#!/usr/bin/env python3
"""Plain-HTTP requests through the proxy, many at once, for spec/proxy_live_spec.lua's swap race.

  live_race.py PROXY_HOST PROXY_PORT TOKEN HOST N STOP_FILE
sends GET http://HOST/a/<i> and GET http://HOST/b/<i> alternately, 16 at a time, until N have
been answered and STOP_FILE exists; prints one JSON list of {path, status, rule} (rule from a
403's JSON body, the policy rule the refusal names)."""
import base64, json, os, socket, sys, threading

ph, pp, token, host, n, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
auth = base64.b64encode(("sandstack:" + token).encode()).decode()
results, lock, counter = [], threading.Lock(), [0]


def one(i):
    path = ("/a/%d" if i % 2 == 0 else "/b/%d") % i
    s = socket.create_connection((ph, pp), timeout=30)
    s.sendall(("GET http://%s%s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n"
               % (host, path, host, auth)).encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    rule = None
    if status == 403:
        try:
            rule = json.loads(body).get("policy", {}).get("rule")
        except ValueError:
            pass
    return {"path": path, "status": status, "rule": rule}


def worker():
    while True:
        with lock:
            i = counter[0]
            if i >= n and os.path.exists(stop):
                return
            counter[0] += 1
        r = one(i)
        with lock:
            results.append(r)


threads = [threading.Thread(target=worker) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(results))
