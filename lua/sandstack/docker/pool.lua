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
local A = require "sandstack.docker.apply"
local base = require "sandstack.pool_class"

local M = {}
-- The Docker placement of the one pool class (lua/sandstack/pool_class.lua, which has the
-- checks, fill, acquire, the cold start and the server): what this placement does its own way.
local Pool = setmetatable({}, { __index = base.Pool })
Pool.__index = Pool

local DEFAULT_CONCURRENCY = 4

local function docker() return require "sandstack.docker.stacks" end

-- The pool's parts, one concept each: the listing and its re-check (pool_survey.lua), the claim of
-- an idle stack (pool_claim.lua), the egress asks of the sessions in use (pool_server.lua).
local survey = require "sandstack.docker.pool_survey"
Pool._survey, Pool._remove_dead = survey.survey, survey.remove_dead
Pool._claim = require("sandstack.docker.pool_claim").claim
Pool._answer_asks = require("sandstack.docker.pool_server").answer_asks

-- what a pooled stack of this plan has: the re-check reads them from the pool's container list
local function fields(plan, stack)
  local image
  local shape = { forwarder = plan.forwarder, sandbox = plan.sandbox, agent_port = plan.agent_port, services = {} }
  for _, c in ipairs(plan.containers) do
    if c.service == plan.forwarder then image = c.image end
    shape.services[#shape.services + 1] = c.service
  end
  return { mark_image = image, shape = shape, grace = (stack.ready_timeout or 60) + (stack.health_timeout or 60) + 120 }
end

-- sandstack.docker.pool{name=, size=, max=, stack={start options}, on_event=} -> pool | nil, err
function M.new(opts)
  local pool, err = base.new(Pool, opts, { what = "sandstack.docker.pool", concurrency = DEFAULT_CONCURRENCY,
    plan = function(...) return docker().plan(...) end, fields = fields })
  if not pool then return nil, err end
  -- the engine client (its /version round, its connection) made with the pool, not in the first
  -- acquire, when the engine is this host's; a failure here is left to the first call to meet
  local a = core.engine_address(pool.stack.docker_host)
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

-- The normal start, labelled with the pool; its mark (the engine's, inventory.lua) for session_key.
function Pool:_start(session_key, opts)
  return require("sandstack.docker.start").start(session_key, opts, self.name)
end

function Pool:_mark(_, project, role, session_key)
  local eng, err = self:_engine()
  if not eng then return nil, err end
  return require("sandstack.docker.inventory").mark(eng, role, project, self.name, session_key, self.mark_image)
end

-- A filled stack's file in this host's store (else it is found by the container list).
function Pool:_published(stack)
  require("sandstack.docker.pool_store").publish(self.name, stack)
end

-- A server pass: the stacks failing their re-check removed, and the half-made ones (their
-- filler died; reap claims each first). Returns the number removed.
function Pool:_replace(eng, view)
  local replaced = self:_remove_dead(eng, view.dead)
  for _, project in ipairs(view.stale) do
    local gone = self:_reap { project = project }
    replaced = replaced + (gone and #gone or 0)
  end
  return replaced
end

-- The pool's sessions whose ttl or idle timeout is due: destroyed or hibernated (docker/expiry.lua).
function Pool:_expire()
  return self:_reap { expired = true }
end

-- An acquire's first claims, on this host: a stack from this host's store (pool_store.lua, no
-- engine call), each file claimed by its lock, then by the engine's rename, with the session's
-- record in flight beside it while the handle is made and the session's egress handed over.
-- Returns the handle and its project; nil when the store has no idle stack left (the acquire
-- reads the container list then); nil, err on an error. pool.last_acquire.find: the store's time.
function Pool:_claim_first(eng, session_key, hooks, t)
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

-- A cold start's record, kept as a start's (a stack whose record cannot be kept is taken down).
function Pool:_keep(stack, hooks)
  stack.spec = self:_spec(hooks)
  local ok, err = require("sandstack.docker.session_methods").keep_record(stack)
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
