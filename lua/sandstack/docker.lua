-- sandstack.docker: per-session stacks (spec 000). Validation and planning are the C core's
-- (core.stack_plan: pure data); this file runs a plan against an engine and is the handle.
local core = require "sandstack.core"
local E = require "sandstack.error"
local store = require "sandstack.store"
local A = require "sandstack.docker.apply"
local batch = require "sandstack.docker.batch"
local isolation = require "sandstack.docker.isolation"

local M = {}
local Stack = {}
Stack.__index = Stack

local LABEL = "io.sandstack.project"

local function engine(opts)
  local sandstack = require "sandstack"
  return sandstack.engine { host = opts.docker_host, timeout = opts.timeout }
end

local function list_reqs(project)
  return batch.list_requests(project and (LABEL .. "=" .. project) or LABEL)
end

local function listed(results)
  local err = batch.first_error(results)
  if err then return nil, err end
  return { containers = results[1].body, networks = results[2].body, volumes = results[3].body.Volumes or {} }
end

-- Everything of one project (or of every project), found by label: three parallel lists.
local function owned(eng, project)
  return listed(batch.run(eng, list_reqs(project), 60))
end

local function union(known, found, key)
  local seen, out = {}, {}
  for _, n in ipairs(known or {}) do if not seen[n] then seen[n] = true; out[#out + 1] = n end end
  for _, o in ipairs(found) do
    local n = o[key]
    if not seen[n] then seen[n] = true; out[#out + 1] = n end
  end
  return out
end

-- Removes every object labelled with the project: containers, then networks, then volumes.
-- Objects the handle knows by name are deleted while the label lists are being read, so a
-- teardown costs the same three rounds as the shortest raw sequence.
local function remove_project(eng, project, known)
  known = known or {}
  local reqs = list_reqs(project)
  local function del_container(name)
    return { "DELETE", "/containers/" .. name, nil, { query = { force = "1", v = "1" } }, ok = { [404] = true, [409] = true } }
  end
  for _, n in ipairs(known.containers or {}) do reqs[#reqs + 1] = del_container(n) end
  local r = batch.run(eng, reqs, 60)
  local objs, err = listed(r)
  if not objs then return nil, err end
  local deleted = {}
  for i = 4, #r do deleted[#deleted + 1] = r[i] end
  local first = batch.first_error(deleted)
  local done, extra = {}, {}
  for _, n in ipairs(known.containers or {}) do done[n] = true end
  for _, c in ipairs(objs.containers) do
    local name = (c.Names and c.Names[1] or ""):gsub("^/", "")
    if not done[name] then extra[#extra + 1] = c.Id end
  end
  local ok, rerr = batch.remove(eng, { containers = extra, networks = union(known.networks, objs.networks, "Name"),
    volumes = union(known.volumes, objs.volumes, "Name") })
  first = first or (not ok and rerr) or nil
  if first then return nil, first end
  return true
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
      check = c.check, body = { Healthcheck = c.body.Healthcheck and { Timeout = c.body.Healthcheck.Timeout } or nil } }
  end
  return { project = plan.project, session_key = plan.session_key, agent_port = plan.agent_port,
    ready_path = plan.ready_path, ready_timeout = plan.ready_timeout, health_timeout = plan.health_timeout,
    capture_path = plan.capture_path, sandbox = plan.sandbox, forwarder = plan.forwarder,
    containers = cs, docker_host = plan.docker_host, timeout = plan.timeout,
    networks = names(plan.networks), volumes = names(plan.volumes) }
end

local function new_stack(eng, plan, hooks)
  local self = setmetatable({ eng = eng, plan = slim(plan), hooks = hooks or {} }, Stack)
  self.project, self.session_key = plan.project, plan.session_key
  return self
end

function Stack:_run()
  return { eng = self.eng, plan = self.plan, t0 = A.now(), on_event = self.hooks.on_event,
    req_adapter = self.hooks.req_adapter, created = { networks = {}, volumes = {}, containers = {} } }
end

function Stack:_set_port(port)
  self.port = port
  self.endpoint = port and ("http://127.0.0.1:%d"):format(port) or nil
end

-- Re-reads the forwarder's published port (it changes on every start).
function Stack:reconnect()
  local port, err = A.read_port(self:_run())
  self:_set_port(port)
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
  local t = opts and opts.timeout or 5
  local reqs = {}
  for i = #self.plan.containers, 1, -1 do
    local c = self.plan.containers[i]
    reqs[#reqs + 1] = { "POST", "/containers/" .. c.name .. "/stop", nil, { query = { t = tostring(math.floor(t)) }, timeout = t + 30 }, ok = { [304] = true } }
  end
  local ok, err = A.check(batch.run(self.eng, reqs, t + 60))
  self:_set_port(nil)
  return ok, err
end

function Stack:start()
  local run = self:_run()
  local ok, err = A.start_services(run, self.plan.containers)
  if not ok then return nil, err end
  local port; port, err = A.read_port(run)
  if not port then return nil, err end
  self:_set_port(port)
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
  local out = { port = nil, services = {} }
  for _, c in ipairs(self.plan.containers) do
    local info, err = A.inspect(self.eng, c.name)
    if not info then
      if err.status ~= 404 then return nil, err end
      out.services[c.service] = { state = "missing" }
    else
      local st = info.State or {}
      out.services[c.service] = { state = st.Status, health = st.Health and st.Health.Status or nil,
        exit_code = st.Status == "exited" and st.ExitCode or nil }
    end
  end
  if out.services[self.plan.forwarder] and out.services[self.plan.forwarder].state == "running" then
    out.port = A.read_port(self:_run())
    self:_set_port(out.port)
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
  if type(dir) ~= "string" or dir == "" then error("capture: dir must be a non-empty string", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("capture: options must be a table", 2) end
  opts = opts or {}
  for k, v in pairs(opts) do
    if not CAPTURE_KEYS[k] then error("capture: unknown option '" .. tostring(k) .. "'", 2) end
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
  opts = opts or {}
  if opts.capture and self.plan.capture_path then self:capture(opts.capture) end
  local cs = {}
  for i, c in ipairs(self.plan.containers) do cs[i] = c.name end
  local ok, err = remove_project(self.eng, self.project,
    { containers = cs, networks = self.plan.networks, volumes = self.plan.volumes })
  if not ok then return nil, err end
  self:_set_port(nil)
  if self.hooks.on_event then pcall(self.hooks.on_event, { phase = "destroyed", project = self.project }) end
  return true
end

function Stack:close()
  if self.eng then self.eng:close() end
  self.eng = nil
end
Stack.__gc = Stack.close
Stack.__close = Stack.close

local function split_hooks(session_key, opts)
  if type(session_key) ~= "string" then error("sandstack.docker.start: session_key must be a string", 3) end
  if type(opts) ~= "table" then error("sandstack.docker.start: options must be a table", 3) end
  local clean, hooks = {}, {}
  for k, v in pairs(opts) do
    if k == "on_event" or k == "req_adapter" then
      if type(v) ~= "function" then error("sandstack.docker.start: " .. k .. " must be a function", 3) end
      hooks[k] = v
    else
      clean[k] = v
    end
  end
  return clean, hooks
end

local function render_policy(tbl)
  local ok, policy = pcall(require, "sandstack.policy")
  if not ok then
    return E.fail("compose", "invalid_option", "egress_policy needs sandstack.policy, which is not installed", { option = "egress_policy" })
  end
  local p, err = policy.compile(tbl)
  if not p then
    return E.fail("compose", "invalid_option", "egress_policy: " .. tostring(err and err.message or err),
      { option = "egress_policy", cause = err })
  end
  return p:render()
end

-- sandstack.docker.start(session_key, opts) -> stack | nil, err
function M.start(session_key, opts)
  local clean, hooks = split_hooks(session_key, opts)
  local ok, err = core.stack_validate(clean, session_key)
  if not ok then return nil, err end
  local rendered
  if clean.egress_policy then
    rendered, err = render_policy(clean.egress_policy)
    if not rendered then return nil, err end
  end
  local eng; eng, err = engine(clean)
  if not eng then return nil, err end
  local plan; plan, err = core.stack_plan(clean, { session_key = session_key, api_version = eng.api_version,
    egress_policy = rendered })
  if not plan then eng:close(); return nil, err end

  local run = { eng = eng, plan = plan, t0 = A.now(), on_event = hooks.on_event, req_adapter = hooks.req_adapter,
    created = { networks = {}, volumes = {}, containers = {} } }
  local stack = new_stack(eng, plan, hooks)
  A.stamp(run)
  local steps = {
    function() return A.ensure_images(run) end,
    function() return isolation.verify(run, function() return A.fresh_subnet(run) end) end,
    function() return A.create_networks_and_volumes(run) end,
    function() return A.create_containers(run) end,
    function() return A.start_services(run, plan.containers) end,
    function()
      local port, e = A.read_port(run)
      stack:_set_port(port)
      return port, e
    end,
    function() return A.wait_ready(run, stack.port) end,
  }
  for _, step in ipairs(steps) do
    local okstep, res, e = pcall(step)
    if not okstep or not res then
      A.rollback(run)
      stack:_set_port(nil)
      eng:close()
      if not okstep then error(res, 0) end -- a programming error: re-raise after cleaning up
      return nil, e
    end
  end
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
  local stack = new_stack(eng, plan, { on_event = opts.on_event, req_adapter = opts.req_adapter })
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

-- Stacks owned by sandstack on the engine, from labels: { {project=, session_key=, created=, ...} }.
function M.list(opts)
  opts = opts or {}
  local eng, err = engine(opts)
  if not eng then return nil, err end
  local objs; objs, err = owned(eng, opts.project)
  eng:close()
  if not objs then return nil, err end
  local by = {}
  local function entry(labels)
    local p = labels[LABEL]
    by[p] = by[p] or { project = p, session_key = labels["io.sandstack.session"],
      created = tonumber(labels["io.sandstack.created"]), version = labels["io.sandstack.version"],
      services = {}, networks = 0, volumes = 0 }
    return by[p]
  end
  for _, c in ipairs(objs.containers) do
    local e = entry(c.Labels or {})
    e.services[(c.Labels or {})["io.sandstack.service"] or "?"] = c.State
  end
  for _, n in ipairs(objs.networks) do local e = entry(n.Labels or {}); e.networks = e.networks + 1 end
  for _, v in ipairs(objs.volumes) do local e = entry(v.Labels or {}); e.volumes = e.volumes + 1 end
  local out = {}
  for _, e in pairs(by) do out[#out + 1] = e end
  table.sort(out, function(a, b) return a.project < b.project end)
  return out
end

-- Removes owned stacks: all of them, or those older than older_than seconds, or one project,
-- or those whose project name starts with prefix. Returns the list of removed projects.
function M.reap(opts)
  opts = opts or {}
  local stacks, err = M.list { docker_host = opts.docker_host, timeout = opts.timeout, project = opts.project }
  if not stacks then return nil, err end
  local eng; eng, err = engine(opts)
  if not eng then return nil, err end
  local removed, first = {}, nil
  local t = os.time()
  for _, s in ipairs(stacks) do
    local old = not opts.older_than or (s.created and t - s.created >= opts.older_than)
    local match = not opts.prefix or s.project:sub(1, #opts.prefix) == opts.prefix
    if old and match then
      local ok, e = remove_project(eng, s.project)
      if ok then removed[#removed + 1] = s.project else first = first or e end
    end
  end
  eng:close()
  if first then return nil, first end
  return removed
end

-- Destroys one project by name without a handle (the CLI's `down`).
function M.down(project, opts)
  opts = opts or {}
  local eng, err = engine(opts)
  if not eng then return nil, err end
  local ok; ok, err = remove_project(eng, project)
  eng:close()
  return ok, err
end

-- The plan a start would apply, without an engine (for inspection and tests).
function M.plan(session_key, opts, ctx)
  local clean = split_hooks(session_key, opts)
  ctx = ctx or {}
  return core.stack_plan(clean, { session_key = session_key, api_version = ctx.api_version, now = ctx.now })
end

return M
