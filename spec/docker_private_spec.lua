-- allow_private on a real stack (docs/policy.md, "Refused addresses"): the proxy sandstack adds
-- reaches a private address the policy names, from inside a real sandbox, and nothing else
-- private. The "lab" is a network namespace of this test on a /28 of 10.250.77.0/24 (a private
-- range: what an internal registry looks like to the proxy), joined to the host by a veth and
-- reached by the proxy over its egress network; in it a TLS server with a test CA for
-- registry.test and other.test (spec/support/proxy_standin.py). The proxy finds both names
-- through `proxy_hosts`; the sandbox (sandstack-test/client:local: curl) trusts the CA. The
-- same opt-in goes through start, set_egress and egress(). Every refusal follows a control that
-- is admitted. The proxy image is built from this mode's proxy binary under a test name.
-- Objects: project "sstest-pv-<random>", netns "sstest-pv-<random>"; all removed at the end.
local sandstack = require "sandstack"
local h = require "helpers"
local docker = sandstack.docker
local policy = sandstack.policy

local dh = require "docker_proxy_harness"

-- a /28 of 10.250.77.0/24 (the spec's share first)
local S = dh.stack("pv", "spv", function(r) return 16 * (r % 16) end, "10.250.77.")
local PROJECT, KEY = S.PROJECT, S.KEY
local addr, missing, in_sandbox, audit = S.addr, S.missing, S.in_sandbox, S.audit

describe("allow_private on a real stack: a named private address, reached from the sandbox #docker", function()
  local skip_why = missing()
  local work, stack, start_err
  local RULES = { "registry.test:443", "other.test:443", "loop.test:443" }
  local function open_policy() return { allow = RULES, allow_private = { addr(2) } } end

  lazy_setup(function()
    if skip_why then return end
    work = S.workdir()
    dh.make_certs(work, "sstest-pv-ca", "registry.test", { "registry.test", "other.test", "loop.test" })
    S.outside_up { 2, 3 }
    S.start_standin(work)
    S.wait_ready(work, { "standin.ready" })
    S.build_images()
    stack, start_err = docker.start(PROJECT, S.options {
      services = S.trusting(h.read_file(work .. "/ca.pem")),
      egress_policy = open_policy(),
      proxy_hosts = { ["registry.test"] = addr(2), ["other.test"] = addr(3), ["loop.test"] = "127.0.0.1" },
    })
  end)

  lazy_teardown(function() if not skip_why then S.teardown(stack, work) end end)
  local function ready() return S.ready(skip_why, stack, start_err, pending) end

  -- curl in the sandbox: its output and whether it succeeded
  local function curl(url) return in_sandbox("curl -sS -m 10 " .. url) end
  local function last_audit(host)
    local found
    for _, l in ipairs(audit()) do if l.host == host then found = l end end
    return found or {}
  end

  it("reaches the named private address by its name, from the sandbox", function()
    if not ready() then return end
    local out, ok = curl("https://registry.test/v2/")
    assert.is_true(ok, out)
    assert.equal("hello from registry.test /v2/\n", out)
    local l = last_audit("registry.test")
    assert.equal("allow", l.decision)
    assert.equal(addr(2), l.address)
  end)

  it("refuses a name that resolves to a private address the policy does not name, and loopback", function()
    if not ready() then return end
    assert.is_true(select(2, curl("https://registry.test/control")))   -- control: the named one
    for host, range in pairs { ["other.test"] = "private", ["loop.test"] = "loopback" } do
      local out, ok = curl("https://" .. host .. "/x")
      assert.is_false(ok, out)
      local l = last_audit(host)
      assert.equal("address_refused", l.decision, host)
      assert.equal(range, l.reason, host)
    end
    -- the named address is no rule: a CONNECT to the literal is refused by the policy
    local out, ok = curl("https://" .. addr(2) .. "/x")
    assert.is_false(ok, out)
    assert.matches("403", out)
    local l = last_audit(addr(2))
    assert.equal("deny", l.decision)
    assert.equal("host", l.reason)
  end)

  it("set_egress and egress() carry it: without it the name is refused, with it reached again", function()
    if not ready() then return end
    local p = assert(stack:egress())
    assert.equal(assert(policy.compile(open_policy())):render(), p:render())
    assert.truthy(p:render():find('"allow_private":["' .. addr(2) .. '"]', 1, true))
    assert.is_true(assert(stack:set_egress { allow = RULES }))
    local out, ok = curl("https://registry.test/closed")
    assert.is_false(ok, out)
    assert.equal("address_refused", last_audit("registry.test").decision)
    assert.is_true(assert(stack:set_egress(open_policy())))
    out, ok = curl("https://registry.test/open")
    assert.is_true(ok, out)
    assert.equal("hello from registry.test /open\n", out)
    -- a range is never opened: set_egress refuses it as start does
    local okr, err = stack:set_egress { allow = RULES, allow_private = { "10.250.77.0/24" } }
    assert.is_nil(okr)
    assert.equal("invalid", err.kind)
    assert.matches("allow_private 1 ('10.250.77.0/24'): name one address", err.message, 1, true)
    local other, serr = docker.start(PROJECT .. "-x", { agent_port = 8080, image = S.CLIENT, api_key = KEY,
      egress_policy = { allow = RULES, allow_private = { "10.250.77.0/24" } } })
    if other then other:destroy() end
    assert.is_nil(other)
    assert.equal("compose", serr.kind)
    assert.matches("allow_private 1 ('10.250.77.0/24'): name one address", tostring(serr), 1, true)
  end)
end)
