-- Credentials for any host (csrc/proxy/parse/cred_table.c, cred_flow.c; docs/proxy.md
-- "Credentials for any host") against the built proxy and real clients. As in
-- spec/proxy_inspect_spec.lua: two network namespaces, the proxy and its clients in "sscrp*",
-- the outside in "sscro*": one stand-in (spec/support/echo_origin.py, with a test CA the proxy
-- trusts through SANDSTACK_UPSTREAM_CA) answering for gh.test, keys.test, bot.test, basic.test
-- and model.test on 8443 and plain http on 80. It echoes what it received twice: as JSON text
-- (which the proxy scrubs on the way back, so the client sees placeholders) and hex-encoded
-- (which no scrub recognises, so the test sees the secret that arrived). It also logs every
-- request it got.
-- Four credentials, one per placement (header Bearer, query parameter, path prefix, Basic), each
-- toward its own host. Every refusal is preceded by a control that succeeds. Needs root and ip(8).
--
-- SANDSTACK_PROXY_UNDER_TEST=<dir>/sandstack-proxy (relative to the checkout) runs the same tests
-- against another binary (such as the proxy before credentials for any host, to see these tests
-- fail).
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("sscr")
local TOKEN, KEY, PROXY_IP = H.TOKEN, H.KEY, H.PROXY_IP
local in_p, proxy_url, audit, proxies = H.in_p, H.proxy_url, H.audit, H.proxies
local work

local SKIP = H.missing { { "test -r /etc/ssl/certs/ca-certificates.crt", "needs the system CA bundle" } }

local HOSTS = [[
198.51.100.10 gh.test
198.51.100.10 keys.test
198.51.100.10 bot.test
198.51.100.10 basic.test
198.51.100.10 model.test
198.51.100.10 plain.test
]]

local function alnum(n)
  local hex = core.random_hex(n):sub(1, n)
  return (hex:gsub("^%d", "P")) -- letters and digits only, as sandstack makes them
end

-- name, host, placement, secret, placeholder (as long as its secret)
local GH_SECRET = "ghp_" .. core.random_hex(18)
local REG_SECRET = "rk/+=&?" .. core.random_hex(12) -- needs percent-encoding in a query
local BOT_SECRET = "123456:" .. core.random_hex(14)
local BASIC_SECRET = "pw:" .. core.random_hex(14) .. "!"
local CREDS = {
  { name = "GH_TOKEN", host = "gh.test", port = 8443, header = "Authorization", format = "Bearer %s", secret = GH_SECRET,
    placeholder = alnum(#GH_SECRET) },
  { name = "REG_KEY", host = "keys.test", port = 8443, query = "api_key", secret = REG_SECRET, placeholder = alnum(#REG_SECRET) },
  { name = "BOT_TOKEN", host = "bot.test", port = 8443, path = "/bot%s/", secret = BOT_SECRET, placeholder = alnum(#BOT_SECRET) },
  { name = "BASIC_PW", host = "basic.test", port = 8443, basic = "deploy", secret = BASIC_SECRET,
    placeholder = alnum(#BASIC_SECRET) },
}
local GH, REG, BOT, BASIC = CREDS[1], CREDS[2], CREDS[3], CREDS[4]

local POLICY = { "gh.test:8443", "keys.test:8443", "bot.test:8443", "basic.test:8443", "model.test:8443", "gh.test:80",
  "plain.test:80" }

local creds_json, unhex = ph.creds_json, ph.unhex

-- every request the stand-in got, in order, as raw bytes
local function received() return ph.hex_lines(work .. "/received.log") end

local function pct(s)
  return (s:gsub("[^%w%-%._~]", function(ch) return ("%%%02X"):format(ch:byte()) end))
end

-- curl through the proxy (HTTPS_PROXY, the proxy's bundle): status, body, curl's own output
local function curl(url, extra, name)
  name = name or "main"
  local out = h.sh(in_p("env HTTPS_PROXY=" .. h.q(proxy_url(name)) .. " http_proxy=" .. h.q(proxy_url(name))
    .. " CURL_CA_BUNDLE=" .. h.q(proxies[name].ca .. "/bundle.pem") .. " curl -sS --max-time 20 -o " .. h.q(work .. "/body")
    .. " -w '%{http_code}' " .. (extra or "") .. " " .. h.q(url) .. " 2>&1"))
  return tonumber(out:match("(%d+)%s*$")), h.read_file(work .. "/body") or "", out
end

local function echo(url, extra)
  local status, body, out = curl(url, extra)
  assert.equal(200, status, out .. body)
  local seen = assert(core.json_decode(body), body)
  seen.raw = unhex(seen.hex)
  return seen, body
end

-- A refusal. Refused in the head, nothing reaches the stand-in; refused in a body (streamed),
-- the head may have gone and the body stops before the placeholder (the origin sees a request
-- cut short), so then: nothing that arrived holds it.
local function refused(url, extra, name, placeholder)
  local before = #received()
  local status, body, out = curl(url, extra, name)
  assert.equal(403, status, url .. ": " .. out .. body:sub(1, 600))
  local j = assert(core.json_decode(body), body)
  assert.equal("credential_misplaced", j.policy.reason, body)
  if placeholder then
    local got = received()
    for i = before + 1, #got do assert.is_nil(got[i]:find(placeholder, 1, true), got[i]) end
  else
    assert.equal(before, #received(), "the refused request reached the stand-in: " .. url)
  end
  return j
end

-- each credential as its own client would send it, toward host (default: its own)
local function use(c, host, path)
  host = host or c.host
  path = path or "/v1/x"
  if c.header then return "https://" .. host .. ":8443" .. path, "-H " .. h.q(c.header .. ": " .. c.format:gsub("%%s", c.placeholder)) end
  if c.query then return "https://" .. host .. ":8443" .. path .. "?" .. c.query .. "=" .. c.placeholder, "" end
  if c.path then return "https://" .. host .. ":8443" .. c.path:gsub("%%s", c.placeholder) .. "getMe", "" end
  return "https://" .. host .. ":8443" .. path, "-u " .. h.q(c.basic .. ":" .. c.placeholder)
end

local function setup()
  work = H.net_up("/tmp/sscr-creds.XXXXXX", HOSTS, { "198.51.100.10" })
  H.make_certs("sscr-test-ca", "gh.test", { "gh.test", "keys.test", "bot.test", "basic.test", "model.test" },
    " && cat /etc/ssl/certs/ca-certificates.crt ca.pem > roots.pem")
  H.start_peer("echo_origin.py", { work .. "/srv.pem", work .. "/srv.key", work .. "/received.log" },
    { ready = work .. "/received.log.ready" })
  local base = H.base_env("sscr-session", {
    SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = POLICY }):render(),
    SANDSTACK_UPSTREAM_CA = h.read_file(work .. "/ca.pem"), SANDSTACK_CA_ROOTS = work .. "/roots.pem",
    SANDSTACK_CREDENTIALS = creds_json(CREDS) })
  H.start_proxy("main", 3128, base, { ca_dir = true })
  H.start_proxy("noca", 3129, base) -- no SANDSTACK_CA_DIR: it cannot inspect
end

describe("sandstack-proxy credentials for any host", function()
  if not H.bring_up(SKIP, setup) then return end

  describe("placed toward their own hosts", function()
    it("a Bearer header: the secret arrives, the echo back shows the placeholder", function()
      local url, extra = use(GH)
      local seen, body = echo(url, extra)
      assert.truthy(seen.raw:find("\r\nAuthorization: Bearer " .. GH.secret .. "\r\n", 1, true), seen.raw)
      assert.is_nil(seen.raw:find(GH.placeholder, 1, true))
      assert.same({ "Bearer " .. GH.placeholder }, seen.headers.authorization) -- scrubbed on the way back
      assert.is_nil(body:find(GH.secret, 1, true))
    end)

    it("a query parameter, percent-encoded; the other parameters stay", function()
      local url = "https://keys.test:8443/v1/pkgs?a=1&" .. REG.query .. "=" .. REG.placeholder .. "&b=2"
      local seen, body = echo(url)
      assert.truthy(seen.raw:find("GET /v1/pkgs?a=1&api_key=" .. pct(REG.secret) .. "&b=2 HTTP/1.1\r\n", 1, true), seen.raw)
      -- the echo back: the secret as it was sent (percent-encoded) is masked too, at the same length
      assert.is_nil(body:find(pct(REG.secret), 1, true))
      assert.equal("/v1/pkgs?a=1&api_key=" .. ("*"):rep(#pct(REG.secret)) .. "&b=2", seen.path)
    end)

    it("a path prefix", function()
      local url = use(BOT)
      local seen = echo(url)
      assert.truthy(seen.raw:find("GET /bot123456:" .. BOT.secret:sub(8) .. "/getMe HTTP/1.1\r\n", 1, true), seen.raw)
      assert.equal("/bot" .. BOT.placeholder .. "/getMe", seen.path) -- the echo back is scrubbed
    end)

    it("Basic auth: the client's user and placeholder become the user and secret", function()
      local url, extra = use(BASIC)
      local seen = echo(url, extra)
      local b64 = seen.raw:match("\r\nAuthorization: Basic ([%w%+/=]+)\r\n")
      assert.is_not_nil(b64, seen.raw)
      assert.equal("deploy:" .. BASIC.secret, h.must("printf %s " .. h.q(b64) .. " | base64 -d"))
      assert.same({ "Basic " .. ("*"):rep(#b64) }, seen.headers.authorization) -- masked on the way back
      -- another user name is not this credential: refused, the placeholder never leaves
      refused("https://basic.test:8443/v1/x", "-u " .. h.q("root:" .. BASIC.placeholder))
    end)

    it("audit lines say inspect and allow, and hold neither a secret nor a header", function()
      local n = 0
      for _, l in ipairs(audit("main")) do
        if l.decision == "allow" and (l.host == "gh.test" or l.host == "keys.test") then n = n + 1 end
      end
      assert.is_true(n >= 2)
    end)
  end)

  describe("misplaced placeholders are refused and audited", function()
    it("each placeholder toward each other host", function()
      for _, c in ipairs(CREDS) do
        local url, extra = use(c)
        echo(url, extra) -- control: toward its own host it works
        for _, other in ipairs(CREDS) do
          if other ~= c then
            local u, x = use(c, other.host)
            refused(u, x)
          end
        end
      end
      local events = 0
      for _, l in ipairs(audit("main")) do
        if l.security_event == "credential_misplaced" then
          events = events + 1
          assert.equal("deny", l.decision)
        end
      end
      assert.is_true(events >= 4 * 3, "audited: " .. events)
    end)

    it("a host without a credential is tunnelled as before: a placeholder goes as it is, a secret never", function()
      local function kinds()
        local out = {}
        for _, l in ipairs(audit("main")) do
          if l.host == "model.test" then out[#out + 1] = l.route or l.kind end
        end
        return out
      end
      local before, lines_before = #received(), #kinds()
      local url, extra = use(GH, "model.test")
      local seen = echo(url, extra)
      assert.truthy(seen.raw:find(GH.placeholder, 1, true)) -- not inspected: the proxy cannot see inside
      assert.is_nil(seen.raw:find(GH.secret, 1, true))
      assert.equal(before + 1, #received())
      -- a tunnel's audit line is written when the connection ends, which a loaded host may do
      -- after the client has read its answer
      local k = h.wait_for("the tunnel's audit line", function()
        local now = kinds()
        return #now > lines_before and now
      end, 10, 0.05)
      assert.equal("connect", k[#k])
    end)

    it("in another header, in the request line, or twice, even toward its own host", function()
      echo(use(GH)) -- control
      refused("https://gh.test:8443/v1/x", "-H " .. h.q("X-Token: " .. GH.placeholder))
      refused("https://gh.test:8443/v1/x?token=" .. GH.placeholder)
      refused("https://gh.test:8443/v1/" .. GH.placeholder)
      refused("https://gh.test:8443/v1/x", "-H " .. h.q("Authorization: token " .. GH.placeholder)) -- not its format
      local url, extra = use(GH)
      refused(url, extra .. " -H " .. h.q("X-Copy: " .. GH.placeholder))
      refused("https://keys.test:8443/v1/x?other=" .. REG.placeholder)
      -- the credential route's token as a Basic password toward another credential's host is fine
      -- (it is the proxy's own credential); another credential's placeholder inside Basic is not
      refused("https://gh.test:8443/v1/x", "-u " .. h.q("deploy:" .. BASIC.placeholder))
    end)

    it("in a request body, also split across TLS records and reads", function()
      local body = "{\"note\":\"" .. GH.placeholder .. "\"}"
      local ok = echo("https://gh.test:8443/v1/post", "--data-binary " .. h.q("{\"note\":\"fine\"}"))
      assert.equal("POST", ok.method) -- control
      refused("https://gh.test:8443/v1/post", "--data-binary " .. h.q(body), nil, GH.placeholder)
      refused("https://keys.test:8443/v1/post", "--data-binary " .. h.q(body), nil, GH.placeholder)
      local before = #received()
      for _, step in ipairs { 3, 7 } do
        local req = ("POST /v1/pieces HTTP/1.1\\r\\nHost: gh.test:8443\\r\\nContent-Length: %d\\r\\n\\r\\n%s"):format(#body, body)
        local r = H.client("pieces", PROXY_IP, "3128", "gh.test:8443", TOKEN, proxies.main.ca .. "/bundle.pem", step,
          req)
        assert.matches("^HTTP/1%.1 403", r.reply, nil, nil)
        assert.truthy(r.reply:find("credential_misplaced", 1, true), r.reply)
      end
      local got = received()
      for i = before + 1, #got do assert.is_nil(got[i]:find(GH.placeholder, 1, true)) end
    end)

    it("over plain http a placeholder is refused, whatever the host (a secret never goes unencrypted)", function()
      local st, body = curl("http://plain.test/v1/x")
      assert.equal(200, st, body) -- control
      for _, host in ipairs { "gh.test", "plain.test" } do
        refused("http://" .. host .. "/v1/x", "-H " .. h.q("Authorization: Bearer " .. GH.placeholder))
        refused("http://" .. host .. "/v1/x?api_key=" .. REG.placeholder)
      end
      -- in a body long past its head (relayed read by read), the placeholder at its very end
      local filler = ("f"):rep(300000)
      h.write_file(work .. "/long_ok", filler .. "end")
      h.write_file(work .. "/long_ph", filler .. GH.placeholder)
      st, body = curl("http://plain.test/v1/long", "--data-binary @" .. h.q(work .. "/long_ok"))
      assert.equal(200, st) -- control
      assert.equal(#filler + 3, #core.json_decode(body).body)
      refused("http://plain.test/v1/long", "--data-binary @" .. h.q(work .. "/long_ph"), nil, GH.placeholder)
    end)

    it("on the credential route, another credential's placeholder is refused; the route still works", function()
      local base = "http://" .. PROXY_IP .. ":3128/v1/echo"
      local out = h.must(in_p("curl -sS --max-time 20 -H " .. h.q("x-api-key: " .. TOKEN) .. " " .. base))
      local seen = assert(core.json_decode(out), out)
      assert.truthy(unhex(seen.hex):find("\r\nx-api-key: " .. KEY .. "\r\n", 1, true)) -- control: the key arrived
      for _, extra in ipairs { "-H " .. h.q("X-Gh: " .. GH.placeholder), "--data-binary " .. h.q("k=" .. REG.placeholder) } do
        local before = #received()
        local r = h.must(in_p("curl -sS --max-time 20 -o " .. h.q(work .. "/cr") .. " -w '%{http_code}' -H "
          .. h.q("x-api-key: " .. TOKEN) .. " " .. extra .. " " .. base))
        assert.equal("403", r)
        assert.equal("credential_misplaced", core.json_decode(h.read_file(work .. "/cr")).policy.reason)
        local got = received()
        for i = before + 1, #got do
          assert.is_nil(got[i]:find(GH.placeholder, 1, true))
          assert.is_nil(got[i]:find(REG.placeholder, 1, true))
        end
      end
    end)
  end)

  describe("keep-alive", function()
    it("each request on one inspected connection gets its secret placed, and a misplaced one ends it", function()
      local good = { Authorization = "Bearer " .. GH.placeholder }
      local bad = { Authorization = good.Authorization, ["X-Other"] = GH.placeholder }
      local reqs = { { method = "GET", path = "/v1/ka/0", headers = good },
        { method = "GET", path = "/v1/ka/1", headers = good }, { method = "GET", path = "/v1/ka/2", headers = bad } }
      h.write_file(work .. "/ka.json", core.json_encode(reqs))
      local before = #received()
      local res, out = H.client("keepalive", PROXY_IP, "3128", "gh.test:8443", proxies.main.ca .. "/bundle.pem", TOKEN,
        "20", work .. "/ka.json")
      for i = 1, 2 do
        assert.equal(200, res[i].status, out)
        local seen = core.json_decode(res[i].body)
        assert.equal("/v1/ka/" .. (i - 1), seen.path)
        assert.truthy(unhex(seen.hex):find("Authorization: Bearer " .. GH.secret, 1, true))
        assert.same({ "Bearer " .. GH.placeholder }, seen.headers.authorization)
      end
      assert.equal(403, res[3].status, out)
      assert.equal("credential_misplaced", core.json_decode(res[3].body).policy.reason)
      local got = received()
      assert.equal(before + 2, #got) -- the third never left
      assert.truthy(got[before + 2]:find("GET /v1/ka/1 ", 1, true))
      local conns = {} -- one audit line per request, all on the one connection
      for _, l in ipairs(audit("main")) do
        if l.path and l.path:find("^/v1/ka/") then conns[#conns + 1] = l.conn end
      end
      assert.equal(3, #conns)
      assert.equal(conns[1], conns[2])
      assert.equal(conns[1], conns[3])
    end)
  end)

  describe("responses", function()
    it("a secret echoed back reaches the client as its placeholder, split over many records", function()
      local url, extra = use(GH, nil, "/split/one")
      local st, body, out = curl(url, extra .. " -H " .. h.q("X-Pad: " .. ("z"):rep(7)))
      assert.equal(200, st, out)
      assert.truthy(body:find("Authorization: Bearer " .. GH.placeholder .. "\r\n", 1, true), body)
      assert.is_nil(body:find(GH.secret, 1, true))
      -- what arrived had the secret (the stand-in's log), and the length is the same both ways
      local raw = received()[#received()]
      assert.truthy(raw:find(GH.secret, 1, true))
      assert.equal(#raw, #body)
    end)

    it("the credential route's key is masked in the answer, with its framing intact", function()
      local out = h.must(in_p("curl -sS --max-time 20 -D " .. h.q(work .. "/hdr") .. " -H " .. h.q("x-api-key: " .. TOKEN)
        .. " http://" .. PROXY_IP .. ":3128/v1/echo"))
      local seen = assert(core.json_decode(out), out) -- a whole JSON document: Content-Length held
      assert.is_nil(out:find(KEY, 1, true))
      assert.same({ ("*"):rep(#KEY) }, seen.headers["x-api-key"]) -- the key's length differs from the token's
      assert.truthy(unhex(seen.hex):find(KEY, 1, true))
    end)
  end)

  describe("without a CA", function()
    it("a CONNECT to a credential's host is refused with the reason; other hosts tunnel", function()
      local r = H.client("pieces", PROXY_IP, "3129", "model.test:8443", TOKEN, "/dev/null", "0", "x")
      assert.matches("200", r.connect) -- control
      local j = H.client("pieces", PROXY_IP, "3129", "gh.test:8443", TOKEN, "/dev/null", "0", "x")
      assert.matches("403", j.connect)
      assert.truthy(j.reply:find("credential_needs_inspection", 1, true), j.reply)
    end)
  end)

  describe("configuration", function()
    local function check(creds)
      local env = H.base_env("sscr-check", { SANDSTACK_CREDENTIALS = creds })
      local vars = {}
      for k, v in pairs(env) do vars[#vars + 1] = k .. "=" .. h.q(v) end
      return h.sh("env " .. table.concat(vars, " ") .. " " .. h.q(H.top .. "/" .. H.PROXY) .. " --check 2>&1")
    end

    it("--check lists the credentials without a secret or a placeholder", function()
      local out, ok = check(creds_json(CREDS))
      assert.is_true(ok, out)
      local summary = assert(core.json_decode(out:match("([^\n]+)%s*$")), out)
      assert.equal(5, #summary.credentials) -- the four and the credential route's own
      for _, c in ipairs(CREDS) do
        assert.is_nil(out:find(c.secret, 1, true))
        assert.is_nil(out:find(c.placeholder, 1, true))
      end
      assert.is_nil(out:find(KEY, 1, true))
    end)

    it("refuses a malformed table, naming the entry and never quoting its secret", function()
      local short = { { name = "X", host = "gh.test", header = "X-Key", secret = "short-secret", placeholder = "abcdefghijkl" } }
      local long = { { name = "Y", host = "gh.test", header = "X-Key", secret = GH.secret, placeholder = GH.placeholder .. "x" } }
      local two = { { name = "Z", host = "gh.test", header = "X-Key", query = "k", secret = GH.secret, placeholder = GH.placeholder } }
      for _, case in ipairs { { short, "secret must be" }, { long, "placeholder must be" }, { two, "two placements" },
        { "{", "JSON array" } } do
        local out, ok = check(type(case[1]) == "string" and case[1] or creds_json(case[1]))
        assert.is_false(ok, out)
        assert.truthy(out:find(case[2], 1, true), out)
        assert.is_nil(out:find("short-secret", 1, true))
        assert.is_nil(out:find(GH.secret, 1, true))
      end
    end)
  end)

  it("no secret appears in anything the proxies wrote (stdout, stderr)", function()
    for _, name in ipairs { "main", "noca" } do
      local out, err = H.stop_clean(name)
      local all = out .. err
      for _, c in ipairs(CREDS) do
        assert.is_nil(all:find(c.secret, 1, true), c.name)
        assert.is_nil(all:find(pct(c.secret), 1, true), c.name)
      end
      assert.is_nil(all:find(KEY, 1, true))
    end
  end)
end)
