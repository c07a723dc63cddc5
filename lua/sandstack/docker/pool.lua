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
local batch = require "sandstack.stack.batch"

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
local function inventory() return require "sandstack.docker.inventory" end
local function store() return require "sandstack.docker.pool_store" end

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
  local host = stack.docker_host or os.getenv("DOCKER_HOST") or "unix://"
  if tostring(host):match("^unix://") then pool:_engine() end
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

-- The pool as one container list shows it: the list and the re-check in one answer. The list
-- carries each container's state, labels, name and published ports, so a stack is idle and
-- healthy when its ready mark is unclaimed, every service of the plan is running and the
-- forwarder publishes the agent's port: the checks the old inspects made, without them.
-- Returns { idle = {{project =, port =}}, dead = {project}, stale = {project}, claimed =,
-- starting = } or nil, err.
function Pool:_survey(eng)
  local r = batch.run(eng, { { "GET", "/containers/json", nil, { query = { all = "1",
    filters = { label = { "io.sandstack.pool=" .. self.name } } } } } }, 60)[1]
  if not r.ok then return nil, r.err end
  if not inventory().is_array(r.body) then return nil, inventory().bad_answer("container list") end
  local by = {}
  for _, c in ipairs(r.body) do
    local l = type(c) == "table" and type(c.Labels) == "table" and c.Labels or {}
    local p = l["io.sandstack.project"]
    if type(p) == "string" then
      local e = by[p] or { services = {} }
      by[p] = e
      e.created = e.created or tonumber(l["io.sandstack.created"]) -- the marks carry none
      local role = inventory().mark_role(c)
      if role == "claim" then e.claimed = true
      elseif role == "ready" then e.marked = true
      else
        local svc = l["io.sandstack.service"]
        if svc then e.services[svc] = c.State end
        if svc == self.shape.forwarder and type(c.Ports) == "table" then
          for _, b in ipairs(c.Ports) do
            if type(b) == "table" and b.PrivatePort == self.shape.agent_port and b.Type == "tcp" and tonumber(b.PublicPort) then
              e.port = e.port or tonumber(b.PublicPort)
            end
          end
        end
      end
    end
  end
  local view, now = { idle = {}, dead = {}, stale = {}, claimed = 0, starting = 0 }, os.time()
  for p, e in pairs(by) do
    local here = e.marked and not e.claimed and store().claimed_here(p)
    if e.claimed or here == "claiming" then -- claiming: answered to a session here, its rename in flight
      view.claimed = view.claimed + 1
      view.in_use = view.in_use or {}
      view.in_use[#view.in_use + 1] = p
    elseif here then -- its claimant died before the rename: it may hold that session's secrets,
      view.dead[#view.dead + 1] = p -- so it is taken down, never handed out
    elseif e.marked then
      local healthy = e.port ~= nil
      for _, svc in ipairs(self.shape.services) do if e.services[svc] ~= "running" then healthy = false end end
      if healthy then view.idle[#view.idle + 1] = { project = p, port = e.port }
      else view.dead[#view.dead + 1] = p end
    elseif e.created and now - e.created < self.grace then view.starting = view.starting + 1
    else view.stale[#view.stale + 1] = p end
  end
  -- tried in random order, so that processes acquiring at once rarely collide
  local idle = view.idle
  for i = #idle, 2, -1 do
    local j = tonumber(core.random_hex(2), 16) % i + 1
    idle[i], idle[j] = idle[j], idle[i]
  end
  return view
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

-- Claims one idle stack for session_key. idle = { project =, port =, placeholders = } (the
-- placeholders from this host's store, pool_store.lua; else, with credential slots, the
-- sandbox's inspect rides beside the rename). The rename (the engine arbitrates) is in flight
-- while the stack is planned in C and its handle made. Two orders:
--   held (this process holds the stack's lock in the host's store, so no claimant on this host
--     can hand it over): the session's record is submitted with the rename, and the session's
--     policy, credentials and model key are handed over while both are in flight. A rename lost
--     even so (to a process on another host, or to a reap) after the hand-over has begun takes
--     the stack down: it holds this session's secrets and must serve no other.
--   otherwise: the hand-over waits for the rename to win, with the record in flight.
-- Returns the handle; nil, nil, true when another claimant won; nil, err on an error (a claimed
-- stack that cannot be handed over is removed). `renamed(done)` is called once the rename is
-- answered (done: won or lost). t: the time of each step (pool.last_acquire).
function Pool:_claim(eng, idle, session_key, hooks, t, renamed, held)
  local t0 = A.now()
  local q = inventory().claim_request(idle.project)
  local ids = { rename = eng:submit(q[1], q[2], q[3], q[4]) }
  if self.slots and not idle.placeholders then
    ids.inspect = eng:submit("GET", "/containers/" .. idle.project .. "-" .. self.shape.sandbox .. "/json")
  end
  local function submit_record(record)
    local rq = inventory().claim_record_request(idle.project, self.name, session_key, record)
    ids.record = eng:submit(rq[1], rq[2], rq[3], rq[4])
  end
  -- curl sends a submitted request on a poll: one now, so the engine works while this process
  -- plans and hands over; answers that come back meanwhile wait in `early`
  self._early = self._early or {} -- kept by the pool: a claim completed later reads its answers here
  local answers, early = {}, self._early
  local function kick() for _, r in ipairs(eng:poll(0)) do early[r.id] = r end end
  kick()
  local plan, err = docker().plan(session_key, self:_plan_opts(idle.project), { token = "x" })
  kick()
  t.plan = A.now() - t0
  t.tries = (t.tries or 0) + 1
  local function wait(which)
    local t1 = A.now()
    local need = {}
    for _, k in ipairs(which) do if ids[k] and not answers[k] then need[#need + 1] = ids[k] end end
    if #need > 0 then
      local got = settle_submitted(eng, need, t1 + 30, "claim", early)
      for _, k in ipairs(which) do if ids[k] and not answers[k] then answers[k] = got[ids[k]] end end
    end
    return A.now() - t1
  end
  local function rename_outcome()
    local r = answers.rename
    local lost = not r.ok and inventory().claim_lost(r)
    if renamed then renamed(r.ok or lost) end
    return r.ok, lost, r.err
  end
  if not held then -- the rename's answer first: nothing is handed over before it wins
    t.claim = (t.claim or 0) + wait { "rename", "inspect" }
    local won, lost, rerr = rename_outcome()
    if lost then return nil, nil, true end
    if not won then return nil, rerr end
  elseif ids.inspect then
    wait { "inspect" }
  end
  local t1 = A.now()
  if plan and self.slots then
    local ok; ok, err = adopt_placeholders(plan, idle, answers.inspect)
    if not ok then plan = nil end
  end
  local stack
  if plan then
    stack, err = require("sandstack.docker.handle").adopt(plan, idle.port, { docker_host = self.stack.docker_host,
      timeout = self.stack.timeout, api_version = eng.api_version, on_event = hooks.on_event or self.on_event,
      req_adapter = hooks.req_adapter })
  end
  -- a whole session's handle: the pool's options and the session's, for its snapshots and
  -- forks, in the record the claim's volume keeps (sandstack.docker.open, the CLI)
  if stack then stack.pool, stack.spec = self.name, self:_spec(hooks) end
  submit_record(stack and core.json_encode(stack:record()))
  kick()
  t.handle = A.now() - t1
  if plan and stack then
    local ok; ok, err = kit.hand_over(self, stack, hooks, false, t)
    if not ok then stack:close(); stack = nil end
  end
  local function down(keep_handle)
    if stack and not keep_handle then stack:close() end
    docker().down(idle.project, { docker_host = self.stack.docker_host, timeout = self.stack.timeout })
  end
  -- the rename's and the record's answers: true, or nil, err, lost (the stack is then down). tt:
  -- where the waits are timed (t, or the completion's own table after an early answer)
  local function complete(keep_handle, tt)
    tt = tt or t
    if held then
      tt.claim = (tt.claim or 0) + wait { "rename" }
      local won, lost, rerr = rename_outcome()
      if not won then -- the session's secrets may be in its proxy: the stack serves nobody else
        wait { "record" }
        down(keep_handle)
        emit(self, "pool_claim_conflict", { project = idle.project, session_key = session_key })
        return nil, lost and E.new("engine", "pool_claim_lost", "pool: another claimant (another host, or a reap) took"
          .. " stack " .. idle.project .. " before this session's claim reached the engine; the stack was taken down:"
          .. " acquire again", { project = idle.project, status = answers.rename.status }) or rerr, lost
      end
    end
    tt.record = (tt.record or 0) + wait { "record" }
    local rec = answers.record
    if not rec.ok then
      down(keep_handle)
      return nil, rec.err
    end
    return true
  end
  -- held, the rename not answered yet (a poll sends what curl has not sent: not left to the
  -- session's next call) and the stack's file here marked claimed durably: the session is answered
  -- now and the handle completes the claim on its first call (pool_pending.lua)
  if held and plan and stack then kick() end
  local tm = A.now()
  if held and plan and stack and not early[ids.rename] and require("sandstack.docker.pool_store").mark_claimed(idle) then
    idle.pending = true
    t.mark = A.now() - tm
    t.claim, t.record = t.claim or 0, t.record or 0
    local done = require("sandstack.docker.pool_pending").defer(stack, function()
      idle.pending = nil -- the rename's answer settles the store's file now
      local ok, cerr = complete(true, {})
      t.after = A.now() - t0
      if self._pending then self._pending[stack] = nil end
      return ok, cerr
    end)
    self._pending = self._pending or setmetatable({}, { __mode = "k" })
    self._pending[stack] = done
    return stack
  end
  if not (plan and stack) then
    if held then
      local ok, _, lost = complete()
      if lost then return nil, nil, true end
      if not ok then return nil, err end -- taken down by complete
    end
    down()
    return nil, err
  end
  local ok, lost; ok, err, lost = complete()
  if not ok then
    if lost then return nil, nil, true end
    return nil, err
  end
  return stack
end

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

-- Stacks failing their re-check (a ready mark, a service not running or no published port) are
-- claimed, so no acquire can take them meanwhile, and removed, each with a pool_dead event.
-- Returns the number removed.
function Pool:_remove_dead(eng, dead)
  local n = 0
  for _, project in ipairs(dead) do
    local r = batch.run(eng, { inventory().claim_request(project) }, 30)[1]
    if r.ok then
      emit(self, "pool_dead", { project = project, reason = "a service is not running or publishes no port" })
      if docker().down(project, { docker_host = self.stack.docker_host, timeout = self.stack.timeout }) then n = n + 1 end
    end
  end
  return n
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

-- Keeping the pool full: pool:serve{ target_idle =, max =, interval =, concurrency = }
-- returns the pool's server. One tick is one pass: the pool's list, the stacks failing their
-- re-check replaced (claimed and removed, and half-made ones whose filler died), then starts up
-- to target_idle idle stacks (idle and starting count, across processes), never more than max in
-- the pool. The gateway's refill timer runs server:tick() (lua/sandstack/gateway/worker.lua); a
-- plain process runs server:run(seconds), or calls tick() from its own loop. pool:close() stops
-- the server (a tick under way finishes its starts) and drains the idle stacks.
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
  local expired = docker().reap { docker_host = pool.stack.docker_host, timeout = pool.stack.timeout, pool = pool.name,
    expired = true }
  for _, project in ipairs(view.stale) do -- half-made by a filler that died: reap claims it first
    local gone = docker().reap { docker_host = pool.stack.docker_host, timeout = pool.stack.timeout, pool = pool.name,
      project = project }
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
function Pool:_answer_asks(eng, projects, on_ask)
  return kit.answer_asks(projects, function(project)
    if not self._proxy then
      local plan = docker().plan("pool-ask", self:_plan_opts(project), { token = "x" })
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
  local removed, err = docker().reap { docker_host = self.stack.docker_host, timeout = self.stack.timeout,
    pool = self.name, idle_only = true }
  if self.eng then self.eng:close(); self.eng = nil end
  if not removed then return nil, err end
  return true, removed
end

return M
