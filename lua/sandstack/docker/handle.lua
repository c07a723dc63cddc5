-- The handle on a running stack (internal to sandstack.docker): stop, start, restart, status,
-- capture, destroy, record, reconnect. It keeps the part of the plan it needs (names, order,
-- checks), never a body or a secret.
local core = require "sandstack.core"
local E = require "sandstack.error"
local store = require "sandstack.store"
local A = require "sandstack.docker.apply"
local batch = require "sandstack.docker.batch"
local inventory = require "sandstack.docker.inventory"

local M = {}
local Stack = {}
Stack.__index = Stack

local function engine(opts)
  local sandstack = require "sandstack"
  return sandstack.engine { host = opts.docker_host, timeout = opts.timeout, api_version = opts.api_version }
end

local function names(list)
  local out = {}
  for i, x in ipairs(list or {}) do out[i] = type(x) == "table" and x.name or x end
  return out
end

-- The part of a plan a handle keeps: names, order, checks; no bodies, no secrets.
local function slim(plan)
  local cs = {}
  for i, c in ipairs(plan.containers) do
    cs[i] = { service = c.service, name = c.name, depends_on = c.depends_on, healthcheck = c.healthcheck,
      check = c.check, check_timeout = c.check_timeout }
  end
  return { project = plan.project, session_key = plan.session_key, agent_port = plan.agent_port,
    ready_path = plan.ready_path, ready_timeout = plan.ready_timeout, health_timeout = plan.health_timeout,
    capture_path = plan.capture_path, sandbox = plan.sandbox, forwarder = plan.forwarder,
    containers = cs, docker_host = plan.docker_host, timeout = plan.timeout,
    networks = names(plan.networks), volumes = names(plan.volumes) }
end

function M.new(eng, plan, hooks)
  local self = setmetatable({ eng = eng, plan = slim(plan), hooks = hooks or {} }, Stack)
  self.project, self.session_key = plan.project, plan.session_key
  return self
end

-- Using a handle after close is a programming error, raised as the engine client does.
local function check_open(self)
  if not self.eng then error("the stack handle is closed", 3) end
end

local function run_of(self)
  check_open(self)
  return { eng = self.eng, plan = self.plan, t0 = A.now(), on_event = self.hooks.on_event,
    req_adapter = self.hooks.req_adapter, created = { networks = {}, volumes = {}, containers = {} } }
end

local function set_port(self, port)
  self.port = port
  self.endpoint = port and ("http://127.0.0.1:%d"):format(port) or nil
end
M.set_port = set_port

-- Re-reads the forwarder's published port (it changes on every start).
function Stack:reconnect()
  local port, err = A.read_port(run_of(self))
  set_port(self, port)
  if not port then return nil, err end
  return port
end

function Stack:record()
  local r = slim(self.plan)
  r.kind = "sandstack.docker"
  r.version = core.VERSION
  r.port = self.port
  return store.scrub(r)
end

function Stack:stop(opts)
  check_open(self)
  local t = opts and opts.timeout or 5
  local reqs = {}
  for i = #self.plan.containers, 1, -1 do
    local c = self.plan.containers[i]
    reqs[#reqs + 1] = { "POST", "/containers/" .. c.name .. "/stop", nil, { query = { t = tostring(math.floor(t)) }, timeout = t + 30 }, ok = { [304] = true } }
  end
  local ok, err = A.check(batch.run(self.eng, reqs, t + 60))
  set_port(self, nil)
  return ok, err
end

function Stack:start()
  local run = run_of(self)
  local ok, err = A.start_services(run, self.plan.containers)
  if not ok then return nil, err end
  local port; port, err = A.read_port(run)
  if not port then return nil, err end
  set_port(self, port)
  ok, err = A.wait_ready(run, port)
  if not ok then return nil, err end
  return true
end

-- A restart is a stop and a start in dependency order (so dependents wait for health again).
function Stack:restart(opts)
  local ok, err = self:stop(opts)
  if not ok then return nil, err end
  return self:start()
end

function Stack:status()
  check_open(self)
  local out = { port = nil, services = {} }
  local reqs = {}
  for i, c in ipairs(self.plan.containers) do
    reqs[i] = { "GET", "/containers/" .. c.name .. "/json", nil, nil, ok = { [404] = true } }
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

-- Copies capture_path out of the sandbox into dir, a directory it makes fresh (0700): the
-- engine's tar is downloaded into dir and unpacked by the C core's safe extractor
-- (csrc/capture), which writes regular files and directories only and reports the rest.
-- Returns true and the list of skipped members ({ name =, type =, reason = }), or nil, err;
-- on failure dir is removed again.
local CAPTURE_KEYS = { max_bytes = true, max_entries = true, timeout = true }
function Stack:capture(dir, opts)
  check_open(self)
  if type(dir) ~= "string" or dir == "" then error("capture: dir must be a non-empty string", 2) end
  opts = E.check_keys(opts, CAPTURE_KEYS, "capture")
  for k, v in pairs(opts) do
    if type(v) ~= "number" or v < 0 or (k ~= "timeout" and v ~= math.floor(v)) then
      error("capture: option '" .. k .. "' must be a number >= 0" .. (k ~= "timeout" and " (whole)" or ""), 2)
    end
  end
  local path = self.plan.capture_path
  if not path then return E.fail("invalid", "no_capture_path", "this stack has no capture_path") end
  local max_bytes = opts.max_bytes or 1024 * 1024 * 1024
  local max_entries = opts.max_entries or 100000
  local ok, err = core.capture_mkdir(dir)
  if not ok then return nil, err end
  -- The archive is bounded too: contents plus, per member, a header, padding and room for a
  -- pax or long-name header; the extractor's own caps are the exact ones.
  local tarname = ".sandstack-capture-" .. core.random_hex(8) .. ".tar"
  local name = self.plan.project .. "-" .. self.plan.sandbox
  ok, err = self.eng:download("/containers/" .. name .. "/archive", dir .. "/" .. tarname, {
    query = { path = path }, timeout = opts.timeout,
    max_bytes = max_bytes + (max_entries + 2) * 8192,
  })
  if not ok then
    core.capture_remove(dir)
    return nil, err
  end
  local report
  report, err = core.capture_extract(dir, tarname, { max_bytes = max_bytes, max_entries = max_entries })
  if not report then return nil, err end
  return true, report.skipped
end

-- Removes containers, networks and volumes of this project; calling it again is harmless.
function Stack:destroy(opts)
  check_open(self)
  opts = opts or {}
  if opts.capture and self.plan.capture_path then self:capture(opts.capture) end
  local cs = {}
  for i, c in ipairs(self.plan.containers) do cs[i] = c.name end
  local ok, err = inventory.remove_project(self.eng, self.project,
    { containers = cs, networks = self.plan.networks, volumes = self.plan.volumes })
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
  set_port(stack, port)
  return stack
end

-- Rebuilds a handle from stack:record() and re-reads the forwarder's port.
function M.reconnect(record, opts)
  if type(record) ~= "table" or type(record.project) ~= "string" then
    error("sandstack.docker.reconnect: expected a record from stack:record()", 2)
  end
  opts = opts or {}
  local eng, err = engine { docker_host = opts.docker_host or record.docker_host, timeout = opts.timeout or record.timeout }
  if not eng then return nil, err end
  local plan = {}
  for k, v in pairs(record) do plan[k] = v end
  local stack = M.new(eng, plan, { on_event = opts.on_event, req_adapter = opts.req_adapter })
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

return M
