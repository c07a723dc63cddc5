-- Refusals an agent can read, and the audit lines' stable schema (csrc/proxy/route/reply.c,
-- deny.c, audit.c; docs/proxy.md "Refusals an agent can read", "Audit lines"). Real clients (curl,
-- Python's urllib and http.client) go through the built sandstack-proxy, in the network-namespace
-- test bed of spec/support/proxy_harness.lua, and each refusal must reach the caller with its
-- reason: the X-Sandstack-Deny-Reason header, the JSON body's "deny" object (what, why,
-- allow_hint, the rule's own reason), and for a refused CONNECT the status line's reason phrase,
-- which is what Python's tunnel error shows. Every refusal follows a control that is admitted.
-- Needs root and ip(8). SANDSTACK_PROXY_UNDER_TEST (a path under the checkout) runs another proxy
-- binary, e.g. one built from the code before this change, to see these tests fail there.
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("ssh25d")
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local in_p, proxy_url, proxies = H.in_p, H.proxy_url, H.proxies
local work

local SKIP = H.missing()

local REASON = "ro.test is read-only for agents: ask the operator (ticket OPS-7) before writing"

local POLICY = {
  "allowed.test",                                                             -- 1: every port, TLS over CONNECT
  { host = "api.test", methods = { "GET" }, paths = { "/v1/*" } },             -- 2: inspected over CONNECT
  { host = "ro.test", port = 80, methods = { "GET", "HEAD" }, reason = REASON }, -- 3: its own reason
  "private.test",                                                             -- 4: resolves to 10.1.2.3
  { host = "long.test", methods = { "GET" }, paths = (function()              -- 5: a rule too long to quote whole
    local t = {}
    for i = 1, 32 do t[i] = "/" .. string.rep(string.char(96 + (i - 1) % 26 + 1), 200) .. "/" .. i .. "/*" end
    return t
  end)() },
}

-- a second proxy with inspection off: a method rule cannot be checked over CONNECT there
local OFF_REASON = "api.test writes go through the review bot; reads need inspection, which this stack has off"
local OFF_POLICY = {
  "allowed.test:443",                                                                          -- 1
  { host = "api.test", methods = { "GET" }, paths = { "/v1/*" }, reason = OFF_REASON },          -- 2
}

local HOSTS = [[
198.51.100.10 allowed.test
198.51.100.11 denied.test
198.51.100.10 api.test
198.51.100.10 ro.test
198.51.100.10 long.test
10.1.2.3 private.test
]]

-- A keep-alive HTTPS origin (the stand-in's :443 answers one request per connection): each GET
-- answers "ok <path> override=<the X-HTTP-Method-Override it received>".
local KA_SERVER = [[
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        b = ("ok %s override=%s\n" % (self.path, self.headers.get("X-HTTP-Method-Override"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[3])), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
]]

-- Checks every audit line of a proxy's stdout against the stable schema, on the raw JSON (a null
-- and an absent field look alike once decoded into Lua): prints {lines, bad: [...]}.
local SCHEMA = [[
import json, sys
types = {"ts": (int, float), "session": str, "route": str, "decision": str, "bytes_in": int, "bytes_out": int,
         "duration_ms": int}
nullable = {"host": str, "port": int, "method": str, "path": str, "rule": int, "security_event": str}
routes = {"connect", "forward", "credential", "inspect", "control", "head"}
bad, n = [], 0
for line in open(sys.argv[1]):
    v = json.loads(line)
    if "decision" not in v:
        continue
    n += 1
    for k, t in list(types.items()) + list(nullable.items()):
        if k not in v:
            bad.append("line %d lacks %s" % (n, k))
        elif v[k] is None and k in nullable:
            pass
        elif isinstance(v[k], bool) or not isinstance(v[k], t):
            bad.append("line %d: %s is %r" % (n, k, v[k]))
    if v.get("route") not in routes:
        bad.append("line %d: route %r" % (n, v.get("route")))
print(json.dumps({"lines": n, "bad": bad}))
]]

local function setup()
  work = H.net_up("/tmp/ssh25d-proxy.XXXXXX", HOSTS, { "198.51.100.10", "198.51.100.11" })
  H.make_certs("ssh25d-test-ca", "allowed.test", { "allowed.test", "denied.test", "api.test" })
  h.write_file(work .. "/schema.py", SCHEMA)
  h.write_file(work .. "/ka_server.py", KA_SERVER)
  H.start_standin()
  H.start_peer(work .. "/ka_server.py", { work .. "/srv.pem", work .. "/srv.key", "8444" },
    { ready = 8444, log = work .. "/ka.log" })
  H.wait_standin()
  H.start_proxy("main", 3128, H.base_env("deny-session", {
    SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = POLICY }):render(),
    SANDSTACK_UPSTREAM_CA = h.read_file(work .. "/ca.pem") }), { ca_dir = true })
  H.start_proxy("off", 3129, H.base_env("deny-session", {
    SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = OFF_POLICY, inspect = false }):render() }), { ca_dir = true })
end

-- Clients trust the test CA (the origins) and the proxy's inspection CA (api.test).
local function cafile()
  local f = work .. "/trust.pem"
  if not h.read_file(f) then
    h.write_file(f, h.read_file(work .. "/ca.pem") .. h.read_file(proxies.main.ca .. "/bundle.pem"))
  end
  return f
end

-- curl through the proxy (http_proxy and HTTPS_PROXY: curl reads only the lowercase name for
-- http:// URLs): everything it printed (stdout and stderr), ok
local function curl(args, name)
  local url = proxy_url(name or "main")
  return h.sh(in_p("env http_proxy=" .. h.q(url) .. " HTTPS_PROXY=" .. h.q(url)
    .. " curl -sS --max-time 15 --cacert " .. h.q(cafile()) .. " " .. args .. " 2>&1"))
end

-- What Python's own clients show their caller (proxy_client.py): "urllib URL [METHOD]" is
-- urllib.request through HTTP(S)_PROXY from the environment ("off" first: the inspection-off
-- proxy's); "tunnel HOST PORT" is http.client with set_tunnel (CONNECT), then GET / inside it
local function py(...)
  local args, name = { ... }, "main"
  if args[1] == "off" then name = table.remove(args, 1) end -- the inspection-off proxy
  if args[1] == "tunnel" then
    return H.client("stdlib_tunnel", PROXY_IP, proxies.main.port, args[2], args[3], TOKEN)
  end
  return H.run_client("urllib", { "15", args[3] or "GET", args[2] },
    { env = { HTTP_PROXY = proxy_url(name), HTTPS_PROXY = proxy_url(name), CAFILE = cafile() } })
end

-- spec/support/proxy_client.py COMMAND ARGS... (after the proxy's address) -> decoded JSON
local function socket_client(cmd, ...)
  local port = proxies.main.port
  if cmd == "raw_off" then cmd, port = "raw", proxies.off.port end
  return H.client(cmd, PROXY_IP, port, ...)
end

-- the JSON body after curl -i's head (the last head when a CONNECT's 200 came first)
local function body_of(out)
  local json = out:match(".*\r\n\r\n(.*)$")
  return assert(json and core.json_decode(json), "no JSON body in: " .. out)
end

-- the header as curl printed it (-i or -v)
local function deny_header(out) return out:match("[Xx]%-[Ss]andstack%-[Dd]eny%-[Rr]eason: ([^\r\n]*)") end

-- the body says what, why and what to allow, and keeps the older "policy" fields
local function assert_deny(b, code, what)
  assert.is_table(b.deny, "no deny object")
  assert.equal(code, b.deny.code)
  for k, v in pairs(what) do assert.equal(v, b.deny.what[k], k) end
  assert.is_string(b.deny.why)
  assert.truthy(#b.deny.why > 10, b.deny.why)
  assert.equal("error", b.type)
end

-- a hint that ends with the named rule as it would read: that text is a rule the policy compiles,
-- and it admits the request that was refused
local function assert_hint_admits(hint, host, method, path, port)
  local text = assert(hint:match("(%{ host = .*%})$"), hint)
  local rule = assert(load("return " .. text, "hint", "t", {}))()
  local p = assert(core.policy_compile { allow = { rule } })
  assert.is_true(p:admits(host, method, path, port), text)
end

-- the audit lines once one matching pred has been written (lines are written when a connection ends)
local function audit_until(pred)
  for _ = 1, 200 do
    for _, l in ipairs(H.audit("main")) do
      if pred(l) then return l end
    end
    h.sh("sleep 0.05")
  end
  error("no such audit line in: " .. (h.read_file(proxies.main.dir .. "/out") or ""))
end

describe("sandstack-proxy refusals an agent can read", function()
  if not H.bring_up(SKIP, setup) then return end

  it("a denied host over plain HTTP: curl prints the header and the JSON body, urllib's HTTPError carries both", function()
    local out, ok = curl("-i http://allowed.test/control")
    assert.is_true(ok, out)
    assert.matches("HTTP/1.1 200", out, 1, true) -- control: the same proxy admits a listed host
    out = curl("-i http://denied.test/x?q=1")
    assert.matches("^HTTP/1.1 403 Forbidden %(sandstack: host; ", out)
    assert.equal("host; no rule admits GET to denied.test:80", deny_header(out))
    local b = body_of(out)
    assert.equal("host", b.policy.reason) -- the older fields stay
    assert.equal("denied.test", b.policy.host)
    assert_deny(b, "host", { route = "forward", host = "denied.test", port = 80, method = "GET", path = "/x" })
    assert.matches('{ host = "denied.test", port = 80 }', b.deny.allow_hint, 1, true)
    assert.matches('to allow it: add the rule { host = "denied.test", port = 80 }', b.error.message, 1, true)
    local r = py("urllib", "http://denied.test/py")
    assert.equal(403, r.status)
    assert.matches("HTTP Error 403: Forbidden (sandstack: host; no rule admits GET to denied.test:80)", r.error, 1, true)
    assert.equal("host; no rule admits GET to denied.test:80", r.header)
    assert_deny(assert(core.json_decode(r.body)), "host", { host = "denied.test", path = "/py" })
  end)

  it("a Host header naming another site: 421 with the reason and a security event", function()
    local out = curl("-i -H 'Host: denied.test' http://allowed.test/h")
    assert.matches("^HTTP/1.1 421 ", out)
    assert.matches("^host_mismatch; ", deny_header(out))
    local b = body_of(out)
    assert_deny(b, "host_mismatch", { host = "allowed.test", port = 80 })
    assert.equal("host_mismatch", b.deny.security_event)
    assert.matches("allowed.test:80", b.deny.allow_hint, 1, true)
    audit_until(function(l) return l.security_event == "host_mismatch" and l.path == "/h" end)
  end)

  it("a wrong proxy token and an oversized head: 407 and 431 say so, with what to change", function()
    local out = h.sh(in_p("curl -sS -i --max-time 15 -x " .. h.q(proxy_url("main", "tok-wrong")) .. " http://allowed.test/t 2>&1"))
    assert.matches("^HTTP/1.1 407 Proxy Authentication Required %(sandstack: proxy_auth_required; ", out)
    assert.matches("Proxy-Authenticate: Basic", out, 1, true)
    local b = body_of(out)
    assert_deny(b, "proxy_auth_required", { route = "forward", host = "allowed.test" })
    assert.matches("HTTPS_PROXY", b.deny.allow_hint, 1, true)
    out = curl("-i -H " .. h.q("X-Big: " .. string.rep("b", 40000)) .. " http://allowed.test/big")
    assert.matches("^HTTP/1.1 431 Request Header Fields Too Large %(sandstack: headers_too_large; ", out)
    b = body_of(out)
    assert_deny(b, "headers_too_large", { route = "head" })
    assert.is_nil(b.deny.what.host) -- refused before the head was read: nothing else is known
    assert.matches("fewer or smaller", b.deny.allow_hint, 1, true)
  end)

  it("a method override header is removed from a forwarded request, and the line says so", function()
    local out, ok = curl("http://allowed.test/plain")
    assert.is_true(ok, out) -- control: no override, no event
    local plain = audit_until(function(l) return l.path == "/plain" end)
    assert.is_nil(plain.security_event)
    out, ok = curl("-H 'X-HTTP-Method-Override: DELETE' http://allowed.test/ov")
    assert.is_true(ok, out)
    local seen = assert(core.json_decode(out:match("(%b{})%s*$")), out) -- the stand-in echoes what it got
    assert.equal("GET", seen.method)
    assert.is_nil(seen.headers["x-http-method-override"])
    local l = audit_until(function(a) return a.path == "/ov" end)
    assert.equal("allow", l.decision)
    assert.equal("override_header_stripped", l.security_event)
  end)

  it("inside an inspected keep-alive connection: the override's request has the event, the next request not", function()
    local out, ok = curl("-H 'X-HTTP-Method-Override: DELETE' https://api.test:8444/v1/ov1 --next --cacert "
      .. h.q(cafile()) .. " https://api.test:8444/v1/ov2") -- --next drops every option, the header with them
    assert.is_true(ok, out)
    assert.matches("ok /v1/ov1 override=None", out, 1, true) -- removed on the way
    assert.matches("ok /v1/ov2 override=None", out, 1, true)
    local first = audit_until(function(l) return l.path == "/v1/ov1" end)
    local second = audit_until(function(l) return l.path == "/v1/ov2" end)
    assert.equal("inspect", first.route)
    assert.equal("override_header_stripped", first.security_event)
    assert.is_nil(second.security_event)
    assert.equal(first.conn, second.conn) -- one connection carried both
  end)

  it("CONNECT to a denied host: curl -v shows the header, urllib's tunnel error the reason, the body says what to add", function()
    local out, ok = curl("https://allowed.test/control")
    assert.is_true(ok, out) -- control: a tunnel to a listed host
    assert.matches("hello from allowed.test /control", out, 1, true)
    out, ok = curl("-v https://denied.test/")
    assert.is_false(ok)
    assert.matches("CONNECT tunnel failed, response 403", out, 1, true)
    assert.equal("host; no rule admits a tunnel to denied.test:443", deny_header(out))
    local r = py("urllib", "https://denied.test/py")
    assert.equal("URLError", r.error_type)
    assert.matches("Tunnel connection failed: 403 Forbidden (sandstack: host; no rule admits a tunnel to denied.test:443)",
      r.error, 1, true)
    -- http.client's own tunnel reads no body; a client reading the 403 itself gets the JSON
    local raw = socket_client("raw", "CONNECT denied.test:443 HTTP/1.1\\r\\nProxy-Authorization: Bearer " .. TOKEN
      .. "\\r\\n\\r\\n")
    local b = assert(core.json_decode(raw.body))
    assert_deny(b, "host", { route = "connect", host = "denied.test", port = 443, method = "CONNECT" })
    assert.is_nil(b.deny.what.path)
    assert.equal('add the rule { host = "denied.test", port = 443 } to the egress policy', b.deny.allow_hint)
  end)

  it("a denied method and a denied path on an inspected host: the rule as it would read with them", function()
    local out, ok = curl("https://api.test/v1/ok")
    assert.is_true(ok, out) -- control: GET /v1/* is admitted inside the inspected tunnel
    assert.matches("hello from api.test /v1/ok", out, 1, true)
    out = curl("-i -X POST -d x https://api.test/v1/ok")
    assert.matches("HTTP/1.1 403 Forbidden %(sandstack: method; ", out)
    assert.equal("method; rule 2 names api.test:443 but admits only the methods GET, not POST", deny_header(out))
    local b = body_of(out)
    assert_deny(b, "method", { route = "inspect", host = "api.test", port = 443, method = "POST", path = "/v1/ok" })
    assert.equal(2, b.deny.rule)
    assert.equal('add "POST" to the methods of rule 2: { host = "api.test", methods = { "GET", "POST" }, '
      .. 'paths = { "/v1/*" } }', b.deny.allow_hint)
    assert_hint_admits(b.deny.allow_hint, "api.test", "POST", "/v1/ok", 443)
    out = curl("-i https://api.test/v2/list")
    assert.equal("path; rule 2 names api.test:443 and GET but none of its paths is /v2/list", deny_header(out))
    b = body_of(out)
    assert_deny(b, "path", { host = "api.test", method = "GET", path = "/v2/list" })
    assert.matches('{ host = "api.test", methods = { "GET" }, paths = { "/v1/*", "/v2/list" } }', b.deny.allow_hint, 1, true)
    assert_hint_admits(b.deny.allow_hint, "api.test", "GET", "/v2/list", 443)
    local r = py("urllib", "https://api.test/v1/py", "POST")
    assert.equal(403, r.status)
    assert.matches("(sandstack: method; rule 2 names api.test:443", r.error, 1, true)
    assert.equal(2, assert(core.json_decode(r.body)).deny.rule)
  end)

  it("a rule's own reason reaches curl and urllib as the policy wrote it", function()
    local out, ok = curl("-i http://ro.test/read")
    assert.is_true(ok, out)
    assert.matches("HTTP/1.1 200", out, 1, true) -- control: GET is what rule 3 admits
    out = curl("-i -X POST -d x http://ro.test/write")
    assert.equal("method; " .. REASON, deny_header(out))
    local b = body_of(out)
    assert_deny(b, "method", { host = "ro.test", method = "POST", path = "/write" })
    assert.equal(REASON, b.deny.rule_reason)
    assert.equal(3, b.deny.rule)
    assert.matches("the policy says: " .. REASON, b.error.message, 1, true)
    assert.matches('{ host = "ro.test", port = 80, methods = { "GET", "HEAD", "POST" } }', b.deny.allow_hint, 1, true)
    -- a method the policy language does not name is admitted only through ANY, alone
    b = body_of(curl("-i -X PROPFIND http://ro.test/dav"))
    assert.equal('add "ANY" to the methods of rule 3: { host = "ro.test", port = 80, methods = { "ANY" } }', b.deny.allow_hint)
    assert_hint_admits(b.deny.allow_hint, "ro.test", "PROPFIND", "/dav", 80)
    local r = py("urllib", "http://ro.test/py", "POST")
    assert.matches("HTTP Error 403: Forbidden (sandstack: method; " .. REASON .. ")", r.error, 1, true)
    assert.equal("method; " .. REASON, r.header)
    assert.equal(REASON, assert(core.json_decode(r.body)).deny.rule_reason)
  end)

  it("a method rule over CONNECT without inspection: needs_inspection, with the rule's own reason", function()
    local out, ok = curl("https://allowed.test/off", "off")
    assert.is_true(ok, out) -- control: this proxy admits a plain rule's host
    out, ok = curl("-v https://api.test/v1/x", "off")
    assert.is_false(ok)
    assert.equal("needs_inspection; " .. OFF_REASON, deny_header(out))
    local r = py("off", "urllib", "https://api.test/v1/py")
    assert.matches("Tunnel connection failed: 403 Forbidden (sandstack: needs_inspection; " .. OFF_REASON .. ")",
      r.error, 1, true)
    local raw = socket_client("raw_off", "CONNECT api.test:443 HTTP/1.1\\r\\nProxy-Authorization: Bearer " .. TOKEN
      .. "\\r\\n\\r\\n")
    local b = assert(core.json_decode(raw.body))
    assert.equal("needs_inspection", b.policy.reason) -- the older fields stay
    assert_deny(b, "needs_inspection", { route = "connect", host = "api.test", port = 443 })
    assert.equal(2, b.deny.rule)
    assert.equal(OFF_REASON, b.deny.rule_reason)
    assert.matches("turn TLS inspection on", b.deny.allow_hint, 1, true)
    assert.matches("inspect = false", b.error.message, 1, true)
  end)

  it("a rule too long to quote whole: the hint is cut, the body still JSON and the header still one line", function()
    local out, ok = curl("-i http://long.test/" .. string.rep("a", 200) .. "/1/x")
    assert.is_true(ok, out)
    assert.matches("HTTP/1.1 200", out, 1, true) -- control: the first path prefix
    out = curl("-i http://long.test/elsewhere")
    assert.matches("^path; rule 5 names long.test:80 and GET but none of its paths is /elsewhere$", deny_header(out))
    local b = body_of(out)
    assert_deny(b, "path", { host = "long.test", path = "/elsewhere" })
    assert.matches('^add "/elsewhere" %(or a prefix ending in /%*%) to the paths of rule 5: { host = "long.test"', b.deny.allow_hint)
    assert.truthy(#b.deny.allow_hint < 700, #b.deny.allow_hint)
  end)

  it("an address the proxy does not connect to: the range, and the allow_private entry (or literal rule) that would allow it", function()
    local out = curl("-i http://private.test/a")
    assert.matches("^HTTP/1.1 403 Forbidden %(sandstack: address_refused; ", out)
    assert.matches("^address_refused; private.test resolves to 10.1.2.3 %(", deny_header(out))
    local b = body_of(out)
    assert.equal("address_refused", b.policy.decision) -- the older fields stay
    assert_deny(b, "address_refused", { host = "private.test", port = 80 })
    assert.equal("address_refused", b.deny.security_event)
    assert.matches('allow_private = { "10.1.2.3:80" }', b.deny.allow_hint, 1, true)
    assert.matches('{ host = "10.1.2.3", port = 80 }', b.deny.allow_hint, 1, true)
    local r = py("urllib", "https://private.test/")
    assert.matches("Tunnel connection failed: 403 Forbidden (sandstack: address_refused; private.test resolves to 10.1.2.3",
      r.error, 1, true)
  end)

  it("a tunnel that is not TLS without a raw rule: curl and http.client read the 403 after the 200", function()
    local out, ok = curl("-p https://allowed.test:443/tls")
    assert.is_true(ok, out) -- control: the same host over a tunnel that starts with TLS
    out = curl("-i -p http://allowed.test:9003/plain")
    assert.matches("HTTP/1.1 200 Connection established", out, 1, true)
    assert.matches("HTTP/1.1 403 Forbidden (sandstack: raw_refused; ", out, 1, true)
    assert.matches("^raw_refused; the tunnel to allowed.test:9003 did not start with a TLS ClientHello", deny_header(out))
    local b = body_of(out)
    assert_deny(b, "raw_refused", { route = "connect", host = "allowed.test", port = 9003 })
    assert.equal("raw_refused", b.deny.security_event)
    assert.matches('{ host = "allowed.test", port = 9003, raw = true }', b.deny.allow_hint, 1, true)
    local r = py("tunnel", "allowed.test", "9003")
    assert.equal(403, r.status)
    assert.matches("^raw_refused; ", r.header)
    assert.matches("(sandstack: raw_refused; ", r.phrase, 1, true)
    assert.equal("raw_refused", assert(core.json_decode(r.body)).deny.code)
  end)

  it("an SNI naming another host: a TLS alert to the client, a security event in the audit line", function()
    local ok = socket_client("tunnel_tls", "allowed.test:443", "allowed.test", cafile(), TOKEN)
    assert.equal("ok", ok.tls, ok.error) -- control
    assert.matches("hello from allowed.test", ok.reply.body, 1, true)
    local r = socket_client("tunnel_tls", "allowed.test:443", "denied.test", cafile(), TOKEN)
    assert.equal(200, r.connect_status)
    assert.equal("error", r.tls)
    assert.matches("UNRECOGNIZED_NAME", r.error, 1, true)
    local l = audit_until(function(a) return a.decision == "sni_mismatch" end)
    assert.equal("sni_mismatch", l.security_event)
    assert.equal("connect", l.route)
  end)

  it("every audit line has each stable field with its type; security events only on refusals that are attacks", function()
    audit_until(function(l) return l.security_event == "raw_refused" end)
    local res = assert(core.json_decode(h.must("python3 " .. h.q(work .. "/schema.py") .. " "
      .. h.q(proxies.main.dir .. "/out"))))
    assert.truthy(res.lines >= 15, "only " .. res.lines .. " audit lines")
    assert.same({}, res.bad)
    local seen = {}
    for _, l in ipairs(H.audit("main")) do
      assert.equal("deny-session", l.session)
      if l.security_event then seen[l.security_event] = true end
      if l.decision == "allow" and l.path ~= "/ov" and l.path ~= "/v1/ov1" then assert.is_nil(l.security_event) end
      if l.route == "connect" and l.decision == "allow" and l.host == "allowed.test" and l.port == 443 then
        assert.truthy(l.bytes_in > 0 and l.bytes_out > 0, "an allowed tunnel carried bytes both ways")
        assert.equal(l.bytes_up, l.bytes_in)
        assert.equal(l.bytes_down, l.bytes_out)
      end
    end
    assert.same({ address_refused = true, host_mismatch = true, raw_refused = true, sni_mismatch = true,
      override_header_stripped = true }, seen)
  end)

  it("the proxies reported no sanitizer finding (the asan mode's proxy is built with ASan and UBSan)", function()
    for name, p in pairs(proxies) do
      local err = h.read_file(p.dir .. "/err") or ""
      assert.is_nil(err:find("runtime error", 1, true), name .. ": " .. err)
      assert.is_nil(err:find("Sanitizer", 1, true), name .. ": " .. err)
      assert.truthy(h.sh("kill -0 " .. p.pid), name .. " is still running")
    end
  end)
end)
