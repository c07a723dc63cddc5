-- sandstack.docker.pool: warm pools. A pooled stack is a normal stack, started by
-- the normal start path (same plan, isolation self-check, readiness) ahead of time, labelled
-- io.sandstack.pool=<name>, and handed to exactly one session. Everything the pool knows lives in
-- the engine's labels, so pools of the same name in several processes share their idle stacks:
--   <project>-ready  a created, never started container: the filler's mark that the stack passed
--                    readiness (an unmarked stack is starting, or half-made by a dead filler)
--   <project>-claim  the ready mark renamed by acquire (one engine round trip; the
--                    engine lets exactly one rename to this name succeed, whatever process it runs
--                    in), with a volume <project>-claim naming the session; or, for a cold start
--                    and for reap, a container created under that name (a second create is 409)
-- On this host an acquire finds idle stacks in the store (pool_store.lua: a file per ready stack
-- in its control directory, claimed by a lock) before the engine's list.
local core = require "sandstack.core"
local E = require "sandstack.error"
local A = require "sandstack.docker.apply"

local M = {}
local Pool = {}
Pool.__index = Pool

local DEFAULT_CONCURRENCY = 4
local MARK_NAMES = { claim = true, ready = true }
-- what the Swarm pool shares with this one (lua/sandstack/pool_kit.lua)
local kit = require "sandstack.pool_kit"
local emit = kit.emit
local check_session_key, check_overrides = kit.check_session_key, kit.check_overrides

local function docker() return require "sandstack.docker.stacks" end

-- The pool's parts, one concept each: the listing and its re-check (pool_survey.lua), the claim of
-- an idle stack (pool_claim.lua), the server keeping the pool full (pool_server.lua).
local survey = require "sandstack.docker.pool_survey"
local server = require "sandstack.docker.pool_server"
Pool._survey, Pool._remove_dead = survey.survey, survey.remove_dead
Pool._claim = require("sandstack.docker.pool_claim").claim
Pool.serve, Pool._answer_asks = server.serve, server.answer_asks

-- sandstack.docker.pool{name=, size=, max=, stack={start options}, on_event=} -> pool | nil, err
function M.new(opts)
  local err
  opts, err = kit.pool_options(opts, "sandstack.docker.pool")
  if not opts then return nil, err end
  local size, max = opts.size or 0, opts.max or math.max(opts.size or 0, 1)
  -- The options are fixed here: every stack of the pool is made from this one table.
  local stack = {}
  for k, v in pairs(opts.stack) do stack[k] = v end
  if stack.project_name ~= nil then
    return E.fail("compose", "invalid_option", "pool: the pool names its stacks' projects; drop project_name",
      { option = "project_name" })
  end
  -- credential slots: throwaway secrets at start, the session's at claim (pool_slots.lua)
  local prepared, slot_err = require("sandstack.docker.pool_slots").prepare(stack)
  if slot_err then return nil, slot_err end
  -- the model key: with the proxy sandstack adds, a waiting stack's proxy holds a throwaway one;
  -- the pool keeps the operator's and a claim hands the session its own (or that one) live
  local model_key = require("sandstack.docker.pool_slots").throwaway_model_key(stack)
  for _, s in ipairs(stack.services or {}) do
    if type(s) == "table" and MARK_NAMES[s.name] then
      return E.fail("compose", "invalid_option", "pool: a service may not be named '" .. s.name .. "' (the pool's marks)",
        { option = "services" })
    end
  end
  local placeholder = "pool." .. opts.name
  -- The name must make valid project names: validate the longest one the pool will use.
  local probe_opts = {}
  for k, v in pairs(stack) do if type(v) ~= "function" then probe_opts[k] = v end end
  probe_opts.project_name = opts.name .. "-ffffffff"
  local plan; plan, err = docker().plan(placeholder, probe_opts, { now = 0, token = "x" })
  if not plan then
    if err.option == "project_name" or err.option == "session_key" then
      return E.fail("compose", "invalid_name", "pool: name '" .. opts.name .. "' cannot prefix a project name",
        { option = "name" })
    end
    return nil, err
  end
  local concurrency = opts.concurrency or DEFAULT_CONCURRENCY
  -- what a pooled stack of this plan has: the re-check reads them from the pool's container list
  local image
  local shape = { forwarder = plan.forwarder, sandbox = plan.sandbox, agent_port = plan.agent_port, services = {} }
  for _, c in ipairs(plan.containers) do
    if c.service == plan.forwarder then image = c.image end
    shape.services[#shape.services + 1] = c.service
  end
  local pool = setmetatable({ name = opts.name, size = size, max = max, stack = stack, on_event = opts.on_event,
    placeholder = placeholder, mark_image = image, shape = shape, concurrency = concurrency, slots = prepared,
    model_key = model_key,
    grace = (stack.ready_timeout or 60) + (stack.health_timeout or 60) + 120 }, Pool)
  -- the engine client (its /version round, its connection) made with the pool, not in the first
  -- acquire, when the engine is this host's; a failure here is left to the first call to meet
  local a = core.engine_address(stack.docker_host)
  if a and a.unix_path then pool:_engine() end
  return pool
end

function Pool:_engine()
  if not self.eng then
    local err
    self.eng, err = require("sandstack").engine { host = self.stack.docker_host, timeout = self.stack.timeout }
    if not self.eng then return nil, err end
  end
  return self.eng
end

-- The pool's stacks as docker.list sees them, with the pool's own "starting" grace.
function Pool:_stacks()
  local list, err = docker().list { docker_host = self.stack.docker_host, timeout = self.stack.timeout, pool = self.name }
  if not list then return nil, err end
  local now = os.time()
  for _, s in ipairs(list) do s.state = require("sandstack.docker.inventory").pool_state(s, now, self.grace) end
  return list
end

-- { ready =, starting =, in_use =, failed = }, counted from the engine's labels (true across processes).
function Pool:status()
  local list, err = self:_stacks()
  if not list then return nil, err end
  local out = { ready = 0, starting = 0, in_use = 0, failed = 0 }
  for _, s in ipairs(list) do out[s.state] = out[s.state] + 1 end
  return out
end

function Pool:_opts(project, hooks)
  local o = {}
  for k, v in pairs(self.stack) do o[k] = v end
  o.project_name = project
  for k, v in pairs(hooks or {}) do o[k] = v end
  if not o.on_event then o.on_event = self.on_event end
  return o
end

-- One project of the pool taken down, and the pool's reaps (opts: reap's filters beyond the pool):
-- the calls the pool's parts make through sandstack.docker, which requires this module.
function Pool:_down(project)
  return docker().down(project, { docker_host = self.stack.docker_host, timeout = self.stack.timeout })
end

function Pool:_reap(opts)
  local o = { docker_host = self.stack.docker_host, timeout = self.stack.timeout, pool = self.name }
  for k, v in pairs(opts) do o[k] = v end
  return docker().reap(o)
end

function Pool:_new_project()
  return self.name .. "-" .. core.random_hex(4)
end

-- The normal start labelled with the pool, then a mark (role "ready" or "claim") for
-- session_key. A mark that cannot be set takes the stack down again.
local function start_marked(self, session_key, hooks, role, before_mark)
  local project = self:_new_project()
  local stack, err = require("sandstack.docker.start").start(session_key, self:_opts(project, hooks), self.name)
  if not stack then return nil, err end
  local eng, ok = nil, true
  if before_mark then ok, err = before_mark(stack) end
  if ok then eng, err = self:_engine() end
  if eng then ok, err = require("sandstack.docker.inventory").mark(eng, role, project, self.name, session_key, self.mark_image) end
  if not ok then
    stack:destroy()
    stack:close()
    return nil, err
  end
  return stack, project
end

-- One stack into the pool: started under the placeholder session, then marked ready.
-- A pool with credential slots narrows each stack's proxy to its baseline before the mark: no
-- stack that can be claimed admits a slot's host while it waits.
function Pool:_fill_one()
  local live = require "sandstack.docker.egress_live"
  local narrow = self.slots and function(s) return live.set_egress(s, self.slots.baseline, true) end -- throwaway slots
  local stack, project = start_marked(self, self.placeholder, nil, "ready", narrow)
  if not stack then return nil, project end
  require("sandstack.docker.pool_store").publish(self.name, stack) -- else found by the container list
  stack:close()
  emit(self, "pool_filled", { project = project })
  return project
end

-- Starting stacks into the pool, and pool:fill (pool_kit.lua, shared with the swarm's pool).
Pool._start_many, Pool.fill = kit.start_many, kit.fill

-- Claims a stack from this host's store (pool_store.lua): each file claimed by its lock, then by
-- the engine's rename. Returns the handle and its project; nil when the store has no idle stack
-- left; nil, err on an error.
function Pool:_claim_stored(eng, session_key, hooks, t)
  local store = require "sandstack.docker.pool_store"
  if require("sandstack.docker.control").choose(eng) ~= "socket" then return nil end
  while true do
    local t0 = A.now()
    local entry = store.take(self.name)
    t.find = (t.find or 0) + (A.now() - t0)
    if not entry then return nil end
    local stack, err, lost = self:_claim(eng, entry, session_key, hooks, t, function(done) store.settle(entry, done) end,
      true)
    store.settle(entry, false) -- a claim that ended before the rename's answer
    if stack then return stack, entry.project end
    if not lost then return nil, err end
  end
end

-- Claims a stack the container list shows idle. On this host its file in the store is claimed
-- first: one another process here holds is skipped (that process may be handing the stack over
-- already), one this process takes is claimed as the store's are. Returns as Pool:_claim.
function Pool:_claim_listed(eng, idle, session_key, hooks, t)
  local store = require "sandstack.docker.pool_store"
  local entry, why = store.take_project(self.name, idle.project)
  if why == "held" then return nil, nil, true end
  -- handed to a session here already (answered before its rename), maybe by a process that died
  if not entry and store.claimed_here(idle.project) then return nil, nil, true end
  if entry then
    local stack, err, lost = self:_claim(eng, entry, session_key, hooks, t, function(done) store.settle(entry, done) end,
      true)
    store.settle(entry, false)
    return stack, err, lost
  end
  return self:_claim(eng, idle, session_key, hooks, t)
end

-- Hands out an idle stack to session_key. On this host: a stack's file claimed in the store (no
-- engine call), then the rename and the session's record in flight together while the handle is
-- made and the session's egress handed over. Else, or when the store has no free stack: the
-- pool's container list (the re-check is in it), then the claim (a rename the engine
-- arbitrates) and the record. A stack whose rename another claimant won is skipped for the next.
-- With no healthy idle stack left, those failing their re-check are removed (event pool_dead)
-- and the session starts cold: the normal start, labelled with the pool and claimed at once
-- (event pool_empty). pool.last_acquire holds the time of each step of the last acquire, in
-- seconds (engine: the pool's engine client, made on first use; find: the store; list: the
-- container list, when it was read).
function Pool:acquire(session_key, overrides)
  local ok, err = check_session_key(session_key)
  if not ok then return nil, err end
  local hooks; hooks, err = check_overrides(self, overrides)
  if not hooks then return nil, err end
  local t = { t0 = A.now() }
  self.last_acquire = t
  local eng; eng, err = self:_engine()
  if not eng then return nil, err end
  t.engine = A.now() - t.t0 -- the pool's engine client: made (a /version round) on its first use
  local stored, project_or_err = self:_claim_stored(eng, session_key, hooks, t)
  if stored then
    t.total = A.now() - t.t0
    emit(self, "pool_acquired", { project = project_or_err, session_key = session_key })
    return stored
  end
  if project_or_err then return nil, project_or_err end -- the store's claim failed: an error, not an empty store
  local t0 = A.now()
  local view; view, err = self:_survey(eng)
  t.list = A.now() - t0
  if not view then return nil, err end
  for _, idle in ipairs(view.idle) do
    local stack, cerr, lost = self:_claim_listed(eng, idle, session_key, hooks, t)
    if stack then
      t.total = A.now() - t.t0
      emit(self, "pool_acquired", { project = idle.project, session_key = session_key })
      return stack
    end
    if not lost then return nil, cerr end
  end
  self:_remove_dead(eng, view.dead)
  emit(self, "pool_empty", { session_key = session_key })
  return self:_cold(session_key, hooks)
end

-- A burst: acquires for every key of `keys` at once (pool_kit.lua, shared with the swarm's pool).
Pool.acquire_many = kit.acquire_many

function Pool:_plan_opts(project)
  local o = {}
  for k, v in pairs(self.stack) do if type(v) ~= "function" then o[k] = v end end
  o.project_name = project
  return o
end

-- What a claimed stack's handle keeps of its options (docker/session_methods.lua's spec_of): the
-- pool's stack options with the session's own (its policy, its credentials without secrets).
-- The same for every session that brings neither, so that one is made once.
function Pool:_spec(hooks)
  local own = hooks.egress_policy ~= nil or hooks.credentials ~= nil
  if not own and self._base_spec then return self._base_spec end
  local spec = require("sandstack.docker.session_methods").spec_of(self:_opts(nil, hooks))
  if not own then self._base_spec = spec end
  return spec
end

-- An empty pool: a normal start under the session's own key, labelled with the pool, claimed
-- before anyone could see it as idle (it never gets a ready mark), its record kept as a start's.
function Pool:_cold(session_key, hooks)
  local stack, err
  if not self.slots then -- the session's policy, if any, is the start's own
    stack, err = start_marked(self, session_key, hooks, "claim")
  else -- with credential slots: started as a pooled stack is, then handed over as a claim is
    local start_hooks = { on_event = hooks.on_event, req_adapter = hooks.req_adapter, api_key = hooks.api_key }
    stack, err = start_marked(self, session_key, start_hooks, "claim",
      function(s) return kit.hand_over(self, s, hooks, true) end)
  end
  if not stack then return nil, err end
  stack.pool, stack.spec = self.name, self:_spec(hooks)
  local ok; ok, err = require("sandstack.docker.session_methods").keep_record(stack)
  if not ok then
    stack:destroy()
    stack:close()
    return nil, err
  end
  return stack
end

-- Destroys the idle stacks of the pool (each claimed first, so none is handed out while it is
-- being removed); stacks held by sessions stay theirs. Idempotent.
function Pool:close()
  if self.server then self.server.closed = true end
  for _, done in pairs(self._pending or {}) do done() end -- claims answered early complete on this engine
  self._pending = nil
  local removed, err = self:_reap { idle_only = true }
  if self.eng then self.eng:close(); self.eng = nil end
  if not removed then return nil, err end
  return true, removed
end

return M
