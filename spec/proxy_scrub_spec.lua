-- The response scrub as a boundary, no smuggling through inspection, the placeholder rules and
-- spliced pipes (docs/proxy.md "Responses", "Keep-alive and chunked bodies", "Relay: splice(2)";
-- SECURITY.md "Credentials for any host"): each attack of the third hostile review of the proxy,
-- made through the real binary after a control that succeeds. Two network namespaces as in
-- spec/proxy_credentials_spec.lua; outside, spec/support/scrub_origin.py: reflect.test reflects
-- the request it got (gzip-compressed, split by a chunk boundary inside the secret, cut short,
-- paused after a prefix, or after the secret was rotated), notes.test is Python's http.server,
-- GET only, never reading a body, and 198.51.100.10:7000 sends 70 KiB on a raw tunnel.
-- Needs root and ip(8).
--
-- SANDSTACK_PROXY_UNDER_TEST=<dir>/sandstack-proxy (relative to the checkout) runs the same tests
-- against another binary (the change's report ran them against the proxy before it).
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("sscs")
if os.getenv("SANDSTACK_PROXY_UNDER_TEST") then H.PROXY = os.getenv("SANDSTACK_PROXY_UNDER_TEST") end
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local in_p, in_o, proxy_url, audit, proxies = H.in_p, H.in_o, H.proxy_url, H.audit, H.proxies
local work

local SKIP = H.missing { { "test -r /etc/ssl/certs/ca-certificates.crt", "needs the system CA bundle" } }

local HOSTS = "198.51.100.10 reflect.test\n198.51.100.10 notes.test\n"

local function alnum(n)
  local hex = core.random_hex(n):sub(1, n)
  return (hex:gsub("^%d", "P"))
end

local SECRET = "sk_live_" .. core.random_hex(16) -- 40 characters
local QSECRET = "qk-" .. core.random_hex(10) -- 23
local BSECRET = "bp-" .. core.random_hex(10)
local RF = { name = "RF_KEY", host = "reflect.test", port = 8443, header = "X-Key", secret = SECRET,
  placeholder = alnum(#SECRET) }
local RQ = { name = "RQ_KEY", host = "reflect.test", port = 8443, query = "key", secret = QSECRET,
  placeholder = alnum(#QSECRET) }
local RB = { name = "RB_PW", host = "reflect.test", port = 8443, basic = "deploy", secret = BSECRET,
  placeholder = alnum(#BSECRET) }

local POLICY = { "reflect.test:8443", { host = "notes.test", port = 9443, methods = { "GET" } },
  { host = "198.51.100.10", port = 7000, raw = true } }

local creds_json, unhex = ph.creds_json, ph.unhex

local function received()
  local t = {}
  for line in (h.read_file(work .. "/received.log") or ""):gmatch("[^\n]+") do t[#t + 1] = unhex(line) end
  return t
end

local function lines(file)
  local t = {}
  for line in (h.read_file(work .. "/" .. file) or ""):gmatch("[^\n]+") do t[#t + 1] = line end
  return t
end

-- the client of spec/support/scrub_client.py through proxy `name`: req with Python escapes
local function raw(target, req, mode, name)
  local p = proxies[name or "main"]
  local out = h.must(in_p("python3 " .. h.q(H.top .. "/spec/support/scrub_client.py") .. " " .. PROXY_IP .. " "
    .. p.port .. " " .. h.q(TOKEN) .. " " .. target .. " " .. h.q(p.ca .. "/bundle.pem") .. " " .. (mode or "all")
    .. " " .. h.q(req)))
  return assert(core.json_decode(out:match("([^\n]+)%s*$")), out)
end

-- a request to reflect.test with the header credential, as its client writes it
local function reflected(path, extra)
  return raw("reflect.test:8443", "GET " .. path .. " HTTP/1.1\\r\\nHost: reflect.test:8443\\r\\nX-Key: "
    .. RF.placeholder .. "\\r\\n" .. (extra or "") .. "Connection: close\\r\\n\\r\\n")
end

local function status(reply) return tonumber(reply:match("^HTTP/1%.1 (%d+)")) end
local function body_of(reply) return reply:match("\r\n\r\n(.*)$") or "" end

local function dechunk(body)
  local out, i = {}, 1
  while true do
    local size, e = body:match("^(%x+)\r\n()", i)
    if not size then return table.concat(out), false end
    size = tonumber(size, 16)
    if size == 0 then return table.concat(out), true end
    out[#out + 1] = body:sub(e, e + size - 1)
    i = e + size + 2
  end
end

local function start_origin()
  local d = h.q(work)
  h.must(in_o("setsid python3 " .. h.q(H.top .. "/spec/support/scrub_origin.py") .. " " .. d .. "/srv.pem " .. d
    .. "/srv.key " .. d .. " " .. h.q(SECRET)) .. " </dev/null >" .. d .. "/origin.out 2>&1 &")
  h.must("for i in $(seq 200); do [ -f " .. d .. "/origin.ready ] && break; sleep 0.05; done; [ -f " .. d
    .. "/origin.ready ]")
end

local function setup()
  work = H.net_up("/tmp/sscs-scrub.XXXXXX", HOSTS, { "198.51.100.10" })
  H.make_certs("sscs-test-ca", "reflect.test", { "reflect.test", "notes.test" },
    " && cat /etc/ssl/certs/ca-certificates.crt ca.pem > roots.pem")
  start_origin()
  local base = H.base_env("sscs-session", {
    SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = POLICY }):render(),
    SANDSTACK_UPSTREAM_CA = h.read_file(work .. "/ca.pem"), SANDSTACK_CA_ROOTS = work .. "/roots.pem",
    SANDSTACK_CREDENTIALS = creds_json { RF, RQ, RB } })
  H.start_proxy("main", 3128, base, { ca_dir = true })
  local ctl = ph.with(base, { SANDSTACK_CONTROL_SOCKET = work .. "/ctl/control.sock" })
  H.start_proxy("rot", 3129, ctl, { ca_dir = true })
  for _ = 1, 100 do
    if (h.read_file(work .. "/rot/out") or ""):find("control_listening", 1, true) then break end
    core.sleep(0.05)
  end
end

describe("sandstack-proxy: credentials that never come back", function()
  if not H.bring_up(SKIP, setup) then return end

  describe("the response scrub", function()
    it("control: a plain reflection shows the placeholder where the origin got the secret", function()
      local r = reflected("/plain")
      assert.equal(200, status(r.reply), r.reply)
      assert.truthy(body_of(r.reply):find("X-Key: " .. RF.placeholder .. "\r\n", 1, true), r.reply)
      assert.is_nil(r.reply:find(SECRET, 1, true))
      assert.truthy(received()[#received()]:find("X-Key: " .. SECRET, 1, true))
    end)

    it("scrub-gzip: asks for Accept-Encoding identity and refuses an encoded answer with 502", function()
      local r = reflected("/gzip", "Accept-Encoding: gzip, br\\r\\n")
      local got = received()[#received()]
      local asked = {}
      for v in got:gmatch("\r\n[Aa]ccept%-[Ee]ncoding:%s*([^\r]*)") do asked[#asked + 1] = v end
      assert.same({ "identity" }, asked)
      assert.equal(502, status(r.reply), r.reply:sub(1, 300))
      assert.truthy(r.reply:find("response_encoded", 1, true), r.reply)
      assert.is_nil(r.reply:find("\31\139", 1, true)) -- no gzip member reached the sandbox
      local a = audit("main")
      assert.equal("upstream_error", a[#a].decision)
    end)

    it("scrub-chunk-split: a secret split by the origin's chunk boundary is scrubbed in the de-chunked body", function()
      local r = reflected("/chunks")
      assert.equal(200, status(r.reply), r.reply)
      local body, whole = dechunk(body_of(r.reply))
      assert.is_true(whole, r.reply)
      assert.truthy(body:find("X-Key: " .. RF.placeholder .. "\r\n", 1, true), body)
      assert.is_nil(body:find(SECRET, 1, true))
      assert.is_nil(r.reply:find(SECRET:sub(1, 20), 1, true))
      assert.truthy(received()[#received()]:find(SECRET, 1, true)) -- it was sent, and reflected split
    end)

    it("capture: a reflection cut one byte short of the secret gives away no half of it", function()
      local r = reflected("/cut")
      assert.equal(200, status(r.reply), r.reply)
      local body = body_of(r.reply)
      assert.truthy(body:find("X-Key: ", 1, true), body)
      assert.is_nil(body:find(SECRET:sub(1, math.floor(#SECRET / 2)), 1, true), body)
    end)

    it("scrub-prefix-oracle: when bytes go on says nothing about whether they start a secret", function()
      local a = reflected("/pause/other")
      local b = reflected("/pause/prefix")
      assert.equal(200, status(a.reply), a.reply)
      assert.equal(200, status(b.reply), b.reply)
      a = raw("reflect.test:8443", "GET /pause/other HTTP/1.1\\r\\nHost: reflect.test:8443\\r\\nX-Key: " .. RF.placeholder
        .. "\\r\\nConnection: close\\r\\n\\r\\n", "early")
      b = raw("reflect.test:8443", "GET /pause/prefix HTTP/1.1\\r\\nHost: reflect.test:8443\\r\\nX-Key: " .. RF.placeholder
        .. "\\r\\nConnection: close\\r\\n\\r\\n", "early")
      assert.truthy(a.early and b.early, core.json_encode { a, b })
      assert.equal(a.early, b.early, "bytes before the pause: " .. a.early .. " after 12 other bytes, " .. b.early
        .. " after the secret's first 12")
      assert.equal(#a.reply, #b.reply)
    end)

    it("rotation-scrub: a secret replaced live is still scrubbed from an answer that was streaming", function()
      local req = "GET /slow HTTP/1.1\\r\\nHost: reflect.test:8443\\r\\nX-Key: " .. RF.placeholder
        .. "\\r\\nConnection: close\\r\\n\\r\\n"
      local before = #received()
      os.remove(work .. "/go")
      local p = proxies.rot
      h.must(in_p("python3 " .. h.q(H.top .. "/spec/support/scrub_client.py") .. " " .. PROXY_IP .. " " .. p.port .. " "
        .. h.q(TOKEN) .. " reflect.test:8443 " .. h.q(p.ca .. "/bundle.pem") .. " all " .. h.q(req)) .. " > "
        .. h.q(work .. "/rot.json") .. " 2>&1 &")
      for _ = 1, 200 do
        if #received() > before then break end
        core.sleep(0.05)
      end
      assert.truthy(received()[#received()]:find(SECRET, 1, true))
      local new = { RF.name, RF.host, RF.port, "X-Key", "sk_live_" .. core.random_hex(16), RF.placeholder }
      local payload = creds_json { { name = new[1], host = new[2], port = new[3], header = new[4], secret = new[5],
        placeholder = new[6] }, RQ, RB }
      local out, ok = h.sh("env SANDSTACK_CONTROL_SOCKET=" .. h.q(work .. "/ctl/control.sock") .. " SANDSTACK_CONTROL_PAYLOAD="
        .. h.q(payload) .. " " .. h.q(H.top .. "/" .. H.PROXY) .. " --control set-credentials")
      assert.is_true(ok, out)
      h.write_file(work .. "/go", "")
      local j
      for _ = 1, 200 do
        j = core.json_decode((h.read_file(work .. "/rot.json") or ""):match("([^\n]+)%s*$") or "")
        if j then break end
        core.sleep(0.05)
      end
      assert.truthy(j, h.read_file(work .. "/rot.json"))
      assert.equal(200, status(j.reply), j.reply)
      assert.truthy(body_of(j.reply):find("X-Key: ", 1, true), j.reply)
      assert.is_nil(j.reply:find(SECRET, 1, true), j.reply)
      assert.is_nil(j.reply:find(SECRET:sub(1, math.floor(#SECRET / 2)), 1, true))
    end)
  end)

  describe("no smuggling through inspection", function()
    it("inspect-cl0-smuggle: a GET's body never runs as a request at an origin that ignores it", function()
      local smuggled = "DELETE /admin HTTP/1.1\\r\\nHost: notes.test:9443\\r\\n\\r\\n"
      local n = #("DELETE /admin HTTP/1.1\r\nHost: notes.test:9443\r\n\r\n")
      local r = raw("notes.test:9443", "GET /a HTTP/1.1\\r\\nHost: notes.test:9443\\r\\nContent-Length: " .. n
        .. "\\r\\n\\r\\n" .. smuggled .. "GET /b HTTP/1.1\\r\\nHost: notes.test:9443\\r\\n\\r\\n")
      assert.equal(200, status(r.reply), r.reply)
      -- the origin logs each request line it parsed; give a smuggled one the time to show
      for _ = 1, 20 do
        if #lines("notes.log") >= 2 then break end
        core.sleep(0.05)
      end
      local seen = lines("notes.log")
      assert.equal("GET /a HTTP/1.1", seen[#seen], table.concat(seen, " | "))
      for _, l in ipairs(seen) do assert.is_nil(l:find("DELETE", 1, true), l) end
      -- the GET /b behind it was not sent on that connection: the answer is the only one
      local _, answers = r.reply:gsub("HTTP/1%.1 200", "")
      assert.equal(1, answers, r.reply)
      assert.same({}, (function()
        local bad = {}
        for _, a in ipairs(audit("main")) do
          if a.method == "DELETE" then bad[#bad + 1] = a end
        end
        return bad
      end)())
    end)

    it("control and refusal stay: a GET without a body keeps the connection; a refused DELETE never arrives", function()
      local r = raw("notes.test:9443", "GET /c HTTP/1.1\\r\\nHost: notes.test:9443\\r\\n\\r\\n"
        .. "GET /d HTTP/1.1\\r\\nHost: notes.test:9443\\r\\n\\r\\nDELETE /e HTTP/1.1\\r\\nHost: notes.test:9443\\r\\n\\r\\n")
      local _, answers = r.reply:gsub("HTTP/1%.1 200", "")
      assert.equal(2, answers, r.reply)
      assert.truthy(r.reply:find("HTTP/1.1 403", 1, true), r.reply)
      local seen = table.concat(lines("notes.log"), "\n")
      assert.truthy(seen:find("GET /d HTTP/1.1", 1, true), seen)
      assert.is_nil(seen:find("DELETE /e", 1, true), seen)
    end)
  end)

  describe("placeholder rules", function()
    local function req(path, headers, body)
      return raw("reflect.test:8443", "GET " .. path .. " HTTP/1.1\\r\\nHost: reflect.test:8443\\r\\n" .. (headers or "")
        .. "Connection: close\\r\\n\\r\\n" .. (body or ""))
    end

    it("cred-twice: a placeholder written twice (two header copies, two query parameters) is refused", function()
      local ok = req("/q?key=" .. RQ.placeholder)
      assert.equal(200, status(ok.reply), ok.reply)
      assert.truthy(received()[#received()]:find("key=" .. QSECRET:gsub("-", "%%2D"), 1, true) or
        received()[#received()]:find("key=" .. QSECRET, 1, true))
      local before = #received()
      local r = req("/q?key=" .. RQ.placeholder .. "&key=" .. RQ.placeholder)
      assert.equal(403, status(r.reply), r.reply)
      assert.truthy(r.reply:find("credential_misplaced", 1, true), r.reply)
      r = req("/h", "X-Key: " .. RF.placeholder .. "\\r\\nX-Key: " .. RF.placeholder .. "\\r\\n")
      assert.equal(403, status(r.reply), r.reply)
      assert.equal(before, #received())
    end)

    it("body-chunk-split: a placeholder split across chunks of a request body is found", function()
      local ph1, ph2 = RF.placeholder:sub(1, 20), RF.placeholder:sub(21)
      local body = ("%x\\r\\nx%s\\r\\n%x\\r\\n%s\\r\\n0\\r\\n\\r\\n"):format(#ph1 + 1, ph1, #ph2, ph2)
      local control = raw("reflect.test:8443", "POST /b HTTP/1.1\\r\\nHost: reflect.test:8443\\r\\nTransfer-Encoding: chunked"
        .. "\\r\\nConnection: close\\r\\n\\r\\n5\\r\\nhello\\r\\n0\\r\\n\\r\\n")
      assert.equal(200, status(control.reply), control.reply)
      local r = raw("reflect.test:8443", "POST /b HTTP/1.1\\r\\nHost: reflect.test:8443\\r\\nTransfer-Encoding: chunked"
        .. "\\r\\nConnection: close\\r\\n\\r\\n" .. body)
      assert.equal(403, status(r.reply), r.reply)
      assert.truthy(r.reply:find("credential_misplaced", 1, true), r.reply)
    end)

    it("the Basic check refuses a value it cannot decode for certain (non-canonical, over-size)", function()
      local b64 = core.base64_encode or function(s) return (h.must("printf %s " .. h.q(s) .. " | base64 -w0")) end
      local good = b64("deploy:" .. RB.placeholder)
      local r = req("/basic", "Authorization: Basic " .. good .. "\\r\\n")
      assert.equal(200, status(r.reply), r.reply)
      assert.truthy(received()[#received()]:find("Authorization: Basic " .. b64("deploy:" .. BSECRET), 1, true))
      -- a placeholder in a Basic value the check could not read: without its padding, or with
      -- stray bits in its last character (lenient decoders read the same bytes from both)
      local plain = "deploy:" .. RB.placeholder .. "x"
      local canon = b64(plain)
      assert.truthy(canon:find("=", 1, true), canon)
      local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
      local last = canon:match("(.)=+$")
      local at = alphabet:find(last, 1, true)
      local stray = canon:gsub(".(=+)$", alphabet:sub(at + 1, at + 1) .. "%1")
      local before = #received()
      r = req("/basic", "Authorization: Basic " .. canon:gsub("=", "") .. "\\r\\n") -- unpadded
      assert.equal(400, status(r.reply), r.reply)
      r = req("/basic", "Authorization: Basic " .. stray .. "\\r\\n")
      assert.equal(400, status(r.reply), r.reply)
      r = req("/basic", "Authorization: Basic " .. b64("deploy:" .. ("A"):rep(5000)) .. "\\r\\n")
      assert.equal(400, status(r.reply), r.reply)
      assert.equal(before, #received())
    end)

    it("refusals that held stay refused: CONNECT, PRI and Upgrade inside an inspected connection", function()
      local r = req("/u", "Upgrade: websocket\\r\\nX-Key: " .. RF.placeholder .. "\\r\\n")
      assert.equal(200, status(r.reply), r.reply)
      assert.is_nil(received()[#received()]:lower():find("upgrade", 1, true))
      local before = #received()
      r = raw("reflect.test:8443", "CONNECT notes.test:9443 HTTP/1.1\\r\\nHost: notes.test:9443\\r\\n\\r\\n")
      assert.equal(400, status(r.reply), r.reply)
      r = raw("reflect.test:8443", "PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n")
      assert.truthy(status(r.reply) == 400 or status(r.reply) == 505, r.reply)
      assert.equal(before, #received())
    end)
  end)

  describe("spliced pipes", function()
    -- the sizes of the proxy's pipes, read through /proc (F_GETPIPE_SZ on a second open of each)
    local SIZES = [[
import fcntl, json, os, sys
pid = sys.argv[1]
out = {}
for fd in os.listdir("/proc/%s/fd" % pid):
    try:
        link = os.readlink("/proc/%s/fd/%s" % (pid, fd))
        if not link.startswith("pipe:") or link in out:
            continue
        f = os.open("/proc/%s/fd/%s" % (pid, fd), os.O_RDONLY | os.O_NONBLOCK)
        out[link] = fcntl.fcntl(f, 1032)
        os.close(f)
    except OSError:
        pass
print(json.dumps(list(out.values())))
]]
    local function sizes()
      h.write_file(work .. "/sizes.py", SIZES)
      return core.json_decode(h.must("python3 " .. h.q(work .. "/sizes.py") .. " " .. proxies.main.pid))
    end
    local function grown(list)
      local n = 0
      for _, s in ipairs(list) do if s > 4096 then n = n + 1 end end
      return n
    end

    it("splice-pipe-quota: grown pipes are capped per proxy and shrink back once empty and idle", function()
      local TUNNELS = 70
      local CLIENT = [[
import base64, os, socket, sys, time
ph, pp, token, n, done = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
auth = base64.b64encode(("sandstack:" + token).encode()).decode()
socks = []
for _ in range(n):
    s = socket.create_connection((ph, pp), timeout=20)
    s.sendall(("CONNECT 198.51.100.10:7000 HTTP/1.1\r\nProxy-Authorization: Basic %s\r\n\r\n" % auth).encode())
    got = b""
    while got.count(b"\r\n\r\n") < 1 or len(got.split(b"\r\n\r\n", 1)[1]) < 70 * 1024:
        d = s.recv(65536)
        if not d:
            raise SystemExit("tunnel ended early: %r" % got[:200])
        got += d
    socks.append(s)
with open(done + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(done + ".tmp", done)
time.sleep(60)
]]
      h.write_file(work .. "/tunnels.py", CLIENT)
      local base = grown(sizes()) -- the proxy's own pipes (libuv's signal pipe...) keep the default size
      os.remove(work .. "/tunnels.done")
      h.must(in_p("setsid python3 " .. h.q(work .. "/tunnels.py") .. " " .. PROXY_IP .. " 3128 " .. h.q(TOKEN) .. " "
        .. TUNNELS .. " " .. h.q(work .. "/tunnels.done")) .. " </dev/null >" .. h.q(work .. "/tunnels.out") .. " 2>&1 &")
      finally(function()
        local pid = tonumber(h.read_file(work .. "/tunnels.done") or "")
        if pid then h.sh("kill " .. pid) end
      end)
      h.must("for i in $(seq 400); do [ -f " .. h.q(work .. "/tunnels.done") .. " ] && break; sleep 0.05; done; [ -f "
        .. h.q(work .. "/tunnels.done") .. " ] || { cat " .. h.q(work .. "/tunnels.out") .. "; false; }")
      local now = sizes()
      assert.truthy(#now >= 2 * TUNNELS, #now .. " pipes") -- every tunnel is spliced (a control)
      assert.truthy(grown(now) > base, "no pipe grew: " .. core.json_encode(now))
      assert.truthy(grown(now) - base <= 64, grown(now) - base .. " grown pipes")
      local left
      for _ = 1, 120 do -- the sweep runs every 2 s: an idle pipe is back within two
        left = grown(sizes()) - base
        if left == 0 then break end
        core.sleep(0.1)
      end
      assert.equal(0, left)
    end)
  end)

  it("no secret appears in anything the proxies wrote, and they exit cleanly", function()
    for _, name in ipairs { "main", "rot" } do
      local err = H.stop(name)
      local out = h.read_file(proxies[name].dir .. "/out") or ""
      for _, s in ipairs { SECRET, QSECRET, BSECRET } do
        assert.is_nil(out:find(s, 1, true))
        assert.is_nil(err:find(s, 1, true))
      end
      assert.is_nil(err:find("ERROR: AddressSanitizer", 1, true), err)
      assert.is_nil(err:find("LeakSanitizer", 1, true), err)
      assert.is_nil(err:find("runtime error", 1, true), err)
    end
  end)
end)
