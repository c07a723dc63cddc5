-- What sandstack-proxy lets a request say to an origin (docs/proxy.md "Headers and Host"),
-- attacked through the real binary as the sandboxed agent would: method and URL override headers,
-- the session token in a header name, and a request naming another host than the one admitted
-- (another name at the same front end, a pipelined second request, an absolute-form target). The
-- test bed is the one of spec/proxy_core_spec.lua (spec/support/proxy_harness.lua): the proxy and
-- the clients in one network namespace, the outside in another. The outside is one recording
-- origin (spec/support/record_origin.py): every name is served at 198.51.100.10, plain HTTP on
-- :80, TLS on :443 and :8443, and each connection's bytes are logged and echoed back as JSON, so
-- a test sees exactly what an origin received. Every refusal is preceded by a control that
-- succeeds. Needs root and ip(8).
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("shdr")
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local audit, proxies = H.audit, H.proxies
local work

local SKIP = H.missing()

local POLICY = {
  { host = "api.test", methods = { "GET", "POST" }, paths = { "/v1/*" } },              -- 1: inspected
  { host = "other.test", methods = { "GET" }, paths = { "/v1/*" } },                    -- 2: another name, same front end
  { host = "plain.test", port = 80, methods = { "GET", "POST" }, paths = { "/v1/*" } }, -- 3: plain-HTTP forward
  "model.test:8443",                                                                    -- 4: the credential upstream
}

local HOSTS = [[
198.51.100.10 api.test
198.51.100.10 other.test
198.51.100.10 plain.test
198.51.100.10 model.test
]]

local OVERRIDES = { "X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "X-Original-URL", "X-Rewrite-URL" }

-- one line each, in several spellings of case (the names are case-insensitive)
local OVERRIDE_LINES = "X-HTTP-Method-Override: DELETE\r\nx-http-method: DELETE\r\nX-METHOD-OVERRIDE: PUT\r\n"
  .. "x-Original-Url: /admin/wipe\r\nX-Rewrite-URL: /admin/wipe\r\n"

-- a request: data sent as it is ("-"), or inside TLS after "CONNECT target" with SNI sni
local function req(target, sni, data) return { target = target, sni = sni, data = data } end
-- a request inside an inspected tunnel to api.test:443 (SNI api.test)
local function insp(data) return req("api.test:443", "api.test", data) end
-- a plain-HTTP request to the proxy (absolute form, with the proxy token)
local function fwd(line, headers)
  return req("-", "-", line .. "\r\nProxy-Authorization: Bearer " .. TOKEN .. "\r\n" .. (headers or "") .. "\r\n")
end

-- the requests, in order, from one client process (proxy_client.py's requests) -> their answers
-- (r.json: the body decoded)
local function run(reqs)
  local file = work .. "/reqs.json"
  h.write_file(file, assert(core.json_encode(reqs)))
  local res = H.client("requests", PROXY_IP, proxies.main.port, proxies.main.ca .. "/bundle.pem", TOKEN, file)
  assert.equal(#reqs, #res)
  for _, r in ipairs(res) do r.json = core.json_decode(r.body) end
  return res
end

-- the header values the origin received under a name (case-insensitive)
local function got(rec, name)
  local vals = {}
  for _, kv in ipairs(rec.headers) do
    if kv[1]:lower() == name:lower() then vals[#vals + 1] = kv[2] end
  end
  return vals
end

local function origin_log() return h.read_file(work .. "/origin.log") or "" end

local function assert_no_overrides(rec, route)
  for _, name in ipairs(OVERRIDES) do
    assert.same({}, got(rec, name), route .. ": " .. name .. " reached the origin")
  end
  assert.is_nil(rec.raw:lower():find("/admin/wipe", 1, true), route)
  assert.same({ "yes" }, got(rec, "X-Keep"), route .. ": control header") -- other headers pass
end

local function setup()
  work = H.net_up("/tmp/shdr-proxy.XXXXXX", HOSTS, { "198.51.100.10" })
  H.make_certs("shdr-test-ca", "api.test", { "api.test", "other.test", "plain.test", "model.test" })
  H.start_peer("record_origin.py", { work .. "/srv.pem", work .. "/srv.key", work .. "/origin.log" },
    { ready = work .. "/origin.log.ready" })
  H.start_proxy("main", 3128, H.base_env("shdr-session", {
    SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = POLICY }):render(),
    SANDSTACK_UPSTREAM_CA = h.read_file(work .. "/ca.pem"), SANDSTACK_CA_ROOTS = work .. "/ca.pem" }), { ca_dir = true })
end

-- the audit lines of kind with decision "misdirected" and status 421
local function misdirected(kind)
  local n = 0
  for _, l in ipairs(audit("main")) do
    if l.kind == kind and l.decision == "misdirected" and l.status == 421 then n = n + 1 end
  end
  return n
end

describe("sandstack-proxy headers and Host", function()
  if not H.bring_up(SKIP, setup) then return end

  describe("method and URL override headers", function()
    it("are stripped from plain-HTTP forwarded requests, inside inspected tunnels and on the credential route", function()
      local res = run {
        fwd("GET http://plain.test/v1/fwd-override HTTP/1.1", "Host: plain.test\r\nX-Keep: yes\r\n" .. OVERRIDE_LINES),
        insp("POST /v1/insp-override HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\nX-Keep: yes\r\n" .. OVERRIDE_LINES
          .. "\r\nhi"),
        req("-", "-", "POST /v1/cred-override HTTP/1.1\r\nHost: proxy\r\nx-api-key: " .. TOKEN
          .. "\r\nContent-Length: 2\r\nX-Keep: yes\r\n" .. OVERRIDE_LINES .. "\r\nhi"),
      }
      local lines = { "GET /v1/fwd-override HTTP/1.1", "POST /v1/insp-override HTTP/1.1", "POST /v1/cred-override HTTP/1.1" }
      for i, route in ipairs { "forward", "inspect", "credential" } do
        local r = res[i]
        assert.equal(200, r.status, route .. ": " .. r.body) -- control: the request itself went through
        assert.equal(lines[i], r.json.line, route)
        assert_no_overrides(r.json, route)
      end
      -- control: the credential route swapped the key (as the origin logged it: its answer echoes the key,
      -- which the proxy masks on the way back)
      local logged
      for line in origin_log():gmatch("[^\n]+") do
        local rec = core.json_decode(line)
        if rec and rec.line == lines[3] then logged = rec end
      end
      assert.same({ H.KEY }, got(assert(logged), "x-api-key"))
      assert.same({ ("*"):rep(#H.KEY) }, got(res[3].json, "x-api-key"))
    end)
  end)

  describe("the session token in a header name", function()
    it("reaches no origin on any route: credential, plain-HTTP forward or inspected", function()
      local named = "X-" .. TOKEN .. ": 1\r\nX-Pre" .. TOKEN .. "post: 2\r\nX-Keep: yes\r\n"
      local res = run {
        req("-", "-", "GET /v1/cred-name HTTP/1.1\r\nHost: proxy\r\nx-api-key: " .. TOKEN .. "\r\n" .. named .. "\r\n"),
        fwd("GET http://plain.test/v1/fwd-name HTTP/1.1", "Host: plain.test\r\n" .. named),
        insp("GET /v1/insp-name HTTP/1.1\r\nHost: api.test\r\n" .. named .. "\r\n"),
      }
      for i, route in ipairs { "credential", "forward", "inspect" } do
        local r = res[i]
        assert.equal(200, r.status, route .. ": " .. r.body) -- control: the request itself went through
        assert.same({ "yes" }, got(r.json, "X-Keep"), route)
        assert.is_nil(r.json.raw:find(TOKEN, 1, true), route .. ": the token reached the origin")
      end
      assert.is_nil(origin_log():find(TOKEN, 1, true))
    end)
  end)

  describe("Host must name the admitted host", function()
    it("inspected tunnel: a request for another name gets 421 and never reaches the origin", function()
      local cases = {
        { "GET /v1/mis-0 HTTP/1.1\r\nHost: OTHER.test.\r\n\r\n", "another name, in other case, with a dot" },
        { "GET /v1/mis-1 HTTP/1.1\r\nHost: other.test\r\n\r\n", "another admitted name" },
        { "GET /v1/mis-2 HTTP/1.1\r\nHost: api.test:8443\r\n\r\n", "another port" },
        { "GET /v1/mis-3 HTTP/1.1\r\nHost: evil.test\r\n\r\n", "a name outside the policy" },
        { "GET https://other.test/v1/mis-4 HTTP/1.1\r\nHost: api.test\r\n\r\n", "absolute-form, another name" },
        { "GET https://api.test:444/v1/mis-5 HTTP/1.1\r\nHost: api.test\r\n\r\n", "absolute-form, another port" },
        { "GET https://api.test/v1/mis-6 HTTP/1.1\r\nHost: other.test\r\n\r\n", "absolute-form, Host another name" },
      }
      -- controls: the admitted name through its tunnel; other.test is admitted and served at the
      -- same address, through a CONNECT of its own
      local reqs = { insp("GET /v1/host-ok HTTP/1.1\r\nHost: api.test\r\n\r\n"),
        req("other.test:443", "other.test", "GET /v1/other-direct HTTP/1.1\r\nHost: other.test\r\n\r\n") }
      for _, case in ipairs(cases) do reqs[#reqs + 1] = insp(case[1]) end
      local before = misdirected("inspect")
      local res = run(reqs)
      assert.equal(200, res[1].status, res[1].body)
      assert.same({ "api.test" }, got(res[1].json, "Host"))
      assert.equal(200, res[2].status, res[2].body)
      assert.same({ "other.test" }, got(res[2].json, "Host"))
      for i, case in ipairs(cases) do
        local r = res[i + 2]
        assert.equal(421, r.status, case[2] .. ": " .. r.body)
        assert.equal("invalid_request_error", r.json.error.type, case[2])
      end
      local log = origin_log()
      assert.matches("/v1/host-ok", log, 1, true) -- control: the log records what arrived
      for i = 0, #cases - 1 do assert.is_nil(log:find("/v1/mis-" .. i, 1, true), "mis-" .. i .. " reached the origin") end
      assert.equal(#cases, misdirected("inspect") - before)
    end)

    it("inspected tunnel: case, one trailing dot, the explicit default port, no Host and a matching absolute-form "
      .. "target name the admitted host; a repeated or malformed Host is a 400", function()
      local same = {
        { "GET /v1/same-1 HTTP/1.1\r\nHost: API.Test.\r\n\r\n", "GET /v1/same-1 HTTP/1.1" },
        { "GET /v1/same-2 HTTP/1.1\r\nHost: api.test:443\r\n\r\n", "GET /v1/same-2 HTTP/1.1" },
        { "GET /v1/same-3 HTTP/1.1\r\n\r\n", "GET /v1/same-3 HTTP/1.1" },
        { "GET /v1/same-4 HTTP/1.0\r\n\r\n", "GET /v1/same-4 HTTP/1.1" },
        { "GET https://API.test/v1/same-5?q=1 HTTP/1.1\r\nHost: api.test\r\n\r\n", "GET /v1/same-5?q=1 HTTP/1.1" },
      }
      local bad = {
        "GET /v1/bad-1 HTTP/1.1\r\nHost: api.test\r\nHost: api.test\r\n\r\n",
        "GET /v1/bad-2 HTTP/1.1\r\nHost: api.test\r\nhost: other.test\r\n\r\n",
        "GET /v1/bad-3 HTTP/1.1\r\nHost: user@api.test\r\n\r\n",
        "GET /v1/bad-4 HTTP/1.1\r\nHost: api.test:0443\r\n\r\n",
        "GET /v1/bad-5 HTTP/1.1\r\nHost: \r\n\r\n",
      }
      local reqs = {}
      for _, case in ipairs(same) do reqs[#reqs + 1] = insp(case[1]) end
      for _, data in ipairs(bad) do reqs[#reqs + 1] = insp(data) end
      local res = run(reqs)
      for i, case in ipairs(same) do
        local r = res[i]
        assert.equal(200, r.status, case[1] .. ": " .. r.body)
        assert.equal(case[2], r.json.line)
        assert.same({ "api.test" }, got(r.json, "Host"), case[1]) -- the origin gets the admitted name, once
      end
      for i, data in ipairs(bad) do
        local r = res[#same + i]
        assert.equal(400, r.status, data .. ": " .. r.body)
      end
      local log = origin_log()
      for i = 1, #bad do assert.is_nil(log:find("/v1/bad-" .. i, 1, true), "bad-" .. i .. " reached the origin") end
    end)

    it("inspected tunnel: a pipelined second request naming another host never reaches the origin", function()
      local res = run {
        insp("GET /v1/pipe-a1 HTTP/1.1\r\nHost: api.test\r\n\r\nGET /v1/pipe-a2 HTTP/1.1\r\nHost: other.test\r\n\r\n"),
        insp("GET /v1/pipe-b1 HTTP/1.1\r\nHost: other.test\r\n\r\nGET /v1/pipe-b2 HTTP/1.1\r\nHost: api.test\r\n\r\n"),
      }
      assert.equal(200, res[1].status, res[1].body) -- the first, checked request
      assert.equal(1, res[1].responses)
      assert.equal(421, res[2].status, res[2].body)
      assert.equal(1, res[2].responses)
      local log = origin_log()
      assert.matches("/v1/pipe-a1", log, 1, true)
      for _, p in ipairs { "/v1/pipe-a2", "/v1/pipe-b1", "/v1/pipe-b2" } do assert.is_nil(log:find(p, 1, true), p) end
    end)

    it("plain-HTTP route: a Host naming another host or port gets 421, also pipelined", function()
      local cases = {
        { "GET http://plain.test/v1/fmis-1 HTTP/1.1", "Host: other.test\r\n" },
        { "GET http://plain.test/v1/fmis-2 HTTP/1.1", "Host: plain.test:8080\r\n" },
        { "GET http://plain.test/v1/fmis-3 HTTP/1.1", "Host: evil.test\r\n" },
        { "GET http://plain.test:80/v1/fmis-4 HTTP/1.1", "Host: plain.test:81\r\n" },
      }
      local auth = "Proxy-Authorization: Bearer " .. TOKEN .. "\r\n"
      local reqs = { fwd("GET http://plain.test/v1/fwd-ok HTTP/1.1", "Host: plain.test\r\n") } -- control
      for _, case in ipairs(cases) do reqs[#reqs + 1] = fwd(case[1], case[2]) end
      -- pipelined: a second request (another Host) in the same bytes, after a checked first, and before one
      reqs[#reqs + 1] = req("-", "-", "GET http://plain.test/v1/fpipe-1 HTTP/1.1\r\nHost: plain.test\r\n" .. auth .. "\r\n"
        .. "GET http://plain.test/v1/fpipe-2 HTTP/1.1\r\nHost: other.test\r\n" .. auth .. "\r\n")
      reqs[#reqs + 1] = req("-", "-", "GET http://plain.test/v1/fpipe-3 HTTP/1.1\r\nHost: other.test\r\n" .. auth .. "\r\n"
        .. "GET http://plain.test/v1/fpipe-4 HTTP/1.1\r\nHost: plain.test\r\n" .. auth .. "\r\n")
      local before = misdirected("forward")
      local res = run(reqs)
      assert.equal(200, res[1].status, res[1].body)
      assert.same({ "plain.test" }, got(res[1].json, "Host"))
      for i, case in ipairs(cases) do
        local r = res[i + 1]
        assert.equal(421, r.status, case[2] .. ": " .. r.body)
        assert.equal("invalid_request_error", r.json.error.type)
      end
      local p1, p3 = res[#cases + 2], res[#cases + 3]
      assert.equal(200, p1.status, p1.body)
      assert.equal(1, p1.responses)
      assert.equal(421, p3.status, p3.body)
      assert.equal(1, p3.responses)
      local log = origin_log()
      assert.matches("/v1/fwd-ok", log, 1, true)
      assert.matches("/v1/fpipe-1", log, 1, true)
      for i = 1, #cases do assert.is_nil(log:find("/v1/fmis-" .. i, 1, true), "fmis-" .. i .. " reached the origin") end
      for i = 2, 4 do assert.is_nil(log:find("/v1/fpipe-" .. i, 1, true), "fpipe-" .. i .. " reached the origin") end
      assert.equal(#cases + 1, misdirected("forward") - before)
    end)

    it("plain-HTTP route: case, one trailing dot, the explicit default port and no Host name the URL's host; "
      .. "a repeated Host is a 400", function()
      local hosts = { "Host: PLAIN.test.\r\n", "Host: plain.test:80\r\n", "" }
      local reqs = {}
      for _, hdr in ipairs(hosts) do reqs[#reqs + 1] = fwd("GET http://plain.test/v1/fsame HTTP/1.1", hdr) end
      reqs[#reqs + 1] = fwd("GET http://plain.test/v1/fbad-1 HTTP/1.1", "Host: plain.test\r\nHost: plain.test\r\n")
      local res = run(reqs)
      for i, hdr in ipairs(hosts) do
        assert.equal(200, res[i].status, hdr .. ": " .. res[i].body)
        assert.same({ "plain.test" }, got(res[i].json, "Host"), hdr)
      end
      assert.equal(400, res[#hosts + 1].status, res[#hosts + 1].body)
      assert.is_nil(origin_log():find("/v1/fbad-1", 1, true))
    end)
  end)

  describe("shutdown", function()
    it("exits cleanly on SIGTERM (and, under ASan, without a sanitizer report)", function()
      local out = H.stop_clean("main")
      assert.is_nil(out:find(TOKEN, 1, true))
    end)
  end)
end)
