-- A plain allowlist needs no model key: sandstack-proxy started without ANTHROPIC_API_KEY admits
-- what its policy allows over CONNECT, refuses the rest, and answers the credential route with
-- a JSON 403 that says the stack has no model key (the route exists only with a key). In the
-- network-namespace test bed of spec/support/proxy_harness.lua; needs root and ip(8).
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("ssnk")
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local work

local SKIP = H.missing()

local HOSTS = "198.51.100.10 allowed.test\n198.51.100.11 denied.test\n"

local function setup()
  work = H.net_up("/tmp/ssnk-proxy.XXXXXX", HOSTS, { "198.51.100.10", "198.51.100.11" })
  H.make_certs("ssnk-test-ca", "allowed.test", { "allowed.test", "denied.test", "model.test" })
  H.start_standin()
  H.wait_standin()
  local env = ph.with(H.base_env("ssnk-session", { SANDSTACK_EGRESS_POLICY = core.json_encode { allow = { "allowed.test:443" } },
    SANDSTACK_UPSTREAM_CA = work .. "/ca.pem" }), { ANTHROPIC_API_KEY = false })
  H.start_proxy("nokey", 3128, env)
end

local function curl(args)
  return h.sh(H.in_p("curl -sS --max-time 10 --cacert " .. h.q(work .. "/ca.pem") .. " " .. args))
end

describe("sandstack-proxy without a model key", function()
  if not H.bring_up(SKIP, setup) then return end

  it("admits the allowlist over CONNECT and refuses what it does not name", function()
    local out, ok = curl("--proxy " .. h.q(H.proxy_url("nokey")) .. " https://allowed.test/a")
    assert.is_true(ok, out)
    assert.matches("hello from allowed.test /a", out, 1, true)
    out, ok = curl("--proxy " .. h.q(H.proxy_url("nokey")) .. " https://denied.test/")
    assert.is_false(ok, out)
    assert.matches("403", out)
  end)

  it("answers the credential route 403, saying the stack has no model key; exits clean", function()
    local out = h.must(H.in_p("curl -sS --max-time 10 -w '\\n%{http_code}' -H 'x-api-key: " .. TOKEN .. "' http://" .. PROXY_IP
      .. ":3128/v1/messages"))
    local body, code = out:match("^(.*)\n(%d+)$")
    assert.equal("403", code, out)
    local doc = assert(core.json_decode(body), body)
    assert.equal("permission_error", doc.error.type)
    assert.matches("no model key", doc.error.message, 1, true)
    H.stop_clean("nokey")
  end)
end)
