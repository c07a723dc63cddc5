-- sandstack.swarm.pool: warm pools on a swarm, with the same calls as sandstack.docker.pool
-- (docs/scale-out.md). A pooled session is a normal swarm session, started by the normal start
-- (placement, the node's promises, readiness, names) under the pool's placeholder key and
-- labelled io.sandstack.pool=<name>; then marked ready. The manager holds every mark
-- (swarm/pool_marks.lua), so pools of one name in several processes share their idle stacks,
-- and a claim is a create the manager arbitrates: one request, which also records the session.
-- The Swarm placement of the one pool class (lua/sandstack/pool_class.lua: the checks, fill,
-- acquire, the cold start and the server are the Docker pool's): what this placement does its own
-- way, the claim's work in each of its states (lua/sandstack/pool_claim.lua) among it.
local core = require "sandstack.core"
local A = require "sandstack.docker.apply"
local batch = require "sandstack.stack.batch"
local kit = require "sandstack.pool_kit"
local base = require "sandstack.pool_class"
local machine = require "sandstack.pool_claim"
local slots = require "sandstack.docker.pool_slots"
local cluster = require "sandstack.swarm.cluster"
local marks = require "sandstack.swarm.pool_marks"

local M = {}
local Pool = setmetatable({}, { __index = base.Pool })
Pool.__index = Pool

local SWARM_KEYS = { constraints = true, placement_timeout = true, task_timeout = true }
local DEFAULT_CONCURRENCY = 2 -- a swarm start waits on the manager and a node: two overlap well
local emit = kit.emit
Pool.DEAD_REASON = "a task is not running"

local function start() return require "sandstack.swarm.start" end

-- what the pool keeps of its plan: the services the re-check wants running, the sandbox
local function fields(shape, stack)
  local names, image, sandbox = {}, nil, nil
  for _, c in ipairs(shape.services) do
    names[#names + 1] = c.service
    if c.role == "sandbox" or not sandbox then
      sandbox, image = c.service, c.image
    end
  end
  return { mark_image = image, shape = { services = names, sandbox = sandbox },
    grace = (stack.ready_timeout or 60) + (stack.health_timeout or 60) + (stack.task_timeout or 120) + 60 }
end

-- sandstack.swarm.pool{name=, size=, max=, stack={sandstack.swarm.start options}, on_event=,
-- concurrency=} -> pool | nil, err
function M.new(opts)
  return base.new(Pool, opts, { what = "sandstack.swarm.pool", concurrency = DEFAULT_CONCURRENCY,
    plan = function(...) return start().plan(...) end, fields = fields })
end

function Pool:_engine() -- the manager's client
  if not self.mgr then
    local err
    self.mgr, err = cluster.manager { docker_host = self.stack.docker_host, timeout = self.stack.timeout }
    if not self.mgr then return nil, err end
  end
  return self.mgr
end

-- The pool's services and their tasks, two requests to the manager.
function Pool:_survey(mgr)
  local services, err = cluster.services(mgr, "io.sandstack.pool=" .. self.name)
  if not services then return nil, err end
  local ids = {}
  for _, s in ipairs(services) do
    if not (s.Spec and s.Spec.Labels or {})[marks.LABEL] then ids[#ids + 1] = s.ID end
  end
  local tasks; tasks, err = cluster.tasks(mgr, ids)
  if not tasks then return nil, err end
  return marks.survey(services, tasks, self.shape, self.grace, os.time(),
    function(i) return tonumber(core.random_hex(2), 16) % i + 1 end)
end

-- { ready =, starting =, in_use =, failed = }, from the manager (true across processes).
function Pool:status()
  local mgr, err = self:_engine()
  if not mgr then return nil, err end
  local view; view, err = self:_survey(mgr)
  if not view then return nil, err end
  return { ready = #view.idle, starting = view.starting, in_use = view.claimed, failed = #view.dead + #view.stale }
end

-- A mark on the manager: true, or nil, err, lost (the name is taken: another claimant won).
local function mark(mgr, project, pool, role, image, labels)
  local r = batch.run(mgr, cluster.requests("create_service", nil,
    { body = marks.body(project, pool, role, image, labels) }), 30)[1]
  if r.ok then return true end
  return nil, r.err, r.status == 409
end

-- The normal swarm start, labelled with the pool; its mark on the manager: a ready mark says
-- where the stack is (its node and port), a claim names the session.
function Pool:_start(session_key, opts)
  return start().start(session_key, opts, self.name)
end

function Pool:_mark(stack, project, role, session_key)
  local labels = role == "ready" and marks.ready_labels(stack) or { ["io.sandstack.session"] = session_key }
  return mark(stack.mgr, project, self.name, role, self.mark_image, labels)
end

-- The session's plan for a pooled project (no engine call): names, placeholders' places, the
-- added proxy; planned again under the session's key, as the Docker pool's claim does.
function Pool:_session_plan(session_key, project)
  local o = {}
  for k, v in pairs(self.stack) do if type(v) ~= "function" and not SWARM_KEYS[k] then o[k] = v end end
  o.project_name = project
  local model, err = core.stack_model(o, session_key, { token = "x" })
  if not model then return nil, err end
  local plan; plan, err = model:plan { pool = self.name }
  model:close()
  return plan, err
end

-- Removes one of the pool's stacks (claimed first by the caller), by its project's label.
function Pool:_remove(project)
  local gone, err = require("sandstack.swarm.inventory").reap { docker_host = self.stack.docker_host,
    timeout = self.stack.timeout, project = project }
  return gone ~= nil, err
end

-- Claims one idle stack through the claim's states (pool_claim.lua): picked and claimed (the
-- claim mark, one create the manager arbitrates, which names the session), placed (the node and
-- a client of its engine), planned and handle (no engine call), handed (the session's egress),
-- ready. Returns the handle; nil, nil, true when another claimant won; nil, err (what the claim
-- made is rolled back: the handle or the node's client closed, the claimed stack removed).
function Pool:_claim(mgr, idle, session_key, hooks, t)
  local m = machine.new(t, idle.project)
  m:to("picked")
  local t0 = A.now()
  local ok, err, lost = mark(mgr, idle.project, self.name, "claim", self.mark_image,
    { ["io.sandstack.session"] = session_key })
  if not ok then
    m.report("claim", A.now() - t0)
    return m:fail(err, lost)
  end
  m:to("claimed", "claim", A.now() - t0)
  m:made(function() self:_remove(idle.project) end)
  t0 = A.now()
  local node; node, err = cluster.node(mgr, idle.node_id)
  local node_eng = node and cluster.node_engine(node, { timeout = self.stack.timeout, project = idle.project })
  if node and not node_eng then err = select(2, cluster.node_engine(node, { project = idle.project })) end
  if not node_eng then
    m.report("node", A.now() - t0)
    return m:fail(err)
  end
  m:to("placed", "node", A.now() - t0)
  local owned = true -- the node's client is the claim's until the handle takes it
  m:made(function() if owned then node_eng:close() end end)
  local t1 = A.now()
  local plan; plan, err = self:_session_plan(session_key, idle.project)
  if plan and self.slots then
    ok, err = slots.adopt_placeholders(plan, { Config = { Env = idle.env } })
    if not ok then plan = nil end
  end
  if not plan then return m:fail(err) end
  m:to("planned")
  local hmgr; hmgr, err = require("sandstack").engine { host = self.stack.docker_host, timeout = self.stack.timeout,
    api_version = mgr.api_version }
  if not hmgr then return m:fail(err) end
  local handle = require "sandstack.swarm.handle"
  local stack = handle.new(hmgr, node_eng, node, plan, { hooks = { on_event = hooks.on_event or self.on_event,
    req_adapter = hooks.req_adapter }, docker_host = self.stack.docker_host, timeout = self.stack.timeout })
  handle.set_port(stack, idle.port)
  owned = false -- the handle's now
  m:made(function() stack:close() end)
  m:to("handle", "handle", A.now() - t1)
  ok, err = kit.hand_over(self, stack, hooks, false, t)
  if not ok then return m:fail(err) end
  m:to("handed")
  m:keep()
  m:to("ready")
  stack.pool = self.name
  return stack
end

-- Stacks failing their re-check are claimed (so no acquire takes them) and removed.
function Pool:_remove_dead(mgr, dead, reason)
  local n = 0
  for _, project in ipairs(dead) do
    if mark(mgr, project, self.name, "claim", self.mark_image, { ["io.sandstack.session"] = self.placeholder }) then
      emit(self, "pool_dead", { project = project, reason = reason })
      if self:_remove(project) then n = n + 1 end
    end
  end
  return n
end

-- A server pass: the stacks failing their re-check and the half-made ones removed, each claimed
-- first. Returns the number removed.
function Pool:_replace(mgr, view)
  return self:_remove_dead(mgr, view.dead, self.DEAD_REASON)
    + self:_remove_dead(mgr, view.stale, "half-made: its filler is gone")
end

-- The pool's sessions whose ttl or idle timeout is due: destroyed or hibernated (swarm/expiry.lua).
function Pool:_expire()
  return require("sandstack.swarm.expiry").reap { docker_host = self.stack.docker_host,
    timeout = self.stack.timeout, pool = self.name, expired = true }
end

-- The egress asks of the sessions in use (pool_kit.answer_asks): each session's proxy reached
-- through its node's engine, by a handle on the pool's manager client (made here, never closed
-- here: the pool keeps its client; the node clients are closed after the pass).
function Pool:_answer_asks(mgr, view, on_ask)
  local handle = require "sandstack.swarm.handle"
  local nodes, views = {}, {}
  local ok, n = pcall(kit.answer_asks, view.in_use, function(project)
    if self._proxy == nil then
      local plan = self:_session_plan(self.placeholder, project)
      self._proxy = plan and type(plan.proxy) == "table" and plan.proxy.added and { added = true,
        service = plan.proxy.service } or false
    end
    if not self._proxy then return false end -- the pool's stacks have no proxy sandstack added
    local id = view.node_of[project]
    if not id then return nil end
    if nodes[id] == nil then
      local node = cluster.node(mgr, id)
      local eng = node and node.state == "ready" and cluster.node_engine(node, { timeout = self.stack.timeout })
      nodes[id] = eng and { node = node, eng = eng } or false
    end
    if not nodes[id] then return nil end -- its node does not answer: next tick
    local h = handle.new(mgr, nodes[id].eng, nodes[id].node, { project = project, proxy = self._proxy,
      sandbox = self.shape.sandbox })
    views[#views + 1] = h
    return h
  end, on_ask)
  for _, h in ipairs(views) do h.mgr, h.node_eng = nil, nil end -- the clients are not the view's
  for _, w in pairs(nodes) do if w then w.eng:close() end end
  if not ok then error(n, 0) end
  return n
end

-- Removes the pool's idle stacks (and those failing their re-check), each claimed first;
-- stacks held by sessions stay theirs. Returns true, the projects removed. Idempotent.
function Pool:close()
  if self.server then self.server.closed = true end
  local mgr, err = self:_engine()
  if not mgr then return nil, err end
  local view; view, err = self:_survey(mgr)
  local removed = {}
  if view then
    local all = {}
    for _, i in ipairs(view.idle) do all[#all + 1] = i.project end
    for _, p in ipairs(view.dead) do all[#all + 1] = p end
    for _, p in ipairs(all) do
      if mark(mgr, p, self.name, "claim", self.mark_image, { ["io.sandstack.session"] = self.placeholder }) then
        local ok, rerr = self:_remove(p)
        if ok then removed[#removed + 1] = p else err = err or rerr end
      end
    end
  end
  mgr:close()
  self.mgr = nil
  if not view or err then return nil, err end
  table.sort(removed)
  return true, removed
end

return M
