-- The parts a warm pool uses on every placement (internal to the pool class,
-- sandstack.pool_class, and its placements): the acquire's checks, the scheduler that runs starts
-- side by side, the hand-over of a session's egress, credentials and model key to a claimed
-- stack's proxy, and the pool's events. Where a pool keeps its marks and how a claim is
-- arbitrated is the placement's.
local E = require "sandstack.error"
local A = require "sandstack.docker.apply"

local M = {}
local MAX_CONCURRENCY = 16
M.MAX_CONCURRENCY = MAX_CONCURRENCY

-- Overrides an acquire accepts: callbacks, which are not part of any create body, and the
-- session's egress_policy and credentials, applied live to the claimed stack's proxy (its
-- credentials fill the pool's slots, pool_slots.lua). Anything else
-- (env, image, limits...) would need another create body than the pooled stack was made with.
M.ACQUIRE_OVERRIDES = { on_event = true, req_adapter = true, egress_policy = true, credentials = true,
  api_key = true }

function M.emit(self, phase, extra)
  if not self.on_event then return end
  local ev = { phase = phase, pool = self.name }
  for k, v in pairs(extra or {}) do ev[k] = v end
  pcall(self.on_event, ev)
end


-- Runs job(i) for i = 1..n, each in a coroutine, at most `width` at once: while one start waits
-- for health or readiness the others go on (the engine calls themselves block: measured on
-- 20.10, the engine serialises most of its own work, so the gain is in the waits). With
-- stop_on_error, no new job begins after the first failure; the ones running finish. Returns
-- {[i] = {ok =, value =, err =, done = clock}}, and the first programming error raised in a job.
function M.run_bounded(width, n, job, stop_on_error)
  local running, begun, out, failed, crash = {}, 0, {}, false, nil
  local function may_begin() return begun < n and not crash and not (stop_on_error and failed) end
  while #running > 0 or may_begin() do
    while #running < width and may_begin() do
      begun = begun + 1
      local i = begun
      local co = coroutine.create(function() return job(i) end)
      A.cooperate(co)
      running[#running + 1] = { co = co, wake = 0, i = i }
    end
    local t, next_wake = A.now(), math.huge
    for k = #running, 1, -1 do
      local r = running[k]
      if r.wake <= t then
        local ok, a, b = coroutine.resume(r.co)
        if not ok then -- a programming error in a start (which rolled back first): the others finish
          table.remove(running, k)
          crash = crash or a
        elseif coroutine.status(r.co) == "dead" then
          table.remove(running, k)
          out[r.i] = { ok = a ~= nil and a ~= false, value = a, err = b, done = A.now() }
          if not a then failed = true end
        else
          r.wake = A.now() + (tonumber(a) or 0)
        end
      end
      if running[k] == r then next_wake = math.min(next_wake, r.wake) end
    end
    local idle = next_wake - A.now()
    if #running > 0 and idle > 0 then A.sleep(math.min(idle, 0.1)) end
  end
  return out, crash
end

-- The options of both backends' pools: a wrong type raises at the caller, a refused value is
-- nil, err (docs/api/README.md, "Conventions"). Each spec is also its table in docs/api/docker.md
-- (sandstack.error's `described`; scripts/api_tables.lua writes it from here).
M.CONCURRENCY = { "number", min = 1, max = MAX_CONCURRENCY, whole = true, says = "a whole number from 1 to 16",
  wanted = "a whole number" }
M.POOL_KEYS = E.described {
  { "name", "string", type = "string", default = "required", refused = "not a string" },
  { "size", E.COUNT0, type = "whole count", default = "`0`", refused = "below 0" },
  { "max", E.COUNT1, type = "whole count", default = "`max(size, 1)`", refused = "below 1 or `size`" },
  { "stack", "table", type = "table, start options", default = "required", refused = "not a table" },
  { "on_event", "function", type = "function", default = "none", refused = "not a function" },
  { "concurrency", M.CONCURRENCY, type = "count, 1-16", default = "`4` (swarm: `2`)", refused = "not whole, or outside 1-16" },
}
M.SERVE_KEYS = E.described {
  { "target_idle", E.COUNT0, type = "whole count", default = "the pool's `size`", refused = "below 0" },
  { "max", E.COUNT1, type = "whole count", default = "the larger of the pool's `max` and `target_idle`",
    refused = "below 1 or `target_idle`" },
  { "interval", { "number", min = 0.1, says = "a number of seconds >= 0.1", wanted = "a number of seconds" },
    type = "seconds", default = "`5`", refused = "below 0.1" },
  { "concurrency", M.CONCURRENCY, type = "count, 1-16", default = "the pool's", refused = "not whole, or outside 1-16" },
  { "on_ask", "function", type = "function", default = "none",
    refused = "not a function ([egress-ask.md](../egress-ask.md))" },
}

-- sandstack.docker.pool's and sandstack.swarm.pool's options -> opts | nil, err (compose)
function M.pool_options(opts, what)
  E.want(opts, "table", what, "argument 'opts'", "an options table")
  if opts == nil then E.raise(what .. ": argument 'opts' must be an options table, got nil") end
  local err
  opts, err = E.options(opts, M.POOL_KEYS, what, "compose")
  if not opts then return nil, err end
  if opts.name == nil then E.raise(what .. ": option 'name' must be a string, got nil") end
  if opts.stack == nil then E.raise(what .. ": option 'stack' must be a table of start options, got nil") end
  if (opts.max or math.max(opts.size or 0, 1)) < (opts.size or 0) then
    return E.refuse(what, "max", "must be at least size", "compose")
  end
  return opts
end

-- pool:serve's options with the pool's defaults -> { target_idle =, max =, interval =,
-- concurrency =, on_ask = } | nil, err
function M.serve_options(self, opts)
  local err
  opts, err = E.options(opts, M.SERVE_KEYS, "pool:serve")
  if not opts then return nil, err end
  local target = opts.target_idle or self.size
  local max = opts.max or math.max(self.max, target)
  if max < target then return E.refuse("pool:serve", "max", "must be at least target_idle") end
  return { target_idle = target, max = max, interval = opts.interval or 5, concurrency = opts.concurrency or self.concurrency,
    on_ask = opts.on_ask }
end


function M.check_session_key(session_key)
  E.want(session_key, "string", "pool:acquire", "argument 'session_key'")
  if type(session_key) ~= "string" or not session_key:match("^%w[%w_.%-]*$") or #session_key > 200 then
    return E.fail("compose", "invalid_name", "pool: session_key must be a valid name", { option = "session_key" })
  end
  return true
end

function M.check_overrides(self, overrides)
  local pool_stack, slots = self.stack, self.slots
  E.want(overrides, "table", "pool:acquire", "argument 'overrides'", "a table of start options")
  local hooks = {}
  for k, v in pairs(overrides or {}) do
    if not M.ACQUIRE_OVERRIDES[k] then
      return E.fail("compose", "invalid_option", "pool: option '" .. tostring(k)
        .. "' would need another create body than the pool's; start this session cold", { option = k })
    end
    hooks[k] = v
  end
  if hooks.egress_policy ~= nil and not pool_stack.egress_policy then
    return E.fail("compose", "invalid_option", "pool: egress_policy at acquire needs the proxy sandstack adds: give "
      .. "the pool's stack an egress_policy, its baseline (e.g. { allow = {} }, which admits nothing)",
      { option = "egress_policy" })
  end
  if hooks.api_key ~= nil or self.model_key then
    local key, kerr = require("sandstack.docker.pool_slots").session_model_key(self.model_key, hooks.api_key)
    if not key then return nil, kerr end
    hooks.api_key = key
  end
  if hooks.credentials ~= nil then
    local merged, cerr = require("sandstack.docker.pool_slots").merge(slots, hooks.credentials)
    if not merged then return nil, cerr end
    hooks.credentials = merged
  end
  if hooks.egress_policy ~= nil then -- a policy the proxy would refuse is refused before a stack is claimed
    local policy = require "sandstack.policy"
    if not policy.is_policy(hooks.egress_policy) then
      E.want(hooks.egress_policy, "table", "pool:acquire", "egress_policy", "a policy table")
      local _, perr = policy.compile(hooks.egress_policy)
      if perr then return E.fail("invalid", "invalid_policy", "pool: egress_policy: " .. tostring(perr.message), { rule = perr.rule }) end
    end
  end
  return hooks
end


-- The session's own egress policy, credentials and model key, into the claimed stack's running
-- proxy, in one round: the policy first, since a credential's host must be one the policy in
-- force admits; then the session's model key (a warm stack waited with a throwaway one): beside
-- its credentials, or alone when it brings none. A cold
-- start of a pool with credential slots starts like a pooled stack, with the session's model
-- key already, and gets the pool's baseline here when the session names no policy. true, or
-- nil, err.
function M.hand_over(self, stack, hooks, cold, t)
  local t0 = A.now()
  local p = hooks.egress_policy
  if p == nil and cold and self.slots then p = self.slots.baseline end
  local list, key = hooks.credentials, not cold and self.model_key and hooks.api_key
  if key and list then
    list = { { name = "ANTHROPIC_API_KEY", secret = key } }
    for _, c in ipairs(hooks.credentials) do list[#list + 1] = c end
  end
  -- all of it in one round to the proxy (egress_live.hand_over)
  local ok, err = require("sandstack.docker.egress_live").hand_over(stack,
    { policy = p, credentials = list, model_key = list == nil and key or nil })
  if t then t.egress = A.now() - t0 end
  return ok, err
end

-- A burst (pool:acquire_many): acquires for every key of `keys` at once. The pool gives _engine,
-- _survey, _claim and _cold. Idle stacks are claimed first, one list
-- for the whole burst; the other sessions start cold, in parallel, up to the pool's concurrency
-- (the fill's own scheduler). Returns {[i] = {stack =, err =, seconds =}} in the order of keys;
-- seconds counts from the call.
function M.acquire_many(self, keys, overrides)
  E.want(keys, "table", "pool:acquire_many", "argument 'keys'", "a list of session keys")
  if keys == nil then E.raise("pool:acquire_many: argument 'keys' must be a list of session keys, got nil") end
  for _, key in ipairs(keys) do
    local ok, err = M.check_session_key(key)
    if not ok then return nil, err end
  end
  local hooks, err = M.check_overrides(self, overrides)
  if not hooks then return nil, err end
  local t0 = A.now()
  local eng; eng, err = self:_engine()
  if not eng then return nil, err end
  local view; view, err = self:_survey(eng)
  if not view then return nil, err end
  local out, cold, next_idle = {}, {}, 1
  for i, key in ipairs(keys) do
    while not out[i] and next_idle <= #view.idle do
      local idle = view.idle[next_idle]
      next_idle = next_idle + 1
      -- the Docker pool first takes the stack's file in this host's store (_claim_listed)
      local claim = self._claim_listed or self._claim
      local stack, cerr, lost = claim(self, eng, idle, key, hooks, {})
      if stack then
        M.emit(self, "pool_acquired", { project = idle.project, session_key = key })
        out[i] = { stack = stack, seconds = A.now() - t0 }
      elseif not lost then
        out[i] = { err = cerr, seconds = A.now() - t0 }
      end
    end
    if not out[i] then cold[#cold + 1] = i end
  end
  local done, crash = M.run_bounded(self.concurrency, #cold, function(k) return self:_cold(keys[cold[k]], hooks) end)
  if crash then error(crash, 0) end
  for k, i in ipairs(cold) do
    local r = done[k]
    out[i] = { stack = r.value or nil, err = r.err, seconds = r.done - t0 }
  end
  return out
end

-- A server tick's asks (pool:serve{ on_ask = }): the pending asks of each session in use, each
-- given to on_ask with a.project saying which session asks (sandstack/ask_serve.lua). reach(project)
-- -> a stack the egress calls take (its proxy's plan and a way to its container), false to stop
-- (the pool's stacks have no added proxy), or nil to skip that session this tick (it may be
-- going away). Returns the number answered.
function M.answer_asks(projects, reach, on_ask)
  local live, serve = require "sandstack.docker.egress_live", require "sandstack.ask_serve"
  local n = 0
  for _, project in ipairs(projects) do
    local stack = reach(project)
    if stack == false then return n end
    if stack then
      n = n + (serve.pass(function() return live.asks(stack) end,
        function(id, d, o) return live.answer(stack, id, d, o) end, function(a)
          a.project = project
          return on_ask(a)
        end) or 0)
    end
  end
  return n
end

-- Ticks every `interval` seconds for `seconds` (forever when nil) or until the pool is closed.
-- An error is reported as a pool_serve_error event and the next tick tries again.
function M.server_run(self, seconds)
  local stop = seconds and A.now() + seconds or math.huge
  while not self.closed and A.now() < stop do
    local t0 = A.now()
    local ok, err = self:tick()
    if not ok and not self.closed then M.emit(self.pool, "pool_serve_error", { reason = err and err.message }) end
    local rest = math.min(self.interval - (A.now() - t0), stop - A.now())
    if rest > 0 and not self.closed then A.sleep(rest) end
  end
  return self.counts
end

-- Starts n stacks into a pool (self:_fill_one() each), up to width at once. Returns the number
-- started, or nil, the first error and that number.
function M.start_many(self, n, width)
  if n <= 0 then return 0 end
  local out, crash = M.run_bounded(width, n, function() return self:_fill_one() end, true)
  if crash then error(crash, 0) end
  local started, first_err = 0, nil
  for i = 1, n do
    local r = out[i]
    if r and r.ok then started = started + 1 elseif r then first_err = first_err or r.err end
  end
  if first_err then return nil, first_err, started end
  return started
end

-- pool:fill{ concurrency = }: starts stacks until `size` are ready or starting (counted across
-- processes, by self:status()), never more than `max` in the pool (in use included), up to
-- `concurrency` at once (default: the pool's, 4; at most 16). After the first error no new start
-- begins; the ones running finish. Returns the number started, or nil, the first error and it.
local FILL_KEYS = E.described {
  { "concurrency", M.CONCURRENCY, type = "count, 1-16", default = "the pool's", refused = "not whole, or outside 1-16" },
}
function M.fill(self, opts)
  local err
  opts, err = E.options(opts, FILL_KEYS, "pool:fill")
  if not opts then return nil, err end
  local width = opts.concurrency or self.concurrency
  local st; st, err = self:status()
  if not st then return nil, err end
  local live = st.ready + st.starting + st.in_use
  return M.start_many(self, math.min(self.size - st.ready - st.starting, self.max - live), width)
end

return M
