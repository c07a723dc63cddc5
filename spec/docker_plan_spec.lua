-- The plan is what start applies: a start runs through the engine double's recording
-- pass-through in front of the engine's socket (spec/support/engine_double.py), and every create and connect
-- body the engine received must be, byte for byte, the body_json of sandstack.docker.plan for the
-- same options, the same run label, creation time and subnets. Lua sends the finished bodies
-- and never edits one. Projects start "sstest-stack-plan-"; the test proves none is left.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker

local PREFIX = "sstest-stack-plan-"
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
local ENGINE_SOCK = (os.getenv("DOCKER_HOST") or "unix:///var/run/docker.sock"):match("^unix://(.+)$")
  or "/var/run/docker.sock"

local eng = assert(sandstack.engine {})

-- The sandbox network carries an option unique to the run (an option the bridge driver keeps and
-- ignores): the isolation self-check's verdict is remembered on the engine per network shape
-- so only a shape no process has checked makes this start run the check, whose
-- requests are compared too.
local function opts(name)
  return {
    project_name = name, agent_port = 8080, forwarder_image = SOCAT, subnet_pool = "10.213.0.0/16", pull = "never",
    network = { internal = true, options = { ["io.sandstack.test.plan"] = name } },
    proxy_service = "proxy", session_token = ("plan-token-"):rep(4),
    egress_policy = { allow = { "api.example.com", { host = "*.pypi.org", methods = { "GET" } } } },
    services = {
      { name = "sandbox", image = AGENT, command = { "agent" }, depends_on = { "db" },
        volumes = { { name = "ws", target = "/workspace" } } },
      { name = "db", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "5432" }, egress = "none" },
      { name = "proxy", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "3128" }, egress = "allow", port = 3128 },
    },
    volumes = { { name = "ws" } },
    ready = { db = { test = { "agent", "connect", "127.0.0.1", "5432", "500" }, interval = 0.5 } },
  }
end

-- The sandbox image's Config, which a start reads for sandstack-init's wrap (the plan's ctx.image).
local function image_config()
  local c = assert(eng:call("GET", "/images/" .. AGENT .. "/json")).Config
  return { Entrypoint = c.Entrypoint, Cmd = c.Cmd }
end

local function leftovers(name)
  local f = { label = { "io.sandstack.project=" .. name } }
  return #assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } }))
    + #assert(eng:call("GET", "/networks", nil, { query = { filters = f } }))
    + #(assert(eng:call("GET", "/volumes", nil, { query = { filters = f } })).Volumes or {})
end

-- The recording double in front of the engine for one test. Stopped after the test, with the
-- project and the memo memo_of() names, if any, removed.
local function recorder(name, memo_of)
  local rec = require("engine_double").start("record", { engine = ENGINE_SOCK })
  finally(function()
    docker.down(name)
    local memo = memo_of()
    if memo then eng:call("DELETE", "/volumes/" .. memo, nil, { ok = { [404] = true } }) end
    rec.stop()
  end)
  return rec
end

describe("sandstack.docker.plan is what start applies #docker", function()
  it("every create and connect body the engine received is the plan's body_json, byte for byte", function()
    local name = PREFIX .. core.random_hex(3)
    local memo -- the memo of the self-check's pass: not in the plan (its labels digest the engine's answers)
    local rec = recorder(name, function() return memo end)

    local s = assert(docker.start(name, (function() local o = opts(name); o.docker_host = rec.host; return o end)()))
    local sent = rec.requests()
    assert.is_true(#sent > 10, "the recorder saw the start")
    s:destroy()
    s:close()

    -- what start took from the clock, the CSPRNG and the engine: read back from what it sent
    local run, created, subnets, api
    for _, r in ipairs(sent) do
      local v = r.target:match("^/v(%d+%.%d+)/")
      api = api or v
      if r.target:find("/networks/create", 1, true) then
        local b = assert(core.json_decode(r.body))
        run = run or b.Labels["io.sandstack.run"]
        created = created or tonumber(b.Labels["io.sandstack.created"])
        local key = b.Labels["io.sandstack.network"]
        if b.Labels["io.sandstack.role"] == "isolation-check" then key = "isocheck" end
        subnets = subnets or {}
        subnets[key] = b.IPAM and b.IPAM.Config[1].Subnet
      end
    end
    assert.truthy(run and created and api)
    local plan = assert(docker.plan(name, opts(name), { api_version = api, now = created, run = run, subnets = subnets,
      image = image_config() }))

    -- a request is named by its path and the object it makes (several share /networks/create)
    local function key(path, body)
      local b = assert(core.json_decode(body))
      return path .. " " .. tostring(b.Name or b.Container or "")
    end
    local want = {}
    local function expect(req) want[key(req.path, req.body_json)] = req.body_json end
    for _, n in ipairs(plan.networks) do expect(n) end
    for _, v in ipairs(plan.volumes) do expect(v) end
    for _, c in ipairs(plan.containers) do
      expect(c)
      for _, cn in ipairs(c.connects) do expect(cn) end
    end
    expect(plan.init.holder) -- the container that writes sandstack-init's volume
    -- the isolation self-check's network and probe come from the plan too
    assert.truthy(plan.isolation_check, "an internal bridge is checked")
    expect(plan.isolation_check.network)
    expect(plan.isolation_check.container)
    local compared = 0
    for _, r in ipairs(sent) do
      local path = r.target:gsub("^/v%d+%.%d+", "")
      if r.method == "POST" and (path:find("^/networks/create") or path:find("^/volumes/create")
        or path:find("^/containers/create") or path:find("/connect$")) then
        local k = key(path, r.body)
        local b = assert(core.json_decode(r.body))
        if path:find("^/volumes/create") and b.Labels and b.Labels["io.sandstack.isolation"] == "verified" then
          memo, k = b.Name, nil
        end
        -- the stack's record, kept on the engine once the start is done (docker/session_methods.lua)
        if path:find("^/volumes/create") and b.Labels and b.Labels["io.sandstack.role"] == "record" then k = nil end
        assert.is_true(k == nil or want[k] ~= nil, "a body the plan does not have: " .. tostring(k))
        if k then
          assert.equal(want[k], r.body, k)
          want[k] = nil
          compared = compared + 1
        end
      end
    end
    assert.is_nil(next(want), "a planned request the engine never received")
    -- three networks, one volume, four containers, two connects, the check's network and probe
    assert.is_true(compared >= 12, "compared " .. compared)
    assert.equal(0, leftovers(name))
  end)

  -- The plan holds every request of a start (and the handle's of a destroy); what is
  -- made from answers is the C core's too, and is named here by what it is.
  it("every request of a start and a destroy is one the plan holds, but the exec's and the memo's", function()
    local name = PREFIX .. core.random_hex(3)
    local memo
    local rec = recorder(name, function() return memo end)
    local o = opts(name)
    o.docker_host = rec.host
    local s = assert(docker.start(name, o))
    assert(s:destroy())
    s:close()
    local sent = rec.requests()
    local plan = assert(docker.plan(name, opts(name), { api_version = eng.api_version, image = image_config() }))

    local held = {}
    local function hold(q) held[q.method .. " " .. q.path:gsub("%?.*$", "")] = true end
    local function hold_all(list) for _, q in ipairs(list or {}) do hold(q) end end
    hold_all(plan.preflight)
    hold_all(plan.networks)
    hold_all(plan.volumes)
    for _, c in ipairs(plan.containers) do
      hold(c); hold(c.start); hold(c.inspect)
      hold_all(c.connects)
    end
    local chk = assert(plan.isolation_check)
    for _, k in ipairs { "network", "container", "inspect_network", "start", "inspect", "remove_container", "remove_network" } do
      hold(chk[k])
    end
    hold_all(plan.removals.containers)
    hold_all(plan.removals.networks)
    hold_all(plan.removals.volumes)
    hold_all(plan.removals.lists)
    hold(plan.init.holder) -- sandstack-init's volume: its holder, and the write of the program and deadline
    hold(plan.init.write)
    hold(core.engine_reads.networks) -- the subnets in use, read before any plan
    local execs = {}
    for _, c in ipairs(plan.containers) do execs[c.name] = true end
    execs[chk.name] = true
    local counted = 0
    for _, r in ipairs(sent) do
      local path = r.target:gsub("^/v%d+%.%d+", ""):gsub("%?.*$", "")
      local k = r.method .. " " .. path
      local exec_of = path:match("^/containers/([^/]+)/exec$")
      local memo_create = path == "/volumes/create" and (assert(core.json_decode(r.body)).Labels or {})["io.sandstack.isolation"] == "verified"
      if memo_create then memo = assert(core.json_decode(r.body)).Name end
      -- the stack's record volume (made after the start, removed by the destroy's label list)
      local record_vol = path == "/volumes/" .. name .. "-record" or (path == "/volumes/create"
        and (assert(core.json_decode(r.body)).Labels or {})["io.sandstack.role"] == "record")
      if exec_of then
        assert.truthy(execs[exec_of], "an exec in a container the plan does not have: " .. k)
      elseif not (path:find("^/exec/[%x]+/") or memo_create or record_vol or path == "/_ping" or k == "GET /version") then
        assert.truthy(held[k], "a request the plan does not hold: " .. k)
        counted = counted + 1
      end
    end
    assert.truthy(memo, "the self-check ran and its memo was written (the network shape is this test's own)")
    assert.is_true(counted >= 30, "compared " .. counted)
    assert.equal(0, leftovers(name))
  end)
end)
