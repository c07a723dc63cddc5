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
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local in_p, audit = H.in_p, H.audit
local SKIP = H.missing { { "test -r /etc/ssl/certs/ca-certificates.crt", "needs the system CA bundle" } }
local work, sock

local HOSTS = "198.51.100.10 allowed.test\n198.51.100.10 cred.test\n198.51.100.10 other.test\n"
local SECRET = "cred-secret-" .. core.random_hex(8)
local CREDS = ph.creds_json { { name = "CRED", host = "cred.test", port = 443, header = "X-Key", secret = SECRET,
  placeholder = ("P"):rep(#SECRET) } }

-- sandstack-proxy --control VERB [payload] -> the decoded answer (raises unless it exits 0 with JSON)
local function control(verb, payload)
  local a, code, out = H.control(sock, verb, payload and core.json_encode(payload))
  assert(code == 0 and not a.raw, out)
  return a
end


local n = 0
-- spec/support/proxy_client.py's tunnel_requests to target:443 in the background (SNI sni, one
-- GET per Host given); returns a function waiting for its result
local function client(target, sni, ...)
  n = n + 1
  local out = work .. "/client" .. n .. ".json"
  local run = H.client_command("tunnel_requests", { PROXY_IP, "3128", target .. ":443", sni,
    H.proxies.main.ca .. "/bundle.pem", TOKEN, ... })
  h.must("sh -c " .. h.q(run .. " > " .. h.q(out .. ".tmp") .. " && mv " .. h.q(out .. ".tmp") .. " " .. h.q(out))
    .. " </dev/null >/dev/null 2>&1 &")
  return function()
    return h.wait_for("the client's result", function()
      local s = h.read_file(out)
      return s and assert(core.json_decode(s), s)
    end)
  end
end

-- the one pending ask for host (waited for), answered
local function answer(host, decision, reason)
  local ask = h.wait_for("an ask for " .. host, function()
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
      SANDSTACK_CREDENTIALS = CREDS }), { ca_dir = true, control = sock })
  end) then return end

  it("admits the requests inside that one inspected tunnel", function()
    local r, ask = allowed_once("cred.test", "cred.test")
    assert.same({ "CONNECT", 443, "https" }, { ask.method, ask.port, ask.service })
    assert.same({ { status = 200, body = "hello from cred.test /r0\n" } }, r.answers)
    local line = h.wait_for("the tunnel's audit line", function() -- written when the connection ends
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
    local ask = h.wait_for("the ask", function() return (control("egress-asks").asks or {})[1] end)
    local second = client("cred.test", "cred.test", "cred.test")
    h.wait_for("two asks", function() return #(control("egress-asks").asks or {}) == 2 end)
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
    local seen = h.wait_for("the refused hello's audit line", function()
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
    local got = h.wait_for("the answer", function()
      local s = h.read_file(out)
      return s and assert(core.json_decode(s), s)
    end)
    assert.equal(200000, #got.body)
    assert.is_true(got.body == h.read_file(body), "the body arrived changed")
  end)

  -- A revocation revokes: an allow once answered a question the policy in force posed, so the
  -- host's next policy (set-egress) takes it back, and a tunnel or inspected connection that the
  -- grant alone admitted is closed, even when the new policy still asks. An answer remembered for
  -- the session only adds a rule to the policy in force and takes back nothing.
  it("set-egress closes the tunnels and inspected connections allowed once; a remembered answer does not", function()
    -- proxy_client.py's hold: a tunnel to host:443, TLS naming host, "open", then "eof <s>" when
    -- the proxy ends it
    local pids = {}
    finally(function() -- the drain at SIGTERM (the next test) waits for open tunnels
      for _, pid in ipairs(pids) do h.signal(pid, "TERM") end
    end)
    local function hold(host)
      local out = work .. "/hold-" .. host
      local run = H.client_command("hold", { host, "60" },
        { HTTPS_PROXY = H.proxy_url("main"), SSL_CERT_FILE = H.proxies.main.ca .. "/bundle.pem" })
      pids[#pids + 1] = h.start(run .. " > " .. h.q(out) .. " 2>&1 </dev/null")
      return function() return h.read_file(out) or "" end
    end
    local plain, inspected = hold("other.test"), hold("cred.test")
    answer("other.test", "allow")
    answer("cred.test", "allow")
    local ruled = hold("allowed.test") -- the control: admitted by a rule of both policies
    for name, f in pairs { plain = plain, inspected = inspected, ruled = ruled } do
      h.wait_for("the " .. name .. " tunnel open", function() return f():find("open", 1, true) end)
    end
    -- a plain-HTTP ask for other.test:80, allowed for the session: a rule added, the grants stay
    local got = work .. "/session.out"
    h.must(in_p("sh -c " .. h.q("curl -sS --max-time 30 -x " .. h.q(H.proxy_url("main")) .. " http://other.test/kept > "
      .. h.q(got .. ".tmp") .. " && mv " .. h.q(got .. ".tmp") .. " " .. h.q(got))) .. " </dev/null >/dev/null 2>&1 &")
    local ask = h.wait_for("the session ask", function()
      for _, a in ipairs(control("egress-asks").asks or {}) do if a.port == 80 then return a end end
    end)
    local r = control("egress-answer", { id = ask.id, decision = "allow", remember = "session", by = "spec" })
    assert.is_true(r.ok and r.remembered, core.json_encode(r))
    h.wait_for("the session ask's answer", function() return h.read_file(got) end)
    core.sleep(1)
    for name, f in pairs { plain = plain, inspected = inspected, ruled = ruled } do
      assert.is_nil(f():find("eof", 1, true), "the " .. name .. " tunnel ended at a remembered answer: " .. f())
    end
    -- the host's new policy: the start's again (asking still), without the remembered rule
    local start = assert(core.policy_compile { allow = { "allowed.test:443" }, ask = true, ask_timeout = 20 }):render()
    r = control("set-egress", assert(core.json_decode(start)))
    assert.is_true(r.ok, core.json_encode(r))
    assert.equal(2, r.closed)
    h.wait_for("the allowed-once tunnel closed", function() return plain():find("eof", 1, true) end, 5)
    h.wait_for("the allowed-once inspected connection closed", function() return inspected():find("eof", 1, true) end, 5)
    core.sleep(1)
    assert.is_nil(ruled():find("eof", 1, true), "the tunnel a rule admits ended: " .. ruled())
    local ended = h.wait_for("the closed connections' audit lines", function()
      local hosts = {}
      for _, l in ipairs(audit("main")) do
        if l.answered_by == "spec" and l["end"] == "policy_changed" then hosts[#hosts + 1] = l.host end
      end
      table.sort(hosts)
      return #hosts == 2 and hosts
    end)
    assert.same({ "cred.test", "other.test" }, ended)
    -- once taken back, the host is asked again
    local again = hold("other.test")
    answer("other.test", "deny", "revoked")
    h.wait_for("the refusal", function() return again():find("refused", 1, true) end)
  end)

  it("exits cleanly on SIGTERM (and, under ASan, without a sanitizer report)", function()
    H.stop_clean("main")
  end)
end)
