-- The claim of one idle pooled stack for a session on a Docker engine (internal to
-- sandstack.docker.pool, whose Pool:_claim this is): the Docker placement's work in each state of
-- the claim's state machine (lua/sandstack/pool_claim.lua). idle = { project =, port =,
-- placeholders = } (the placeholders from this host's store, pool_store.lua; else, with credential
-- slots, the sandbox's inspect rides beside the rename). The rename (the engine arbitrates) is in
-- flight while the stack is planned in C and its handle made. Two orders:
--   held (this process holds the stack's lock in the host's store, so no claimant on this host
--     can hand it over): picked, planned, handle, handed while the rename is in flight, then
--     claimed and ready (or deferred: the handle completes the claim on its first call). A
--     rename lost even so (to a process on another host, or to a reap) after the hand-over has
--     begun takes the stack down: it holds this session's secrets and must serve no other.
--   otherwise: picked, planned, claimed (the rename won), handle, handed, ready.
-- The session's record is submitted with the handle and its answer is the claim's last wait. A
-- claim that fails rolls back what it made: its handle closed, and the stack down once the claim
-- holds it (or, held, may hold it), after the record's answer so that the record goes with it.
-- This module requires no module that requires sandstack.docker.pool: what goes through
-- sandstack.docker (down) is the pool's own method.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local A = require "sandstack.docker.apply"
local kit = require "sandstack.pool_kit"
local machine = require "sandstack.pool_claim"

local M = {}
local Claim = {}
Claim.__index = Claim

local function inventory() return require "sandstack.docker.inventory" end

-- Waits for submitted requests while the caller did other work: their answers by id, each
-- { ok = false } with a transport error when the engine did not answer by the deadline. An
-- answer to another request submitted on eng arrives meanwhile too: it is kept in `early` (by
-- id) for the wait that wants it.
local function settle_submitted(eng, ids, deadline, what, early)
  early = early or {}
  local got, left = {}, 0
  for _, id in pairs(ids) do
    if early[id] then got[id], early[id] = early[id], nil else left = left + 1 end
  end
  while left > 0 and A.now() < deadline do
    for _, r in ipairs(eng:poll(0.05)) do
      local wanted = false
      for _, id in pairs(ids) do if id == r.id then wanted = true end end
      if wanted and not got[r.id] then got[r.id], left = r, left - 1 else early[r.id] = r end
    end
  end
  for _, id in pairs(ids) do
    got[id] = got[id] or { ok = false, err = E.new("transport", nil, "the engine did not answer the " .. what .. " in time") }
  end
  return got
end

-- The placeholders a stack's sandbox holds, put into its plan: from the host's store (idle.placeholders)
-- or from the sandbox's inspect. true, or nil, err.
local function adopt_placeholders(plan, idle, inspect)
  local slots = require "sandstack.docker.pool_slots"
  if idle.placeholders then
    local env = {}
    for k, v in pairs(idle.placeholders) do env[#env + 1] = k .. "=" .. tostring(v) end
    return slots.adopt_placeholders(plan, { Config = { Env = env } })
  end
  if not inspect.ok then return nil, inspect.err end
  return slots.adopt_placeholders(plan, inspect.body)
end

-- curl sends a submitted request on a poll: one now, so the engine works while this process
-- plans and hands over; answers that come back meanwhile wait in `early`
function Claim:kick()
  for _, r in ipairs(self.eng:poll(0)) do self.early[r.id] = r end
end

-- Waits for the answers named in `which` (rename, inspect, record) not in yet. Returns the seconds waited.
function Claim:wait(which)
  local t1 = A.now()
  local need = {}
  for _, k in ipairs(which) do if self.ids[k] and not self.answers[k] then need[#need + 1] = self.ids[k] end end
  if #need > 0 then
    local got = settle_submitted(self.eng, need, t1 + 30, "claim", self.early)
    for _, k in ipairs(which) do if self.ids[k] and not self.answers[k] then self.answers[k] = got[self.ids[k]] end end
  end
  return A.now() - t1
end

-- The rename's answer: won, lost (to another claimant), err; `renamed` told once it is known.
function Claim:rename_outcome()
  local r = self.answers.rename
  local lost = not r.ok and inventory().claim_lost(r)
  if self.renamed and not self.told then
    self.told = true
    self.renamed(r.ok or lost)
  end
  return r.ok, lost, r.err
end

-- The error of a held claim whose rename another claimant won after the hand-over had begun.
function Claim:lost_error()
  local project = self.idle.project
  return E.new("engine", "pool_claim_lost", "pool: another claimant (another host, or a reap) took stack " .. project
    .. " before this session's claim reached the engine; the stack was taken down: acquire again",
    { project = project, status = self.answers.rename.status })
end

-- Undoing the claim of the stack: the record's answer awaited (so the record goes too), then the
-- stack down. A held claim whose rename did not win says so (pool_claim_conflict): the stack may
-- hold this session's secrets, so it serves nobody else.
function Claim:take_down()
  self:wait { "record" }
  self.pool:_down(self.idle.project)
  if self.held and not self.answers.rename.ok then
    kit.emit(self.pool, "pool_claim_conflict", { project = self.idle.project, session_key = self.session_key })
  end
end

-- State picked: the rename (and, with credential slots and no stored placeholders, the
-- sandbox's inspect) submitted and sent. Held, the claim may hold the stack from now on.
function Claim:send()
  local eng, idle, pool = self.eng, self.idle, self.pool
  local q = inventory().claim_request(idle.project)
  self.ids.rename = eng:submit(q.method, q.path, nil, { query = q.query })
  if pool.slots and not idle.placeholders then
    self.ids.inspect = eng:submit(ops.target("inspect_container", idle.project .. "-" .. pool.shape.sandbox))
  end
  self:kick()
  self.m:to("picked")
  if self.held then self.m:made(function() self:take_down() end) end
end

-- State planned: the session's plan made in C while the rename is in flight. false when it failed.
function Claim:plan()
  self.stack_plan, self.err = require("sandstack.docker.start").plan(self.session_key,
    self.pool:_plan_opts(self.idle.project), { token = "x" })
  self:kick()
  if not self.stack_plan then return false end
  self.m:to("planned", "plan", A.now() - self.t0)
  return true
end

-- State claimed (not held, before anything is handed over): the rename won. Else the claim
-- ends lost or failed, having made nothing. true, or nil, err, lost.
function Claim:rename_first()
  local waited = self:wait { "rename", "inspect" }
  local won, lost, rerr = self:rename_outcome()
  if not won then
    self.report("claim", waited)
    return self.m:fail(rerr, lost)
  end
  self.m:to("claimed", "claim", waited)
  self.m:made(function() self:take_down() end)
  return true
end

-- The session's record (its handle's), submitted to the claim's volume.
function Claim:submit_record(record)
  local rq = inventory().claim_record_request(self.idle.project, self.pool.name, self.session_key, record)
  self.ids.record = self.eng:submit(rq[1], rq[2], rq[3], rq[4])
end

-- State handle: the stack's handle from the plan (with the sandbox's placeholders), its record
-- submitted. false when it failed (self.err says why).
function Claim:make_handle()
  local t1 = A.now()
  local pool, hooks, plan = self.pool, self.hooks, self.stack_plan
  if pool.slots then
    local ok; ok, self.err = adopt_placeholders(plan, self.idle, self.answers.inspect)
    if not ok then return false end
  end
  local stack; stack, self.err = require("sandstack.docker.handle").adopt(plan, self.idle.port,
    { docker_host = pool.stack.docker_host, timeout = pool.stack.timeout, api_version = self.eng.api_version,
      on_event = hooks.on_event or pool.on_event, req_adapter = hooks.req_adapter })
  if not stack then return false end
  self.stack = stack
  self.m:made(function() stack:close() end)
  -- a whole session's handle: the pool's options and the session's, for its snapshots and
  -- forks, in the record the claim's volume keeps (sandstack.docker.open, the CLI)
  stack.pool, stack.spec = pool.name, pool:_spec(hooks)
  self:submit_record(core.json_encode(stack:record()))
  self:kick()
  self.m:to("handle", "handle", A.now() - t1)
  return true
end

-- State handed: the session's egress, credentials and model key in the stack's proxy. false
-- when it failed.
function Claim:hand_over()
  local ok; ok, self.err = kit.hand_over(self.pool, self.stack, self.hooks, false, self.t)
  if not ok then return false end
  self.m:to("handed")
  return true
end

-- The claim ends with err: the rename's answer first when it is not in yet (held: whether the
-- claim took the stack; a lost one is lost, not failed), then what it made rolled back.
function Claim:fail(err)
  err = err or self.err
  if not self.answers.rename then
    self.report("claim", self:wait { "rename", "inspect" })
    local won, lost, rerr = self:rename_outcome()
    if not won then return self.m:fail(lost and self.held and self:lost_error() or rerr, lost) end
    self.m:to("claimed")
    if not self.held then self.m:made(function() self:take_down() end) end
  end
  return self.m:fail(err)
end

-- States claimed (held) and ready: the rename's and the record's answers. true, or nil, err,
-- lost (the stack is then down). report: where the waits are timed (the acquire's, or a
-- throwaway one after an early answer).
function Claim:complete(report)
  report = report or self.report
  if self.held then
    report("claim", self:wait { "rename" })
    local won, lost, rerr = self:rename_outcome()
    if not won then return self.m:fail(lost and self:lost_error() or rerr, lost) end
    self.m:to("claimed")
  end
  report("record", self:wait { "record" })
  local rec = self.answers.record
  if not rec.ok then return self.m:fail(rec.err) end
  self.m:keep()
  self.m:to("ready")
  return true
end

-- State deferred: held, the rename not answered yet (a poll sends what curl has not sent: not
-- left to the session's next call) and the stack's file here marked claimed durably: the session
-- is answered now and the handle completes the claim on its first call (pool_pending.lua); the
-- handle is the session's from now, a claim that fails then only takes the stack down. true
-- when deferred.
function Claim:defer()
  if not self.held then return false end
  self:kick()
  local tm = A.now()
  if self.early[self.ids.rename] or not require("sandstack.docker.pool_store").mark_claimed(self.idle) then
    return false
  end
  local pool, stack, idle, t = self.pool, self.stack, self.idle, self.t
  idle.pending = true
  self.m:to("deferred", "mark", A.now() - tm)
  self.m:keep()
  self.m:made(function() self:take_down() end)
  t.claim, t.record = t.claim or 0, t.record or 0
  local done = require("sandstack.docker.pool_pending").defer(stack, function()
    idle.pending = nil -- the rename's answer settles the store's file now
    local ok, cerr = self:complete(machine.timings {})
    self.report("after", A.now() - self.t0)
    if pool._pending then pool._pending[stack] = nil end
    return ok, cerr
  end)
  pool._pending = pool._pending or setmetatable({}, { __mode = "k" })
  pool._pending[stack] = done
  return true
end

-- Pool:_claim(eng, idle, session_key, hooks, t, renamed, held): returns the handle; nil, err,
-- true when another claimant won; nil, err on an error (a claimed stack that cannot be handed
-- over is removed). `renamed(done)` is called once the rename is answered (done: won or lost).
-- t: the time of each step and the claim's states (pool.last_acquire).
function M.claim(pool, eng, idle, session_key, hooks, t, renamed, held)
  pool._early = pool._early or {} -- kept by the pool: a claim completed later reads its answers here
  local c = setmetatable({ pool = pool, eng = eng, idle = idle, session_key = session_key, hooks = hooks, t = t,
    renamed = renamed, held = held, t0 = A.now(), ids = {}, answers = {}, early = pool._early,
    m = machine.new(t, idle.project) }, Claim)
  c.report = c.m.report
  c:send()
  if not c:plan() then return c:fail() end
  if not held then
    local won, rerr, lost = c:rename_first()
    if not won then return nil, rerr, lost end
  elseif c.ids.inspect then
    c:wait { "inspect" }
  end
  if not c:make_handle() then return c:fail() end
  if not c:hand_over() then return c:fail() end
  if c:defer() then return c.stack end
  local ok, err, lost = c:complete()
  if not ok then return nil, err, lost end
  return c.stack
end

return M
