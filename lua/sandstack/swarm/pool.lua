-- sandstack.swarm.pool: warm pools on a swarm, with the same calls as sandstack.docker.pool
-- (docs/scale-out.md). A pooled session is a normal swarm session, started by the normal start
-- (placement, the node's promises, readiness, names) under the pool's placeholder key and
-- labelled io.sandstack.pool=<name>; then marked ready. The manager holds every mark
-- (swarm/pool_marks.lua), so pools of one name in several processes share their idle stacks,
-- and a claim is a create the manager arbitrates: one request, which also records the session.
-- The acquire's checks, the hand-over of the session's egress, credentials and model key, and
-- the scheduler of side-by-side starts are the Docker pool's (lua/sandstack/pool_kit.lua).
local core = require "sandstack.core"
local E = require "sandstack.error"
local A = require "sandstack.docker.apply"
local batch = require "sandstack.stack.batch"
local kit = require "sandstack.pool_kit"
local slots = require "sandstack.docker.pool_slots"
local cluster = require "sandstack.swarm.cluster"
local marks = require "sandstack.swarm.pool_marks"

local M = {}
local Pool = {}
Pool.__index = Pool

local SWARM_KEYS = { constraints = true, placement_timeout = true, task_timeout = true }
local DEFAULT_CONCURRENCY = 2 -- a swarm start waits on the manager and a node: two overlap well
local emit = kit.emit

local function start() return require "sandstack.swarm.start" end

-- sandstack.swarm.pool{name=, size=, max=, stack={sandstack.swarm.start options}, on_event=,
-- concurrency=} -> pool | nil, err
function M.new(opts)
  local err
  opts, err = kit.pool_options(opts, "sandstack.swarm.pool")
  if not opts then return nil, err end
  local size = opts.size or 0
  local max = opts.max or math.max(size, 1)
  local width = opts.concurrency or DEFAULT_CONCURRENCY
  local stack = {}
  for k, v in pairs(opts.stack) do stack[k] = v end
  if stack.project_name ~= nil then
    return E.fail("compose", "invalid_option", "pool: the pool names its stacks' projects; drop project_name",
      { option = "project_name" })
  end
  local prepared; prepared, err = slots.prepare(stack) -- credential slots, as the Docker pool's
  if err then return nil, err end
  local model_key = slots.throwaway_model_key(stack)
  for _, c in ipairs(stack.services or {}) do
    if type(c) == "table" and (c.name == "ready" or c.name == "claim") then
      return E.fail("compose", "invalid_option", "pool: a service may not be named '" .. c.name
        .. "' (the pool's marks)", { option = "services" })
    end
  end
  local placeholder = "pool." .. opts.name
  local probe = {}
  for k, v in pairs(stack) do if type(v) ~= "function" then probe[k] = v end end
  probe.project_name = opts.name .. "-ffffffff"
  local shape; shape, err = start().plan(placeholder, probe, { now = 0, token = "x" })
  if not shape then
    if err.option == "project_name" or err.option == "session_key" then
      return E.fail("compose", "invalid_name", "pool: name '" .. opts.name .. "' cannot prefix a project name",
        { option = "name" })
    end
    return nil, err
  end
  local names, image, sandbox = {}, nil, nil
  for _, c in ipairs(shape.services) do
    names[#names + 1] = c.service
    if c.role == "sandbox" or not sandbox then
      sandbox, image = c.service, c.image
    end
  end
  return setmetatable({ name = opts.name, size = size, max = max, stack = stack, on_event = opts.on_event,
    placeholder = placeholder, concurrency = width, slots = prepared, model_key = model_key, mark_image = image,
    shape = { services = names, sandbox = sandbox },
    grace = (stack.ready_timeout or 60) + (stack.health_timeout or 60) + (stack.task_timeout or 120) + 60 }, Pool)
end

function Pool:_engine() -- the manager's client (the name pool_kit.lua calls)
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

-- The start options of one pooled stack (the stack's, its project, the call's hooks).
function Pool:_opts(project, hooks)
  local o = {}
  for k, v in pairs(self.stack) do o[k] = v end
  o.project_name = project
  for k, v in pairs(hooks or {}) do o[k] = v end
  if not o.on_event then o.on_event = self.on_event end
  return o
end

-- A mark on the manager: true, or nil, err, lost (the name is taken: another claimant won).
local function mark(mgr, project, pool, role, image, labels)
  local r = batch.run(mgr, cluster.requests("create_service", nil,
    { body = marks.body(project, pool, role, image, labels) }), 30)[1]
  if r.ok then return true end
  return nil, r.err, r.status == 409
end

-- The normal start, labelled with the pool, then a mark (role "ready" or "claim"); before_mark
-- runs on the stack first. A mark that cannot be set takes the stack down again.
local function start_marked(self, session_key, hooks, role, labels_of, before_mark)
  local project = self.name .. "-" .. core.random_hex(4)
  local stack, err = start().start(session_key, self:_opts(project, hooks), self.name)
  if not stack then return nil, err end
  local ok = true
  if before_mark then ok, err = before_mark(stack) end
  if ok then ok, err = mark(stack.mgr, project, self.name, role, self.mark_image, labels_of(stack)) end
  if not ok then
    stack:destroy()
    stack:close()
    return nil, err
  end
  return stack, project
end

-- One stack into the pool: started under the placeholder key, narrowed to the pool's baseline
-- (credential slots), then marked ready with its node and port.
function Pool:_fill_one()
  local live = require "sandstack.docker.egress_live"
  local narrow = self.slots and function(s) return live.set_egress(s, self.slots.baseline, true) end -- throwaway slots
  local stack, project = start_marked(self, self.placeholder, nil, "ready", marks.ready_labels, narrow)
  if not stack then return nil, project end
  stack:close()
  emit(self, "pool_filled", { project = project })
  return project
end

-- Starting stacks into the pool, and pool:fill (pool_kit.lua, shared with the Docker pool).
Pool._start_many, Pool.fill = kit.start_many, kit.fill

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

-- Claims one idle stack: the claim mark (the manager arbitrates; it names the session), then
-- the node and its engine, the plan and the handle (no engine call), and the session's egress
-- handed over. Returns the handle; nil, nil, true when another claimant won; nil, err (a
-- claimed stack that cannot be handed over is removed).
function Pool:_claim(mgr, idle, session_key, hooks, t)
  local t0 = A.now()
  local ok, err, lost = mark(mgr, idle.project, self.name, "claim", self.mark_image,
    { ["io.sandstack.session"] = session_key })
  t.claim, t.tries = (t.claim or 0) + (A.now() - t0), (t.tries or 0) + 1
  if not ok then
    if lost then return nil, nil, true end
    return nil, err
  end
  t0 = A.now()
  local stack
  local node; node, err = cluster.node(mgr, idle.node_id)
  local node_eng = node and cluster.node_engine(node, { timeout = self.stack.timeout, project = idle.project })
  if node and not node_eng then err = select(2, cluster.node_engine(node, { project = idle.project })) end
  t.node = A.now() - t0
  local plan
  if node_eng then plan, err = self:_session_plan(session_key, idle.project) end
  if plan and self.slots then
    ok, err = slots.adopt_placeholders(plan, { Config = { Env = idle.env } })
    if not ok then plan = nil end
  end
  if plan then
    local hmgr; hmgr, err = require("sandstack").engine { host = self.stack.docker_host, timeout = self.stack.timeout,
      api_version = mgr.api_version }
    if hmgr then
      local handle = require "sandstack.swarm.handle"
      stack = handle.new(hmgr, node_eng, node, plan, { hooks = { on_event = hooks.on_event or self.on_event,
        req_adapter = hooks.req_adapter }, docker_host = self.stack.docker_host, timeout = self.stack.timeout })
      handle.set_port(stack, idle.port)
      node_eng = nil -- the handle's now
    end
  end
  t.handle = A.now() - t0 - t.node
  if stack then
    ok, err = kit.hand_over(self, stack, hooks, false, t)
    if not ok then stack:close(); stack = nil end
  end
  if not stack then
    if node_eng then node_eng:close() end
    self:_remove(idle.project)
    return nil, err
  end
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

-- Hands out an idle stack to session_key: the pool's list (services and tasks: the re-check),
-- the claim (one create the manager arbitrates, which also names the session), the node, and
-- the hand-over. With no healthy idle stack, those failing the re-check are removed and the
-- session starts cold (event pool_empty). pool.last_acquire: the time of each step, in seconds.
function Pool:acquire(session_key, overrides)
  local ok, err = kit.check_session_key(session_key)
  if not ok then return nil, err end
  local hooks; hooks, err = kit.check_overrides(self, overrides)
  if not hooks then return nil, err end
  local t = { t0 = A.now() }
  self.last_acquire = t
  local mgr; mgr, err = self:_engine()
  if not mgr then return nil, err end
  local view; view, err = self:_survey(mgr)
  t.list = A.now() - t.t0
  if not view then return nil, err end
  for _, idle in ipairs(view.idle) do
    local stack, cerr, lost = self:_claim(mgr, idle, session_key, hooks, t)
    if stack then
      t.total = A.now() - t.t0
      emit(self, "pool_acquired", { project = idle.project, session_key = session_key, node = stack.node })
      return stack
    end
    if not lost then return nil, cerr end
  end
  self:_remove_dead(mgr, view.dead, "a task is not running")
  emit(self, "pool_empty", { session_key = session_key })
  return self:_cold(session_key, hooks)
end

-- An empty pool: a normal start under the session's key, labelled with the pool and claimed at
-- once (never marked ready); with credential slots, handed over as a claim is.
function Pool:_cold(session_key, hooks)
  local labels = function() return { ["io.sandstack.session"] = session_key } end
  local stack, err
  if not self.slots then
    stack, err = start_marked(self, session_key, hooks, "claim", labels)
  else
    stack, err = start_marked(self, session_key, { on_event = hooks.on_event, req_adapter = hooks.req_adapter,
      api_key = hooks.api_key }, "claim", labels, function(s) return kit.hand_over(self, s, hooks, true) end)
  end
  if not stack then return nil, err end
  stack.pool = self.name
  return stack
end

-- A burst: idle stacks claimed first, from one list; the rest start cold, side by side.
Pool.acquire_many = kit.acquire_many

-- Keeping the pool full, as the Docker pool's server: tick() is one pass (the list, the stacks
-- failing their re-check and the half-made ones replaced, the pool's sessions whose ttl or idle
-- timeout is due acted on, then starts up to target_idle); with on_ask, the asks of the sessions
-- in use answered, each through an exec on its node (design/scale-out.md "The pool's server").
local Server = {}
Server.__index = Server

function Pool:serve(opts)
  local o, err = kit.serve_options(self, opts)
  if not o then return nil, err end
  local server = setmetatable({ pool = self, target_idle = o.target_idle, max = o.max, interval = o.interval,
    concurrency = o.concurrency, on_ask = o.on_ask, counts = { idle = 0, claimed = 0, starting = 0, failed = 0 } }, Server)
  self.server = server
  return server
end

local function counts_of(view)
  return { idle = #view.idle, claimed = view.claimed, starting = view.starting, failed = #view.dead + #view.stale }
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

function Server:tick()
  local pool = self.pool
  if self.closed then return E.fail("compose", "closed", "pool:serve: the pool is closed") end
  local mgr, err = pool:_engine()
  if not mgr then return nil, err end
  local view; view, err = pool:_survey(mgr)
  if not view then return nil, err end
  local replaced = pool:_remove_dead(mgr, view.dead, "a task is not running")
    + pool:_remove_dead(mgr, view.stale, "half-made: its filler is gone")
  -- the pool's sessions whose ttl or idle timeout is due: destroyed or hibernated (swarm/expiry.lua)
  local expired = require("sandstack.swarm.expiry").reap { docker_host = pool.stack.docker_host,
    timeout = pool.stack.timeout, pool = pool.name, expired = true }
  local live = #view.idle + view.claimed + view.starting
  local want = math.min(self.target_idle - #view.idle - view.starting, self.max - live)
  local started, serr, partial = pool:_start_many(want, self.concurrency)
  view, err = pool:_survey(mgr)
  if not view then return nil, err end
  self.counts = counts_of(view)
  self.counts.started, self.counts.replaced = started or partial or 0, replaced
  self.counts.expired = expired and #expired or 0
  if self.on_ask then self.counts.answered = pool:_answer_asks(mgr, view, self.on_ask) end
  if not started then
    serr.started = partial
    return nil, serr
  end
  return self.counts
end

Server.run = kit.server_run

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
