-- The claim of one idle pooled stack for a session (internal to sandstack.docker.pool, whose
-- Pool:_claim this is). idle = { project =, port =, placeholders = } (the placeholders from this
-- host's store, pool_store.lua; else, with credential slots, the sandbox's inspect rides beside
-- the rename). The rename (the engine arbitrates) is in flight while the stack is planned in C
-- and its handle made. Two orders:
--   held (this process holds the stack's lock in the host's store, so no claimant on this host
--     can hand it over): the session's record is submitted with the rename, and the session's
--     policy, credentials and model key are handed over while both are in flight. A rename lost
--     even so (to a process on another host, or to a reap) after the hand-over has begun takes
--     the stack down: it holds this session's secrets and must serve no other.
--   otherwise: the hand-over waits for the rename to win, with the record in flight.
-- The claim is a short sequence of steps (send, plan, rename_first, make_handle, defer, complete),
-- each reporting the time it took as a timing event (step name, seconds) to the acquire's table
-- (pool.last_acquire): plan, handle and mark are set, claim and record add up over the tries.
-- This module requires no module that requires sandstack.docker.pool: what goes through
-- sandstack.docker (down) is the pool's own method.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local A = require "sandstack.docker.apply"
local kit = require "sandstack.pool_kit"

local M = {}
local Claim = {}
Claim.__index = Claim

local function inventory() return require "sandstack.docker.inventory" end

-- The steps whose times add up over the tries of one acquire; every other step's time is set.
local ADDED = { claim = true, record = true }

-- A reporter of timing events into the table tt: report(step, seconds).
local function timings(tt)
  return function(step, seconds)
    if ADDED[step] then tt[step] = (tt[step] or 0) + seconds else tt[step] = seconds end
  end
end

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
  if self.renamed then self.renamed(r.ok or lost) end
  return r.ok, lost, r.err
end

-- Step send: the rename (and, with credential slots and no stored placeholders, the sandbox's
-- inspect) submitted and sent.
function Claim:send()
  local eng, idle, pool = self.eng, self.idle, self.pool
  local q = inventory().claim_request(idle.project)
  self.ids.rename = eng:submit(q.method, q.path, nil, { query = q.query })
  if pool.slots and not idle.placeholders then
    self.ids.inspect = eng:submit(ops.target("inspect_container", idle.project .. "-" .. pool.shape.sandbox))
  end
  self:kick()
end

-- Step plan: the session's plan made in C while the rename is in flight.
function Claim:plan()
  self.stack_plan, self.err = require("sandstack.docker.start").plan(self.session_key,
    self.pool:_plan_opts(self.idle.project), { token = "x" })
  self:kick()
  self.report("plan", A.now() - self.t0)
  self.t.tries = (self.t.tries or 0) + 1
end

-- Step rename_first (not held): nothing is handed over before the rename wins. true, or nil,
-- err, lost.
function Claim:rename_first()
  self.report("claim", self:wait { "rename", "inspect" })
  local won, lost, rerr = self:rename_outcome()
  if lost then return nil, nil, true end
  if not won then return nil, rerr end
  return true
end

-- The session's record, submitted to the claim's volume (nil: the claim failed before a handle).
function Claim:submit_record(record)
  local rq = inventory().claim_record_request(self.idle.project, self.pool.name, self.session_key, record)
  self.ids.record = self.eng:submit(rq[1], rq[2], rq[3], rq[4])
end

-- Step make_handle: the stack's handle from the plan (with the sandbox's placeholders), its record
-- submitted, then the session's egress handed over. self.stack stays nil when any of it failed
-- (self.err says why).
function Claim:make_handle()
  local t1 = A.now()
  local pool, hooks, plan = self.pool, self.hooks, self.stack_plan
  if plan and pool.slots then
    local ok; ok, self.err = adopt_placeholders(plan, self.idle, self.answers.inspect)
    if not ok then plan = nil end
  end
  local stack
  if plan then
    stack, self.err = require("sandstack.docker.handle").adopt(plan, self.idle.port, { docker_host = pool.stack.docker_host,
      timeout = pool.stack.timeout, api_version = self.eng.api_version, on_event = hooks.on_event or pool.on_event,
      req_adapter = hooks.req_adapter })
  end
  -- a whole session's handle: the pool's options and the session's, for its snapshots and
  -- forks, in the record the claim's volume keeps (sandstack.docker.open, the CLI)
  if stack then stack.pool, stack.spec = pool.name, pool:_spec(hooks) end
  self:submit_record(stack and core.json_encode(stack:record()))
  self:kick()
  self.report("handle", A.now() - t1)
  if plan and stack then
    local ok; ok, self.err = kit.hand_over(pool, stack, hooks, false, self.t)
    if not ok then stack:close(); stack = nil end
  end
  self.stack_plan, self.stack = plan, stack
end

-- The claimed stack taken down (its handle closed unless kept for the session).
function Claim:down(keep_handle)
  if self.stack and not keep_handle then self.stack:close() end
  self.pool:_down(self.idle.project)
end

-- Step complete: the rename's and the record's answers. true, or nil, err, lost (the stack is
-- then down). report: where the waits are timed (the acquire's, or a throwaway one after an
-- early answer).
function Claim:complete(keep_handle, report)
  report = report or self.report
  local idle, answers = self.idle, self.answers
  if self.held then
    report("claim", self:wait { "rename" })
    local won, lost, rerr = self:rename_outcome()
    if not won then -- the session's secrets may be in its proxy: the stack serves nobody else
      self:wait { "record" }
      self:down(keep_handle)
      kit.emit(self.pool, "pool_claim_conflict", { project = idle.project, session_key = self.session_key })
      return nil, lost and E.new("engine", "pool_claim_lost", "pool: another claimant (another host, or a reap) took"
        .. " stack " .. idle.project .. " before this session's claim reached the engine; the stack was taken down:"
        .. " acquire again", { project = idle.project, status = answers.rename.status }) or rerr, lost
    end
  end
  report("record", self:wait { "record" })
  local rec = answers.record
  if not rec.ok then
    self:down(keep_handle)
    return nil, rec.err
  end
  return true
end

-- Step defer: held, the rename not answered yet (a poll sends what curl has not sent: not left
-- to the session's next call) and the stack's file here marked claimed durably: the session is
-- answered now and the handle completes the claim on its first call (pool_pending.lua). true
-- when deferred.
function Claim:defer()
  local ready = self.held and self.stack_plan and self.stack
  if ready then self:kick() end
  local tm = A.now()
  if not (ready and not self.early[self.ids.rename] and require("sandstack.docker.pool_store").mark_claimed(self.idle)) then
    return false
  end
  local pool, stack, idle, t = self.pool, self.stack, self.idle, self.t
  idle.pending = true
  self.report("mark", A.now() - tm)
  t.claim, t.record = t.claim or 0, t.record or 0
  local done = require("sandstack.docker.pool_pending").defer(stack, function()
    idle.pending = nil -- the rename's answer settles the store's file now
    local ok, cerr = self:complete(true, timings {})
    self.report("after", A.now() - self.t0)
    if pool._pending then pool._pending[stack] = nil end
    return ok, cerr
  end)
  pool._pending = pool._pending or setmetatable({}, { __mode = "k" })
  pool._pending[stack] = done
  return true
end

-- Pool:_claim(eng, idle, session_key, hooks, t, renamed, held): returns the handle; nil, nil,
-- true when another claimant won; nil, err on an error (a claimed stack that cannot be handed
-- over is removed). `renamed(done)` is called once the rename is answered (done: won or lost).
-- t: the time of each step (pool.last_acquire).
function M.claim(pool, eng, idle, session_key, hooks, t, renamed, held)
  pool._early = pool._early or {} -- kept by the pool: a claim completed later reads its answers here
  local c = setmetatable({ pool = pool, eng = eng, idle = idle, session_key = session_key, hooks = hooks, t = t,
    renamed = renamed, held = held, t0 = A.now(), ids = {}, answers = {}, early = pool._early, report = timings(t) },
    Claim)
  c:send()
  c:plan()
  if not held then
    local won, rerr, lost = c:rename_first()
    if not won then return nil, rerr, lost end
  elseif c.ids.inspect then
    c:wait { "inspect" }
  end
  c:make_handle()
  if c:defer() then return c.stack end
  if not (c.stack_plan and c.stack) then
    if held then
      local ok, _, lost = c:complete()
      if lost then return nil, nil, true end
      if not ok then return nil, c.err end -- taken down by complete
    end
    c:down()
    return nil, c.err
  end
  local ok, err, lost = c:complete()
  if not ok then
    if lost then return nil, nil, true end
    return nil, err
  end
  return c.stack
end

return M
