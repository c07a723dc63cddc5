-- The start pipeline of sandstack.swarm (internal). The same model and plan as
-- sandstack.docker.start (core.stack_model validates the options, mints the token and the run
-- label); swarm/spec.lua re-expresses the plan for Swarm. Then:
--   1. the overlays, on the manager;
--   2. the first service in dependency order, with the whole session's reservation and no
--      constraint of sandstack's: Swarm's scheduler chooses the node (a drained, paused or full
--      node is never chosen);
--   3. the forwarder, a standalone container on that node's own engine as the plan made it:
--      publishing on the node's 127.0.0.1, joined to the session's (attachable) overlay once
--      the first task has brought the overlay to the node; with it, the node's promises,
--      checked on the node (swarm/verify.lua);
--   4. the other services in dependency order, each pinned to that node (node.id==...), each
--      wave once its dependencies run (and pass their ready test, run by exec on the node);
--   5. readiness through the forwarder (swarm/ready.lua).
-- Any failure removes what this run made (by its run label, on the manager and the node).
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.docker.batch"
local run_ctx = require "sandstack.docker.run"
local readiness = require "sandstack.docker.readiness"
local spec = require "sandstack.swarm.spec"
local cluster = require "sandstack.swarm.cluster"
local verify = require "sandstack.swarm.verify"
local ready = require "sandstack.swarm.ready"
local inventory = require "sandstack.swarm.inventory"
local handle = require "sandstack.swarm.handle"
local names = require "sandstack.swarm.names"

local M = {}
local now, pause, emit = run_ctx.now, run_ctx.pause, run_ctx.emit

-- Options of sandstack.swarm only; every other key is the stack's and goes to the C model.
local SWARM_KEYS = { constraints = true, placement_timeout = true, task_timeout = true }

-- What Swarm cannot give, refused before anything is made.
local function refusals(clean)
  if clean.runtime ~= nil then
    return E.fail("compose", "invalid_option", "runtime: a Swarm service cannot choose an engine runtime; "
      .. "make it the nodes' default-runtime instead", { option = "runtime" })
  end
  if clean.subnet_pool ~= nil then
    return E.fail("compose", "invalid_option", "subnet_pool: overlay subnets come from the swarm's own pool "
      .. "(docker swarm init --default-addr-pool)", { option = "subnet_pool" })
  end
  if clean.pull ~= nil and clean.pull ~= "missing" then
    return E.fail("compose", "invalid_option", "pull: on a swarm the node's agent pulls a task's image itself "
      .. "when it is absent; only \"missing\" can be kept", { option = "pull" })
  end
  local net = clean.network
  if type(net) == "table" and ((net.driver and net.driver ~= "bridge" and net.driver ~= "overlay")
      or (type(net.options) == "table" and next(net.options))) then
    return E.fail("compose", "invalid_option", "network: on a swarm the sandbox network is an overlay; "
      .. "a driver or driver options of the bridge have no meaning there", { option = "network" })
  end
  return true
end

local function split(session_key, opts)
  if type(session_key) ~= "string" then error("sandstack.swarm.start: session_key must be a string", 3) end
  if type(opts) ~= "table" then error("sandstack.swarm.start: options must be a table", 3) end
  local clean, hooks, sw = {}, {}, {}
  for k, v in pairs(opts) do
    if k == "on_event" or k == "req_adapter" then
      if type(v) ~= "function" then error("sandstack.swarm.start: " .. k .. " must be a function", 3) end
      hooks[k] = v
    elseif SWARM_KEYS[k] then
      sw[k] = v
    else
      clean[k] = v
    end
  end
  if sw.constraints ~= nil then
    if type(sw.constraints) ~= "table" then error("sandstack.swarm.start: constraints must be a list of strings", 3) end
    for _, c in ipairs(sw.constraints) do
      if type(c) ~= "string" or not c:match("^[%w%._%-]+%s*[!=]=%s*[^%c]+$") then
        error("sandstack.swarm.start: constraint " .. tostring(c) .. " is not 'attribute==value' or 'attribute!=value'", 3)
      end
    end
  end
  for _, k in ipairs { "placement_timeout", "task_timeout" } do
    if sw[k] ~= nil and (type(sw[k]) ~= "number" or sw[k] <= 0) then
      error("sandstack.swarm.start: " .. k .. " must be a positive number of seconds", 3)
    end
  end
  return clean, hooks, sw
end

-- A task's end, as a typed error.
local function task_error(c, t)
  local st = t.Status or {}
  local msg = st.Err or st.Message or st.State
  local cs = st.ContainerStatus or {}
  if tostring(msg):find("No such image", 1, true) then
    return E.new("engine", "image_missing", ("image %s is not on node %s and could not be pulled: load it on "
      .. "every node (docker save | docker load) or make its registry reachable"):format(
        tostring(c.body.TaskTemplate.ContainerSpec.Image), tostring(t.NodeID)),
      { image = c.body.TaskTemplate.ContainerSpec.Image, service = c.service, node_id = t.NodeID })
  end
  if (st.State == "failed" or st.State == "complete") and cs.ExitCode then
    return E.new("exited", nil, ("service %s exited with code %s (%s)"):format(c.service, tostring(cs.ExitCode),
      tostring(msg)), { service = c.service, exit_code = cs.ExitCode })
  end
  return E.new("engine", "task_failed", ("the task of %s is %s: %s"):format(c.service, tostring(st.State), tostring(msg)),
    { service = c.service, state = st.State })
end

local ENDED = { failed = true, rejected = true, complete = true, shutdown = true, orphaned = true, remove = true }

-- Waits until each of the services `wave` is started: its task running (Swarm reports a task with
-- a healthcheck running once healthy), or its ready test passing by exec on the node.
local function wait_wave(run, wave)
  local placed_at, started = {}, {}
  local left = #wave
  local t0 = now()
  local delay = 0.05
  while left > 0 do
    local names = {}
    for _, c in ipairs(wave) do if not started[c.service] then names[#names + 1] = c.id end end
    local tasks, err = cluster.tasks(run.mgr, names)
    if not tasks then return nil, err end
    for _, c in ipairs(wave) do
      if not started[c.service] then
        local t = cluster.current_task(tasks, c.id)
        local st = t and t.Status or {}
        if t and t.NodeID and t.NodeID ~= "" and not placed_at[c.service] then
          placed_at[c.service] = now()
          c.node_id = t.NodeID
          emit(run, "placed", c.service, { node_id = t.NodeID })
        end
        if t and ENDED[st.State] then return nil, task_error(c, t) end
        if not placed_at[c.service] then
          if now() - t0 > run.placement_timeout then
            return nil, E.new("engine", "no_suitable_node", ("Swarm placed no task of %s within %gs: %s"):format(
              c.service, run.placement_timeout, tostring(st.Err or st.Message or "pending")),
              { service = c.service, detail = st.Err })
          end
        else
          local cid = st.ContainerStatus and st.ContainerStatus.ContainerID
          local done = st.State == "running"
          if not done and c.check and cid and cid ~= "" and st.State == "starting" and run.node_eng then
            local res = run.node_eng:exec(cid, c.check, { timeout = c.check_timeout or 5, max_bytes = 65536 })
            done = res ~= nil and res.exit_code == 0
            if done then emit(run, "healthy", c.service, { by = "probe" }) end
          end
          if done then
            started[c.service] = true
            left = left - 1
            emit(run, "task_running", c.service, { node_id = t.NodeID, container = cid })
          elseif st.State == "starting" and c.healthcheck and now() - placed_at[c.service] > run.health_timeout then
            return nil, E.new("timeout", nil, ("service %s was not healthy within %gs"):format(c.service, run.health_timeout),
              { phase = "health", service = c.service })
          elseif now() - placed_at[c.service] > run.task_timeout then
            return nil, E.new("timeout", nil, ("the task of %s did not start within %gs (state %s)"):format(c.service,
              run.task_timeout, tostring(st.State)), { phase = "task", service = c.service, state = st.State })
          end
        end
      end
    end
    if left > 0 then pause(delay); delay = math.min(delay * 1.5, 0.25) end
  end
  return true
end

local function create_services(run, wave)
  local reqs = {}
  for i, c in ipairs(wave) do reqs[i] = cluster.requests("create_service", nil, { body = c.body })[1] end
  local results = batch.run(run.mgr, reqs, 60)
  local first
  for i, r in ipairs(results) do
    local c = wave[i]
    if r.ok then
      c.id = r.body.ID
      run.created.services[#run.created.services + 1] = c.id
      emit(run, "service_created", c.service, { name = c.name })
    else
      first = first or r.err
    end
  end
  if first then return nil, first end
  return true
end

local function create_overlays(run)
  local reqs = {}
  for i, o in ipairs(run.shape.overlays) do reqs[i] = cluster.requests("create_network", nil, { body = o.body })[1] end
  local results = batch.run(run.mgr, reqs, 60)
  for i, r in ipairs(results) do
    if not r.ok then return nil, r.err end
    run.created.overlays[#run.created.overlays + 1] = r.body.Id
    emit(run, "network_created", nil, { network = run.shape.overlays[i].name, driver = "overlay" })
  end
  return true
end

-- The forwarder's publish network and its container (created, not started) on the node: they
-- need nothing of the overlay, so they are made while the node starts the first task.
local function forwarder_create(run)
  local eng, fw = run.node_eng, run.shape.forwarder
  local reqs = {}
  for i, n in ipairs(run.shape.local_networks) do reqs[i] = { method = n.method, path = n.path, body_json = n.body_json } end
  local results = batch.run(eng, reqs, 60)
  for i, r in ipairs(results) do
    if not r.ok then return nil, r.err end
    emit(run, "network_created", nil, { network = run.shape.local_networks[i].name, node = run.node.hostname })
  end
  local ok, err = eng:call(fw.method, fw.path, fw.body_json)
  if not ok then return nil, err end
  emit(run, "container_created", fw.service, { container = fw.name, node = run.node.hostname })
  return true
end

-- Once the first task runs, the session's overlay is on the node: the forwarder joins it and
-- starts (socat resolves the sandbox per connection, so it may start before the sandbox does),
-- and the node probe (when this node was not checked before) is made and started alongside.
local function forwarder_start_and_probe(run)
  local eng, fw = run.node_eng, run.shape.forwarder
  local probe = verify.probe_request(run)
  local reqs = {}
  for _, cn in ipairs(fw.connects) do reqs[#reqs + 1] = { cn.method, cn.path, cn.body_json } end
  if probe then reqs[#reqs + 1] = probe.create end
  local err = batch.first_error(batch.run(eng, reqs, 60))
  if err then return nil, err end
  reqs = { fw.start }
  if probe then reqs[2] = probe.start end
  err = batch.first_error(batch.run(eng, reqs, 60))
  if err then return nil, err end
  emit(run, "container_started", fw.service, { container = fw.name })
  if probe then return verify.check(run, probe) end
  return true
end

-- The first service: Swarm chooses its node. Then that node's engine, the forwarder, and the
-- node's promises.
local function place(run)
  local first = run.shape.services[1]
  local ok, err = create_services(run, { first })
  if not ok then return nil, err end
  local t0 = now()
  while not first.node_id do
    local tasks; tasks, err = cluster.tasks(run.mgr, { first.id })
    if not tasks then return nil, err end
    local t = cluster.current_task(tasks, first.id)
    local st = t and t.Status or {}
    if t and t.NodeID and t.NodeID ~= "" then
      first.node_id = t.NodeID
    elseif t and ENDED[st.State] then
      return nil, task_error(first, t)
    elseif now() - t0 > run.placement_timeout then
      return nil, E.new("engine", "no_suitable_node", ("Swarm placed no task of %s within %gs: %s"):format(
        first.service, run.placement_timeout, tostring(st.Err or st.Message or "pending")),
        { service = first.service, detail = st.Err })
    else
      pause(0.05)
    end
  end
  local node; node, err = cluster.node(run.mgr, first.node_id)
  if not node then return nil, err end
  run.node = node
  emit(run, "placed", first.service, { node = node.hostname, node_id = node.id })
  run.node_eng, err = cluster.node_engine(node, { timeout = run.timeout, project = run.plan.project })
  if not run.node_eng then return nil, err end
  ok, err = forwarder_create(run)
  if not ok then return nil, err end
  ok, err = wait_wave(run, { first })
  if not ok then return nil, err end
  -- did the manager keep the service's no-new-privileges? (API 1.41 drops the field)
  if run.shape.nnp then
    local s; s, err = cluster.op(run.mgr, "inspect_service", first.id)
    if not s then return nil, err end
    local priv = (((s.Spec or {}).TaskTemplate or {}).ContainerSpec or {}).Privileges or {}
    run.nnp_from_node = priv.NoNewPrivileges ~= true
  end
  return forwarder_start_and_probe(run)
end

-- The other services, pinned to the node, in dependency waves.
local function start_rest(run)
  local ready_set = { [run.shape.services[1].service] = true }
  local pending = {}
  for i = 2, #run.shape.services do
    local c = run.shape.services[i]
    spec.pin(c.body, run.node.id)
    pending[#pending + 1] = c
  end
  while #pending > 0 do
    local wave, later = {}, {}
    for _, c in ipairs(pending) do
      local deps_ok = true
      for _, d in ipairs(c.depends_on) do if not ready_set[d] then deps_ok = false end end
      if deps_ok then wave[#wave + 1] = c else later[#later + 1] = c end
    end
    if #wave == 0 then return nil, E.new("compose", "dependency_cycle", "no service can start") end
    local ok, err = create_services(run, wave)
    if not ok then return nil, err end
    ok, err = wait_wave(run, wave)
    if not ok then return nil, err end
    for _, c in ipairs(wave) do ready_set[c.service] = true end
    pending = later
  end
  return true
end

-- Every service's task still where it should be (for the readiness wait).
local function tasks_alive(run)
  local ids = {}
  for i, c in ipairs(run.shape.services) do ids[i] = c.id end
  local tasks, err = cluster.tasks(run.mgr, ids)
  if not tasks then return nil, err end
  for _, c in ipairs(run.shape.services) do
    local t = cluster.current_task(tasks, c.id)
    if not t or ENDED[(t.Status or {}).State] then
      return nil, t and task_error(c, t) or E.new("engine", "task_failed", "service " .. c.service .. " has no task")
    end
  end
  return true
end

-- A live key's project already has services: conflict/stack_exists, as docker's start answers,
-- before anything is made (the rollback by run label would spare the live stack, but the start
-- would fail later on a name the manager refuses, with nothing saying why).
local function absent(mgr, plan)
  local svcs, err = cluster.services(mgr, "io.sandstack.project=" .. plan.project)
  if not svcs then return nil, err end
  if #svcs == 0 then return true end
  return E.fail("conflict", "stack_exists", ("session %s already has a stack: project %s has %d services on the "
    .. "swarm; nothing was changed. Use it with sandstack.swarm.reconnect(record), or remove it with "
    .. "sandstack.swarm.reap{project = %q} and start again"):format(tostring(plan.session_key), plan.project, #svcs,
    plan.project), { project = plan.project, session_key = plan.session_key, services = #svcs })
end

-- pool: a warm pool's name (sandstack.swarm.pool), labelling every object io.sandstack.pool.
function M.start(session_key, opts, pool)
  local clean, hooks, sw = split(session_key, opts)
  local ok, err = refusals(clean)
  if not ok then return nil, err end
  local model; model, err = core.stack_model(clean, session_key)
  if not model then return nil, err end
  local mgr; mgr, err = cluster.manager(clean)
  if not mgr then model:close(); return nil, err end
  local plan; plan, err = model:plan { api_version = mgr.api_version, pool = pool }
  model:close()
  if not plan then mgr:close(); return nil, err end
  ok, err = absent(mgr, plan)
  if not ok then mgr:close(); return nil, err end
  local shape; shape, err = spec.translate(plan, { constraints = sw.constraints })
  if not shape then mgr:close(); return nil, err end
  local run = { mgr = mgr, plan = plan, shape = shape, t0 = now(), on_event = hooks.on_event,
    req_adapter = hooks.req_adapter, timeout = clean.timeout, api_version = mgr.api_version,
    placement_timeout = sw.placement_timeout or 30, task_timeout = sw.task_timeout or 120,
    health_timeout = plan.health_timeout, created = { overlays = {}, services = {} } }
  local steps = {
    function() return create_overlays(run) end,
    function() return place(run) end,
    function() return start_rest(run) end,
    function()
      run.port, err = readiness.read_port { eng = run.node_eng, plan = plan }
      return run.port, err
    end,
    function()
      if run.req_adapter then -- the caller's own HTTP client: it must run where the node's loopback is
        return readiness.wait_ready({ eng = run.node_eng, plan = plan, t0 = run.t0, on_event = run.on_event,
          req_adapter = run.req_adapter }, run.port)
      end
      run.forwarder_container = shape.forwarder.name
      run.check_tasks = function() return tasks_alive(run) end
      return ready.wait(run)
    end,
    function() return names.wait(run) end, -- the names a health check holds back (swarm/names.lua)
  }
  for _, step in ipairs(steps) do
    local okstep, res, e = pcall(step)
    if not okstep or not res then
      local rok, rerr = inventory.remove(mgr, run.node_eng, "io.sandstack.run=" .. plan.run, run.created)
      emit(run, "rolled_back", nil, { services = #run.created.services, overlays = #run.created.overlays,
        error = rerr })
      if run.node_eng then run.node_eng:close() end
      mgr:close()
      if not okstep then error(res, 0) end
      if not rok and type(e) == "table" then
        e.rollback_error = rerr
        e.message = tostring(e.message) .. "; the rollback left " .. tostring(rerr and rerr.message)
      end
      return nil, e
    end
  end
  local stack = handle.new(mgr, run.node_eng, run.node, plan, { hooks = hooks, docker_host = clean.docker_host,
    timeout = clean.timeout })
  handle.set_port(stack, run.port)
  return stack
end

-- The Swarm bodies a start would send, without a cluster (for inspection and tests), a
-- credential's secret never shown (as sandstack.docker.plan: a marker in its place).
function M.plan(session_key, opts, ctx)
  local clean, _, sw = split(session_key, opts)
  local ok, err = refusals(clean)
  if not ok then return nil, err end
  ctx = ctx or {}
  E.check_keys(ctx, { api_version = true, now = true, token = true, run = true }, "sandstack.swarm.plan")
  local model; model, err = core.stack_model(clean, session_key, { now = ctx.now, token = ctx.token, run = ctx.run })
  if not model then return nil, err end
  local plan; plan, err = model:plan { api_version = ctx.api_version, redact = true }
  model:close()
  if not plan then return nil, err end
  local shape; shape, err = spec.translate(plan, { constraints = sw.constraints })
  if not shape then return nil, err end
  shape.project = plan.project
  return shape
end

return M
