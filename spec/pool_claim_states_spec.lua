-- The claim of a pooled stack as a state machine (lua/sandstack/pool_claim.lua), on both
-- placements: a claim made to fail in each of its states names the states it passed, in order,
-- in pool.last_acquire.states, and rolls back exactly what it made: the stack it claimed is gone
-- (with the session's record), the clients it opened are closed, and the pool's other stacks
-- are still idle. The Swarm pool runs on the scripted swarm (spec/support/scripted_engine.lua);
-- the Docker pool on the live engine (#docker), both orders of its claim: through the container
-- list, and held in this host's store (the hand-over before the rename's answer). Pools are
-- named "sstest-poolst-", with their own address pools, removed by label at the end of each test.
local sandstack = require "sandstack"
local E = require "sandstack.error"
local core = require "sandstack.core"
local machine = require "sandstack.pool_claim"
local scripted = require "spec.support.scripted_engine"

local function boom(what) return E.new("engine", "injected", "the spec's " .. what .. " failed") end
-- the states a claim passed, in order; the acquire's table stays JSON-safe (a mixed table is not)
local function states_of(t)
  assert(core.json_encode(t), "pool.last_acquire does not encode as JSON")
  return { (table.unpack or unpack)(t.states) }
end

describe("the pool claim's state machine", function()
  it("refuses a move it does not know, and rolls back what a claim made, the newest first", function()
    local t = {}
    local c = machine.new(t, "p-1")
    c:to("picked")
    assert.has_error(function() c:to("ready") end, "pool claim: no move from picked to ready")
    local undone = {}
    c:to("claimed", "claim", 0.5)
    c:made(function() undone[#undone + 1] = "stack" end)
    c:made(function() undone[#undone + 1] = "handle" end)
    local ok, err, lost = c:fail(boom("step"))
    assert.is_nil(ok)
    assert.equal("injected", err.reason)
    assert.is_nil(lost)
    assert.same({ "handle", "stack" }, undone)
    assert.same({ "picked", "claimed", "failed", "rolled_back" }, states_of(t))
    assert.equal("p-1", t.project)
    assert.same({ 0.5, 1 }, { t.claim, t.tries })
  end)
end)

describe("sandstack.swarm.pool's claim, failed in each state (a scripted swarm)", function()
  local stack = { docker_host = "tcp://manager.scripted:2376", agent_port = 8080,
    services = { { name = "sandbox", image = "x/agent", command = { "agent" } } }, egress_policy = { allow = {} } }

  -- A scripted swarm whose requests, clients and execs the test can make fail once (sw.fault),
  -- and whose clients it counts (made, closed), by host.
  local function rig()
    local sw
    local function once(fault)
      if sw.fault ~= fault then return false end
      sw.fault = nil
      return true
    end
    sw = scripted.swarm { exec = function(_, argv) -- the proxy's control commands: each one taken
      if argv[2] ~= "--control" then return nil end
      if once("exec") then return { exit_code = 1, stdout = "", stderr = "refused" } end
      return { exit_code = 0, stdout = '{"ok":true}\n', stderr = "" }
    end }
    sw.clients = {}
    local client = sw.client
    sw.client = function(host)
      if host == stack.docker_host and once("manager_client") then return nil end
      local c = client(host)
      local request = c.request
      function c.request(self, method, path, body, o)
        if path == "/services/create" and tostring(body):find('%-claim"') and once("claim_mark") then
          return 500, { message = "the spec's claim mark failed" }
        end
        if path:match("^/nodes/") and once("node") then return 500, { message = "the spec's node failed" } end
        return request(self, method, path, body, o)
      end
      local rec = { host = host, closed = 0 }
      sw.clients[#sw.clients + 1] = rec
      function c.close() rec.closed = rec.closed + 1 end
      return c
    end
    local undo = scripted.install(function(o)
      local c = sw.client(o.host or "manager")
      if not c then return nil, boom("manager's client") end
      return c
    end)
    return sw, undo
  end

  -- the project's services on the manager, and whether one is its claim mark
  local function services_of(sw, project)
    local n, claimed = 0, false
    for _, spec in pairs(sw.services) do
      if (spec.Labels or {})["io.sandstack.project"] == project then n = n + 1 end
      if spec.Name == project .. "-claim" then claimed = true end
    end
    return n, claimed
  end

  local cases = {
    { fault = "claim_mark", states = { "picked", "failed" }, gone = false },
    { fault = "node", states = { "picked", "claimed", "failed", "rolled_back" }, gone = true },
    { fault = "plan", states = { "picked", "claimed", "placed", "failed", "rolled_back" }, gone = true },
    { fault = "manager_client", states = { "picked", "claimed", "placed", "planned", "failed", "rolled_back" },
      gone = true },
    { fault = "exec", states = { "picked", "claimed", "placed", "planned", "handle", "failed", "rolled_back" },
      gone = true },
  }
  for _, case in ipairs(cases) do
    it("rolls back what it made when it fails after " .. case.states[#case.states - (case.gone and 2 or 1)]
      .. " (" .. case.fault .. ")", function()
      local sw, undo = rig()
      local ok, err = pcall(function()
        local p = assert(sandstack.swarm.pool { name = "swp", size = 2, stack = stack })
        assert.equal(2, assert(p:fill()))
        if case.fault == "plan" then
          p._session_plan = function(self, ...)
            if sw.fault == "plan" then sw.fault = nil; return nil, boom("plan") end
            return getmetatable(self).__index._session_plan(self, ...)
          end
        end
        local made = #sw.clients
        sw.fault = case.fault
        local s, aerr = p:acquire("k1", { egress_policy = { allow = {} } })
        assert.is_nil(sw.fault) -- the fault was met
        assert.is_nil(s)
        assert.is_table(aerr)
        assert.same(case.states, states_of(p.last_acquire))
        -- the claimed stack is gone (marks, services); the other one is still idle
        local n, claimed = services_of(sw, p.last_acquire.project)
        assert.is_false(claimed)
        if case.gone then assert.equal(0, n) else assert.is_true(n > 0) end
        assert.same({ ready = case.gone and 1 or 2, starting = 0, in_use = 0, failed = 0 }, assert(p:status()))
        -- every client the claim opened is closed (the pool's own manager client stays open)
        for i = made + 1, #sw.clients do
          assert.is_true(sw.clients[i].closed >= 1, "client " .. i .. " of " .. sw.clients[i].host .. " left open")
        end
        -- and a claim that does not fail passes every state to ready
        local good = assert(p:acquire("k2", { egress_policy = { allow = {} } }))
        assert.same({ "picked", "claimed", "placed", "planned", "handle", "handed", "ready" }, states_of(p.last_acquire))
        assert.equal(good.project, p.last_acquire.project)
        good.mgr, good.node_eng = nil, nil
      end)
      undo()
      assert(ok, err)
    end)
  end
end)

describe("sandstack.docker.pool's claim, failed in each state #docker", function()
  local h = require "helpers"
  local ph = require "pool_helpers"
  local inventory = require "sandstack.docker.inventory"
  local SUBNETS = "10.219.0.0/16"

  -- what the engine holds of one project: containers, networks and volumes labelled with it
  local function objects_of(project)
    local eng = assert(sandstack.engine {})
    local f = { label = { "io.sandstack.project=" .. project } }
    local cs = assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } }))
    local ns = assert(eng:call("GET", "/networks", nil, { query = { filters = f } }))
    local vs = assert(eng:call("GET", "/volumes", nil, { query = { filters = f } }))
    local claim = eng:call("GET", "/volumes/" .. project .. "-claim")
    eng:close()
    return #cs + #ns + #(vs.Volumes or {}) + (claim and 1 or 0)
  end

  -- a module's function replaced while fn runs
  local function patched(mod, key, with, fn)
    local real = mod[key]
    mod[key] = with
    local ok, err = pcall(fn)
    mod[key] = real
    assert(ok, err)
  end

  -- the case of a claim whose plan fails (the plan is the first step after the pick)
  local function failing_plan()
    local start = require "sandstack.docker.start"
    local real_plan = start.plan
    return { "plan", start, "plan", function(key, ...)
      if key == "k-plan" then return nil, boom("plan") end
      return real_plan(key, ...)
    end, { "picked", "claimed", "failed", "rolled_back" } }
  end

  -- Each case ({what, module, key, replacement, states wanted}) fails one claim of `pool`, which
  -- had `ready` idle stacks: the states are named in order, the claimed stack is gone (the
  -- session's record with it) and the others are still idle. extra(what, project): more checks.
  local function fail_each(pool, cases, ready, extra)
    for _, case in ipairs(cases) do
      local what, mod, key, with, want = case[1], case[2], case[3], case[4], case[5]
      patched(mod, key, with, function()
        local s, err = pool:acquire("k-" .. what)
        assert.is_nil(s, what)
        assert.is_table(err, what)
      end)
      local project = pool.last_acquire.project
      assert.same(want, states_of(pool.last_acquire), what)
      assert.equal(0, objects_of(project), what .. ": objects of " .. project .. " left")
      if extra then extra(what, project) end
      ready = ready - 1
      assert.equal(ready, assert(pool:status()).ready, what)
    end
  end

  it("names the states in order and rolls back exactly what each failed claim made", function()
    local name = "sstest-poolst-" .. h.random_suffix(3)
    local pool = assert(sandstack.docker.pool { name = name, size = 5, max = 6, stack = ph.stack_opts(SUBNETS) })
    finally(function() pool:close(); ph.clean(name) end)
    assert.equal(5, assert(pool:fill()))
    local handle = require "sandstack.docker.handle"
    local live = require "sandstack.docker.egress_live"
    local function failing(what) return function() return nil, boom(what) end end
    local cases = {
      failing_plan(),
      { "handle", handle, "adopt", failing("handle"), { "picked", "planned", "claimed", "failed", "rolled_back" } },
      { "hand-over", live, "hand_over", failing("hand-over"),
        { "picked", "planned", "claimed", "handle", "failed", "rolled_back" } },
      { "record", inventory, "claim_record_request", function(project)
        return { "POST", "/volumes/create", { Name = project .. "-claim", Driver = "no-such-driver-sstest" } }
      end, { "picked", "planned", "claimed", "handle", "handed", "failed", "rolled_back" } },
    }
    fail_each(pool, cases, 5)
    -- a claim that does not fail passes every state to ready, and its record is kept
    local s = assert(pool:acquire("k-good"))
    assert.same({ "picked", "planned", "claimed", "handle", "handed", "ready" }, states_of(pool.last_acquire))
    assert.equal(s.project, pool.last_acquire.project)
    assert.is_true(objects_of(s.project) > 0)
    assert(s:destroy())
    s:close()
  end)

  it("held in this host's store, hands over before the rename's answer and rolls back the same", function()
    local control = require "sandstack.docker.control"
    local eng = assert(sandstack.engine {})
    local here = control.choose(eng) == "socket"
    eng:close()
    if not here then pending("the engine's files are not this host's: no store") return end
    local build = package.cpath:match("^%.?/?([^;]-)/%?%.so") or "build"
    local tag = build:gsub("[^%w.-]", "-") .. "-" .. core.sha256_hex((h.must("pwd"):gsub("%s+$", ""))):sub(1, 8)
    local proxy, fwd = "sandstack-test/proxy:" .. tag, "sandstack-test/forwarder:" .. tag
    assert(sandstack.docker.build_images { proxy_binary = build .. "/sandstack-proxy", proxy_image = proxy,
      forwarder_image = fwd })
    local name = "sstest-poolst-" .. h.random_suffix(3)
    local pool = assert(sandstack.docker.pool { name = name, size = 4, max = 5, stack = { agent_port = 8080,
      pull = "never", forwarder_image = fwd, proxy_image = proxy, subnet_pool = "10.220.0.0/16", egress_policy = { allow = {} },
      services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" } } } } })
    finally(function() pool:close(); ph.clean(name) end)
    assert.equal(4, assert(pool:fill()))
    local handle = require "sandstack.docker.handle"
    local live = require "sandstack.docker.egress_live"
    local cases = {
      failing_plan(),
      { "handle", handle, "adopt", function() return nil, boom("handle") end,
        { "picked", "planned", "claimed", "failed", "rolled_back" } },
      { "hand-over", live, "hand_over", function() return nil, boom("hand-over") end,
        { "picked", "planned", "handle", "claimed", "failed", "rolled_back" } },
    }
    fail_each(pool, cases, 4, function(what, project)
      assert.is_nil(pool.last_acquire.list, what) -- claimed from the store, not the list
      assert.is_nil(core.file_stat(control.dir(project)), what .. ": its control directory is left")
    end)
    -- one that does not fail: handed over, then claimed and ready, now or (deferred) by its first call
    local s = assert(pool:acquire("k-good"))
    local got = states_of(pool.last_acquire)
    local deferred = got[5] == "deferred"
    assert.same({ "picked", "planned", "handle", "handed" }, { got[1], got[2], got[3], got[4] })
    assert(s:record())
    got = states_of(pool.last_acquire)
    assert.same(deferred and { "deferred", "claimed", "ready" } or { "claimed", "ready" }, { select(5, (table.unpack or unpack)(got)) })
    assert(s:destroy())
    s:close()
  end)
end)
