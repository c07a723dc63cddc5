-- The egress ask hook on a real stack: under egress_policy { ask = true }, a request from inside
-- the sandbox that no rule admits waits in the proxy; stack:egress_asks() lists it, and
-- stack:answer() lets it through (remembered for the session: it shows in stack:egress(), and
-- the other pending asks for that host go on too),
-- denies it with a reason the sandbox reads, or leaves it to time out (reason ask_timeout); the
-- callback form h:serve answers one too; every decision is an audit line naming who answered.
-- d.test has a credential; once a live policy no longer names it, its CONNECT is asked, and
-- allowed once, that one connection is inspected and its request passes; the next asks again,
-- and a new policy closes the tunnels an ask allowed once.
-- The outside is a network namespace of this test with the TLS stand-in
-- (spec/support/proxy_standin.py) serving a.test, b.test and d.test (its CA is the stack's
-- proxy_upstream_ca, so the stack's bundle, which replaces the sandbox's CA variables, has it). Objects: project and netns
-- "sstest-ask-<random>", removed at the end. The proxy image carries this tree's proxy under a
-- name of its own, so a stack of another tree's spec building the shared test name at the same
-- time cannot swap it.
local sandstack = require "sandstack"
local h = require "helpers"
local core = sandstack.core
local docker = sandstack.docker

local dh = require "docker_proxy_harness"

local S = dh.stack("ask", "sak", function(r) return 16 * (4 + r % 8) end)
S.PROXY_IMAGE = S.PROXY_IMAGE:gsub("^sandstack%-test/proxy:", "sandstack-test/proxy-ask:")
local PROJECT = S.PROJECT
local addr, sandbox, audit = S.addr, S.sandbox, S.audit

local TIMEOUT = 4
-- d.test is named at start; a live policy drops it (under ask = true a credential's host may
-- be left to an ask, at start and live)
local START = { allow = { "b.test:443", "d.test:443" }, ask = true, ask_timeout = TIMEOUT }

-- curl in the sandbox in the background, its output (-i: the proxy's answer too) in a file
local function curl_bg(work, name, url)
  local file = work .. "/" .. name
  h.must(("docker exec %s curl -sS -i --max-time 30 %s > %s 2>&1 &"):format(sandbox(), h.q(url), h.q(file)))
  return function() return h.read_file(file) or "" end
end


-- the pending ask for host, once the proxy holds it
local function ask_for(stack, host)
  return h.wait_for("an ask for " .. host, function()
    for _, a in ipairs(assert(stack:egress_asks())) do if a.host == host then return a end end
  end, 15)
end

describe("the egress ask hook from inside a live sandbox #docker", function()
  local skip_why = S.missing()
  local work, stack, start_err

  lazy_setup(function()
    if skip_why then return end
    work = S.workdir()
    dh.make_certs(work, "sstest-ask-ca", "a.test", { "a.test", "b.test", "c.test", "d.test" })
    S.outside_up { 2 }
    S.start_standin(work)
    S.wait_ready(work, { "standin.ready" })
    S.build_images()
    local ca = h.read_file(work .. "/ca.pem")
    stack, start_err = docker.start(PROJECT, S.options {
      services = S.trusting(ca),
      egress_policy = START,
      proxy_hosts = { ["a.test"] = addr(2), ["b.test"] = addr(2), ["c.test"] = addr(2), ["d.test"] = addr(2) },
      proxy_upstream_ca = ca,
      credentials = { { name = "D_KEY", host = "d.test", header = "X-Key", secret = "d-secret-" .. core.random_hex(8) } },
    })
  end)

  lazy_teardown(function() if not skip_why then S.teardown(stack, work) end end)
  local function ready() return S.ready(skip_why, stack, start_err) end

  it("holds a request, and the host's allow (remembered) lets it through", function()
    if not ready() then return end
    local out = curl_bg(work, "allow.out", "https://a.test/one")
    local a = ask_for(stack, "a.test")
    local other = curl_bg(work, "other.out", "https://a.test/other") -- a second ask for the same host
    h.wait_for("two asks for a.test", function()
      local n = 0
      for _, x in ipairs(assert(stack:egress_asks())) do if x.host == "a.test" then n = n + 1 end end
      return n == 2
    end, 15)
    assert.same({ host = "a.test", port = 443, method = "CONNECT", service = "https" },
      { host = a.host, port = a.port, method = a.method, service = a.service })
    assert.is_nil(a.path)
    assert.is_true(math.abs(a.at - os.time()) < 60)
    assert.equal("", (out():gsub("%s", ""))) -- the agent's request is still waiting
    local r = assert(stack:answer(a.id, "allow", { remember = "session", by = "spec" }))
    assert.is_true(r.remembered)
    h.wait_for("a.test's answer", function() return out():find("hello from a.test /one", 1, true) end, 15)
    -- the remembered rule let the other ask for a.test through with the same answer
    h.wait_for("the other answer", function() return other():find("hello from a.test /other", 1, true) end, 15)
    assert.same({}, assert(stack:egress_asks()))
    assert.is_true((stack:egress():admits("a.test", nil, nil, 443)))
    -- remembered: the next request passes without an ask
    local again = curl_bg(work, "again.out", "https://a.test/two")
    h.wait_for("a.test's second answer", function() return again():find("hello from a.test /two", 1, true) end, 15)
    local answered
    for _, l in ipairs(audit()) do
      if l.route == "ask" and l.decision == "allow" and l.host == "a.test" then answered = l end
    end
    assert.equal("spec", answered and answered.by)
    assert.equal("session", answered.remember)
    -- an answer for an ask already answered finds nothing, typed
    local none, err = stack:answer(a.id, "deny")
    assert.is_nil(none)
    assert.equal("not_found", err.kind)
  end)

  it("a denied request gets a refusal whose reason the sandbox reads", function()
    if not ready() then return end
    local out = curl_bg(work, "deny.out", "http://c.test/secret")
    local a = ask_for(stack, "c.test")
    assert.equal("/secret", a.path)
    assert.equal("GET", a.method)
    assert(stack:answer(a.id, "deny", { reason = "not during the exam" }))
    local text = h.wait_for("the refusal", function() local t = out(); return t:find("403") and t end, 15)
    assert.matches("X-Sandstack-Deny-Reason: ask_denied", text, 1, true)
    assert.matches("not during the exam", text, 1, true)
    local seen
    for _, l in ipairs(audit()) do
      if l.route == "ask" and l.decision == "deny" and l.host == "c.test" then seen = l end
    end
    assert.equal("host", seen and seen.by)
  end)

  it("an allow once on an inspected host (a credential's) admits that connection alone", function()
    if not ready() then return end
    assert(stack:set_egress { allow = { "b.test:443" }, ask = true, ask_timeout = TIMEOUT })
    local out = curl_bg(work, "once.out", "https://d.test/once")
    local a = ask_for(stack, "d.test")
    local r = assert(stack:answer(a.id, "allow", { remember = "once", by = "spec" }))
    assert.is_false(r.remembered)
    -- the proxy terminated the tunnel's TLS (the stack CA's leaf) and let its request through
    h.wait_for("d.test's answer", function() return out():find("hello from d.test /once", 1, true) end, 15)
    assert.is_false((stack:egress():admits("d.test", nil, nil, 443)))
    local again = curl_bg(work, "once2.out", "https://d.test/again")
    local b = ask_for(stack, "d.test")
    assert.is_true(b.id > a.id)
    assert(stack:answer(b.id, "deny", { reason = "once was enough" }))
    h.wait_for("the refusal", function() return again():find("403", 1, true) end, 15)
    local inspected = h.wait_for("the inspected connection's audit line", function()
      for _, l in ipairs(audit()) do
        if l.route == "inspect" and l.host == "d.test" and l.decision == "allow" then return l end
      end
    end, 15)
    assert.same({ "/once", "spec" }, { inspected.path, inspected.answered_by })
  end)

  -- a revocation revokes: the host's next policy takes an allow once back, and the tunnel (a.test)
  -- and the inspected connection (d.test, a credential's host) it alone admitted are closed;
  -- one a rule admits (b.test) stays
  it("set_egress closes the tunnels an ask allowed once", function()
    if not ready() then return end
    finally(function() stack:set_egress { allow = { "b.test:443" }, ask = true, ask_timeout = TIMEOUT } end)
    local files = {}
    local function hold(host)
      files[host] = work .. "/revoke-" .. host
      h.must(S.client_command("hold", { host, "40" }) .. " > " .. h.q(files[host]) .. " 2>&1 &")
    end
    local function line(host) return h.read_file(files[host]) or "" end
    for _, host in ipairs { "a.test", "d.test" } do
      hold(host)
      assert(stack:answer(ask_for(stack, host).id, "allow", { remember = "once", by = "spec" }))
    end
    hold("b.test")
    for _, host in ipairs { "a.test", "d.test", "b.test" } do
      h.wait_for(host .. "'s tunnel open", function() return line(host):find("open", 1, true) end, 15)
    end
    -- without ask, a policy that leaves D_KEY's host out is refused (its credential could never
    -- be used), and nothing changes; under ask the host is left to an answer, and the allow once
    -- given is taken back
    local refused, rerr = stack:set_egress { allow = { "b.test:443" } }
    assert.is_nil(refused)
    assert.equal("D_KEY", rerr.credential, tostring(rerr))
    assert(stack:set_egress { allow = { "b.test:443" }, ask = true, ask_timeout = TIMEOUT })
    for _, host in ipairs { "a.test", "d.test" } do
      h.wait_for(host .. "'s tunnel closed", function() return line(host):find("eof", 1, true) end, 10)
    end
    core.sleep(1)
    assert.is_nil(line("b.test"):find("eof", 1, true), "the tunnel a rule admits ended: " .. line("b.test"))
    local ended = {}
    for _, l in ipairs(audit()) do
      if l.answered_by == "spec" and l["end"] == "policy_changed" then ended[l.host] = true end
    end
    assert.same({ ["a.test"] = true, ["d.test"] = true }, ended)
  end)

  it("an unanswered ask is refused with ask_timeout", function()
    if not ready() then return end
    local t0 = os.time()
    local out = curl_bg(work, "timeout.out", "http://c.test/late")
    ask_for(stack, "c.test")
    local text = h.wait_for("the timeout", function() local t = out(); return t:find("403") and t end, TIMEOUT + 15)
    assert.is_true(os.time() - t0 >= TIMEOUT - 1)
    assert.matches("ask_timeout", text, 1, true)
    assert.same({}, assert(stack:egress_asks()))
  end)

  it("an ask whose client leaves is dropped, and answering it finds nothing", function()
    if not ready() then return end
    h.must(("docker exec %s curl -sS --max-time 2 http://c.test/gone > /dev/null 2>&1 &"):format(sandbox()))
    local a = ask_for(stack, "c.test")
    h.wait_for("the ask to go with its client", function()
      for _, x in ipairs(assert(stack:egress_asks())) do if x.id == a.id then return false end end
      return true
    end, 15)
    local r, err = stack:answer(a.id, "allow")
    assert.is_nil(r)
    assert.equal("not_found", err.kind)
  end)

  it("h:serve runs on_ask for a pending ask", function()
    if not ready() then return end
    local out = curl_bg(work, "serve.out", "http://c.test/served")
    ask_for(stack, "c.test")
    local seen = {}
    local r = assert(stack:serve(1, { on_ask = function(a)
      seen[#seen + 1] = a.path
      return "deny", { reason = "on_ask says no" }
    end }))
    assert.equal(1, r.answered)
    assert.same({ "/served" }, seen)
    local text = h.wait_for("the refusal", function() local t = out(); return t:find("403") and t end, 15)
    assert.matches("on_ask says no", text, 1, true)
  end)
end)
