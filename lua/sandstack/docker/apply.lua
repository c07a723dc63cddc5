-- The executor: applies a plan (csrc/stack, pure data) to an engine. Sends the finished requests
-- the plan holds (it never edits a body), in parallel where nothing depends on anything, and on
-- any failure removes exactly what this run created (every object carries the plan's run
-- label). Starting services and health are docker/services.lua's, readiness stack/readiness.lua's.
local ops = require "sandstack.engine.ops"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"

local A = {}

local run_ctx = require "sandstack.stack.run"
local core = require "sandstack.core"
A.now, A.sleep, A.cooperate, A.emit = run_ctx.now, run_ctx.sleep, run_ctx.cooperate, run_ctx.emit

local function image_error(image, detail)
  return E.new("engine", "image_missing",
    ("image %s is not on this engine and could not be pulled (%s): build or load it first "
      .. "(docker build -t %s ..., or docker save/docker load from a machine that has it), "
      .. "or make its registry reachable"):format(image, detail, image), { image = image })
end

-- The reads that precede every create, in one round: the image checks, the isolation
-- self-check's identity (its verdict's key and the memos on the engine) or /info for the
-- runtime check, all held by the plan (plan.preflight: one read per image first), and the
-- project's label lists: a project that already has objects is another stack's (a crashed
-- session's, or a second start of a live key), and this start stops there, sending nothing
-- that could change it. Kept on run for the steps that use them.
function A.preflight(run)
  local plan = run.plan
  local reqs = {}
  for i, q in ipairs(plan.preflight) do reqs[i] = q end
  local pre = #reqs
  for _, q in ipairs(plan.removals.lists) do reqs[#reqs + 1] = q end -- the project's label lists
  if plan.port_check then reqs[#reqs + 1] = plan.port_check end -- the ports published now
  local r = batch.run(run.eng, reqs, 30)
  local n = #plan.images
  local function slice(i, j)
    local out = {}
    for k = i, j do out[#out + 1] = r[k] end
    return out
  end
  run.found_images = slice(1, n)
  if plan.isolation_check then
    run.identity, run.info = slice(n + 1, pre), r[n + 2] -- the identity: /version, /info, ...
  elseif plan.runtime then
    run.info = r[n + 1]
  end
  local ok, err = A.absent(run, r[pre + 1], r[pre + 2], r[pre + 3])
  if not ok then return nil, err end
  return require("sandstack.docker.ports").check(plan, r[pre + 4] or {})
end

-- True when the engine lists nothing labelled with the plan's project; else nil and the
-- conflict: kind "conflict", reason "stack_exists", naming the project, its state and the two
-- ways on (reconnect to it, or take it down).
function A.absent(run, cs, ns, vs)
  local err = batch.first_error { cs, ns, vs }
  if err then return nil, err end
  local lists; lists, err = require("sandstack.docker.inventory").checked_lists(cs.body, ns.body, vs.body)
  if not lists then return nil, err end
  if #lists.containers + #lists.networks + #lists.volumes == 0 then return true end
  local plan = run.plan
  local running, total, states = 0, 0, {}
  for _, c in ipairs(lists.containers) do
    local svc = type(c.Labels) == "table" and c.Labels["io.sandstack.service"]
    if svc then
      total = total + 1
      if c.State == "running" then running = running + 1 end
      states[#states + 1] = svc .. " " .. tostring(c.State)
    end
  end
  table.sort(states)
  local state = total == 0 and "partial" or running == total and "running" or running == 0 and "stopped"
    or "partly running"
  local detail = total == 0 and (("%d networks and %d volumes, no container"):format(#lists.networks, #lists.volumes))
    or table.concat(states, ", ")
  return nil, E.new("conflict", "stack_exists",
    ("session %s already has a stack: project %s is %s (%s); nothing was changed. Use it with "
      .. "sandstack.docker.reconnect(record), or remove it with `sandstack down %s` and start again")
      :format(tostring(plan.session_key), plan.project, state, detail, tostring(plan.session_key or plan.project)),
    { project = plan.project, session_key = plan.session_key, state = state, containers = #lists.containers,
      networks = #lists.networks, volumes = #lists.volumes })
end

-- Images: "missing" pulls what is absent, "always" pulls all, "never" only checks. Each pull is
-- the plan's (plan.pulls, one per image).
function A.ensure_images(run)
  local eng, plan = run.eng, run.plan
  if not run.found_images then A.preflight(run) end
  local found = run.found_images
  local pulls, which = {}, {}
  for i, img in ipairs(plan.images) do
    local r = found[i]
    if not r.ok then return nil, r.err end
    local absent = r.status == 404
    if absent and plan.pull == "never" then return nil, image_error(img, 'pull = "never"') end
    if plan.pull == "always" or absent then
      pulls[#pulls + 1] = plan.pulls[i]
      which[#pulls] = img
    end
  end
  local pulled = batch.run(eng, pulls, 300)
  for i, r in ipairs(pulled) do
    local body = r.body
    local text = type(body) == "string" and body or ""
    local streamed = text:match('"error"%s*:%s*"([^"]*)"')
    if not r.ok or streamed then
      return nil, image_error(which[i], streamed or (r.err and r.err.message) or "pull failed")
    end
    A.emit(run, "image_pulled", nil, { image = which[i] })
  end
  return true
end

local function pool_exhausted(err) return err ~= nil and err.cause == "no_subnet" end

-- a subnet the engine would not place: taken by another network, or no room left
local function overlap(err) return err ~= nil and (err.cause == "subnet_overlap" or err.cause == "no_subnet") end

function A.used_subnets(eng)
  local r = batch.run(eng, { core.engine_reads.networks }, 60)[1]
  if not r.ok then return nil, r.err end
  local nets = type(r.body) == "table" and r.body or {}
  local used = {}
  for _, n in ipairs(nets) do
    for _, c in ipairs((n.IPAM or {}).Config or {}) do
      if c.Subnet then used[#used + 1] = c.Subnet end
    end
  end
  return used
end

-- Subnets for the networks that are still to be made (keys: sbx, pub, egress, isocheck), all from
-- one walk of subnet_pool against `used`, which the picks are added to.
local NET_KEYS = { "sbx", "pub", "egress", "isocheck" }
local function pick_subnets(run, used, keys)
  local picked, err = core.stack_pick_subnet(run.subnet_pool, used, nil, 28, #keys) -- seeded in C
  if not picked then return nil, err end
  for i, k in ipairs(keys) do run.subnets[k] = picked[i]; used[#used + 1] = picked[i] end
  return true
end

-- (Re)plans the stack: with subnet_pool, every network gets a /28 of the pool that no network of
-- the engine uses now. The model keeps the token, names and run label, so a second plan (after a
-- subnet was taken by another process) differs only in the subnets.
-- The first plan of a run picks its subnets in the same call (model:plan's subnet_pool and
-- used: csrc/lua/stack.c) and hands them back as plan.subnets.
function A.plan(run)
  local args = { api_version = run.eng.api_version, pool = run.pool, subnets = run.subnets,
    control_dir = run.control_dir, control_uid = run.control_dir and core.euid() or nil, init = run.init }
  if run.subnet_pool and not run.subnets then
    local used, err = A.used_subnets(run.eng)
    if not used then return nil, err end
    run.used, args.subnet_pool, args.used = used, run.subnet_pool, used
  end
  local plan, err = run.model:plan(args)
  if not plan then return nil, err end
  if args.used then
    run.subnets = plan.subnets
    for _, k in ipairs(NET_KEYS) do args.used[#args.used + 1] = plan.subnets[k] end
  end
  run.plan, run.nonce = plan, plan.run
  return plan
end

-- Whether an object the engine answered with carries this run's label.
function A.ours(run, body)
  local labels = type(body) == "table" and type(body.Labels) == "table" and body.Labels or {}
  return run.nonce ~= nil and labels["io.sandstack.run"] == run.nonce
end

-- The container creates and then their connects: two rounds. The last create is sandstack-init's
-- volume holder, when the plan has one, and the second round writes the init's volume through
-- it, beside the connects: no round of its own before the starts (docker/deadline.lua).
local function container_rounds(plan)
  local creates, connects = {}, {}
  for i, c in ipairs(plan.containers) do
    creates[i] = c -- the plan's finished requests, sent as they are
    for _, cn in ipairs(c.connects) do connects[#connects + 1] = cn end
  end
  if plan.init then
    creates[#creates + 1] = plan.init.holder
    connects[#connects + 1] = require("sandstack.docker.deadline").install_request(plan)
  end
  return creates, connects
end

-- Networks and volumes: one parallel batch, with the containers' rounds as its later waves. A
-- subnet another process took in the meantime is picked again, the plan made again, and only
-- those networks are asked for again (the containers then go in their own step).
function A.create_networks_and_volumes(run)
  local eng = run.eng
  local todo = {}
  for _, n in ipairs(run.plan.networks) do todo[#todo + 1] = n.key end
  for attempt = 1, 6 do
    local plan = run.plan
    local reqs, items = {}, {}
    for _, n in ipairs(plan.networks) do
      for _, k in ipairs(todo) do
        if n.key == k then
          reqs[#reqs + 1] = n
          items[#reqs] = { net = n }
        end
      end
    end
    if attempt == 1 then
      for _, v in ipairs(plan.volumes) do
        reqs[#reqs + 1] = v
        items[#reqs] = { vol = v }
      end
    end
    local results
    if attempt == 1 then -- the containers' two rounds ride along, sent when all of these are made
      local made, connected
      results, made, connected = eng:perform(reqs, 60, container_rounds(plan))
      run.containers_sent = made and { made, connected } or nil
    else
      results = batch.run(eng, reqs, 60)
    end
    local retry, first_err = {}, nil
    for i, r in ipairs(results) do
      local it = items[i]
      if r.ok and it.net then
        run.created.networks[#run.created.networks + 1] = r.body and r.body.Id or it.net.name
        A.emit(run, "network_created", nil, { network = it.net.name, subnet = it.net.subnet })
      elseif r.ok and not A.ours(run, r.body) then
        -- a volume create of a name that exists answers with that volume: another stack's,
        -- made since the preflight read. Not ours to remove, and this start cannot go on.
        first_err = first_err or E.new("conflict", "stack_exists", ("volume %s already exists (another process "
          .. "started project %s at the same time?); nothing of it was changed"):format(it.vol.name, run.plan.project),
          { project = run.plan.project, session_key = run.plan.session_key, volume = it.vol.name })
      elseif r.ok then
        run.created.volumes[#run.created.volumes + 1] = it.vol.name
        A.emit(run, "volume_created", nil, { volume = it.vol.name })
      elseif it.net and run.subnets and overlap(r.err) then
        retry[#retry + 1] = it.net.key
      else
        if pool_exhausted(r.err) then
          r.err = E.new("engine", "address_pool_exhausted",
            "the engine has no free address pool for " .. (it.net and it.net.name or "?")
              .. ": remove stale stacks (sandstack reap) or give sandstack a subnet_pool",
            { status = r.status, method = "POST", path = ops.request("create_network", nil, { body = {} }).path, cause = r.err.message })
        end
        first_err = first_err or r.err
      end
    end
    if first_err then return nil, first_err end
    if #retry == 0 then return true end
    todo = retry
    local used = A.used_subnets(eng) or run.used
    for _, k in pairs(run.subnets) do used[#used + 1] = k end
    local ok, err = pick_subnets(run, used, retry)
    if not ok then return nil, err end
    ok, err = A.plan(run)
    if not ok then return nil, err end
  end
  return nil, E.new("engine", "address_pool_exhausted", "could not place the networks in subnet_pool " .. run.subnet_pool)
end

-- Containers: created in parallel, then every extra network connected before start. Both rounds
-- were usually sent already, as the later waves of the networks' call (perform's waves: sent
-- when every network and volume was made); else they are sent here, in one call.
function A.create_containers(run)
  local eng, plan = run.eng, run.plan
  local creates, connects = container_rounds(plan)
  local results, connected
  if run.containers_sent then
    results, connected = run.containers_sent[1], run.containers_sent[2]
    run.containers_sent = nil
  else
    results, connected = eng:perform(creates, 60, connects)
  end
  local first_err
  for i, r in ipairs(results) do
    local c = plan.containers[i] or { name = plan.init.holder.name, image = plan.containers[#plan.containers].image }
    -- (the init's holder: no service; its image is the forwarder's, the plan's last container)
    if r.ok then
      run.created.containers[#run.created.containers + 1] = r.body and r.body.Id or c.name
      if c.service then A.emit(run, "container_created", c.service, { container = c.name }) end
    elseif r.status == 404 then
      first_err = first_err or image_error(c.image, r.err.message)
    else
      first_err = first_err or r.err
    end
  end
  if first_err then return nil, first_err end
  return A.check(connected or batch.run(eng, connects, 60)) -- a stand-in client may not send `after`
end

function A.check(results)
  local err = batch.first_error(results)
  if err then return nil, err end
  return true
end

-- Removes what this run created, newest first; failures here never hide the original error.
-- Returns nil, or the first removal that failed after its retries (it names the object), so
-- the caller can say what is left behind.
function A.rollback(run)
  local c = run.created
  local _, first = batch.remove(run.eng, c)
  if run.nonce then
    local r = batch.run(run.eng, batch.list_requests("io.sandstack.run=" .. run.nonce), 60)
    local function ids(res, key)
      local out = {}
      for _, o in ipairs(res.ok and type(res.body) == "table" and (res.body.Volumes or res.body) or {}) do out[#out + 1] = o[key] end
      return out
    end
    local _, err = batch.remove(run.eng, { containers = ids(r[1], "Id"), networks = ids(r[2], "Id"), volumes = ids(r[3], "Name") })
    first = first or err
  end
  A.emit(run, "rolled_back", nil, { containers = #c.containers, networks = #c.networks, volumes = #c.volumes,
    error = first })
  return first
end

-- The services' start (docker/services.lua) and the shared readiness half (stack/readiness.lua),
-- under the executor's name for its callers; a container that exits ends the readiness wait.
local readiness = require "sandstack.stack.readiness"
local services = require "sandstack.docker.services"
A.inspect, A.start_services, A.read_port = readiness.inspect, services.start_services, readiness.read_port
function A.wait_ready(run, port) return readiness.wait_ready(run, port, services.exited) end

return A
