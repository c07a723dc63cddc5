-- One warm pool, two placements (internal to sandstack.docker.pool and sandstack.swarm.pool):
-- the pool's options and checks, its stacks' start and marks, fill, acquire (the claim of an
-- idle stack, else a cold start), the burst, and the server that keeps it full, written once.
-- A placement is a class whose __index falls back to this one's Pool; it gives what differs:
--   Class._start(self, session_key, opts)        -> stack: its normal start
--   Class._mark(self, stack, project, role, key)  -> true | nil, err: a ready or claim mark
--   Class._engine(self)                          -> the client the pool's calls go through
--   Class._survey(self, eng)                     -> { idle =, dead =, stale =, in_use =,
--                                                     claimed =, starting = } | nil, err
--   Class._claim(self, eng, idle, key, hooks, t) -> stack | nil, err, lost (pool_claim.lua)
--   Class._remove_dead(self, eng, projects, reason) -> n: stacks failing their re-check removed
--   Class._replace(self, eng, view)              -> n: a server pass's dead and half-made removed
--   Class._expire(self)                          -> the sessions whose ttl or idle timeout is due
--   Class._answer_asks(self, eng, view, on_ask)  -> n answered
--   Class.status, Class.close
-- and may give Class._published(self, stack) (a filled stack, once marked), Class._claim_first
-- (self, eng, key, hooks, t) -> stack, project | nil[, err] (claims tried before the list),
-- Class._claim_listed (the claim of a listed stack, else _claim), Class._keep(self, stack,
-- hooks) -> stack | nil, err (a cold start's, before it is handed out), Class.DEAD_REASON.
local core = require "sandstack.core"
local E = require "sandstack.error"
local A = require "sandstack.docker.apply"
local kit = require "sandstack.pool_kit"
local slots = require "sandstack.docker.pool_slots"

local M = {}
local Pool = {}
M.Pool = Pool

local MARK_NAMES = { claim = true, ready = true }
local emit = kit.emit

-- A pool of Class from the caller's options (docs/api/docker.md), or nil, err. how = { what =
-- the constructor's name, concurrency = its default, plan = function(placeholder, opts, o) (the
-- placement's plan, no engine call), fields = function(plan, stack) -> what the pool keeps of it
-- (shape, mark_image, grace, ...) }.
function M.new(Class, opts, how)
  local err
  opts, err = kit.pool_options(opts, how.what)
  if not opts then return nil, err end
  local size = opts.size or 0
  local max = opts.max or math.max(size, 1)
  -- The options are fixed here: every stack of the pool is made from this one table.
  local stack = {}
  for k, v in pairs(opts.stack) do stack[k] = v end
  if stack.project_name ~= nil then
    return E.fail("compose", "invalid_option", "pool: the pool names its stacks' projects; drop project_name",
      { option = "project_name" })
  end
  -- credential slots: throwaway secrets at start, the session's at claim (pool_slots.lua)
  local prepared; prepared, err = slots.prepare(stack)
  if err then return nil, err end
  -- the model key: with the proxy sandstack adds, a waiting stack's proxy holds a throwaway one;
  -- the pool keeps the operator's and a claim hands the session its own (or that one) live
  local model_key = slots.throwaway_model_key(stack)
  for _, s in ipairs(stack.services or {}) do
    if type(s) == "table" and MARK_NAMES[s.name] then
      return E.fail("compose", "invalid_option", "pool: a service may not be named '" .. s.name .. "' (the pool's marks)",
        { option = "services" })
    end
  end
  local placeholder = "pool." .. opts.name
  -- The name must make valid project names: validate the longest one the pool will use.
  local probe = {}
  for k, v in pairs(stack) do if type(v) ~= "function" then probe[k] = v end end
  probe.project_name = opts.name .. "-ffffffff"
  local plan; plan, err = how.plan(placeholder, probe, { now = 0, token = "x" })
  if not plan then
    if err.option == "project_name" or err.option == "session_key" then
      return E.fail("compose", "invalid_name", "pool: name '" .. opts.name .. "' cannot prefix a project name",
        { option = "name" })
    end
    return nil, err
  end
  local pool = { name = opts.name, size = size, max = max, stack = stack, on_event = opts.on_event,
    placeholder = placeholder, concurrency = opts.concurrency or how.concurrency, slots = prepared,
    model_key = model_key }
  for k, v in pairs(how.fields(plan, stack)) do pool[k] = v end
  return setmetatable(pool, Class)
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

-- The normal start, labelled with the pool, then a mark (role "ready" or "claim") for
-- session_key; before_mark runs on the stack first. A mark that cannot be set takes the stack
-- down again. Returns the stack and its project, or nil, err.
function Pool:_start_marked(session_key, hooks, role, before_mark)
  local project = self.name .. "-" .. core.random_hex(4)
  local stack, err = self:_start(session_key, self:_opts(project, hooks))
  if not stack then return nil, err end
  local ok = true
  if before_mark then ok, err = before_mark(stack) end
  if ok then ok, err = self:_mark(stack, project, role, session_key) end
  if not ok then
    stack:destroy()
    stack:close()
    return nil, err
  end
  return stack, project
end

-- One stack into the pool: started under the placeholder session, then marked ready. A pool
-- with credential slots narrows each stack's proxy to its baseline before the mark: no stack
-- that can be claimed admits a slot's host while it waits.
function Pool:_fill_one()
  local live = require "sandstack.docker.egress_live"
  local narrow = self.slots and function(s) return live.set_egress(s, self.slots.baseline, true) end -- throwaway slots
  local stack, project = self:_start_marked(self.placeholder, nil, "ready", narrow)
  if not stack then return nil, project end
  if self._published then self:_published(stack) end
  stack:close()
  emit(self, "pool_filled", { project = project })
  return project
end

-- Starting stacks into the pool, pool:fill and the burst (pool_kit.lua).
Pool._start_many, Pool.fill, Pool.acquire_many = kit.start_many, kit.fill, kit.acquire_many

-- Hands out an idle stack to session_key: the placement's own first claims (_claim_first), else
-- the pool's list (the re-check is in it) and the claim of each idle stack in turn, a stack
-- another claimant won skipped for the next. With no healthy idle stack left, those failing
-- their re-check are removed (event pool_dead) and the session starts cold: the normal start,
-- labelled with the pool and claimed at once (event pool_empty). pool.last_acquire holds the
-- time of each step of the last acquire, in seconds (engine: the pool's client, made on first
-- use; list: the pool's list, when it was read), and the states of its latest claim.
function Pool:acquire(session_key, overrides)
  local ok, err = kit.check_session_key(session_key)
  if not ok then return nil, err end
  local hooks; hooks, err = kit.check_overrides(self, overrides)
  if not hooks then return nil, err end
  local t = { t0 = A.now() }
  self.last_acquire = t
  local eng; eng, err = self:_engine()
  if not eng then return nil, err end
  t.engine = A.now() - t.t0
  if self._claim_first then
    local stack, project_or_err = self:_claim_first(eng, session_key, hooks, t)
    if stack then return self:_acquired(t, stack, project_or_err, session_key) end
    if project_or_err then return nil, project_or_err end -- an error, not an empty store
  end
  local t0 = A.now()
  local view; view, err = self:_survey(eng)
  t.list = A.now() - t0
  if not view then return nil, err end
  local claim = self._claim_listed or self._claim
  for _, idle in ipairs(view.idle) do
    local stack, cerr, lost = claim(self, eng, idle, session_key, hooks, t)
    if stack then return self:_acquired(t, stack, idle.project, session_key) end
    if not lost then return nil, cerr end
  end
  self:_remove_dead(eng, view.dead, self.DEAD_REASON)
  emit(self, "pool_empty", { session_key = session_key })
  return self:_cold(session_key, hooks)
end

function Pool:_acquired(t, stack, project, session_key)
  t.total = A.now() - t.t0
  emit(self, "pool_acquired", { project = project, session_key = session_key, node = stack.node })
  return stack
end

-- An empty pool: a normal start under the session's own key, labelled with the pool, claimed
-- before anyone could see it as idle (it never gets a ready mark). With credential slots:
-- started as a pooled stack is, then handed over as a claim is.
function Pool:_cold(session_key, hooks)
  local stack, err
  if not self.slots then -- the session's policy, if any, is the start's own
    stack, err = self:_start_marked(session_key, hooks, "claim")
  else
    local start_hooks = { on_event = hooks.on_event, req_adapter = hooks.req_adapter, api_key = hooks.api_key }
    stack, err = self:_start_marked(session_key, start_hooks, "claim",
      function(s) return kit.hand_over(self, s, hooks, true) end)
  end
  if not stack then return nil, err end
  stack.pool = self.name
  if self._keep then return self:_keep(stack, hooks) end
  return stack
end

-- Keeping the pool full: pool:serve{ target_idle =, max =, interval =, concurrency =, on_ask = }
-- returns the pool's server. One tick is one pass: the pool's list, the stacks failing their
-- re-check and the half-made ones (their filler died) replaced, the pool's sessions whose ttl
-- or idle timeout is due acted on, then starts up to target_idle idle stacks (idle and starting
-- count, across processes), never more than max in the pool; with on_ask, the asks of the
-- sessions in use answered. The gateway's refill timer runs server:tick()
-- (lua/sandstack/gateway/worker.lua); a plain process runs server:run(seconds), or calls tick()
-- from its own loop. pool:close() stops the server (a tick under way finishes its starts).
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

-- One refill pass. Returns the counts after it { idle =, claimed =, starting =, failed =,
-- started =, replaced =, expired = [, answered =] } (also in server.counts), or nil, err
-- (err.started: stacks started before the error). Counted from the engine's (or manager's)
-- lists, so several processes serving one pool agree.
function Server:tick()
  local pool = self.pool
  if self.closed then return E.fail("compose", "closed", "pool:serve: the pool is closed") end
  local eng, err = pool:_engine()
  if not eng then return nil, err end
  local view; view, err = pool:_survey(eng)
  if not view then return nil, err end
  local replaced = pool:_replace(eng, view)
  local expired = pool:_expire()
  local live = #view.idle + view.claimed + view.starting
  local want = math.min(self.target_idle - #view.idle - view.starting, self.max - live)
  local started, serr, partial = pool:_start_many(want, self.concurrency)
  view, err = pool:_survey(eng)
  if not view then return nil, err end
  self.counts = counts_of(view)
  self.counts.started, self.counts.replaced = started or partial or 0, replaced
  self.counts.expired = expired and #expired or 0
  if self.on_ask then self.counts.answered = pool:_answer_asks(eng, view, self.on_ask) end
  if not started then
    serr.started = partial
    return nil, serr
  end
  return self.counts
end

-- Ticks every `interval` seconds for `seconds` (forever when nil) or until the pool is closed.
Server.run = kit.server_run

return M
