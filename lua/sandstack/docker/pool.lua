-- sandstack.docker.pool: warm pools (issue 16). A pooled stack is a normal stack, started by
-- the normal start path (same plan, isolation self-check, readiness) ahead of time, labelled
-- io.sandstack.pool=<name>, and handed to exactly one session. Everything the pool knows lives in
-- the engine's labels, so pools of the same name in several processes share their idle stacks:
--   <project>-ready  a created, never started container: the filler's mark that the stack passed
--                    readiness (an unmarked stack is starting, or half-made by a dead filler)
--   <project>-claim  the same, naming the session: the engine refuses a second create of a name
--                    (409), so exactly one claimant wins, whatever process it runs in
local core = require "sandstack.core"
local E = require "sandstack.error"
local A = require "sandstack.docker.apply"
local batch = require "sandstack.docker.batch"

local M = {}
local Pool = {}
Pool.__index = Pool

local KEYS = { name = true, size = true, max = true, stack = true, on_event = true }
-- Overrides an acquire accepts: callbacks, which are not part of any create body. Anything else
-- (env, image, limits...) would need another create body than the pooled stack was made with.
local ACQUIRE_OVERRIDES = { on_event = true, req_adapter = true }
local MARK_NAMES = { claim = true, ready = true }

local function docker() return require "sandstack.docker" end

local function count(name, v, min)
  if type(v) ~= "number" or v ~= math.floor(v) or v < min then
    error(("sandstack.docker.pool: option '%s' must be a whole number >= %d"):format(name, min), 3)
  end
end

local function emit(self, phase, extra)
  if not self.on_event then return end
  local ev = { phase = phase, pool = self.name }
  for k, v in pairs(extra or {}) do ev[k] = v end
  pcall(self.on_event, ev)
end

-- sandstack.docker.pool{name=, size=, max=, stack={start options}, on_event=} -> pool | nil, err
function M.new(opts)
  if type(opts) ~= "table" then error("sandstack.docker.pool: options must be a table", 2) end
  E.check_keys(opts, KEYS, "sandstack.docker.pool")
  if type(opts.name) ~= "string" then error("sandstack.docker.pool: option 'name' must be a string", 2) end
  count("size", opts.size or 0, 0)
  count("max", opts.max or math.max(opts.size or 0, 1), 1)
  if type(opts.stack) ~= "table" then error("sandstack.docker.pool: option 'stack' must be a table", 2) end
  if opts.on_event ~= nil and type(opts.on_event) ~= "function" then
    error("sandstack.docker.pool: on_event must be a function", 2)
  end
  local size, max = opts.size or 0, opts.max or math.max(opts.size or 0, 1)
  if max < size then
    return E.fail("compose", "invalid_option", "pool: max must be at least size", { option = "max" })
  end
  -- The options are fixed here: every stack of the pool is made from this one table.
  local stack = {}
  for k, v in pairs(opts.stack) do stack[k] = v end
  if stack.project_name ~= nil then
    return E.fail("compose", "invalid_option", "pool: the pool names its stacks' projects; drop project_name",
      { option = "project_name" })
  end
  if stack.credentials ~= nil then -- a claim plans the stack again, which would mint other placeholders
    return E.fail("compose", "invalid_option", "pool: credentials are not supported in a warm pool yet (a claimed "
      .. "stack's handle could not know the placeholders its sandbox holds)", { option = "credentials" })
  end
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
  local plan, err = docker().plan(placeholder, probe_opts, { now = 0, token = "x" })
  if not plan then
    if err.option == "project_name" or err.option == "session_key" then
      return E.fail("compose", "invalid_name", "pool: name '" .. opts.name .. "' cannot prefix a project name",
        { option = "name" })
    end
    return nil, err
  end
  local image
  for _, c in ipairs(plan.containers) do if c.service == plan.forwarder then image = c.image end end
  return setmetatable({ name = opts.name, size = size, max = max, stack = stack, on_event = opts.on_event,
    placeholder = placeholder, mark_image = image,
    grace = (stack.ready_timeout or 60) + (stack.health_timeout or 60) + 120 }, Pool)
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
local function start_marked(self, session_key, hooks, role)
  local project = self:_new_project()
  local stack, err = require("sandstack.docker.start").start(session_key, self:_opts(project, hooks), self.name)
  if not stack then return nil, err end
  local eng, ok; eng, err = self:_engine()
  if eng then ok, err = require("sandstack.docker.inventory").mark(eng, role, project, self.name, session_key, self.mark_image) end
  if not ok then
    stack:destroy()
    stack:close()
    return nil, err
  end
  return stack, project
end

-- One stack into the pool: started under the placeholder session, then marked ready.
function Pool:_fill_one()
  local stack, project = start_marked(self, self.placeholder, nil, "ready")
  if not stack then return nil, project end
  stack:close()
  emit(self, "pool_filled", { project = project })
  return project
end

-- Starts stacks until `size` are ready or starting (counted across processes), never more than
-- `max` in the pool (in use included), up to `concurrency` at once (default 4, at most 16). Each
-- start runs in a coroutine; while one waits for health or readiness the others go on (the
-- engine calls themselves block: measured on 20.10, the engine serialises most of its own work,
-- so the gain is in the waits). After the first error no new start begins; the ones running
-- finish. Returns the number of stacks started, or nil, the first error and that number.
local FILL_KEYS = { concurrency = true }
local DEFAULT_FILL_CONCURRENCY, MAX_FILL_CONCURRENCY = 4, 16
function Pool:fill(opts)
  opts = E.check_keys(opts, FILL_KEYS, "pool:fill")
  local width = opts.concurrency or DEFAULT_FILL_CONCURRENCY
  if type(width) ~= "number" or width ~= math.floor(width) or width < 1 or width > MAX_FILL_CONCURRENCY then
    error("pool:fill: concurrency must be a whole number from 1 to " .. MAX_FILL_CONCURRENCY, 2)
  end
  local st, err = self:status()
  if not st then return nil, err end
  local live = st.ready + st.starting + st.in_use
  local want = math.min(self.size - st.ready - st.starting, self.max - live)
  local running, begun, n, first_err, crash = {}, 0, 0, nil, nil
  while #running > 0 or (begun < want and not first_err and not crash) do
    while #running < width and begun < want and not first_err and not crash do
      begun = begun + 1
      local co = coroutine.create(function() return self:_fill_one() end)
      A.cooperate(co)
      running[#running + 1] = { co = co, wake = 0 }
    end
    local t, next_wake = A.now(), math.huge
    for i = #running, 1, -1 do
      local r = running[i]
      if r.wake <= t then
        local ok, a, b = coroutine.resume(r.co)
        if not ok then -- a programming error in a start (which rolled back first): the others finish
          table.remove(running, i)
          crash = crash or a
        elseif coroutine.status(r.co) == "dead" then
          table.remove(running, i)
          if a then n = n + 1 else first_err = first_err or b end
        else
          r.wake = A.now() + (tonumber(a) or 0)
        end
      end
      if running[i] == r then next_wake = math.min(next_wake, r.wake) end
    end
    local idle = next_wake - A.now()
    if #running > 0 and idle > 0 then A.sleep(math.min(idle, 0.1)) end
  end
  if crash then error(crash, 0) end
  if first_err then return nil, first_err, n end
  return n
end

-- Hands out a ready stack to session_key: claim it on the engine, re-check it (the forwarder's
-- port is re-read, the sandbox still runs), or destroy it with an event and try the next. With
-- no ready stack, a cold start: the normal start, labelled with the pool and claimed at once.
function Pool:acquire(session_key, overrides)
  if type(session_key) ~= "string" or not session_key:match("^%w[%w_.%-]*$") or #session_key > 200 then
    return E.fail("compose", "invalid_name", "pool: session_key must be a valid name", { option = "session_key" })
  end
  local hooks = {}
  if overrides ~= nil and type(overrides) ~= "table" then error("pool:acquire: overrides must be a table", 2) end
  for k, v in pairs(overrides or {}) do
    if not ACQUIRE_OVERRIDES[k] then
      return E.fail("compose", "invalid_option", "pool: option '" .. tostring(k)
        .. "' would need another create body than the pool's; start this session cold", { option = k })
    end
    hooks[k] = v
  end
  local eng, err = self:_engine()
  if not eng then return nil, err end
  local r = batch.run(eng, { { "GET", "/containers/json", nil, { query = { all = "1",
    filters = { label = { "io.sandstack.pool=" .. self.name } } } } } }, 60)[1]
  if not r.ok then return nil, r.err end
  local inventory = require "sandstack.docker.inventory"
  if not inventory.is_array(r.body) then return nil, inventory.bad_answer("container list") end
  -- idle = marked ready, not claimed; tried in random order so that processes rarely collide
  local marked, claimed = {}, {}
  for _, c in ipairs(r.body) do
    local l = type(c) == "table" and type(c.Labels) == "table" and c.Labels or {}
    local p = l["io.sandstack.project"]
    if p and l["io.sandstack.role"] == "ready" then marked[p] = true end
    if p and l["io.sandstack.role"] == "claim" then claimed[p] = true end
  end
  local idle = {}
  for p in pairs(marked) do if not claimed[p] then idle[#idle + 1] = p end end
  for i = #idle, 2, -1 do
    local j = tonumber(core.random_hex(2), 16) % i + 1
    idle[i], idle[j] = idle[j], idle[i]
  end
  for _, project in ipairs(idle) do
    local ok, cerr = require("sandstack.docker.inventory").mark(eng, "claim", project, self.name, session_key, self.mark_image)
    if ok then
      local stack, why = self:_checked(eng, project, session_key, hooks)
      if stack then
        emit(self, "pool_acquired", { project = project, session_key = session_key })
        return stack
      end
      emit(self, "pool_dead", { project = project, reason = why })
      docker().down(project, { docker_host = self.stack.docker_host, timeout = self.stack.timeout })
    elseif cerr.status ~= 409 then
      return nil, cerr
    end -- 409: another session claimed it first; try the next
  end
  emit(self, "pool_empty", { session_key = session_key })
  return self:_cold(session_key, hooks)
end

-- The cheap health check after a claim: both inspects in parallel, then a handle.
function Pool:_checked(eng, project, session_key, hooks)
  local plan, err = docker().plan(session_key, self:_plan_opts(project), { token = "x" })
  if not plan then return nil, err and err.message end
  local fw, sbx = project .. "-" .. plan.forwarder, project .. "-" .. plan.sandbox
  local rs = batch.run(eng, { { "GET", "/containers/" .. fw .. "/json" }, { "GET", "/containers/" .. sbx .. "/json" } }, 30)
  if not rs[1].ok or not rs[2].ok then return nil, "a container is gone" end
  local function running(info) return type(info) == "table" and type(info.State) == "table" and info.State.Running == true end
  if not running(rs[1].body) or not running(rs[2].body) then return nil, "a container is not running" end
  local ports = rs[1].body.NetworkSettings and rs[1].body.NetworkSettings.Ports or {}
  local b = type(ports[("%d/tcp"):format(plan.agent_port)]) == "table" and ports[("%d/tcp"):format(plan.agent_port)][1]
  local port = b and tonumber(b.HostPort)
  if not port then return nil, "the forwarder publishes no port" end
  local stack; stack, err = require("sandstack.docker.handle").adopt(plan, port, { docker_host = self.stack.docker_host, timeout = self.stack.timeout,
    api_version = eng.api_version, on_event = hooks.on_event or self.on_event, req_adapter = hooks.req_adapter })
  if not stack then return nil, err and err.message end
  stack.pool = self.name
  return stack
end

function Pool:_plan_opts(project)
  local o = {}
  for k, v in pairs(self.stack) do if type(v) ~= "function" then o[k] = v end end
  o.project_name = project
  return o
end

-- An empty pool: a normal start under the session's own key, labelled with the pool, claimed
-- before anyone could see it as idle (it never gets a ready mark).
function Pool:_cold(session_key, hooks)
  local stack, err = start_marked(self, session_key, hooks, "claim")
  if not stack then return nil, err end
  stack.pool = self.name
  return stack
end

-- Destroys the idle stacks of the pool (each claimed first, so none is handed out while it is
-- being removed); stacks held by sessions stay theirs. Idempotent.
function Pool:close()
  local removed, err = docker().reap { docker_host = self.stack.docker_host, timeout = self.stack.timeout,
    pool = self.name, idle_only = true }
  if self.eng then self.eng:close(); self.eng = nil end
  if not removed then return nil, err end
  return true, removed
end

return M
