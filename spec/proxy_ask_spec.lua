-- The ask hook's "allow once" on a host the proxy inspects, against the built proxy and real TLS
-- (docs/egress-ask.md; design/proxy.md "The ask hook"). cred.test has a credential but no rule,
-- so under ask = true its CONNECT is held; an allow once admits that one connection, which the
-- proxy inspects (it terminates TLS and judges each request inside): its requests to cred.test
-- pass, one naming another Host is refused 421, a ClientHello naming another name is refused,
-- and the next connection to cred.test asks again (the policy in force never names it).
-- The asks are listed and answered through the binary's own control client. As in
-- spec/proxy_inspect_spec.lua: two network namespaces, the proxy and its clients in "ssas*", the
-- TLS stand-in (spec/support/proxy_standin.py: "hello from <sni> <path>" on 443) outside.
-- Needs root and ip(8). SANDSTACK_PROXY_UNDER_TEST=<path>/sandstack-proxy (relative to the
-- checkout) runs the same tests against another binary (the proxy before the fix refuses the
-- request inside the allowed tunnel with reason host).
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("ssas")
if os.getenv("SANDSTACK_PROXY_UNDER_TEST") then H.PROXY = os.getenv("SANDSTACK_PROXY_UNDER_TEST") end
local TOKEN, PROXY_IP, top = H.TOKEN, H.PROXY_IP, H.top
local in_p, audit = H.in_p, H.audit
local SKIP = H.missing { { "test -r /etc/ssl/certs/ca-certificates.crt", "needs the system CA bundle" } }
local work, sock

local HOSTS = "198.51.100.10 allowed.test\n198.51.100.10 cred.test\n198.51.100.10 other.test\n"
local SECRET = "cred-secret-" .. core.random_hex(8)
local CREDS = ph.creds_json { { name = "CRED", host = "cred.test", port = 443, header = "X-Key", secret = SECRET,
  placeholder = ("P"):rep(#SECRET) } }

-- sandstack-proxy --control VERB [payload] -> the decoded answer
local function control(verb, payload)
  local out = h.must(("env SANDSTACK_CONTROL_SOCKET=%s %s %s --control %s"):format(h.q(sock),
    payload and ("SANDSTACK_CONTROL_PAYLOAD=" .. h.q(core.json_encode(payload))) or "", h.q(top .. "/" .. H.PROXY), verb))
  return assert(core.json_decode(out:match("[^\n]+") or ""), out)
end

local wait_for = h.wait_for

local n = 0
-- spec/support/proxy_client.py's tunnel_requests to target:443 in the background (SNI sni, one
-- GET per Host given); returns a function waiting for its result
local function client(target, sni, ...)
  n = n + 1
  local out = work .. "/client" .. n .. ".json"
  local args = { "tunnel_requests", PROXY_IP, "3128", target .. ":443", sni, H.proxies.main.ca .. "/bundle.pem", TOKEN, ... }
  for i, a in ipairs(args) do args[i] = h.q(a) end
  h.must(in_p("sh -c " .. h.q("python3 " .. h.q(top .. "/spec/support/proxy_client.py") .. " " .. table.concat(args, " ")
    .. " > " .. h.q(out .. ".tmp") .. " && mv " .. h.q(out .. ".tmp") .. " " .. h.q(out))) .. " </dev/null >/dev/null 2>&1 &")
  return function()
    return wait_for("the client's result", function()
      local s = h.read_file(out)
      return s and assert(core.json_decode(s), s)
    end)
  end
end

-- the one pending ask for host (waited for), answered
local function answer(host, decision, reason)
  local ask = wait_for("an ask for " .. host, function()
    local asks = control("egress-asks").asks or {}
    for _, a in ipairs(asks) do if a.host == host then return a end end
  end)
  local r = control("egress-answer", { id = ask.id, decision = decision, remember = "once", reason = reason, by = "spec" })
  assert.is_true(r.ok, core.json_encode(r))
  return ask
end

-- a CONNECT to cred.test (SNI sni, a GET per Host given) held, allowed once, its tunnel opened:
-- the client's result and the ask
local function allowed_once(sni, ...)
  local result = client("cred.test", sni, ...)
  local ask = answer("cred.test", "allow")
  local r = result()
  assert.equal(200, r.connect.status)
  return r, ask
end

describe("sandstack-proxy: an ask's allow once on an inspected host", function()
  if not H.bring_up(SKIP, function()
    work = H.net_up("/tmp/ssas-proxy.XXXXXX", HOSTS, { "198.51.100.10" })
    H.make_certs("ssas-test-ca", "allowed.test", { "allowed.test", "cred.test", "other.test" },
      " && cat /etc/ssl/certs/ca-certificates.crt ca.pem > roots.pem")
    H.start_standin()
    H.wait_standin()
    sock = work .. "/ctl/control.sock"
    H.start_proxy("main", 3128, H.base_env("ssas-session", {
      SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = { "allowed.test:443" }, ask = true, ask_timeout = 20 })
        :render(),
      SANDSTACK_UPSTREAM_CA = h.read_file(work .. "/ca.pem"), SANDSTACK_CA_ROOTS = work .. "/roots.pem",
      SANDSTACK_CREDENTIALS = CREDS, SANDSTACK_CONTROL_SOCKET = sock }), { ca_dir = true })
    wait_for("the control socket", function()
      return (h.read_file(work .. "/main/out") or ""):find("control_listening", 1, true)
    end)
  end) then return end

  it("admits the requests inside that one inspected tunnel", function()
    local r, ask = allowed_once("cred.test", "cred.test")
    assert.same({ "CONNECT", 443, "https" }, { ask.method, ask.port, ask.service })
    assert.same({ { status = 200, body = "hello from cred.test /r0\n" } }, r.answers)
    local line = wait_for("the tunnel's audit line", function() -- written when the connection ends
      for _, l in ipairs(audit("main")) do
        if l.route == "inspect" and l.host == "cred.test" and l.decision == "allow" then return l end
      end
    end)
    assert.same({ "spec", "/r0" }, { line.answered_by, line.path })
    -- once: the policy in force still does not name cred.test
    assert.is_nil(core.json_encode(control("egress")):find("cred.test", 1, true))
  end)

  it("another connection to the host asks again, held beside it or made after; a deny is readable", function()
    local first = client("cred.test", "cred.test", "cred.test") -- the connection before closed: asked again
    local ask = wait_for("the ask", function() return (control("egress-asks").asks or {})[1] end)
    local second = client("cred.test", "cred.test", "cred.test")
    wait_for("two asks", function() return #(control("egress-asks").asks or {}) == 2 end)
    assert.is_true(control("egress-answer", { id = ask.id, decision = "allow", remember = "once", by = "spec" }).ok)
    assert.same({ { status = 200, body = "hello from cred.test /r0\n" } }, first().answers)
    -- the allow was this connection's alone: the other is still held
    local asks = control("egress-asks").asks
    assert.equal(1, #asks)
    assert.is_true(asks[1].id > ask.id)
    answer("cred.test", "deny", "one request was enough")
    local r = second()
    assert.equal(403, r.connect.status)
    assert.matches("^ask_denied; ", r.connect.headers["x-sandstack-deny-reason"])
    local j = assert(core.json_decode(r.connect.body), r.connect.body)
    assert.equal("ask_denied", j.policy.reason)
    assert.matches("denied by spec when asked: one request was enough", j.deny.why, 1, true)
    assert.same({}, r.answers)
  end)

  it("inside the allowed tunnel, a request naming another Host is refused 421", function()
    local r = allowed_once("cred.test", "other.test")
    assert.equal(421, r.answers[1] and r.answers[1].status, core.json_encode(r))
    assert.matches("cred.test", r.answers[1].body, 1, true)
  end)

  it("a ClientHello naming another name than the allowed CONNECT's is refused", function()
    local r = allowed_once("other.test", "other.test")
    assert.same({}, r.answers)
    assert.is_string(r.error)
    local seen = wait_for("the refused hello's audit line", function()
      for _, l in ipairs(audit("main")) do if l.security_event == "sni_mismatch" then return l end end
    end)
    assert.equal("cred.test", seen.host)
  end)

  it("a held POST's body reaches the destination whole once allowed (more than the held buffer)", function()
    local body, out = work .. "/big", work .. "/post.json"
    h.write_file(body, ("0123456789abcdef"):rep(12500))
    h.must(in_p("sh -c " .. h.q("curl -sS --max-time 30 -H 'Expect:' -x " .. h.q(H.proxy_url("main")) .. " --data-binary @"
      .. h.q(body) .. " http://other.test/up > " .. h.q(out .. ".tmp") .. " && mv " .. h.q(out .. ".tmp") .. " " .. h.q(out)))
      .. " </dev/null >/dev/null 2>&1 &")
    answer("other.test", "allow")
    local got = wait_for("the answer", function()
      local s = h.read_file(out)
      return s and assert(core.json_decode(s), s)
    end)
    assert.equal(200000, #got.body)
    assert.is_true(got.body == h.read_file(body), "the body arrived changed")
  end)

  it("exits cleanly on SIGTERM (and, under ASan, without a sanitizer report)", function()
    local err = H.stop("main")
    assert.is_nil(err:find("ERROR: AddressSanitizer", 1, true), err)
    assert.is_nil(err:find("ERROR: LeakSanitizer", 1, true), err)
    assert.is_nil(err:find("runtime error", 1, true), err)
  end)
end)
