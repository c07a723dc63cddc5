-- Keep-alive inside inspected CONNECT tunnels (csrc/proxy/route/inspect.c, http_response.c,
-- http_chunked.c; docs/proxy.md "TLS inspection"): several requests on one inspected connection,
-- each checked on its own (pipelined ones too), chunked request bodies framed strictly, and the
-- smuggling shapes that live in framing differences refused. Real clients (curl, Python
-- http.client, a raw TLS client: spec/support/proxy_client.py) through the built proxy to a
-- keep-alive HTTPS origin in another network namespace (spec/support/keepalive_origin.py, which
-- logs every request it got and on which connection). As in spec/proxy_inspect_spec.lua: two
-- namespaces joined by a veth pair; every refusal comes with a control that succeeds. Needs root.
-- SANDSTACK_PROXY_UNDER_TEST=path runs the spec against another proxy binary (the old one).
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("sska")
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local in_p, proxy_url, audit, proxies = H.in_p, H.proxy_url, H.audit, H.proxies
local work

local SKIP = H.missing()

local POLICY = {
  { host = "api.test", methods = { "GET", "POST", "HEAD" }, paths = { "/v1/*" } }, -- inspected
}

local function bundle() return proxies.main.ca .. "/bundle.pem" end

-- curl through the proxy with the given arguments; its output
local function curl(args)
  return h.sh(in_p("env HTTPS_PROXY=" .. h.q(proxy_url("main")) .. " CURL_CA_BUNDLE=" .. h.q(bundle())
    .. " curl -sS --max-time 20 " .. args .. " 2>&1"))
end

-- the raw client (proxy_client.py's payload): payload sent inside TLS as mode says; {reply, end}
-- (or a list for "cuts")
local n_payload = 0
local function raw(payload, mode)
  n_payload = n_payload + 1
  local file = work .. "/payload" .. n_payload
  h.write_file(file, payload)
  local args = { PROXY_IP, proxies.main.port, "api.test:443", bundle(), TOKEN, mode or "one", file }
  if mode == "cuts" then return (H.client_lines("payload", args)) end
  return (H.run_client("payload", args))
end

-- the status codes of the responses in a reply, in order
local function statuses(reply)
  local list = {}
  for st in reply:gmatch("HTTP/1%.1 (%d%d%d) ") do list[#list + 1] = tonumber(st) end
  return list
end

-- what the origin got whose path starts with prefix, in order
local function origin_got(prefix)
  local list = {}
  for line in (h.read_file(work .. "/requests.log") or ""):gmatch("[^\n]+") do
    local r = core.json_decode(line)
    if r and r.path:sub(1, #prefix) == prefix then list[#list + 1] = r end
  end
  return list
end

local function get(path, extra)
  return "GET " .. path .. " HTTP/1.1\r\nHost: api.test\r\n" .. (extra or "") .. "\r\n"
end
local LAST = "Connection: close\r\n" -- the last request of a payload: the proxy then ends the connection

local function chunked_post(path, chunks, extra)
  return "POST " .. path .. " HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n" .. (extra or "") .. "\r\n"
    .. chunks
end

local function setup()
  work = H.net_up("/tmp/sska-keepalive.XXXXXX", "198.51.100.10 api.test\n", { "198.51.100.10" })
  H.make_certs("sska-test-ca", "api.test", { "api.test" }, " && cat /etc/ssl/certs/ca-certificates.crt ca.pem > roots.pem")
  H.start_peer("keepalive_origin.py", { work .. "/srv.pem", work .. "/srv.key", work, "443" },
    { ready = work .. "/origin.ready" })
  local base = H.base_env("sska-session", {
    SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = POLICY }):render(),
    SANDSTACK_UPSTREAM_CA = h.read_file(work .. "/ca.pem"), SANDSTACK_CA_ROOTS = work .. "/roots.pem" })
  H.start_proxy("main", 3128, base, { ca_dir = true })
end

describe("sandstack-proxy keep-alive inspection", function()
  if not H.bring_up(SKIP, setup) then return end

  describe("several requests on one connection", function()
    it("curl: three URLs share one tunnel and one origin connection; each is one audit line", function()
      local out = curl("-w '%{num_connects} %{http_code}\\n' -o /dev/null https://api.test/v1/curl-a -o /dev/null "
        .. "https://api.test/v1/curl-b -o /dev/null https://api.test/v1/curl-c")
      assert.equal("1 200\n0 200\n0 200\n", out) -- one connection, reused twice
      local got = origin_got("/v1/curl-")
      assert.equal(3, #got, out)
      assert.equal(got[1].conn, got[2].conn)
      assert.equal(got[1].conn, got[3].conn)
      local lines, conn = {}, nil
      for _, l in ipairs(audit("main")) do
        if l.kind == "inspect" and (l.path or ""):find("^/v1/curl%-") then
          lines[#lines + 1] = l
          conn = conn or l.conn
          assert.equal(conn, l.conn)
          assert.equal("allow", l.decision)
          assert.equal(200, l.status)
          assert.equal("GET", l.method)
        end
      end
      assert.equal(3, #lines)
      assert.same({ "/v1/curl-a", "/v1/curl-b", "/v1/curl-c" }, { lines[1].path, lines[2].path, lines[3].path })
    end)

    it("python http.client keeps the tunnel alive across GETs and into a POST; a body or a refusal ends it, the next request reconnects", function()
      local reqs = {}
      for i, r in ipairs { { "GET", "/v1/py-a" }, { "POST", "/v1/py-b", "payload" }, { "HEAD", "/v1/py-h" },
        { "GET", "/v1/py-c" }, { "GET", "/v2/py-refused" }, { "GET", "/v1/py-d" } } do
        reqs[i] = { method = r[1], path = r[2], body = r[3] }
      end
      h.write_file(work .. "/reqs.json", core.json_encode(reqs))
      local got, out = H.client("keepalive", PROXY_IP, proxies.main.port, "api.test:443", bundle(), TOKEN, "10",
        work .. "/reqs.json")
      assert.equal(6, #got, out)
      assert.same({ 200, 200, 200, 200, 403, 200 }, { got[1].status, got[2].status, got[3].status, got[4].status,
        got[5].status, got[6].status })
      local a, b, c = core.json_decode(got[1].body), core.json_decode(got[2].body), core.json_decode(got[4].body)
      assert.equal("payload", b.body)
      assert.equal("", got[3].body) -- HEAD: the length without a body, and the next answer is read right
      assert.equal(a.conn, b.conn) -- the GET's connection carried the POST
      -- after a body the connection is not reused (CL.0: an origin ignoring the body would read it
      -- as a request); the POST went out with Connection: close, and the HEAD on a new tunnel
      assert.is_not.equal(a.conn, c.conn)
      assert.same({ 1, 2, 2 }, { a.n, b.n, c.n })
      assert.equal("path", core.json_decode(got[5].body).policy.reason)
      assert.is_not.equal(a.conn, core.json_decode(got[6].body).conn) -- after the 403, a new tunnel
      assert.equal(0, #origin_got("/v2/"))
    end)

    it("answers a chunked response, a HEAD and a 100 Continue, each request on the same connection", function()
      local r = raw(get("/v1/chunked") .. "HEAD /v1/head-x HTTP/1.1\r\nHost: api.test\r\n\r\n" .. get("/v1/fr-mid")
        .. "POST /v1/continue HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabc")
      assert.same({ 200, 200, 200, 100, 200 }, statuses(r.reply))
      assert.equal("close_notify", r["end"]) -- the request with a body is the connection's last
      assert.matches("chunk one\n", r.reply:gsub("\r\n4;x=y\r\n", ""), 1, true)
      local last = origin_got("/v1/continue")[1]
      assert.equal(origin_got("/v1/chunked")[1].conn, last.conn)
      assert.equal(4, last.n)
    end)
  end)

  describe("pipelined requests", function()
    it("are each checked when the one before has been answered: an allowed pair goes through in order", function()
      local r = raw(get("/v1/pipe-a1") .. get("/v1/pipe-a2") .. get("/v1/pipe-a3", LAST))
      assert.same({ 200, 200, 200 }, statuses(r.reply))
      assert.equal("close_notify", r["end"])
      local got = origin_got("/v1/pipe-a")
      assert.equal(3, #got)
      assert.same({ "/v1/pipe-a1", "/v1/pipe-a2", "/v1/pipe-a3" }, { got[1].path, got[2].path, got[3].path })
      assert.equal(got[1].conn, got[3].conn)
    end)

    it("a refused second request gets the 403 and never reaches the origin; the first is answered", function()
      local r = raw(get("/v1/pipe-d1") .. "DELETE /v1/pipe-d2 HTTP/1.1\r\nHost: api.test\r\n\r\n" .. get("/v1/pipe-d3"))
      assert.same({ 200, 403 }, statuses(r.reply))
      assert.matches('"reason":"method"', r.reply, 1, true)
      assert.same({ "/v1/pipe-d1" }, (function()
        local t = {}
        for _, g in ipairs(origin_got("/v1/pipe-d")) do t[#t + 1] = g.path end
        return t
      end)())
      -- the same for a path and for another Host
      r = raw(get("/v1/pipe-p1") .. get("/v2/pipe-p2") .. get("/v1/pipe-p3", LAST))
      assert.same({ 200, 403 }, statuses(r.reply))
      r = raw(get("/v1/pipe-h1") .. "GET /v1/pipe-h2 HTTP/1.1\r\nHost: other.test\r\n\r\n")
      assert.same({ 200, 421 }, statuses(r.reply))
      assert.equal(1, #origin_got("/v1/pipe-p"))
      assert.equal(1, #origin_got("/v1/pipe-h"))
    end)

    it("with every byte its own TLS record, the same answers; nothing behind a request with a body is read", function()
      local r = raw(get("/v1/pipe-b1") .. "DELETE /v1/pipe-b0 HTTP/1.1\r\nHost: api.test\r\n\r\n", "bytes")
      assert.same({ 200, 403 }, statuses(r.reply))
      r = raw(get("/v1/pipe-b1") .. chunked_post("/v1/pipe-b2", "3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        .. get("/v1/pipe-b3"), "bytes")
      assert.same({ 200, 200 }, statuses(r.reply))
      local got = origin_got("/v1/pipe-b")
      assert.equal(3, #got)
      assert.equal("abcde", got[3].body)
      assert.equal(0, #origin_got("/v1/pipe-b3"))
    end)
  end)

  describe("chunked request bodies", function()
    it("curl: a chunked upload reaches the origin whole and chunked; a malformed one is a 400 and sends nothing", function()
      h.write_file(work .. "/upload", string.rep("0123456789abcdef", 5000))
      local out = curl("-o " .. h.q(work .. "/up.out") .. " -w '%{http_code}' -H 'Transfer-Encoding: chunked' "
        .. "--data-binary @" .. h.q(work .. "/upload") .. " https://api.test/v1/upload")
      assert.equal("200", out)
      local got = origin_got("/v1/upload")[1]
      assert.equal(80000, #got.body)
      assert.equal(string.rep("0123456789abcdef", 5000), got.body)
      assert.same({ "chunked" }, got.te)
      local r = raw(chunked_post("/v1/chunk-bad", "zz\r\nhello\r\n0\r\n\r\n"))
      assert.same({ 400 }, statuses(r.reply))
      assert.matches("malformed chunked request body", r.reply, 1, true)
      assert.equal(0, #origin_got("/v1/chunk-bad"))
    end)
  end)

  describe("request smuggling", function()
    local SMUGGLED = "DELETE /v1/smuggled HTTP/1.1\r\nHost: api.test\r\n\r\n"
    it("refuses the framing shapes two parsers could read differently, with 400, sending nothing", function()
      local r = raw(chunked_post("/v1/ctl-smuggle", "5\r\nhello\r\n0\r\n\r\n", LAST))
      assert.same({ 200 }, statuses(r.reply)) -- control: a well-formed chunked body passes
      local cases = {
        { "CL+TE", "POST /v1/sm-1 HTTP/1.1\r\nHost: api.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
          .. "0\r\n\r\n" .. SMUGGLED },
        { "TE+CL", "POST /v1/sm-2 HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n"
          .. "0\r\n\r\n" .. SMUGGLED },
        { "chunk-size overflow", chunked_post("/v1/sm-3", "10000000000000000005\r\nhello\r\n0\r\n\r\n" .. SMUGGLED) },
        { "two TE fields", chunked_post("/v1/sm-4", "0\r\n\r\n", "Transfer-Encoding: identity\r\n") },
        { "TE list", "POST /v1/sm-5 HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" },
        { "TE lookalike", "POST /v1/sm-6 HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n" },
        { "bare LF in a chunk line", chunked_post("/v1/sm-7", "5\nhello\r\n0\r\n\r\n") },
        { "data longer than its size", chunked_post("/v1/sm-8", "3\r\nhello\r\n0\r\n\r\n" .. SMUGGLED) },
        { "a trailer field", chunked_post("/v1/sm-9", "0\r\nX-Smuggle: 1\r\n\r\n") },
        { "a blank before the size", chunked_post("/v1/sm-10", " 5\r\nhello\r\n0\r\n\r\n") },
        { "a signed size", chunked_post("/v1/sm-11", "+5\r\nhello\r\n0\r\n\r\n") },
        { "two Content-Lengths", "POST /v1/sm-12 HTTP/1.1\r\nHost: api.test\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"
          .. "hello" },
      }
      for _, case in ipairs(cases) do
        r = raw(case[2])
        assert.same({ 400 }, statuses(r.reply), case[1] .. ": " .. r.reply)
      end
      assert.same({}, origin_got("/v1/sm-"))
      assert.equal(0, #origin_got("/v1/smuggled"))
    end)

    it("bytes after the last chunk or after Content-Length never reach the origin: the answer ends the connection", function()
      local r = raw(chunked_post("/v1/after-1", "5\r\nhello\r\n0\r\n\r\n") .. SMUGGLED)
      assert.same({ 200 }, statuses(r.reply))
      r = raw("POST /v1/after-2 HTTP/1.1\r\nHost: api.test\r\nContent-Length: 5\r\n\r\nhello" .. SMUGGLED)
      assert.same({ 200 }, statuses(r.reply))
      local got = origin_got("/v1/after-")
      assert.equal(2, #got)
      assert.equal("hello", got[1].body)
      assert.equal("hello", got[2].body)
      assert.equal(0, #origin_got("/v1/smuggled"))
    end)
  end)

  describe("the origin ends the connection", function()
    it("after Connection: close, curl's next request opens a new tunnel and works", function()
      local out = curl("-w '%{num_connects} %{http_code}\\n' -o /dev/null https://api.test/v1/close -o /dev/null "
        .. "https://api.test/v1/after-close")
      assert.equal("1 200\n1 200\n", out)
    end)

    it("after a response it did not announce as the last, the client's connection ends cleanly", function()
      local r = raw(get("/v1/drop") .. get("/v1/after-drop"))
      assert.equal(200, statuses(r.reply)[1])
      assert.equal("close_notify", r["end"])
      r = raw(get("/v1/nolen") .. get("/v1/after-nolen"))
      assert.same({ 200 }, statuses(r.reply))
      assert.matches("until the close\n$", r.reply)
      assert.equal("close_notify", r["end"])
      assert.equal(0, #origin_got("/v1/after-nolen"))
    end)
  end)

  describe("a client that stops anywhere", function()
    it("at every byte of a pipelined chunked POST and GET: nothing incomplete or unchecked reaches the origin", function()
      local payload = chunked_post("/v1/cut-1", "3\r\nabc\r\n0\r\n\r\n") .. get("/v1/cut-2")
      local list = raw(payload, "cuts")
      assert.equal(#payload + 1, #list)
      for _, g in ipairs(origin_got("/v1/cut-")) do
        if g.path == "/v1/cut-1" then assert.equal("abc", g.body) end
      end
      assert.is_true(#origin_got("/v1/cut-2") <= 1) -- only the one whole send
      local r = raw(get("/v1/after-cuts", LAST))
      assert.same({ 200 }, statuses(r.reply)) -- the proxy still serves
    end)
  end)

  describe("shutdown", function()
    it("exits cleanly on SIGTERM (and, under ASan, without a sanitizer report)", function()
      H.stop_clean("main")
    end)
  end)
end)
