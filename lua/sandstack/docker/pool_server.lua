-- Keeping a pool full (internal to sandstack.docker.pool, whose Pool:serve and
-- Pool:_answer_asks these are): pool:serve{ target_idle =, max =, interval =, concurrency = }
-- returns the pool's server. One tick is one pass: the pool's list, the stacks failing their
-- re-check replaced (claimed and removed, and half-made ones whose filler died), then starts up
-- to target_idle idle stacks (idle and starting count, across processes), never more than max in
-- the pool. The gateway's refill timer runs server:tick() (lua/sandstack/gateway/worker.lua); a
-- plain process runs server:run(seconds), or calls tick() from its own loop. pool:close() stops
-- the server (a tick under way finishes its starts) and drains the idle stacks. It requires no
-- module that requires sandstack.docker.pool: the reaps are the pool's own method.
local E = require "sandstack.error"
local kit = require "sandstack.pool_kit"

local M = {}
local Server = {}
Server.__index = Server

function M.serve(self, opts)
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
-- started =, replaced =, expired = } (also in server.counts), or nil, err (err.started: stacks started
-- before the error). Counted from the engine, so several processes serving one pool agree.
function Server:tick()
  local pool = self.pool
  if self.closed then return E.fail("compose", "closed", "pool:serve: the pool is closed") end
  local eng, err = pool:_engine()
  if not eng then return nil, err end
  local view; view, err = pool:_survey(eng)
  if not view then return nil, err end
  local replaced = pool:_remove_dead(eng, view.dead)
  -- the pool's sessions whose ttl or idle timeout is due: destroyed or hibernated (docker/expiry.lua)
  local expired = pool:_reap { expired = true }
  for _, project in ipairs(view.stale) do -- half-made by a filler that died: reap claims it first
    local gone = pool:_reap { project = project }
    replaced = replaced + (gone and #gone or 0)
  end
  local live = #view.idle + view.claimed + view.starting
  local want = math.min(self.target_idle - #view.idle - view.starting, self.max - live)
  local started, serr, partial = pool:_start_many(want, self.concurrency)
  view, err = pool:_survey(eng)
  if not view then return nil, err end
  self.counts = counts_of(view)
  self.counts.started, self.counts.replaced = started or partial or 0, replaced
  self.counts.expired = expired and #expired or 0
  if self.on_ask then self.counts.answered = pool:_answer_asks(eng, view.in_use or {}, self.on_ask) end
  if not started then
    serr.started = partial
    return nil, serr
  end
  return self.counts
end

-- The egress asks of the sessions in use, each given to on_ask (pool_kit.answer_asks) through
-- its proxy's control socket. Returns the number answered.
function M.answer_asks(self, eng, projects, on_ask)
  return kit.answer_asks(projects, function(project)
    if not self._proxy then
      local plan = require("sandstack.docker.start").plan("pool-ask", self:_plan_opts(project), { token = "x" })
      self._proxy = plan and type(plan.proxy) == "table" and plan.proxy.added and { added = true,
        service = plan.proxy.service } or false
    end
    if not self._proxy then return false end -- the pool's stacks have no proxy sandstack added
    return { eng = eng, project = project, plan = { project = project, proxy = self._proxy, containers = {} } }
  end, on_ask)
end

-- Ticks every `interval` seconds for `seconds` (forever when nil) or until the pool is closed
-- (pool_kit.lua).
Server.run = kit.server_run

return M
