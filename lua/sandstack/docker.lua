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

-- The start pipeline; pool (a warm pool's name, or nil) labels every object io.sandstack.pool.
local function start_with(session_key, clean, hooks, pool)
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
    egress_policy = rendered, pool = pool })
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
      local left = A.rollback(run)
      stack:_set_port(nil)
      eng:close()
      if not okstep then error(res, 0) end -- a programming error: re-raise after cleaning up
      if left and type(e) == "table" then -- what the rollback could not remove, by name
        e.rollback_error = left
        e.message = tostring(e.message) .. "; the rollback left " .. tostring(left.message)
      end
      return nil, e
    end
  end
  return stack
end

-- sandstack.docker.start(session_key, opts) -> stack | nil, err
function M.start(session_key, opts)
  local clean, hooks = split_hooks(session_key, opts)
  return start_with(session_key, clean, hooks, nil)
end

-- For sandstack.docker.pool: the same start, with every object labelled with the pool.
function M._start_pooled(session_key, opts, pool)
  local clean, hooks = split_hooks(session_key, opts)
  return start_with(session_key, clean, hooks, pool)
end

-- For sandstack.docker.pool: a handle on a stack the pool has claimed, from its plan (computed
-- for the claiming session) and the forwarder port the pool has just read.
function M._adopt(plan, port, opts)
  local sandstack = require "sandstack"
  local eng, err = sandstack.engine { host = opts.docker_host, timeout = opts.timeout, api_version = opts.api_version }
  if not eng then return nil, err end
  local stack = new_stack(eng, plan, { on_event = opts.on_event, req_adapter = opts.req_adapter })
  stack:_set_port(port)
  return stack
end

-- The claim of a pooled stack: a container named <project>-claim, created and never started.
-- The engine's name registry answers a second create of that name 409, in any process, so
-- exactly one claimant wins. It carries the project label, so the stack's removal takes it.
-- The same create with role "ready" is the mark a filler sets once the stack has passed
-- readiness: only marked stacks are handed out (a half-made one never is).
function M._mark(eng, role, project, pool, session_key, image)
  local q = { query = { name = project .. "-" .. role } }
  local body = { Image = image, Entrypoint = { "true" }, NetworkDisabled = true,
    Labels = { [LABEL] = project, ["io.sandstack.pool"] = pool, ["io.sandstack.session"] = session_key,
      ["io.sandstack.role"] = role, ["io.sandstack.version"] = core.VERSION },
    HostConfig = { NetworkMode = "none" } }
  local r = batch.run(eng, { { "POST", "/containers/create", body, q } }, 60)[1]
  if r.ok then return true end
  return nil, r.err
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

local POOL = "io.sandstack.pool"

local check_keys = E.check_keys

-- A stack of a warm pool that no session holds and whose filler has not marked it ready is
-- "starting" for this long after its creation, then "failed" (its filler died mid-start).
M.POOL_STARTING_GRACE = 600

-- The state of a pooled stack from its list entry: in_use (claimed), ready (marked, every
-- service running), starting (unmarked, young) or failed.
function M._pool_state(e, now, grace)
  if e.claimed then return "in_use" end
  if e.marked then
    for _, st in pairs(e.services) do if st ~= "running" then return "failed" end end
    return next(e.services) and "ready" or "failed"
  end
  if e.created and (now or os.time()) - e.created < (grace or M.POOL_STARTING_GRACE) then return "starting" end
  return "failed"
end

local function is_list(x) return type(x) == "table" end

-- Stacks owned by sandstack on the engine, from labels: { {project=, session_key=, created=,
-- pool=, state=, ...} }, sorted by pool and project. Objects without the project label are not
-- sandstack's and are skipped; an Engine answer of the wrong shape is an error.
local LIST_KEYS = { docker_host = true, timeout = true, project = true, pool = true }
function M.list(opts)
  opts = check_keys(opts, LIST_KEYS, "sandstack.docker.list")
  local eng, err = engine(opts)
  if not eng then return nil, err end
  local filters = { opts.project and (LABEL .. "=" .. opts.project) or LABEL }
  if opts.pool then filters[#filters + 1] = POOL .. "=" .. opts.pool end
  local f = { label = filters }
  local r = batch.run(eng, {
    { "GET", "/containers/json", nil, { query = { all = "1", filters = f } } },
    { "GET", "/networks", nil, { query = { filters = f } } },
    { "GET", "/volumes", nil, { query = { filters = f } } },
  }, 60)
  eng:close()
  err = batch.first_error(r)
  if err then return nil, err end
  local cs, ns, vb = r[1].body, r[2].body, r[3].body
  if not is_list(cs) or not is_list(ns) or not is_list(vb) or (vb.Volumes ~= nil and not is_list(vb.Volumes)) then
    return nil, E.new("engine", "bad_answer", "the engine's object lists are malformed")
  end
  local by = {}
  local function entry(labels)
    local p = type(labels) == "table" and labels[LABEL]
    if type(p) ~= "string" then return nil end
    by[p] = by[p] or { project = p, session_key = labels["io.sandstack.session"], pool = labels[POOL],
      created = tonumber(labels["io.sandstack.created"]), version = labels["io.sandstack.version"],
      services = {}, images = {}, networks = 0, volumes = 0 }
    return by[p]
  end
  for _, c in ipairs(cs) do
    local labels = type(c) == "table" and c.Labels
    local e = entry(labels)
    if e then
      local role = labels["io.sandstack.role"]
      if role == "claim" then
        e.claimed, e.pool, e.claim_session = true, e.pool or labels[POOL], labels["io.sandstack.session"]
      elseif role == "ready" then
        e.marked = true
      else
        local svc = labels["io.sandstack.service"] or "?"
        e.services[svc], e.images[svc] = c.State, c.Image
      end
    end
  end
  for _, n in ipairs(ns) do local e = entry(type(n) == "table" and n.Labels); if e then e.networks = e.networks + 1 end end
  for _, v in ipairs(vb.Volumes or {}) do local e = entry(type(v) == "table" and v.Labels); if e then e.volumes = e.volumes + 1 end end
  local out, now = {}, os.time()
  for _, e in pairs(by) do
    if e.pool then
      -- the objects' own session label is the pool's placeholder: the claim names the owner
      e.state = M._pool_state(e, now)
      e.session_key = e.claim_session
    end
    e.claim_session = nil
    out[#out + 1] = e
  end
  table.sort(out, function(a, b)
    if (a.pool or "") ~= (b.pool or "") then return (a.pool or "") < (b.pool or "") end
    return a.project < b.project
  end)
  return out
end

-- Removes owned stacks: all of them, or those older than older_than seconds, or one project,
-- or those whose project name starts with prefix, or (pool = name) a warm pool's leftovers:
-- every stack of that pool no session holds, idle, starting or half-made. An idle stack is
-- claimed before it is removed, so a concurrent acquire never receives a stack being removed.
-- Returns the list of removed projects.
local REAP_KEYS = { docker_host = true, timeout = true, project = true, older_than = true, prefix = true, pool = true,
  idle_only = true }
function M.reap(opts)
  opts = check_keys(opts, REAP_KEYS, "sandstack.docker.reap")
  local stacks, err = M.list { docker_host = opts.docker_host, timeout = opts.timeout, project = opts.project, pool = opts.pool }
  if not stacks then return nil, err end
  local eng; eng, err = engine(opts)
  if not eng then return nil, err end
  local removed, first = {}, nil
  local t = os.time()
  for _, s in ipairs(stacks) do
    local old = not opts.older_than or (s.created and t - s.created >= opts.older_than)
    local match = not opts.prefix or s.project:sub(1, #opts.prefix) == opts.prefix
    local take = old and match
    if take and opts.pool then
      take = s.state ~= "in_use" and (not opts.idle_only or s.state == "ready" or (s.marked and s.state == "failed"))
      if take and s.marked then
        local image = s.images.forwarder or select(2, next(s.images))
        local ok, e = M._mark(eng, "claim", s.project, opts.pool, "reap", image)
        if not ok then
          take = false
          if e.status ~= 409 then first = first or e end -- 409: a session claimed it first
        end
      end
    end
    if take then
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

-- sandstack.docker.pool{...}: a warm pool of ready stacks (lua/sandstack/docker/pool.lua).
function M.pool(opts)
  return require("sandstack.docker.pool").new(opts)
end

-- The plan a start would apply, without an engine (for inspection and tests).
function M.plan(session_key, opts, ctx)
  local clean = split_hooks(session_key, opts)
  ctx = ctx or {}
  return core.stack_plan(clean, { session_key = session_key, api_version = ctx.api_version, now = ctx.now })
end

return M
