-- Issue 10: sandstack checks on each engine that the isolation it relies on works there, before
-- the first stack, and refuses with engine/isolation_unsupported where it does not. The refusal
-- paths are driven by a real engine that is lied about: the network really lacks the option
-- while the inspect says it has it (the gateway must then be found answering), or the inspect
-- drops the option as Podman does.
local sandstack = require "sandstack"
local isolation = require "sandstack.docker.isolation"
local core = sandstack.core
local docker = sandstack.docker

local PREFIX = "sstest-stack-iso-"
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
local INHIBIT = "com.docker.network.bridge.inhibit_ipv4"
local GATEWAY_MODE = "com.docker.network.bridge.gateway_mode_ipv4"

describe("isolation self-check: parsing", function()
  it("reads default routes' gateways from /proc/net/route", function()
    local route = "Iface\tDestination\tGateway \tFlags\n"
      .. "eth0\t00000000\t010013AC\t0003\t0\t0\t0\t00000000\n"
      .. "eth0\t000013AC\t00000000\t0001\t0\t0\t0\t0000FFFF\n"
    assert.same({ "172.19.0.1" }, isolation.default_gateways(route))
    assert.same({}, isolation.default_gateways("Iface\tDestination\n eth0\t000013AC\t00000000\t0001\n"))
  end)
  it("names Podman and Docker from /version", function()
    local p = isolation.describe { Version = "5.4.2", ApiVersion = "1.41",
      Components = { { Name = "Podman Engine", Version = "5.4.2" } } }
    assert.equal("Podman Engine", p)
    local d, v, desc = isolation.describe { Version = "28.5.2", ApiVersion = "1.51", Platform = { Name = "" } }
    assert.equal("Docker Engine", d)
    assert.equal("28.5.2", v)
    assert.equal("Docker Engine 28.5.2 (API 1.51)", desc)
  end)
end)

describe("isolation self-check #docker", function()
  local eng
  setup(function() eng = assert(sandstack.engine {}) end)
  after_each(function() docker.reap { prefix = PREFIX } end)

  local function opts(name, extra)
    local o = { project_name = name, agent_port = 8080, forwarder_image = SOCAT, pull = "never",
      services = { { name = "sandbox", image = AGENT, command = { "agent" } } } }
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
  end

  local function leftovers(project)
    local f = { label = { "io.sandstack.project=" .. project } }
    local cs = assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } }))
    local ns = assert(eng:call("GET", "/networks", nil, { query = { filters = f } }))
    return #cs + #ns
  end

  it("verifies this engine once before the first stack, then trusts the cache", function()
    isolation.forget()
    local api = core.stack_api_number(eng.api_version)
    local function start()
      local name = PREFIX .. core.random_hex(3)
      local phases = {}
      local s = assert(docker.start(name, opts(name, { on_event = function(ev)
        phases[ev.phase] = ev
      end })))
      s:destroy()
      assert.equal(0, leftovers(name))
      return phases
    end
    local first = start()
    assert.truthy(first.isolation_verified, "the first start did not run the check")
    assert.matches("API " .. eng.api_version:gsub("%.", "%%."), first.isolation_verified.engine)
    local ev = first.isolation_verified
    -- it probed a gateway, or there is none to probe: no default route, and the subnet's .1 is
    -- the probe's own or unreported (Engine 28 with inhibit_ipv4)
    assert.truthy(#ev.probed >= 1 or ev.default_routes == 0,
      ("the check probed nothing: %d default routes, gateway is the probe: %s"):format(ev.default_routes,
        tostring(ev.gateway_is_probe)))
    if api >= 148 then assert.equal(0, ev.default_routes) end
    if api < 148 then assert.truthy(#ev.probed >= 1, "the check probed no gateway address") end
    assert.is_nil(start().isolation_verified)
  end)

  -- An engine proxy that answers like eng but rewrites what the engine reports.
  local function lying(rewrite_net, rewrite_body)
    local proxy = setmetatable({}, { __index = function(_, k)
      local v = eng[k]
      if type(v) == "function" then return function(_, ...) return v(eng, ...) end end
      return v
    end })
    proxy.call = function(_, method, path, body, o)
      if method == "POST" and path == "/networks/create" and rewrite_body then
        body = rewrite_body(assert(core.json_decode(body))) -- the plan's finished body, as text
      end
      local res, err = eng:call(method, path, body, o)
      if res and method == "GET" and path:match("^/networks/") and rewrite_net then rewrite_net(res) end
      return res, err
    end
    return proxy
  end

  local function plan_for(name)
    local plan = assert(require("sandstack.docker").plan("iso", opts(name), { api_version = eng.api_version }))
    return { eng = nil, plan = plan }
  end

  it("refuses an engine whose network keeps a gateway address that answers (the option was not applied)", function()
    isolation.forget()
    local name = PREFIX .. core.random_hex(3)
    local run = plan_for(name)
    -- the engine gets neither inhibit_ipv4 nor (Engine 28) the isolated gateway mode, but its
    -- inspect claims what was asked for: only the probe can tell
    local asked = assert(core.json_decode(run.plan.networks[1].body_json)).Options
    run.eng = lying(function(info)
      info.Options = info.Options or {}
      for _, k in ipairs { INHIBIT, GATEWAY_MODE } do info.Options[k] = asked[k] end
    end, function(body)
      local b = {}
      for k, v in pairs(body) do b[k] = v end
      b.Options = {}
      for k, v in pairs(body.Options or {}) do if k ~= INHIBIT and k ~= GATEWAY_MODE then b.Options[k] = v end end
      return b
    end)
    local ok, err = isolation.verify(run)
    assert.is_nil(ok)
    assert.equal("engine", err.kind)
    assert.equal("isolation_unsupported", err.reason)
    assert.matches("answers", err.message)
    assert.matches("API", err.message)
    assert.equal(0, leftovers(name))
    -- control: the same engine, told the truth, passes
    run.eng = eng
    assert.is_true(isolation.verify(run))
    assert.equal(0, leftovers(name))
  end)

  it("refuses an engine that drops inhibit_ipv4 from the network, as Podman does, and leaves nothing", function()
    isolation.forget()
    local name = PREFIX .. core.random_hex(3)
    local run = plan_for(name)
    run.eng = lying(function(info) if info.Options then info.Options[INHIBIT] = nil end end)
    local ok, err = isolation.verify(run)
    assert.is_nil(ok)
    assert.equal("isolation_unsupported", err.reason)
    assert.matches("inhibit_ipv4", err.missing)
    assert.equal(0, leftovers(name))
  end)
end)
