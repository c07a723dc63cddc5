-- The handle on a running stack (internal to sandstack.docker): stop, start, restart, status,
-- capture, destroy, record, reconnect. It keeps the part of the plan it needs (names, order,
-- checks), never a body or a secret.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local store = require "sandstack.store"
local A = require "sandstack.docker.apply"
local stack_run = require "sandstack.docker.stack_run"
local batch = require "sandstack.stack.batch"
local inventory = require "sandstack.docker.inventory"
local live = require "sandstack.docker.egress_live"
local session = require "sandstack.session"
local pending = require "sandstack.docker.pool_pending"
local capture = require "sandstack.stack.capture"
local record_env = require "sandstack.docker.record_env"

local M = {}
-- The handle's own methods (record, status, capture, destroy, close, ...), and Op: the driver's
-- operations of the session interface, which the one session class wraps (sandstack.session).
local Stack, Op = {}, {}

local function engine(opts)
  local sandstack = require "sandstack"
  return sandstack.engine { host = opts.docker_host, timeout = opts.timeout, api_version = opts.api_version }
end

local function names(list)
  local out = {}
  for i, x in ipairs(list or {}) do out[i] = type(x) == "table" and x.name or x end
  return out
end

-- The proxy sandstack added: its service, and how its control socket is reached (docker/control.lua).
local function added_proxy(px)
  if type(px) == "table" and px.added then return { service = px.service, added = true, control = px.control } end
end

-- The part of a plan a handle keeps: names, order, checks and the bodiless requests of its life
-- (each container's start and inspect, the removals); no bodies, no secrets. A record keeps the
-- names only (requests = false): a handle rebuilt from one has the C core make its requests
-- again (core.stack_lifecycle), so a record of any version reconnects.
local function slim(plan, requests)
  local cs = {}
  for i, c in ipairs(plan.containers) do
    cs[i] = { service = c.service, name = c.name, depends_on = c.depends_on, healthcheck = c.healthcheck,
      check = c.check, check_timeout = c.check_timeout, ready_log = c.ready_log, ready_times = c.ready_times,
      ready_port = c.ready_port, role = c.role, port = c.port }
    if requests then cs[i].start, cs[i].inspect = c.start, c.inspect end
  end
  return { project = plan.project, session_key = plan.session_key, agent_port = plan.agent_port,
    ready_path = plan.ready_path, ready_timeout = plan.ready_timeout, health_timeout = plan.health_timeout,
    capture_path = plan.capture_path, sandbox = plan.sandbox, forwarder = plan.forwarder,
    containers = cs, docker_host = plan.docker_host, timeout = plan.timeout,
    networks = names(plan.networks), volumes = names(plan.volumes), credentials = store.credentials(plan.credentials),
    placeholders = store.placeholders(plan), proxy = added_proxy(plan.proxy), removals = requests and plan.removals or nil, ports = plan.ports }
end

function M.new(eng, plan, hooks)
  if not plan.removals then plan = core.stack_lifecycle(plan) end -- a record's names, without requests
  local self = setmetatable({ eng = eng, plan = slim(plan, true), hooks = hooks or {} }, Stack)
  self.project, self.session_key, self.spec = plan.project, plan.session_key, plan.spec
  return self
end

-- The start pipeline planned again (docker/start.lua, for the init's wrap: docker/deadline.lua):
-- the handle keeps the new plan's part.
function M.replan(stack, plan) stack.plan = slim(plan, true) end

-- Using a handle after close is a programming error, raised at the caller.
local function check_open(self)
  if not self.eng then require("sandstack.session").closed("sandstack.docker.reconnect or open") end
end
M.check_open = check_open

local run_of, set_port = stack_run.run_of, stack_run.set_port
M.set_port = set_port

-- Re-reads the forwarder's published port (it changes on every start).
function Stack:reconnect()
  local port, err = A.read_port(run_of(self))
  set_port(self, port)
  if not port then return nil, err end
  return port
end

-- { NAME = placeholder, ... }: what the sandbox's environment holds for each credential (never
-- a secret); {} without credentials. Kept by the record, so a reconnected handle answers too.
function Op:credentials()
  local out = {}
  for _, c in ipairs(self.plan.credentials or {}) do out[c.name] = c.placeholder end
  return out
end

function Stack:record()
  local r = slim(self.plan, false)
  r.kind = "sandstack.docker"
  r.version = core.VERSION
  r.port = self.port
  -- the start's options without a secret (docker/snapshot.lua), each env by name only
  r.spec = record_env.withhold(self.spec)
  r.pool = self.pool -- a warm pool's stack: its expiry marks carry the pool (docker/expiry.lua)
  return store.scrub(r)
end

-- The options of each method, checked once where the caller handed them in (sandstack.error):
-- the methods that call each other internally pass checked tables on.
local O = require "sandstack.docker.method_options" -- each also the reference's table
local STOP_KEYS, START_KEYS, DESTROY_KEYS = O.stop, O.start, O.destroy

-- stop's timeout: the engine's grace period before it kills, whole seconds >= 0. -> t | nil, err
local function stop_timeout(opts, what)
  local err
  opts, err = E.options(opts, STOP_KEYS, what)
  if not opts then return nil, err end
  return math.floor(opts.timeout or 5)
end

local function stop(self, t)
  local reqs = {}
  for i = #self.plan.containers, 1, -1 do
    local c = self.plan.containers[i]
    reqs[#reqs + 1] = ops.request("stop", c.name, { t = math.floor(t) }) -- ?t=, and t + 30 s to answer
  end
  local ok, err = A.check(batch.run(self.eng, reqs, t + 60))
  set_port(self, nil)
  return ok, err
end

function Op:stop(opts)
  local t, err = stop_timeout(opts, "stop")
  if not t then return nil, err end
  return stop(self, t)
end

local start = stack_run.start

function Op:start(opts)
  E.check_keys(opts, START_KEYS, "start")
  return start(self)
end

-- A restart is a stop and a start in dependency order (so dependents wait for health again).
function Op:restart(opts)
  local t, err = stop_timeout(opts, "restart")
  if not t then return nil, err end
  local ok; ok, err = stop(self, t)
  if not ok then return nil, err end
  return start(self)
end

function Stack:status()
  check_open(self)
  local out = { port = nil, services = {} }
  local reqs = {}
  for i, c in ipairs(self.plan.containers) do
    reqs[i] = { method = c.inspect.method, path = c.inspect.path, ok = { 404 } } -- a missing one is reported
  end
  local results = batch.run(self.eng, reqs, 60) -- every inspect at once
  for i, c in ipairs(self.plan.containers) do
    local r = results[i]
    local info = r.ok and r.status ~= 404 and r.body
    if not r.ok then return nil, r.err end
    if not info then
      out.services[c.service] = { state = "missing" }
    else
      local st = info.State or {}
      out.services[c.service] = { state = st.Status, health = st.Health and st.Health.Status or nil,
        exit_code = st.Status == "exited" and st.ExitCode or nil }
    end
  end
  if out.services[self.plan.forwarder] and out.services[self.plan.forwarder].state == "running" then
    out.port = A.read_port(run_of(self))
    set_port(self, out.port)
  end
  return out
end

-- Copies capture_path out of the sandbox into dir (stack/capture.lua), from the container's
-- archive on this engine.
function Stack:capture(dir, opts)
  check_open(self)
  local err
  opts, err = capture.args(dir, opts)
  if not opts then return nil, err end
  local path = self.plan.capture_path
  if not path then return E.fail("invalid", "no_capture_path", "this stack has no capture_path") end
  return capture.take(self.eng, self.plan.project .. "-" .. self.plan.sandbox, path, dir, opts)
end

-- Removes containers, networks and volumes of this project; calling it again is harmless.
function Stack:destroy(opts)
  check_open(self)
  opts = E.options(opts, DESTROY_KEYS, "destroy")
  if opts.capture and self.plan.capture_path then self:capture(opts.capture) end
  local ok, err = inventory.remove_project(self.eng, self.project, self.plan.removals)
  if not ok then return nil, err end
  set_port(self, nil)
  if self.hooks.on_event then pcall(self.hooks.on_event, { phase = "destroyed", project = self.project }) end
  return true
end

function Stack:close()
  if self.eng then self.eng:close() end
  self.eng = nil
end
Stack.__gc = Stack.close
Stack.__close = Stack.close

-- For sandstack.docker.pool: a handle on a stack the pool has claimed, from its plan (computed
-- for the claiming session) and the forwarder port the pool has just read.
function M.adopt(plan, port, opts)
  local eng, err = engine(opts)
  if not eng then return nil, err end
  local stack = M.new(eng, plan, { on_event = opts.on_event, req_adapter = opts.req_adapter })
  if stack.plan.proxy then stack.plan.proxy.control = require("sandstack.docker.control").found(eng, stack.project) end
  set_port(stack, port)
  return stack
end

-- The egress of the running stack, changed live through the added proxy (egress_live.lua).
function Op:set_egress(policy)
  return live.set_egress(self, policy)
end

function Op:egress()
  return live.egress(self)
end

-- The ask hook: the requests the proxy holds for an answer, and the answer (egress_live.lua).
function Op:egress_asks()
  return live.asks(self)
end

function Op:answer(id, decision, opts)
  return live.answer(self, id, decision, opts)
end

function Op:serve(seconds, opts)
  return require("sandstack.ask_serve").serve(self, seconds, opts)
end

function Op:set_credentials(list)
  return live.set_credentials(self, list)
end

-- The credential route's model key, replaced live; the other credentials stay.
function Op:set_model_key(key)
  return live.set_model_key(self, key)
end

-- Rebuilds a handle from stack:record() and re-reads the forwarder's port.
local RECONNECT_KEYS = O.reconnect
M.RECONNECT_KEYS = RECONNECT_KEYS
function M.reconnect(record, opts)
  E.want(record, "table", "sandstack.docker.reconnect", "argument 'record'", "a record from stack:record()")
  local err
  opts, err = E.options(opts, RECONNECT_KEYS, "sandstack.docker.reconnect")
  if not opts then return nil, err end
  -- a list() entry or a snapshot names a stack but is no record: it has no containers to drive
  if type(record) ~= "table" or type(record.project) ~= "string" or type(record.containers) ~= "table"
    or type(record.sandbox) ~= "string" or type(record.forwarder) ~= "string" then
    return E.fail("invalid", "not_a_record", "sandstack.docker.reconnect: that is not a record from stack:record() "
      .. "(a list() entry is not one: open a stack by its project or key with sandstack.docker.open)")
  end
  local eng; eng, err = engine { docker_host = opts.docker_host or record.docker_host, timeout = opts.timeout or record.timeout }
  if not eng then return nil, err end
  local plan = {}
  for k, v in pairs(record) do plan[k] = v end
  local stack = M.new(eng, plan, { on_event = opts.on_event, req_adapter = opts.req_adapter })
  stack.pool = type(record.pool) == "string" and record.pool or nil
  local port; port, err = stack:reconnect()
  if not port then
    if err and err.status == 404 then
      eng:close()
      return nil, E.new("engine", "not_found", "stack " .. record.project .. " no longer exists", { status = 404, project = record.project })
    end
    -- a stopped stack has no port; the handle is still useful (start, destroy)
  end
  return stack
end

-- The session interface (sandstack.session). Its methods live in files of their own, one
-- concept each: lua/sandstack/docker/handle_<part>.lua returns { methods = { name = fn } },
-- mixed in here: an interface method into the driver's operations, any other (wake) onto the
-- handle (a part reaches the handle's helpers through sandstack.docker.target, never by
-- requiring this file, which is still loading). The requires are literal, so that
-- spec/module_graph_spec.lua sees them. The one session class makes the methods.
M.PARTS = { exec = require "sandstack.docker.handle_exec", files = require "sandstack.docker.handle_files",
  observe = require "sandstack.docker.handle_observe", spawn = require "sandstack.docker.handle_spawn",
  lifecycle = require "sandstack.docker.handle_lifecycle", ports = require "sandstack.docker.handle_ports" }
M.Stack, M.ops = Stack, Op

function M.mixin(methods)
  for name, fn in pairs(methods) do
    if rawget(Stack, name) ~= nil or Op[name] ~= nil then error("sandstack.docker handle: method " .. name .. " is defined twice", 2) end
    if session.KNOWN[name] then Op[name] = fn else Stack[name] = fn end
  end
end

for _, part in ipairs { "exec", "files", "observe", "spawn", "lifecycle", "ports" } do M.mixin(M.PARTS[part].methods) end
session.class({ backend = "docker", ops = Op, path = "an absolute path in the container", reopen = "sandstack.docker.reconnect or open",
  is_open = function(self) return self.eng ~= nil end, settle = pending.settle }, Stack)
-- the handle's own methods settle a pooled claim answered early too (its named state, `_claim`)
pending.wrap(Stack, session.class_method)

return M
