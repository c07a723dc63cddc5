-- A swarm session over time without a cluster: the expiry both backends share
-- (lua/sandstack/expiry.lua: the mark as labels, the idle measure, the reap pass), the mark
-- written on the sandbox service's labels at its version (swarm/expiry.lua), hibernate's scale
-- to 0 pinned to the node, with the proxy kept (swarm/lifecycle.lua), against a scripted manager.
local core = require "sandstack.core"
local X = require "sandstack.expiry"
local scripted = require "spec.support.scripted_engine"
local swarm = require "sandstack.swarm"
local sexpiry = require "sandstack.swarm.expiry"
local lifecycle = require "sandstack.swarm.lifecycle"
local shandle = require "sandstack.swarm.handle"

describe("the shared expiry", function()
  it("writes a mark as labels and reads it back", function()
    local m = X.first(60, 30, "hibernate", 1000)
    m.idle_bytes = 512
    local l = X.labels(m, 1000.5)
    assert.same({ "1060", "30", "hibernate", "1000.500", "1000", "512" }, { l["io.sandstack.expires"],
      l["io.sandstack.idle_timeout"], l["io.sandstack.on_expiry"], l["io.sandstack.expiry_set"],
      l["io.sandstack.idle_seen"], l["io.sandstack.idle_bytes"] })
    l["io.sandstack.project"] = "p"
    local back = X.parse(l)
    assert.same({ "p", 1060, 30, "hibernate", 1000.5, 1000, 512 }, { back.project, back.expires, back.idle_timeout,
      back.on_expiry, back.set, back.idle_seen, back.idle_bytes })
    assert.is_nil(X.parse { ["io.sandstack.project"] = "p" }) -- no mark
    assert.same({ at = 1060, remaining = 50, idle_timeout = 30, idle_since = 1000, on_expiry = "hibernate" },
      X.view(back, 1010))
    assert.same({}, X.view(nil, 1010))
  end)

  it("extends a ttl and keeps idle_timeout and on_expiry; false drops the ttl", function()
    local prev = X.first(5, 30, "hibernate", 1000)
    local m = X.timeout(prev, 600, 1003)
    assert.same({ 1603, 30, "hibernate" }, { m.expires, m.idle_timeout, m.on_expiry })
    assert.is_nil(X.timeout(prev, false, 1003).expires)
    assert.equal(10, X.timeout(nil, 10, 0).expires)
  end)

  it("is due at the ttl, and idle only after idle_timeout seconds without traffic", function()
    local rewrites = 0
    local function rewrite() rewrites = rewrites + 1 end
    assert.equal("ttl", X.due({ expires = 100 }, 100, error, rewrite))
    assert.is_nil(X.due({ expires = 101 }, 100, error, rewrite))
    local m = { idle_timeout = 10, idle_seen = 0, idle_bytes = 1000 }
    -- traffic seen: the mark moves on
    assert.is_nil(X.due(m, 50, function() return 1000 + X.NOISE + 1, true end, rewrite))
    assert.same({ 1, 50, 1000 + X.NOISE + 1 }, { rewrites, m.idle_seen, m.idle_bytes })
    -- no traffic (noise only): idle once idle_timeout has passed since it was last seen
    assert.is_nil(X.due(m, 55, function() return m.idle_bytes + 10, true end, rewrite))
    assert.equal("idle", X.due(m, 60, function() return m.idle_bytes + 10, true end, rewrite))
    -- a forwarder that does not run (hibernated) is not measured
    assert.is_nil(X.due(m, 99, function() return nil, false end, rewrite))
    assert.equal(1, rewrites)
  end)

  it("acts on what is due in project order, by on_expiry, within the filters; a hibernation drops the ttl", function()
    local by = { ["p-b"] = { project = "p-b", expires = 1, on_expiry = "hibernate" },
      ["p-a"] = { project = "p-a", expires = 1, on_expiry = "destroy" },
      ["q-c"] = { project = "q-c", expires = 1 },
      ["p-d"] = { project = "p-d", expires = os.time() + 600 } }
    local log = {}
    local done = assert(X.pass(by, { prefix = "p-" }, {
      due = function(m, t) return m.expires and t >= m.expires and "ttl" or nil end,
      hibernate = function(m) log[#log + 1] = "hibernate " .. m.project; return true end,
      destroy = function(m) log[#log + 1] = "destroy " .. m.project; return true end,
      rewrite = function(m) log[#log + 1] = "rewrite " .. m.project .. " " .. tostring(m.expires) end,
    }))
    assert.same({ "destroy p-a", "hibernate p-b", "rewrite p-b nil" }, log)
    assert.same({ { project = "p-a", reason = "ttl", action = "destroy" },
      { project = "p-b", reason = "ttl", action = "hibernate" } }, done)
    -- a failure is returned with what was done before it, and the pass goes on
    local _, err = X.pass(by, { prefix = "p-" }, {
      due = function() return "ttl" end,
      hibernate = function() return true end,
      destroy = function(m) if m.project == "p-a" then return nil, { message = "refused" } end; return true end,
      rewrite = function() end,
    })
    assert.equal("refused", err.message)
    assert.equal(2, #err.done)
  end)
end)

describe("the core's service update request", function()
  it("sends the spec at the version read, and refuses an update without a version", function()
    local r = core.session_requests("update_service", { "id-sbx" }, { body = { Name = "p-sandbox" }, version = 12 })[1]
    assert.same({ "POST", "/services/id-sbx/update", "12" }, { r.method, r.path, r.query.version })
    assert.equal("p-sandbox", core.json_decode(r.body_json).Name)
    assert.has_error(function() core.session_requests("update_service", { "id" }, { body = {} }) end)
  end)
end)

-- A scripted manager holding the services of one session: proxy, sandbox, and a record of what
-- was sent. update_service answers "update out of sequence" `conflicts` times first, and to an
-- update at a version that is no longer the service's (as the manager does); e.before_update(id),
-- when set, runs as an update arrives (another writer coming in between a read and its write).
local function manager(conflicts)
  local svcs = {
    { ID = "id-proxy", Version = { Index = 7 }, Spec = { Name = "p-proxy", Mode = { Replicated = { Replicas = 1 } },
      Labels = { ["io.sandstack.project"] = "p", ["io.sandstack.service"] = "proxy" },
      TaskTemplate = { Placement = {} } } },
    { ID = "id-sbx", Version = { Index = 9 }, Spec = { Name = "p-sandbox", Mode = { Replicated = { Replicas = 1 } },
      Labels = { ["io.sandstack.project"] = "p", ["io.sandstack.service"] = "sandbox" },
      TaskTemplate = { Placement = { Constraints = { "node.id==n1" } } } } },
  }
  local by = { ["id-proxy"] = svcs[1], ["id-sbx"] = svcs[2] }
  local sent = {}
  local e = scripted.with({ sent = sent, svcs = by })
  function e:request(m, path, body, opts)
    local q = opts and opts.query or {}
    sent[#sent + 1] = { m = m, path = path, body = body and core.json_decode(body), query = q }
    -- answers are copies, as the wire's are: a change to one is not the manager's until sent
    if m == "GET" and path == "/services" then return 200, core.json_decode(core.json_encode(svcs)) end
    local id = path:match("^/services/([^/]+)$")
    if m == "GET" and id then return 200, core.json_decode(core.json_encode(by[id])) end
    id = path:match("^/services/([^/]+)/update$")
    if m == "POST" and id then
      if conflicts > 0 then
        conflicts = conflicts - 1
        by[id].Version.Index = by[id].Version.Index + 1
        return 500, { message = "rpc error: code = Unknown desc = update out of sequence" }
      end
      local body = sent[#sent].body
      if e.before_update then
        local f = e.before_update
        e.before_update = nil
        f(id)
      end
      if tostring(by[id].Version.Index) ~= q.version then
        return 500, { message = "rpc error: code = Unknown desc = update out of sequence" }
      end
      by[id].Spec = body
      by[id].Version.Index = by[id].Version.Index + 1
      return 200, {}
    end
    if m == "GET" and path == "/tasks" then return 200, {} end
    if m == "GET" and path == "/nodes" then
      return 200, { { ID = "n1", Description = { Hostname = "host-1" }, Status = { State = "ready" }, Spec = {} } }
    end
    if m == "GET" and path == "/containers/json" then
      return 200, { { Id = "fw1", State = "running", Labels = { ["io.sandstack.role"] = "forwarder" } } }
    end
    if m == "POST" and path:match("^/containers/[^/]+/stop$") then return 204 end
    error("unexpected request " .. m .. " " .. path)
  end
  return e
end

describe("a swarm session's expiry and hibernation (scripted manager)", function()
  it("keeps the mark on the sandbox service's labels, updated at its version, retried when it moved", function()
    local mgr = manager(1)
    local stack = { mgr = mgr, project = "p", plan = { sandbox = "sandbox" } }
    assert.same({}, assert(sexpiry.expires(stack)))
    assert.is_true(assert(sexpiry.set_timeout(stack, 300)))
    local l = mgr.svcs["id-sbx"].Spec.Labels
    assert.truthy(tonumber(l["io.sandstack.expires"]) >= os.time() + 299)
    assert.equal("p", l["io.sandstack.project"]) -- the service's own labels stay
    assert.equal(1, mgr.svcs["id-sbx"].Spec.Mode.Replicated.Replicas) -- labels only
    assert.is_nil(mgr.svcs["id-proxy"].Spec.Labels["io.sandstack.expires"])
    local view = assert(sexpiry.expires(stack))
    assert.truthy(view.remaining > 290 and view.remaining <= 300)
    local ok, err = sexpiry.set_timeout(stack, -1) -- a value: refused
    assert.is_nil(ok)
    assert.same({ "compose", "invalid_option", "seconds" }, { err.kind, err.reason, err.option })
    assert.has_error(function() sexpiry.set_timeout(stack, "1h") end) -- a wrong type: raised
  end)

  -- Every gateway of a cluster runs the expiry pass over the same sessions: passes that listed
  -- the same due mark act once between them.
  local function due_manager()
    local mgr = manager(0)
    local l = mgr.svcs["id-sbx"].Spec.Labels
    for k, v in pairs(X.labels({ expires = os.time() - 5 }, os.time() - 60)) do l[k] = v end
    return mgr
  end
  local function pass(mgr, m, who, log, fail)
    return X.pass({ p = m }, {}, {
      due = function() return "ttl" end,
      claim = function(x) return sexpiry.claim(mgr, "p", "sandbox", x, who, os.time()) end,
      release = function(x) sexpiry.release(mgr, "p", "sandbox", x, who) end,
      destroy = function()
        log[#log + 1] = who
        if fail then return nil, { message = "refused" } end
        return true
      end,
      hibernate = error, rewrite = error,
    })
  end

  it("acts once when passes that listed the same due mark meet: one claim is written, the rest find it", function()
    local mgr = due_manager()
    local log = {}
    local ma, mb, mc = X.parse(mgr.svcs["id-sbx"].Spec.Labels), X.parse(mgr.svcs["id-sbx"].Spec.Labels),
      X.parse(mgr.svcs["id-sbx"].Spec.Labels)
    -- pass c reads the service, then a's claim is written before c's update arrives
    local done_a
    mgr.before_update = function() done_a = assert(pass(mgr, ma, "a", log)) end
    local done_c = assert(pass(mgr, mc, "c", log))
    local done_b = assert(pass(mgr, mb, "b", log)) -- b after both
    assert.same({ "a" }, log)
    assert.same({ { project = "p", reason = "ttl", action = "destroy" } }, done_a)
    assert.same({}, done_b)
    assert.same({}, done_c)
    local claim = mgr.svcs["id-sbx"].Spec.Labels[sexpiry.CLAIM]
    assert.truthy(claim:match(" a$"), claim)
  end)

  it("lets a later pass act after a failed action's release, or once a claim's lease is over", function()
    local mgr = due_manager()
    local l = mgr.svcs["id-sbx"].Spec.Labels
    local log = {}
    local _, err = pass(mgr, X.parse(l), "a", log, true)
    assert.equal("refused", err.message)
    assert.is_nil(mgr.svcs["id-sbx"].Spec.Labels[sexpiry.CLAIM]) -- given back
    assert.equal(1, #assert(pass(mgr, X.parse(mgr.svcs["id-sbx"].Spec.Labels), "b", log)))
    -- a claim left by a pass that died: it holds for the lease, then the session is taken again
    l = mgr.svcs["id-sbx"].Spec.Labels
    l[sexpiry.CLAIM] = ("%s %d gone"):format(l["io.sandstack.expiry_set"], os.time() - 10)
    assert.same({}, assert(pass(mgr, X.parse(l), "c", log)))
    l = mgr.svcs["id-sbx"].Spec.Labels
    l[sexpiry.CLAIM] = ("%s %d gone"):format(l["io.sandstack.expiry_set"], os.time() - sexpiry.CLAIM_LEASE - 1)
    assert.equal(1, #assert(pass(mgr, X.parse(l), "d", log)))
    assert.same({ "a", "b", "d" }, log)
  end)

  it("does not act on a mark that moved since the pass read it (a set_timeout in between), and a new mark ends a claim", function()
    local mgr = due_manager()
    local stale = X.parse(mgr.svcs["id-sbx"].Spec.Labels)
    local stack = { mgr = mgr, project = "p", plan = { sandbox = "sandbox" } }
    assert(sexpiry.set_timeout(stack, 600))
    local log = {}
    assert.same({}, assert(pass(mgr, stale, "a", log)))
    assert.same({}, log)
    -- a claim on the previous mark does not hold once a new mark is written
    local l = mgr.svcs["id-sbx"].Spec.Labels
    l[sexpiry.CLAIM] = ("%s %d a"):format(l["io.sandstack.expiry_set"], os.time())
    assert(sexpiry.set_timeout(stack, 1))
    assert.is_nil(mgr.svcs["id-sbx"].Spec.Labels[sexpiry.CLAIM])
  end)

  it("refuses hibernate{memory = true} as checkpoint_unsupported, touching nothing", function()
    local stack = shandle.new(scripted.with({ request = function() error("no request expected") end }),
      scripted.with({ request = function() error("no request expected") end }), { id = "n1", hostname = "h" },
      { project = "p", session_key = "k", sandbox = "sandbox", containers = {} })
    local ok, err = stack:hibernate { memory = true }
    assert.is_nil(ok)
    assert.same({ "engine", "checkpoint_unsupported" }, { err.kind, err.reason })
    assert.has_error(function() stack:hibernate { memory = "yes" } end)
    assert.has_error(function() stack:hibernate { later = true } end)
    for _, m in ipairs { "snapshot", "fork", "changes" } do
      local _, uerr = stack[m](stack)
      assert.same({ "unsupported", "swarm" }, { uerr.kind, uerr.backend })
    end
    stack.mgr, stack.node_eng = nil, nil
  end)

  it("scales every service but the proxy to 0, pinned to the node, and stops the forwarder", function()
    local mgr = manager(0)
    local node = scripted.new(function(_, path)
      if path == "/containers/json" then
        return 200, { { Id = "fw1", State = "running", Labels = { ["io.sandstack.role"] = "forwarder" } } }
      end
      return 204
    end)
    assert.is_true(assert(lifecycle.hibernate_project(mgr, node, "p", "n1", {})))
    assert.equal(0, mgr.svcs["id-sbx"].Spec.Mode.Replicated.Replicas)
    assert.same({ "node.id==n1" }, mgr.svcs["id-sbx"].Spec.TaskTemplate.Placement.Constraints) -- not twice
    assert.equal(1, mgr.svcs["id-proxy"].Spec.Mode.Replicated.Replicas)
    assert.same({ "GET /containers/json", "POST /containers/fw1/stop" }, node.log)
  end)

  it("pauses and resumes the services, leaving the forwarder and the added proxy running", function()
    local node = scripted.new(function() return 204 end)
    local S = {}
    lifecycle.mix(S)
    local stack = { node_eng = node, plan = { project = "p", sandbox = "sandbox", forwarder = "forwarder",
      proxy = { service = "proxy", added = true }, containers = { { service = "proxy", role = "sidecar" },
        { service = "db", role = "sidecar" }, { service = "sandbox", role = "sandbox" },
        { service = "forwarder", role = "forwarder" } } } }
    function stack:container(service) return "id-" .. service end
    assert.is_true(assert(S.pause(stack)))
    assert.is_true(assert(S.resume(stack)))
    assert.same({ "POST /containers/id-db/pause", "POST /containers/id-sandbox/pause",
      "POST /containers/id-db/unpause", "POST /containers/id-sandbox/unpause" }, node.log)
  end)

  it("lists a hibernated session (no task left) on the node its pin names", function()
    local mgr = manager(0)
    mgr.svcs["id-proxy"].Spec.TaskTemplate.Placement.Constraints = { "node.id==n1" }
    mgr.svcs["id-sbx"].Spec.Mode.Replicated.Replicas = 0
    local s = assert(require("sandstack.swarm.inventory").list_with(mgr, "p"))[1]
    assert.same({ "n1", "host-1", "ready" }, { s.node_id, s.node, s.node_state })
    assert.same({ sandbox = true }, s.hibernated)
  end)

  it("pins an unpinned first service to the session's node when it scales it", function()
    local mgr = manager(0)
    mgr.svcs["id-proxy"].Spec.Labels["io.sandstack.service"] = "sidecar" -- not the added proxy
    local node = scripted.with({ request = function(_, _, path)
      if path == "/containers/json" then return 200, {} end
      return 204
    end })
    assert(lifecycle.hibernate_project(mgr, node, "p", "n1", {}))
    assert.same({ "node.id==n1" }, mgr.svcs["id-proxy"].Spec.TaskTemplate.Placement.Constraints)
    assert.equal(0, mgr.svcs["id-proxy"].Spec.Mode.Replicated.Replicas)
  end)

  it("checks start's ttl, idle_timeout and on_expiry and reap{expired}'s options before any engine", function()
    for _, o in ipairs { { ttl = 0 }, { ttl = 5, on_expiry = "stop" } } do -- values: refused
      local s, err = swarm.start("k", o)
      assert.is_nil(s)
      assert.same({ "compose", "invalid_option" }, { err.kind, err.reason })
    end
    assert.has_error(function() swarm.start("k", { idle_timeout = "5m" }) end) -- a wrong type: raised
    assert.has_error(function() swarm.reap { expired = true, older_than = 5 } end)
  end)
end)
