-- The start pipeline of sandstack.swarm (internal). The same model as sandstack.docker.start
-- (core.stack_model validates the options, mints the token and the run label); its Swarm plan
-- (model:swarm_plan, csrc/stack/swarm_plan.c) holds every create finished, and this file only
-- sends them, in the shared step loop (stack/steps.lua). Then:
--   1. the overlays, on the manager;
--   2. the first service in dependency order, with the whole session's reservation and no
--      constraint of sandstack's: Swarm's scheduler chooses the node (a drained, paused or full
--      node is never chosen);
--   3. the forwarder, a standalone container on that node's own engine as the plan made it:
--      publishing on the node's 127.0.0.1, joined to the session's (attachable) overlay once
--      the first task has brought the overlay to the node; with it, the node's promises,
--      checked on the node (swarm/verify.lua);
--   4. the other services in dependency order, each pinned to that node (node.id==..., planned
--      again by C once the node is known), each wave once its dependencies run (and pass their
--      ready test, run by exec on the node);
--   5. readiness through the forwarder (swarm/ready.lua).
-- Any failure removes what this run made (by its run label, on the manager and the node).
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"
local run_ctx = require "sandstack.stack.run"
local readiness = require "sandstack.stack.readiness"
local spec = require "sandstack.swarm.spec"
local steps = require "sandstack.stack.steps"
local cluster = require "sandstack.swarm.cluster"
local verify = require "sandstack.swarm.verify"
local ready = require "sandstack.swarm.ready"
local inventory = require "sandstack.swarm.inventory"
local handle = require "sandstack.swarm.handle"
local names = require "sandstack.swarm.names"
local service_tasks = require "sandstack.swarm.start_tasks" -- the services' tasks: read, waited for, their ends

local M = {}
local core_model = require("sandstack.core").stack_model
local now, pause, emit = run_ctx.now, run_ctx.pause, run_ctx.emit

-- Options of sandstack.swarm only; every other key is the stack's and goes to the C model.
local SWARM_KEYS = E.described {
  { "constraints", type = "list of `\"attribute==value\"` or `\"attribute!=value\"`", default = "none",
    refused = "anything else" },
  { "placement_timeout", type = "seconds", default = "`30`",
    refused = "not above 0: a task not placed by then fails the start" },
  { "task_timeout", type = "seconds", default = "`120`",
    refused = "not above 0: a placed task not running by then fails it" },
}

-- What Swarm cannot give is refused by the C plan (csrc/stack/swarm_plan.c), before anything is
-- made; sandstack.swarm's own keys are checked here: a wrong type raises at the caller, a value
-- refused is compose/invalid_option. -> clean, hooks, own | nil, err
local function split(session_key, opts)
  local what = "sandstack.swarm.start"
  local clean, hooks, sw = steps.split(what, session_key, opts, SWARM_KEYS)
  E.want(sw.constraints, "table", what, "constraints", "a list of strings")
  for _, c in ipairs(sw.constraints or {}) do
    E.want(c, "string", what, "constraints", "a list of strings")
    if c == nil or not c:match("^[%w%._%-]+%s*[!=]=%s*[^%c]+$") then
      return E.refuse(what, "constraints", "holds " .. ("%q"):format(c) .. ", not 'attribute==value' or 'attribute!=value'",
        "compose")
    end
  end
  for _, k in ipairs { "placement_timeout", "task_timeout" } do
    E.want(sw[k], "number", what, k, "a number of seconds")
    if sw[k] ~= nil and not (sw[k] > 0) then return E.refuse(what, k, "must be a number of seconds above 0", "compose") end
  end
  return clean, hooks, sw
end

-- The creates' answers of wave (from position `from` of res): each service's id kept, for the
-- rollback too.
local function created(run, wave, res, from)
  local first
  for i, c in ipairs(wave) do
    local r = res[(from or 0) + i]
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

-- The overlays, then the first service, then its tasks: one call of three waves (each sent when
-- the one before is done).
local function create_first(run)
  local first = run.shape.services[1]
  local overlays = {}
  for i, o in ipairs(run.shape.overlays) do overlays[i] = o.create end -- finished by C, sent as they are
  local r_over, r_first, r_tasks = run.mgr:perform(overlays, 60, { first.create }, { first.tasks })
  for i, r in ipairs(r_over) do
    if not r.ok then return nil, r.err end
    run.created.overlays[#run.created.overlays + 1] = r.body.Id
    emit(run, "network_created", nil, { network = run.shape.overlays[i].name, driver = "overlay" })
  end
  local ok, err = created(run, { first }, r_first)
  if not ok then return nil, err end
  if r_tasks then run.tasks, run.tasks_at = service_tasks.settle({ first }, r_tasks) end
  return true
end

-- The forwarder's publish network and its container (created, not started) on the node, in one
-- call: they need nothing of the overlay, so they are made while the node starts the first task.
local function forwarder_create(run)
  local eng, fw = run.node_eng, run.shape.forwarder
  local r_nets, r_fw = eng:perform(run.shape.local_networks, 60, { fw })
  for i, r in ipairs(r_nets) do
    if not r.ok then return nil, r.err end
    emit(run, "network_created", nil, { network = run.shape.local_networks[i].name, node = run.node.hostname })
  end
  if not r_fw[1].ok then return nil, r_fw[1].err end
  emit(run, "container_created", fw.service, { container = fw.name, node = run.node.hostname })
  return true
end

-- Once the first task runs, the session's overlay is on the node: the forwarder joins it and
-- starts (socat resolves the sandbox per connection, so it may start before the sandbox does),
-- and the node probe (when this node was not checked before) is made and started alongside: one
-- call, the starts its second wave.
local function forwarder_start_and_probe(run)
  local eng, fw = run.node_eng, run.shape.forwarder
  local probe = verify.probe_request(run)
  local reqs, starts = {}, { fw.start }
  for _, cn in ipairs(fw.connects) do reqs[#reqs + 1] = cn end
  if probe then reqs[#reqs + 1] = probe.create; starts[2] = probe.start end
  local made, started = eng:perform(reqs, 60, starts)
  local err = batch.first_error(made) or (started and batch.first_error(started))
  if err then return nil, err end
  emit(run, "container_started", fw.service, { container = fw.name })
  if probe then return verify.check(run, probe) end
  return true
end

-- The first service: Swarm chooses its node. Then C plans the others again, pinned to it, with
-- that node's read; the node's engine, the forwarder, and the node's promises.
local function place(run)
  local first = run.shape.services[1]
  local tasks, at = run.tasks, run.tasks_at
  local t0 = at or now()
  while true do
    local t = tasks and tasks[first.service]
    local st = t and t.Status or {}
    if t and t.NodeID and t.NodeID ~= "" then first.node_id = t.NodeID; break end
    if t and service_tasks.ENDED[st.State] then return nil, service_tasks.task_error(first, t) end
    if (at or t0) - t0 > run.placement_timeout then
      return nil, E.new("engine", "no_suitable_node", ("Swarm placed no task of %s within %gs: %s"):format(
        first.service, run.placement_timeout, tostring(st.Err or st.Message or "pending")),
        { service = first.service, detail = st.Err })
    end
    pause(0.05)
    local got, x = service_tasks.read(run, { first })
    if not got then return nil, x end
    tasks, at = got, x
  end
  local pinned, err = spec.plan(run.model, { api_version = run.api_version, constraints = run.constraints,
    node_id = first.node_id, pool = run.pool })
  if not pinned then return nil, err end
  for i = 2, #run.shape.services do run.shape.services[i].create = pinned.swarm.services[i].create end
  -- did the manager keep the service's no-new-privileges? (API 1.41 drops the field)
  local res = run.mgr:perform({ pinned.swarm.reads.node, run.shape.nnp and first.inspect or nil }, 60)
  local node; node, err = cluster.node_answer(res[1], first.node_id)
  if not node then return nil, err end
  if run.shape.nnp then
    if not res[2].ok then return nil, res[2].err end
    local priv = ((((res[2].body or {}).Spec or {}).TaskTemplate or {}).ContainerSpec or {}).Privileges or {}
    run.nnp_from_node = priv.NoNewPrivileges ~= true
  end
  run.node = node
  emit(run, "placed", first.service, { node = node.hostname, node_id = node.id })
  run.node_eng, err = cluster.node_engine(node, { timeout = run.timeout, project = run.plan.project })
  if not run.node_eng then return nil, err end
  local ok; ok, err = forwarder_create(run)
  if not ok then return nil, err end
  ok, err = service_tasks.wait_wave(run, { first }, tasks, at, true)
  if not ok then return nil, err end
  ok, err = forwarder_start_and_probe(run)
  if not ok then return nil, err end
  run.forwarder_running = run.shape.forwarder.name
  if not (first.ready_log or first.ready_port) then return true end
  return service_tasks.wait_wave(run, { first }) -- its ready log and port, now that the forwarder runs
end

-- The other services, pinned to the node, in dependency waves: each wave's creates and then
-- their tasks' reads in one call.
local function start_rest(run)
  local ready_set = { [run.shape.services[1].service] = true }
  local pending = {}
  for i = 2, #run.shape.services do pending[#pending + 1] = run.shape.services[i] end
  while #pending > 0 do
    local wave, later = {}, {}
    for _, c in ipairs(pending) do
      local deps_ok = true
      for _, d in ipairs(c.depends_on) do if not ready_set[d] then deps_ok = false end end
      if deps_ok then wave[#wave + 1] = c else later[#later + 1] = c end
    end
    if #wave == 0 then return nil, E.new("compose", "dependency_cycle", "no service can start") end
    local creates, reads = {}, {}
    for i, c in ipairs(wave) do creates[i], reads[i] = c.create, c.tasks end
    local r_made, r_tasks = run.mgr:perform(creates, 60, reads)
    local ok, err = created(run, wave, r_made)
    if not ok then return nil, err end
    local tasks, at = service_tasks.settle(wave, r_tasks)
    if not tasks then return nil, at end
    ok, err = service_tasks.wait_wave(run, wave, tasks, at)
    if not ok then return nil, err end
    for _, c in ipairs(wave) do ready_set[c.service] = true end
    pending = later
  end
  return true
end

-- A live key's project already has services (r: the answer to the plan's `existing` read):
-- conflict/stack_exists, as docker's start answers, before anything is made (the rollback by run
-- label would spare the live stack, but the start would fail later on a name the manager
-- refuses, with nothing saying why).
local function absent(r, plan)
  if not r.ok then return nil, r.err end
  local svcs = r.body
  if type(svcs) ~= "table" then return E.fail("engine", "bad_answer", "the manager's service list is malformed") end
  if #svcs == 0 then return true end
  return E.fail("conflict", "stack_exists", ("session %s already has a stack: project %s has %d services on the "
    .. "swarm; nothing was changed. Use it with sandstack.swarm.reconnect(record), or remove it with "
    .. "sandstack.swarm.reap{project = %q} and start again"):format(tostring(plan.session_key), plan.project, #svcs,
    plan.project), { project = plan.project, session_key = plan.session_key, services = #svcs })
end

-- start(session_key, opts[, pool]) -> stack | nil, err; pool: a warm pool's name, labelling every
-- object io.sandstack.pool.
function M.start(session_key, opts, pool)
  local clean, hooks, sw = split(session_key, opts)
  if not clean then return nil, hooks end
  local model, err = core_model(clean, session_key)
  if not model then return nil, err end
  local mgr; mgr, err = cluster.client(clean)
  if not mgr then model:close(); return nil, err end
  local plan; plan, err = spec.plan(model, { api_version = mgr.api_version, constraints = sw.constraints, pool = pool })
  local ok
  if plan then -- is it a manager, and is the project free: one call
    local res = mgr:perform({ plan.swarm.reads.info, plan.swarm.reads.existing }, 60)
    ok, err = cluster.check_manager(mgr, res[1])
    if ok then ok, err = absent(res[2], plan) end
  end
  if not ok then model:close(); mgr:close(); return nil, err end
  local shape = plan.swarm
  plan.swarm = nil -- the handle keeps the stack's plan; the shape is this run's
  -- the clock is read for on_event's `elapsed` only
  local run = { mgr = mgr, model = model, plan = plan, shape = shape, t0 = hooks.on_event and now(), pool = pool,
    on_event = hooks.on_event, req_adapter = hooks.req_adapter, timeout = clean.timeout, api_version = mgr.api_version,
    constraints = sw.constraints, placement_timeout = sw.placement_timeout or 30,
    task_timeout = sw.task_timeout or 120, health_timeout = plan.health_timeout,
    created = { overlays = {}, services = {} } }
  ok, err = steps.run({
    function() return create_first(run) end,
    function() return place(run) end,
    function() return start_rest(run) end,
    function()
      run.port, err = readiness.read_port { eng = run.node_eng, plan = plan }
      return run.port, err
    end,
    function()
      if run.req_adapter then -- the caller's own HTTP client: it must run where the node's loopback is
        return readiness.wait_ready({ eng = run.node_eng, plan = plan, t0 = run.t0, on_event = run.on_event,
          req_adapter = run.req_adapter }, run.port, function() return select(2, service_tasks.alive(run)) end)
      end
      run.forwarder_container = shape.forwarder.name
      run.check_tasks = function() return service_tasks.alive(run) end
      return ready.wait(run)
    end,
    function() return names.wait(run) end, -- the names a health check holds back (swarm/names.lua)
  }, function()
    model:close()
    local rok, rerr = inventory.remove(mgr, run.node_eng, "io.sandstack.run=" .. plan.run, run.created)
    emit(run, "rolled_back", nil, { services = #run.created.services, overlays = #run.created.overlays,
      error = rerr })
    if run.node_eng then run.node_eng:close() end
    mgr:close()
    return not rok and rerr or nil
  end, plan.project)
  if not ok then return nil, err end
  model:close()
  local stack = handle.new(mgr, run.node_eng, run.node, plan, { hooks = hooks, docker_host = clean.docker_host,
    timeout = clean.timeout })
  handle.set_port(stack, run.port)
  return stack
end

-- The Swarm bodies a start would send, without a cluster (for inspection and tests), a
-- credential's secret never shown (as sandstack.docker.plan: a marker in its place).
function M.plan(session_key, opts, ctx)
  local clean, serr, sw = split(session_key, opts)
  if not clean then return nil, serr end
  ctx = ctx or {}
  E.check_keys(ctx, { api_version = true, now = true, token = true, run = true }, "sandstack.swarm.plan")
  local model, err = core_model(clean, session_key, { now = ctx.now, token = ctx.token, run = ctx.run })
  if not model then return nil, err end
  local plan; plan, err = spec.plan(model, { api_version = ctx.api_version, constraints = sw.constraints, redact = true })
  model:close()
  if not plan then return nil, err end
  return plan.swarm
end

return M
