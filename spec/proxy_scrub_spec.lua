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
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local audit, proxies = H.audit, H.proxies
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

local creds_json = ph.creds_json

-- every request the reflecting origin got, in order, as raw bytes
local function received() return ph.hex_lines(work .. "/received.log") end

local function lines(file)
  local t = {}
  for line in (h.read_file(work .. "/" .. file) or ""):gmatch("[^\n]+") do t[#t + 1] = line end
  return t
end

-- proxy_client.py's inner through proxy `name`: req (Python escapes) inside an inspected tunnel
local function inner_args(target, req, mode, name)
  local p = proxies[name or "main"]
  return { PROXY_IP, p.port, target, TOKEN, p.ca .. "/bundle.pem", mode or "all", req }
end
local function raw(target, req, mode, name) return (H.run_client("inner", inner_args(target, req, mode, name))) end

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


local function setup()
  work = H.net_up("/tmp/sscs-scrub.XXXXXX", HOSTS, { "198.51.100.10" })
  H.make_certs("sscs-test-ca", "reflect.test", { "reflect.test", "notes.test" },
    " && cat /etc/ssl/certs/ca-certificates.crt ca.pem > roots.pem")
  H.start_peer("scrub_origin.py", { work .. "/srv.pem", work .. "/srv.key", work, SECRET },
    { ready = work .. "/origin.ready" })
  local base = H.base_env("sscs-session", {
    SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = POLICY }):render(),
    SANDSTACK_UPSTREAM_CA = h.read_file(work .. "/ca.pem"), SANDSTACK_CA_ROOTS = work .. "/roots.pem",
    SANDSTACK_CREDENTIALS = creds_json { RF, RQ, RB } })
  H.start_proxy("main", 3128, base, { ca_dir = true })
  H.start_proxy("rot", 3129, base, { ca_dir = true, control = work .. "/ctl/control.sock" })
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
      h.must(H.client_command("inner", inner_args("reflect.test:8443", req, "all", "rot")) .. " > "
        .. h.q(work .. "/rot.json") .. " 2>&1 &")
      h.wait_for("the origin's request", function() return #received() > before end, 10)
      assert.truthy(received()[#received()]:find(SECRET, 1, true))
      local new = { RF.name, RF.host, RF.port, "X-Key", "sk_live_" .. core.random_hex(16), RF.placeholder }
      local payload = creds_json { { name = new[1], host = new[2], port = new[3], header = new[4], secret = new[5],
        placeholder = new[6] }, RQ, RB }
      local _, code, out = H.control(work .. "/ctl/control.sock", "set-credentials", payload)
      assert.is_true(code == 0, out)
      h.write_file(work .. "/go", "")
      local j = h.wait_for("the client's answer", function()
        return core.json_decode((h.read_file(work .. "/rot.json") or ""):match("([^\n]+)%s*$") or "")
      end, 10)
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
      pcall(h.wait_for, "a second request line", function() return #lines("notes.log") >= 2 end, 1)
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
    local function sizes()
      local list = {}
      for _, size in pairs(H.pipe_sizes(proxies.main.pid)) do list[#list + 1] = size end
      return list
    end
    local function grown(list)
      local n = 0
      for _, s in ipairs(list) do if s > 4096 then n = n + 1 end end
      return n
    end

    it("splice-pipe-quota: grown pipes are capped per proxy and shrink back once empty and idle", function()
      local TUNNELS = 70
      local base = grown(sizes()) -- the proxy's own pipes (libuv's signal pipe...) keep the default size
      os.remove(work .. "/tunnels.done")
      -- TUNNELS raw tunnels to the 70 KiB sender, each read whole, then held open
      h.must("setsid " .. H.client_command("fill", { PROXY_IP, "3128", "198.51.100.10:7000", TOKEN, TUNNELS, 70 * 1024,
        work .. "/tunnels.done" }) .. " </dev/null >" .. h.q(work .. "/tunnels.out") .. " 2>&1 &")
      local client
      finally(function() if client then h.signal(client, "TERM") end end)
      local ok = pcall(h.wait_for, "the tunnels", function() return h.read_file(work .. "/tunnels.done") end, 30)
      -- the client's own pid, which it writes once its tunnels are open; it then holds them 60 s
      client = ok and h.track(h.read_file(work .. "/tunnels.done"):match("^%s*(%d+)"))
      assert(ok, "the tunnels did not open: " .. (h.read_file(work .. "/tunnels.out") or ""))
      local now = sizes()
      assert.truthy(#now >= 2 * TUNNELS, #now .. " pipes") -- every tunnel is spliced (a control)
      assert.truthy(grown(now) > base, "no pipe grew: " .. core.json_encode(now))
      assert.truthy(grown(now) - base <= 64, grown(now) - base .. " grown pipes")
      local left
      -- the sweep runs every 2 s: an idle pipe is back within two
      pcall(h.wait_for, "the grown pipes' shrinking", function()
        left = grown(sizes()) - base
        return left == 0
      end, 12, 0.1)
      assert.equal(0, left)
    end)
  end)

  it("no secret appears in anything the proxies wrote, and they exit cleanly", function()
    for _, name in ipairs { "main", "rot" } do
      local out, err = H.stop_clean(name)
      for _, s in ipairs { SECRET, QSECRET, BSECRET } do
        assert.is_nil(out:find(s, 1, true))
        assert.is_nil(err:find(s, 1, true))
      end
    end
  end)
end)
