-- Issue 23 item 1: the inspected request the origin receives is exactly the one the proxy checked.
-- The attack: an inspected CONNECT whose request head and body (separate TLS records) reach the
-- proxy in one read while the origin's TLS handshake is still pending. Before the fix, the body
-- bytes grew the buffer the parsed head pointed into, and the head sent on was built from freed
-- memory: the origin got a request the policy never saw (another connection's, or heap bytes),
-- and the ASan build aborted. The interleaving is made certain, whatever the machine's load: the
-- origin holds back its handshake until every client of a round has sent its request (the
-- clients leave a mark, the spec then lets the origin go). Denied requests ("POST /ad") run
-- beside the admitted ones, so freed memory holds their heads; MALLOC_PERTURB_ makes glibc fill
-- freed memory in the release build too. The origin records every request it gets; each must
-- be exactly what an audit line admitted. As spec/proxy_inspect_spec.lua: two network
-- namespaces, a test CA the proxy trusts through SANDSTACK_UPSTREAM_CA, the clients trusting the
-- proxy's bundle. Needs root and ip(8).
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("ssu1")
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local in_p, in_o, audit, proxies = H.in_p, H.in_o, H.audit, H.proxies
local work

local SKIP = H.missing { { "test -r /etc/ssl/certs/ca-certificates.crt", "needs the system CA bundle" } }

local POLICY = { { host = "slow.test", methods = { "POST" }, paths = { "/up" } } } -- inspected: POST /up only

-- A TLS origin that holds back its handshake until the file GO exists (so the proxy's handshake
-- with it is pending when the request arrives), then reads one request (Content-Length body) and
-- appends it as a JSON line to the log: request line, body length and sha256, whether the head
-- was printable text; or the error, with "line" empty when no request came (a denied one).
local SLOW_ORIGIN = [[
import hashlib, json, os, socket, ssl, sys, threading, time
cert, key, log, ready, go = sys.argv[1:6]
ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(cert, key)
srv = socket.create_server(("0.0.0.0", 443), backlog=64)
lock = threading.Lock()
def serve(c):
    rec = {"line": ""}
    try:
        for _ in range(400):
            if os.path.exists(go):
                break
            time.sleep(0.025)
        t = ctx.wrap_socket(c, server_side=True)
        t.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 1 << 20:
            d = t.recv(65536)
            if not d:
                break
            data += d
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        rec["line"] = lines[0].decode("latin-1")
        rec["method"] = parts[0].decode("latin-1")
        rec["target"] = parts[1].decode("latin-1") if len(parts) > 1 else ""
        rec["clean"] = all(32 <= b < 127 for b in head.replace(b"\r\n", b""))
        n = 0
        for l in lines[1:]:
            k, _, v = l.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v.strip())
        while len(body) < n:
            d = t.recv(65536)
            if not d:
                break
            body += d
        rec["body_len"] = len(body)
        rec["body_sha"] = hashlib.sha256(body).hexdigest()
        t.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
        t.close()
    except Exception as e:
        rec["error"] = repr(e)
        c.close()
    with lock:
        with open(log, "a") as f:
            f.write(json.dumps(rec) + "\n")
open(ready, "w").close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
]]

-- The hostile client: CONNECT, TLS (memory BIOs, so the record boundaries are ours), then the
-- head and the body written as separate TLS records and sent to the proxy in ONE send. Prints
-- the status of the inner answer and the body's sha256, as JSON. Touches MARK once it has sent.
local CLIENT = [[
import base64, hashlib, json, socket, ssl, sys
ph, pp, cafile, token, method, path, size, mark = sys.argv[1:9]
size = int(size)
body = bytes((i * 7 + len(path)) % 251 for i in range(size))
s = socket.create_connection((ph, int(pp)), timeout=10)
auth = base64.b64encode(("sandstack:" + token).encode()).decode()
s.sendall(("CONNECT slow.test:443 HTTP/1.1\r\nHost: slow.test:443\r\nProxy-Authorization: Basic %s\r\n\r\n" % auth).encode())
head = b""
while b"\r\n\r\n" not in head:
    d = s.recv(1)
    if not d:
        break
    head += d
out = {"connect": head.split(b"\r\n")[0].decode(), "sha": hashlib.sha256(body).hexdigest()}
ctx = ssl.create_default_context(cafile=cafile)
ctx.set_alpn_protocols(["http/1.1"])
inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
tls = ctx.wrap_bio(inc, outg, server_hostname="slow.test")
def pump():
    d = outg.read()
    if d:
        s.sendall(d)
try:
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            pump()
            d = s.recv(65536)
            if not d:
                raise EOFError("proxy closed during the handshake")
            inc.write(d)
    pump()
    req = ("%s %s HTTP/1.1\r\nHost: slow.test\r\nContent-Length: %d\r\n\r\n" % (method, path, size)).encode()
    tls.write(req)
    tls.write(body)
    s.sendall(outg.read())  # head and body records in one send: one read at the proxy
    open(mark, "w").close()
    raw = b""
    while True:
        try:
            d = tls.read(65536)
            if not d:
                break
            raw += d
            continue
        except ssl.SSLWantReadError:
            pass
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            break
        pump()
        d = s.recv(65536)
        if not d:
            break
        inc.write(d)
    out["reply"] = raw.decode("latin-1")
    out["status"] = int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else None
except Exception as e:
    out["error"] = repr(e)
open(mark, "w").close()
print(json.dumps(out))
]]

local function setup()
  work = H.net_up("/tmp/ssu1-uaf.XXXXXX", "198.51.100.10 slow.test\n", { "198.51.100.10" })
  local d = h.q(work)
  H.make_certs("ssu1-test-ca", "slow.test", { "slow.test" })
  h.write_file(work .. "/slow_origin.py", SLOW_ORIGIN)
  h.write_file(work .. "/client.py", CLIENT)
  h.must(in_o("setsid python3 " .. d .. "/slow_origin.py " .. d .. "/srv.pem " .. d .. "/srv.key " .. d .. "/origin.log "
    .. d .. "/origin.ready " .. d .. "/go") .. " </dev/null >" .. d .. "/origin.err 2>&1 &")
  local _, up = h.sh("for i in $(seq 400); do [ -f " .. d .. "/origin.ready ] && break; sleep 0.05; done; [ -f " .. d .. "/origin.ready ]")
  assert(up, "the origin did not start: " .. (h.read_file(work .. "/origin.err") or ""))
  H.start_proxy("main", 3128, H.base_env("ssu1-session", {
    SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = POLICY }):render(),
    SANDSTACK_UPSTREAM_CA = h.read_file(work .. "/ca.pem"),
    MALLOC_PERTURB_ = "165" }), { ca_dir = true }) -- glibc fills freed memory (ASan ignores it)
end

-- runs the clients in parallel and lets the origin handshake once each has sent its request (or
-- given up); returns their JSON results in the order given
local function run_clients(list)
  local d = h.q(work)
  local cmds, marks = { "rm -f " .. d .. "/go " .. d .. "/mark.*;" }, {}
  for i, c in ipairs(list) do
    cmds[#cmds + 1] = in_p("python3 " .. d .. "/client.py " .. PROXY_IP .. " " .. proxies.main.port .. " "
      .. h.q(proxies.main.ca .. "/bundle.pem") .. " " .. h.q(TOKEN) .. " " .. c[1] .. " " .. h.q(c[2]) .. " " .. c[3] .. " "
      .. d .. "/mark." .. i) .. " >" .. d .. "/client" .. i .. ".out 2>&1 &"
    marks[#marks + 1] = "[ -f " .. d .. "/mark." .. i .. " ]"
  end
  cmds[#cmds + 1] = "for i in $(seq 600); do " .. table.concat(marks, " && ") .. " && break; sleep 0.05; done; touch " .. d
    .. "/go; wait"
  h.must(table.concat(cmds, " "))
  local results = {}
  for i = 1, #list do
    local text = h.read_file(work .. "/client" .. i .. ".out") or ""
    results[i] = assert(core.json_decode(text:match("([^\n]+)%s*$") or ""), text)
  end
  return results
end

local function origin_log()
  local recs = {}
  for line in (h.read_file(work .. "/origin.log") or ""):gmatch("[^\n]+") do recs[#recs + 1] = core.json_decode(line) end
  return recs
end

describe("sandstack-proxy, hostile clients: an inspected request sends exactly what was checked", function()
  if not H.bring_up(SKIP, setup) then return end

  it("head and body in one read while the origin's handshake is pending: the origin gets exactly POST /up and its body", function()
    -- control: the denied request is refused, and an admitted one with a small body goes through
    local list = { { "POST", "/ad", 100 }, { "POST", "/up", 100 } }
    local results = run_clients(list)
    assert.equal(403, results[1].status, results[1].error or results[1].reply)
    assert.equal(200, results[2].status, results[2].error or results[2].reply)
    -- the attack: big bodies (the buffer would grow several times after the head was parsed),
    -- beside denied requests whose heads freed memory may then hold
    local more = { { "POST", "/up", 40997 }, { "POST", "/ad", 300 }, { "POST", "/up", 30001 }, { "POST", "/ad", 20000 },
      { "POST", "/up", 65000 }, { "POST", "/ad", 5000 } }
    for i, r in ipairs(run_clients(more)) do
      list[#list + 1], results[#results + 1] = more[i], r
    end
    h.must("sleep 0.3") -- the last origin and audit lines
    local sent, admitted = {}, 0
    for i, c in ipairs(list) do
      if c[2] == "/up" then
        sent[results[i].sha], admitted = true, admitted + 1
      end
    end
    -- every request the origin got is exactly an admitted one: request line, and a body a client
    -- sent with it; a denied request never reaches it (its connections end before a request)
    local got = 0
    for _, rec in ipairs(origin_log()) do
      if rec.line ~= "" or rec.body_len then
        got = got + 1
        assert.equal("POST /up HTTP/1.1", rec.line)
        assert.is_true(rec.clean, rec.line)
        assert.is_nil(rec.error, rec.error)
        assert.is_true(sent[rec.body_sha], "the origin got a body no client sent (" .. tostring(rec.body_len) .. " bytes)")
        sent[rec.body_sha] = nil -- and each once
      end
    end
    assert.equal(admitted, got, h.read_file(work .. "/origin.log"))
    -- each client got the answer its request deserved
    for i, c in ipairs(list) do
      local want = c[2] == "/up" and 200 or 403
      assert.equal(want, results[i].status, ("client %d (%s %s): %s"):format(i, c[1], c[2], results[i].error or results[i].reply))
    end
    -- and the audit lines say the same: the admitted ones are POST /up, the denied ones POST /ad
    local allow, deny = 0, 0
    for _, l in ipairs(audit("main")) do
      if l.kind == "inspect" and l.decision == "allow" then
        allow = allow + 1
        assert.equal("POST", l.method)
        assert.equal("/up", l.path)
      elseif l.kind == "inspect" and l.decision == "deny" then
        deny = deny + 1
        assert.equal("/ad", l.path)
      end
    end
    assert.equal(admitted, allow)
    assert.equal(#list - admitted, deny)
  end)

  it("exits cleanly on SIGTERM (and, under ASan, without a sanitizer report)", function()
    local p = proxies.main
    h.must("kill -TERM " .. p.pid)
    h.must("for i in $(seq 100); do kill -0 " .. p.pid .. " 2>/dev/null || break; sleep 0.1; done; ! kill -0 " .. p.pid .. " 2>/dev/null")
    p.pid = nil
    local err = h.read_file(p.dir .. "/err") or ""
    assert.is_nil(err:find("Sanitizer", 1, true), err)
    assert.is_nil(err:find("runtime error", 1, true), err)
    assert.matches('"event":"stopped"', h.read_file(p.dir .. "/out"), 1, true)
  end)
end)
