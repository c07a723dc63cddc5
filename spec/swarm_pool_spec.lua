-- sandstack.swarm.pool without a cluster: the marks and how a survey reads them, the wait for
-- the names a health check holds back (a scripted manager), and the checks every call makes
-- before it reaches an engine. The pool on a real swarm: spec/swarm_cluster_spec.lua, "a warm
-- pool on a worker node".
local sandstack = require "sandstack"
local marks = require "sandstack.swarm.pool_marks"
local names = require "sandstack.swarm.names"
local scripted = require "spec.support.scripted_engine"

local function svc(id, labels, env)
  return { ID = id, Spec = { Labels = labels, TaskTemplate = { ContainerSpec = { Env = env } } } }
end
local function task(service_id, state)
  return { ServiceID = service_id, DesiredState = "running", Status = { State = state } }
end
local function stack_labels(project, service, created)
  return { ["io.sandstack.project"] = project, ["io.sandstack.service"] = service, ["io.sandstack.pool"] = "p",
    ["io.sandstack.created"] = tostring(created) }
end
local function mark_labels(project, role, extra)
  local l = marks.body(project, "p", role, "img", extra).Labels
  return l
end

describe("sandstack.swarm.pool marks", function()
  it("makes a mark a service of no replica, named after the project, labelled with the project and the pool", function()
    local b = marks.body("p-1", "p", "claim", "img", { ["io.sandstack.session"] = "k" })
    assert.equal("p-1-claim", b.Name)
    assert.equal(0, b.Mode.Replicated.Replicas)
    assert.same({ ["io.sandstack.project"] = "p-1", ["io.sandstack.pool"] = "p", ["io.sandstack.mark"] = "claim",
      ["io.sandstack.session"] = "k" }, b.Labels)
    assert.same({ ["io.sandstack.node_id"] = "n1", ["io.sandstack.port"] = "4000" },
      marks.ready_labels { node_id = "n1", port = 4000 })
  end)

  it("reads idle, claimed, dead, starting and half-made stacks from the manager's lists", function()
    local now = 1000
    local services = {
      -- idle: ready, both tasks running
      svc("a1", stack_labels("p-a", "sandbox", 900), { "GH_TOKEN=ph" }), svc("a2", stack_labels("p-a", "proxy", 900)),
      svc("am", mark_labels("p-a", "ready", { ["io.sandstack.node_id"] = "n2", ["io.sandstack.port"] = "4001" })),
      -- claimed
      svc("b1", stack_labels("p-b", "sandbox", 900)), svc("b2", stack_labels("p-b", "proxy", 900)),
      svc("bm", mark_labels("p-b", "ready", { ["io.sandstack.node_id"] = "n2", ["io.sandstack.port"] = "4002" })),
      svc("bc", mark_labels("p-b", "claim", { ["io.sandstack.session"] = "k" })),
      -- dead: ready, the proxy's task failed
      svc("c1", stack_labels("p-c", "sandbox", 900)), svc("c2", stack_labels("p-c", "proxy", 900)),
      svc("cm", mark_labels("p-c", "ready", { ["io.sandstack.node_id"] = "n3", ["io.sandstack.port"] = "4003" })),
      -- starting (within the grace) and half-made (older)
      svc("d1", stack_labels("p-d", "sandbox", 990)),
      svc("e1", stack_labels("p-e", "sandbox", 100)),
    }
    local tasks = { task("a1", "running"), task("a2", "running"), task("b1", "running"), task("b2", "running"),
      task("c1", "running"), task("c2", "failed"), task("d1", "starting"), task("e1", "starting") }
    local view = marks.survey(services, tasks, { services = { "sandbox", "proxy" }, sandbox = "sandbox" }, 300, now,
      function(i) return i end)
    assert.same({ { project = "p-a", node_id = "n2", port = 4001, env = { "GH_TOKEN=ph" } } }, view.idle)
    assert.same({ "p-b" }, view.in_use)
    assert.equal(1, view.claimed)
    assert.same({ "p-c" }, view.dead)
    assert.equal(1, view.starting)
    assert.same({ "p-e" }, view.stale)
  end)
end)

describe("sandstack.swarm names held by a health check", function()
  local function manager(states)
    local calls = 0
    return scripted.with {
      request = function(_, method, path)
        assert.equal("GET", method)
        assert.equal("/tasks", path)
        calls = calls + 1
        return 200, { task("s-proxy", states[math.min(calls, #states)]) }
      end,
    }, function() return calls end
  end
  local shape = { services = { { service = "proxy", id = "s-proxy", healthcheck = true }, { service = "sandbox",
    id = "s-sandbox", body = { TaskTemplate = { ContainerSpec = {} } } } } }

  it("waits until Swarm reports each task with a health check running, the others not asked for", function()
    local mgr, calls = manager { "starting", "starting", "running" }
    assert.same({ shape.services[1] }, names.pending(shape))
    assert.is_true(names.wait { mgr = mgr, shape = shape, health_timeout = 10 })
    assert.equal(3, calls())
  end)

  it("asks nothing when no service has a health check", function()
    local mgr, calls = manager { "running" }
    assert.is_true(names.wait { mgr = mgr, shape = { services = { shape.services[2] } } })
    assert.equal(0, calls())
  end)

  it("ends with a typed error when the task ends, or is not healthy in time", function()
    local mgr = manager { "starting", "failed" }
    local ok, err = names.wait { mgr = mgr, shape = shape, health_timeout = 10 }
    assert.is_nil(ok)
    assert.equal("task_failed", err.reason)
    mgr = manager { "starting" }
    ok, err = names.wait { mgr = mgr, shape = shape, health_timeout = 0.2 }
    assert.is_nil(ok)
    assert.equal("timeout", err.kind)
    assert.equal("proxy", err.service)
  end)
end)

describe("sandstack.swarm.pool checks, before any engine", function()
  local stack = { docker_host = "unix:///nonexistent/sandstack-swarm-pool.sock", agent_port = 8080,
    services = { { name = "sandbox", image = "x/agent", command = { "agent" } } }, egress_policy = { allow = {} } }
  local function pool(o)
    local opts = { name = "swp", size = 1, stack = stack }
    for k, v in pairs(o or {}) do opts[k] = v end
    return sandstack.swarm.pool(opts)
  end

  it("has the Docker pool's calls", function()
    local p = assert(pool())
    for _, m in ipairs { "status", "fill", "acquire", "acquire_many", "serve", "close" } do
      assert.is_function(p[m], m)
      assert.is_function(sandstack.docker.pool { name = "dp", stack = { services = stack.services, agent_port = 8080 } }[m])
    end
  end)

  it("refuses bad options as the Docker pool does", function()
    assert.has_error(function() pool { name = 3 } end)
    assert.has_error(function() pool { nope = true } end)
    local p, err = pool { size = -1 } -- a value of the right type: refused, as the Docker pool refuses it
    assert.is_nil(p)
    assert.same({ "invalid_option", "size" }, { err.reason, err.option })
    p, err = pool { size = 3, max = 2 }
    assert.is_nil(p)
    assert.equal("max", err.option)
    local s = {}
    for k, v in pairs(stack) do s[k] = v end
    s.project_name = "mine"
    p, err = pool { stack = s }
    assert.equal("project_name", err.option)
    s.project_name, s.services = nil, { { name = "ready", image = "x/agent" } }
    p, err = pool { stack = s }
    assert.equal("services", err.option)
    s.services = stack.services
    s.credentials = { { name = "GH_TOKEN", host = "gh.test", secret = "ghp_secret_of_the_pool" } }
    p, err = pool { stack = s }
    assert.equal("credentials[1].secret", err.option)
    s.credentials, s.runtime = nil, "runsc"
    p, err = pool { stack = s }
    assert.equal("runtime", err.option) -- what Swarm cannot do, refused as sandstack.swarm.start refuses it
  end)

  it("checks an acquire's key and overrides before it reaches the manager", function()
    local p = assert(pool())
    local s, err = p:acquire("no spaces allowed")
    assert.is_nil(s)
    assert.equal("invalid_name", err.reason)
    s, err = p:acquire("k1", { env = { A = "1" } })
    assert.equal("env", err.option)
    s, err = p:acquire("k1", { egress_policy = { allow = { 42 } } })
    assert.equal("invalid_policy", err.reason)
  end)

  it("checks its server's options as the Docker pool's", function()
    local p = assert(pool())
    assert.is_table(p:serve { target_idle = 1 })
    local none, err = p:serve { target_idle = 2, max = 1 } -- values: refused; a wrong type raises
    assert.is_nil(none)
    assert.same({ "invalid", "invalid_option", "max" }, { err.kind, err.reason, err.option })
    assert.has_error(function() p:serve { on_ask = "allow" } end)
  end)
end)

describe("sandstack.swarm.pool's server (a scripted swarm)", function()
  local core = sandstack.core
  local X = require "sandstack.expiry"
  local answered = {}
  -- the proxy's control commands, by exec on the node: one ask pending until answered
  local function control(_, argv, o)
    if argv[2] ~= "--control" then return nil end
    local verb = argv[3]
    local out = { ok = true }
    if verb == "egress-asks" then
      out.asks = #answered == 0 and { { id = 7, host = "ask.test", port = 443, method = "CONNECT", service = "https",
        at = 1 } } or {}
    elseif verb == "egress-answer" then
      answered[#answered + 1] = core.json_decode(o.env.SANDSTACK_CONTROL_PAYLOAD)
      out.id, out.decision = 7, answered[#answered].decision
    end
    return { exit_code = 0, stdout = core.json_encode(out) .. "\n", stderr = "" }
  end
  local stack = { docker_host = "tcp://manager.scripted:2376", agent_port = 8080,
    services = { { name = "sandbox", image = "x/agent", command = { "agent" } } }, egress_policy = { allow = {}, ask = true } }

  it("answers the asks of its sessions in use through their nodes, and acts on their expiry", function()
    local sw = scripted.swarm { exec = control }
    local undo = scripted.install(sw)
    local ok, err = pcall(function()
      local p = assert(sandstack.swarm.pool { name = "swp", size = 1, stack = stack })
      assert.equal(1, assert(p:fill()))
      local s = assert(p:acquire("k1"))
      local seen = {}
      local server = assert(p:serve { target_idle = 0, on_ask = function(a)
        seen[#seen + 1] = a
        return "deny", { reason = "not for agents" }
      end })
      local st = assert(server:tick())
      assert.equal(1, st.answered)
      assert.equal(0, st.expired)
      assert.equal(1, #seen)
      assert.equal(s.project, seen[1].project) -- which session asks
      assert.equal("ask.test", seen[1].host)
      assert.same({ "deny", 7, "not for agents", "on_ask" }, { answered[1].decision, answered[1].id, answered[1].reason,
        answered[1].by })
      local on_node = 0
      for _, l in ipairs(sw.log) do
        if l.exec and l.host == "tcp://n1.scripted:2376" and l.argv[3] == "egress-asks" then on_node = on_node + 1 end
      end
      assert.equal(1, on_node)
      assert.is_table(p.mgr) -- the pool's client stays open after the views of the pass
      -- its ttl passed: the next tick removes the session's services (its marks with them)
      for _, spec in pairs(sw.services) do
        local l = spec.Labels or {}
        if l["io.sandstack.project"] == s.project and l["io.sandstack.service"] == "sandbox" then
          for k, v in pairs(X.labels({ expires = os.time() - 5, on_expiry = "destroy" }, os.time() - 10)) do l[k] = v end
        end
      end
      st = assert(server:tick())
      assert.equal(1, st.expired)
      assert.equal(0, st.claimed)
      for _, spec in pairs(sw.services) do assert.not_equal(s.project, (spec.Labels or {})["io.sandstack.project"]) end
      s.mgr, s.node_eng = nil, nil
    end)
    undo()
    assert(ok, err)
  end)
end)
