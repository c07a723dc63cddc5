-- The isolation self-check: sandstack checks on each engine that the isolation it relies on works
-- there, before the first stack, and refuses with engine/isolation_unsupported where it does not.
-- The refusal paths are driven by a real engine that is lied about: the network really lacks the
-- option while the inspect says it has it (the gateway must then be found answering), or the
-- inspect drops the option as Podman does.
local sandstack = require "sandstack"
local isolation = require "sandstack.docker.isolation"
local core = sandstack.core
local docker = sandstack.docker
local memo = require "spec.support.isolation_memo"

local PREFIX = "sstest-stack-iso-"
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
local INHIBIT = "com.docker.network.bridge.inhibit_ipv4"
local GATEWAY_MODE = "com.docker.network.bridge.gateway_mode_ipv4"

local function opts(name, extra)
  local o = { project_name = name, agent_port = 8080, forwarder_image = SOCAT, pull = "never",
    services = { { name = "sandbox", image = AGENT, command = { "agent" } } } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

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

  -- A pass is remembered on the engine under the digest of everything it is about.
  local function deep(t)
    if type(t) ~= "table" then return t end
    local o = {}
    for k, v in pairs(t) do o[k] = deep(v) end
    return o
  end
  local V = { Version = "20.10.24", ApiVersion = "1.41", GitCommit = "5d6db84", KernelVersion = "6.1.0",
    Components = { { Name = "containerd", Version = "1.6.20" }, { Name = "runc", Version = "1.1.5" } } }
  local INFO = { ID = "AZ7K:SIK6", OperatingSystem = "Debian GNU/Linux 12", DefaultRuntime = "runc",
    Runtimes = { runc = { path = "runc" }, runsc = { path = "/usr/bin/runsc", runtimeArgs = { "--network=sandbox" } } } }
  local BRIDGE = { Id = "ba317a735792", Created = "2026-12-02T09:14:30.245151404Z" }
  local CHECK = { shape = '{"api_version":"1.41","network":{}}' }

  it("keys a verdict by the check, the engine, its start, the runtime and the network's shape", function()
    local base = assert(isolation.memo_key(V, INFO, BRIDGE, CHECK, nil))
    assert.equal(isolation.MEMO_PREFIX, base.memo:sub(1, #isolation.MEMO_PREFIX))
    assert.matches("^%x+$", base.memo:sub(#isolation.MEMO_PREFIX + 1))
    assert.same(base, isolation.memo_key(deep(V), deep(INFO), deep(BRIDGE), deep(CHECK), nil))
    local reordered = deep(V)
    reordered.Components = { V.Components[2], V.Components[1] }
    assert.same(base, isolation.memo_key(reordered, INFO, BRIDGE, CHECK, nil), "the components' order is not a change")
    assert.same(base, isolation.memo_key(V, INFO, BRIDGE, CHECK, "runc"), "the default runtime named is the same runtime")
    local changes = {
      ["the check's version"] = function(v, info, bridge, check) return v, info, bridge, check, nil, "1" end,
      ["the engine's ID"] = function(v, info, bridge, check) info.ID = "OTHER"; return v, info, bridge, check end,
      ["the engine's version"] = function(v, info, bridge, check) v.Version = "20.10.25"; return v, info, bridge, check end,
      ["the API version"] = function(v, info, bridge, check) v.ApiVersion = "1.40"; return v, info, bridge, check end,
      ["the engine's commit"] = function(v, info, bridge, check) v.GitCommit = "0000000"; return v, info, bridge, check end,
      ["the kernel"] = function(v, info, bridge, check) v.KernelVersion = "6.2.0"; return v, info, bridge, check end,
      ["runc's version"] = function(v, info, bridge, check) v.Components[2].Version = "1.1.6"; return v, info, bridge, check end,
      ["the daemon's start (its default bridge re-created)"] = function(v, info, bridge, check)
        bridge.Id = "5f0c2a61b3e4"; return v, info, bridge, check end,
      ["the bridge's creation time"] = function(v, info, bridge, check)
        bridge.Created = "2026-12-02T10:00:00.000000001Z"; return v, info, bridge, check end,
      ["the runtime"] = function(v, info, bridge, check) return v, info, bridge, check, "runsc" end,
      ["the default runtime"] = function(v, info, bridge, check) info.DefaultRuntime = "runsc"; return v, info, bridge, check end,
      ["the default runtime's arguments"] = function(v, info, bridge, check)
        info.Runtimes.runc.runtimeArgs = { "--debug" }; return v, info, bridge, check end,
      ["the network's shape"] = function(v, info, bridge, check)
        check.shape = '{"api_version":"1.41","network":{"Internal":false}}'; return v, info, bridge, check end,
    }
    for what, change in pairs(changes) do
      local k = assert(isolation.memo_key(change(deep(V), deep(INFO), deep(BRIDGE), deep(CHECK))))
      assert.are_not.equal(base.key, k.key, what .. " did not change the key")
      assert.are_not.equal(base.memo, k.memo, what .. " did not change the memo's name")
    end
    assert.is_nil(isolation.memo_key(V, INFO, nil, CHECK), "no start marker, no memo")
    assert.is_nil(isolation.memo_key(V, INFO, BRIDGE, {}), "no shape, no memo")
  end)

  it("gives stacks the same shape unless their sandbox network or runtime differs", function()
    local function shape(name, extra)
      local plan = assert(docker.plan("iso", opts(name, extra), { api_version = "1.41" }))
      return plan.isolation_check.shape
    end
    local a = shape("sstest-a")
    assert.equal(a, shape("sstest-b", { memory = "256m" }), "the name or the memory limit changed the shape")
    local o1 = { network = { internal = true, options = { ["com.docker.network.driver.mtu"] = "1400", ["com.example.x"] = "1" } } }
    local o2 = { network = { internal = true, options = { ["com.example.x"] = "1", ["com.docker.network.driver.mtu"] = "1400" } } }
    assert.equal(shape("sstest-c", o1), shape("sstest-d", o2))
    assert.are_not.equal(a, shape("sstest-e", o1), "a network option did not change the shape")
    assert.are_not.equal(a, shape("sstest-f", { runtime = "runsc" }), "the runtime did not change the shape")
    assert.matches('"api_version":"1.41"', a, nil, true)
    local p48 = assert(docker.plan("iso", opts("sstest-g"), { api_version = "1.48" }))
    assert.are_not.equal(a, p48.isolation_check.shape, "the API version did not change the shape")
  end)
end)

describe("isolation self-check #docker", function()
  local eng
  setup(function() eng = assert(sandstack.engine {}) end)
  after_each(function()
    docker.reap { prefix = PREFIX }
    memo.drop_fakes(eng)
  end)

  local function leftovers(project)
    local f = { label = { "io.sandstack.project=" .. project } }
    local cs = assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } }))
    local ns = assert(eng:call("GET", "/networks", nil, { query = { filters = f } }))
    return #cs + #ns
  end

  it("verifies this engine once before the first stack, then trusts the cache", function()
    assert(isolation.forget(eng)) -- the memos on the engine: the next start checks
    local api = require("sandstack_test.stack").api_number(eng.api_version)
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

  -- An engine proxy that answers like eng but rewrites what the engine reports. It reports an
  -- engine ID of its own (memo.engine_as), so no memo of the real engine vouches for it.
  local function lying(rewrite_net, rewrite_body)
    local proxy = memo.engine_as(eng, { ID = memo.fake_id() })
    memo.intercept(proxy, function(method, path, body) -- the plan's requests come through perform
      if method == "POST" and path == "/networks/create" and rewrite_body then return rewrite_body(body) end
    end, function(method, path, body)
      if method == "GET" and path:match("^/networks/") and rewrite_net then rewrite_net(body) end
    end)
    return proxy
  end

  local function plan_for(name)
    local plan = assert(require("sandstack.docker").plan("iso", opts(name), { api_version = eng.api_version }))
    return { eng = nil, plan = plan }
  end

  it("refuses an engine whose network keeps a gateway address that answers (the option was not applied)", function()
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
    -- control: the same engine, told the truth, passes (under an ID of its own: the check runs)
    run.eng = lying()
    assert.is_true(isolation.verify(run))
    assert.equal(0, leftovers(name))
  end)

  it("refuses an engine that drops inhibit_ipv4 from the network, as Podman does, and leaves nothing", function()
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

-- The memo on the engine. Each test speaks to the engine through a proxy that reports
-- an engine ID of its own, so the real engine's memo (which other processes rely on) is neither
-- trusted here nor touched; the memos these IDs leave are removed after each test.
describe("isolation self-check: the memo on the engine #docker", function()
  local eng
  setup(function() eng = assert(sandstack.engine {}) end)
  after_each(function()
    docker.reap { prefix = PREFIX }
    memo.drop_fakes(eng)
  end)

  -- verify() through `proxy` with a fresh plan; returns ok, err and the events by phase.
  local function verify(mod, proxy, extra)
    local plan = assert(docker.plan("iso", opts(PREFIX .. core.random_hex(3), extra), { api_version = eng.api_version }))
    local phases = {}
    local run = { eng = proxy, plan = plan, t0 = core.engine_clock(), on_event = function(ev) phases[ev.phase] = ev end }
    local ok, err = mod.verify(run)
    return ok, err, phases, plan
  end

  -- A fresh copy of the module: nothing the first one knew is left in this Lua state, as in a
  -- new process.
  local function fresh_module()
    package.loaded["sandstack.docker.isolation"] = nil
    local m = require "sandstack.docker.isolation"
    package.loaded["sandstack.docker.isolation"] = isolation
    return m
  end

  it("remembers a pass on the engine for other processes, and checks again after the daemon restarts", function()
    local as = { ID = memo.fake_id() }
    local ok, err, ph = verify(isolation, memo.engine_as(eng, as))
    assert.is_true(ok, tostring(err))
    local first = assert(ph.isolation_verified, "the first verify did not run the check")
    assert.truthy(first.memo, first.memo_error)
    local labels = assert(memo.memos(eng)[first.memo], "no memo volume on the engine")
    assert.equal("verified", labels[isolation.MEMO_LABEL])
    assert.equal(as.ID, labels["io.sandstack.isolation.engine"])

    ok, err, ph = verify(fresh_module(), memo.engine_as(eng, as))
    assert.is_true(ok, tostring(err))
    assert.is_nil(ph.isolation_verified, "a new process probed although the memo was there")
    assert.equal(first.memo, ph.isolation_remembered and ph.isolation_remembered.memo)

    -- the daemon restarted: its default bridge network is a new one
    as.bridge_id = core.random_hex(32)
    ok, err, ph = verify(fresh_module(), memo.engine_as(eng, as))
    assert.is_true(ok, tostring(err))
    assert.truthy(ph.isolation_verified, "a changed daemon start did not run the check again")
    assert.is_nil(ph.isolation_remembered)
    local memos = memo.memos(eng)
    assert.truthy(memos[ph.isolation_verified.memo])
    assert.is_nil(memos[first.memo], "the memo of the earlier daemon start was not removed")
  end)

  it("does not trust a forged or stale memo: it checks, then writes its own", function()
    local as = { ID = memo.fake_id() }
    local proxy = memo.engine_as(eng, as)
    local plan = assert(docker.plan("iso", opts(PREFIX .. "forge"), { api_version = eng.api_version }))
    local v, info = assert(proxy:call("GET", "/version")), assert(proxy:call("GET", "/info"))
    local bridge = assert(proxy:call("GET", "/networks/bridge"))
    local key = assert(isolation.memo_key(v, info, bridge, plan.isolation_check, nil))
    local stale = assert(isolation.memo_key(v, info, bridge, plan.isolation_check, nil, "1"))
    -- under the very name the key gives, labelled as verified, but with the digest of the check's
    -- previous version; and one that carries the right digest under another name
    assert(eng:call("POST", "/volumes/create", { Name = key.memo, Labels = { [isolation.MEMO_LABEL] = "verified",
      ["io.sandstack.isolation.key"] = stale.key, ["io.sandstack.isolation.engine"] = as.ID } }))
    assert(eng:call("POST", "/volumes/create", { Name = isolation.MEMO_PREFIX .. "elsewhere-" .. core.random_hex(4),
      Labels = { [isolation.MEMO_LABEL] = "verified", ["io.sandstack.isolation.key"] = key.key,
        ["io.sandstack.isolation.engine"] = as.ID, ["io.sandstack.isolation.epoch"] = isolation.epoch(key) } }))
    local ok, err, ph = verify(isolation, proxy)
    assert.is_true(ok, tostring(err))
    assert.truthy(ph.isolation_verified, "a forged memo was trusted")
    assert.is_nil(ph.isolation_remembered)
    assert.equal(key.memo, ph.isolation_verified.memo)
    assert.equal(key.key, memo.memos(eng)[key.memo]["io.sandstack.isolation.key"], "the forgery was not replaced")
    ok, err, ph = verify(fresh_module(), proxy)
    assert.is_true(ok, tostring(err))
    assert.truthy(ph.isolation_remembered, "the memo written after the check was not trusted")
  end)

  it("still refuses an engine that fails the check after a change, and never remembers a failure", function()
    local as = { ID = memo.fake_id() }
    local ok, err, ph = verify(isolation, memo.engine_as(eng, as))
    assert.is_true(ok, tostring(err))
    assert.truthy(ph.isolation_verified and ph.isolation_verified.memo)
    -- the same engine after a restart with a setting that breaks the isolation: the bridge
    -- options are not applied, while the inspect claims them (only the probe can tell)
    as.bridge_id = core.random_hex(32)
    local broken = memo.engine_as(eng, as)
    local asked
    memo.intercept(broken, function(method, path, b)
      if method == "POST" and path == "/networks/create" then
        asked = b.Options
        b.Options = {}
        return b
      end
    end, function(method, path, res)
      if method == "GET" and path:find("/networks/" .. PREFIX, 1, true) == 1 then
        res.Options = res.Options or {}
        for k, val in pairs(asked or {}) do res.Options[k] = val end
      end
    end)
    local before = memo.memos(eng, as.ID)
    for attempt = 1, 2 do
      ok, err, ph = verify(fresh_module(), broken)
      assert.is_nil(ok, "attempt " .. attempt .. " passed an engine whose gateway answers")
      assert.equal("isolation_unsupported", err.reason)
      assert.matches("answers", err.message)
      assert.is_nil(ph.isolation_remembered)
    end
    assert.same(before, memo.memos(eng, as.ID), "a failure changed the memos")
  end)
end)
