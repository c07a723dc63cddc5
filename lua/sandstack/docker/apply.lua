-- The executor: applies a plan (csrc/stack, pure data) to an engine. Creates what the plan
-- names, in parallel where nothing depends on anything, starts services in dependency order,
-- waits for health and readiness, and on any failure removes exactly what this run created.
local E = require "sandstack.error"
local batch = require "sandstack.docker.batch"

local A = {}

-- The core's monotonic clock and sleep: no LuaSocket needed, no whole-second os.time deadlines,
-- and no `sleep` child process (one would inherit a gateway's descriptors).
local core = require "sandstack.core"
local now, sleep = core.engine_clock, core.sleep
A.now, A.sleep = now, sleep

function A.emit(run, phase, service, extra)
  if not run.on_event then return end
  local ev = { phase = phase, service = service, project = run.plan.project,
    elapsed = now() - run.t0 }
  for k, v in pairs(extra or {}) do ev[k] = v end
  -- a failing callback must not leave half a stack behind: report it, carry on
  local ok, err = pcall(run.on_event, ev)
  if not ok then io.stderr:write("sandstack: on_event failed: ", tostring(err), "\n") end
end

local function split_image(ref)
  local name, tag = ref:match("^(.+):([%w][%w_.-]*)$")
  if name and not tag:find("/") then return name, tag end
  return ref, "latest"
end

local function image_error(image, detail)
  return E.new("engine", "image_missing",
    ("image %s is not on this engine and could not be pulled (%s): build or load it first "
      .. "(docker build -t %s ..., or docker save/docker load from a machine that has it), "
      .. "or make its registry reachable"):format(image, detail, image), { image = image })
end

-- Images: "missing" pulls what is absent, "always" pulls all, "never" only checks.
function A.ensure_images(run)
  local eng, plan = run.eng, run.plan
  local reqs = {}
  for i, img in ipairs(plan.images) do reqs[i] = { "GET", "/images/" .. img .. "/json", nil, nil, ok = { [404] = true } } end
  local found = batch.run(eng, reqs, 30)
  local pulls, which = {}, {}
  for i, img in ipairs(plan.images) do
    local r = found[i]
    if not r.ok then return nil, r.err end
    local absent = r.status == 404
    if absent and plan.pull == "never" then return nil, image_error(img, 'pull = "never"') end
    if plan.pull == "always" or absent then
      local name, tag = split_image(img)
      pulls[#pulls + 1] = { "POST", "/images/create", nil,
        { query = { fromImage = name, tag = tag }, timeout = 300, max_bytes = 16 * 2 ^ 20 } }
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

local function pool_exhausted(err)
  local msg = err and err.message or ""
  return msg:find("non%-overlapping IPv4 address pool") or msg:find("fully subnetted")
end

local function overlap(err)
  local msg = err and err.message or ""
  return msg:find("overlap") ~= nil
end

function A.used_subnets(eng)
  local nets, err = eng:call("GET", "/networks")
  if not nets then return nil, err end
  local used = {}
  for _, n in ipairs(nets) do
    for _, c in ipairs((n.IPAM or {}).Config or {}) do
      if c.Subnet then used[#used + 1] = c.Subnet end
    end
  end
  return used
end

local function pick_subnet(run, used)
  local seed = tonumber(core.random_hex(3), 16)
  local s, err = core.stack_pick_subnet(run.plan.subnet_pool, used, seed, 28)
  if s then used[#used + 1] = s end
  return s, err
end

-- A fresh /28 of subnet_pool that no network of the engine uses now.
function A.fresh_subnet(run)
  local used, err = A.used_subnets(run.eng)
  if not used then return nil, err end
  return pick_subnet(run, used)
end

-- Networks and volumes: one parallel batch. With subnet_pool, each network gets a /28 of the
-- pool; a subnet another process took in the meantime is retried with a fresh pick.
function A.create_networks_and_volumes(run)
  local eng, plan = run.eng, run.plan
  local used
  if plan.subnet_pool then
    local err
    used, err = A.used_subnets(eng)
    if not used then return nil, err end
  end
  local todo = {}
  for _, n in ipairs(plan.networks) do todo[#todo + 1] = n end
  for attempt = 1, 6 do
    local reqs, items = {}, {}
    for _, n in ipairs(todo) do
      if used then
        local s, err = pick_subnet(run, used)
        if not s then return nil, err end
        n.body.IPAM = { Driver = "default", Config = { { Subnet = s } } }
      end
      reqs[#reqs + 1] = { "POST", "/networks/create", n.body }
      items[#reqs] = { net = n }
    end
    if attempt == 1 then
      for _, v in ipairs(plan.volumes) do
        reqs[#reqs + 1] = { "POST", "/volumes/create", v.body }
        items[#reqs] = { vol = v }
      end
    end
    local results = batch.run(eng, reqs, 60)
    local retry, first_err = {}, nil
    for i, r in ipairs(results) do
      local it = items[i]
      if r.ok and it.net then
        run.created.networks[#run.created.networks + 1] = r.body and r.body.Id or it.net.name
        A.emit(run, "network_created", nil, { network = it.net.name, subnet = it.net.body.IPAM and it.net.body.IPAM.Config[1].Subnet })
      elseif r.ok then
        run.created.volumes[#run.created.volumes + 1] = it.vol.name
        A.emit(run, "volume_created", nil, { volume = it.vol.name })
      elseif it.net and used and overlap(r.err) then
        retry[#retry + 1] = it.net
      else
        if pool_exhausted(r.err) then
          r.err = E.new("engine", "address_pool_exhausted",
            "the engine has no free address pool for " .. (it.net and it.net.name or "?")
              .. ": remove stale stacks (sandstack reap) or give sandstack a subnet_pool",
            { status = r.status, method = "POST", path = "/networks/create", cause = r.err.message })
        end
        first_err = first_err or r.err
      end
    end
    if first_err then return nil, first_err end
    if #retry == 0 then return true end
    todo = retry
    used = A.used_subnets(eng) or used
  end
  return nil, E.new("engine", "address_pool_exhausted", "could not place the networks in subnet_pool " .. plan.subnet_pool)
end

-- Containers: created in parallel, then every extra network connected before start.
function A.create_containers(run)
  local eng, plan = run.eng, run.plan
  local reqs = {}
  for i, c in ipairs(plan.containers) do
    reqs[i] = { "POST", "/containers/create", c.body, { query = { name = c.name } } }
  end
  local results = batch.run(eng, reqs, 60)
  local first_err
  for i, r in ipairs(results) do
    local c = plan.containers[i]
    if r.ok then
      run.created.containers[#run.created.containers + 1] = r.body and r.body.Id or c.name
      A.emit(run, "container_created", c.service, { container = c.name })
    elseif r.status == 404 then
      first_err = first_err or image_error(c.image, r.err.message)
    else
      first_err = first_err or r.err
    end
  end
  if first_err then return nil, first_err end
  local connects = {}
  for _, c in ipairs(plan.containers) do
    for _, cn in ipairs(c.connects) do
      connects[#connects + 1] = { "POST", "/networks/" .. cn.network .. "/connect", cn.body }
    end
  end
  return A.check(batch.run(eng, connects, 60))
end

function A.check(results)
  local err = batch.first_error(results)
  if err then return nil, err end
  return true
end

local function inspect(eng, name)
  return eng:call("GET", "/containers/" .. name .. "/json")
end
A.inspect = inspect

local function exited_error(c, info)
  local code = info.State and info.State.ExitCode
  return E.new("exited", nil, ("service %s exited with code %s"):format(c.service, tostring(code)),
    { service = c.service, exit_code = code })
end

-- Runs the healthcheck's own test by exec: the engine waits a whole interval before its first
-- probe, while a passing test right after start already means "healthy" in the spec's sense.
local function probe(run, c)
  if not c.check or not run.eng.exec then return false end
  local hc = c.body.Healthcheck or {}
  local t = hc.Timeout and hc.Timeout / 1e9 or 5
  local res = run.eng:exec(c.name, c.check, { timeout = t, max_bytes = 65536 })
  return res ~= nil and res.exit_code == 0
end

-- Starts the given containers in dependency order: a service starts when each dependency is
-- healthy (with a healthcheck) or running (without). Independent services start together.
function A.start_services(run, containers)
  local eng, plan = run.eng, run.plan
  local state, by_service, started_at = {}, {}, {}
  for _, c in ipairs(containers) do state[c.service] = "pending"; by_service[c.service] = c end
  local function deps_ready(c)
    for _, d in ipairs(c.depends_on) do
      if state[d] and state[d] ~= "ready" then return false end
    end
    return true
  end
  local left = #containers
  while left > 0 do
    local progress = false
    local reqs, which = {}, {}
    for _, c in ipairs(containers) do
      if state[c.service] == "pending" and deps_ready(c) then
        reqs[#reqs + 1] = { "POST", "/containers/" .. c.name .. "/start", nil, nil, ok = { [304] = true } }
        which[#reqs] = c
      end
    end
    local results = batch.run(eng, reqs, 60)
    for i, r in ipairs(results) do
      local c = which[i]
      if not r.ok then return nil, r.err end
      started_at[c.service] = now()
      A.emit(run, "container_started", c.service, { container = c.name })
      if c.healthcheck then
        state[c.service] = "health"
        A.emit(run, "waiting_health", c.service)
      else
        state[c.service] = "ready"
        left = left - 1
      end
      progress = true
    end
    for _, c in ipairs(containers) do
      if state[c.service] == "health" then
        if probe(run, c) then
          state[c.service] = "ready"; left = left - 1; progress = true
          A.emit(run, "healthy", c.service, { by = "probe" })
        else
          local info, err = inspect(eng, c.name)
          if not info then return nil, err end
          local st = info.State or {}
          local health = st.Health and st.Health.Status
          if st.Status == "exited" or st.Status == "dead" then return nil, exited_error(c, info) end
          if health == "healthy" then
            state[c.service] = "ready"; left = left - 1; progress = true
            A.emit(run, "healthy", c.service, { by = "engine" })
          elseif health == "unhealthy" then
            return nil, E.new("unhealthy", nil, "service " .. c.service .. " is unhealthy", { service = c.service })
          elseif now() - started_at[c.service] > plan.health_timeout then
            return nil, E.new("timeout", nil, ("service %s was not healthy within %gs"):format(c.service, plan.health_timeout),
              { phase = "health", service = c.service })
          end
        end
      end
    end
    if left > 0 and not progress then sleep(0.1) end
  end
  return true
end

-- The forwarder's published host port: every start allocates a new one.
function A.read_port(run)
  local fw = run.plan.forwarder
  local key = ("%d/tcp"):format(run.plan.agent_port)
  for _ = 1, 50 do
    local info, err = inspect(run.eng, run.plan.project .. "-" .. fw)
    if not info then return nil, err end
    local ports = info.NetworkSettings and info.NetworkSettings.Ports or {}
    local b = type(ports[key]) == "table" and ports[key][1]
    if b and b.HostPort and b.HostPort ~= "" then return tonumber(b.HostPort) end
    if info.State and info.State.Status ~= "running" and info.State.Status ~= "created" then
      return nil, exited_error({ service = fw }, info)
    end
    sleep(0.05)
  end
  return nil, E.new("engine", "no_port", "the forwarder published no port")
end

-- Readiness: GET ready_path through the forwarder answers 2xx within ready_timeout. While
-- waiting, a service that has exited ends the wait with its exit code.
-- The agent is an untrusted peer: by default each attempt is core.http_probe (csrc/probe), which
-- reads the status only, under one overall deadline, follows no redirect (a 3xx is "not
-- ready"), uses no proxy and drops the body after READY_MAX_BYTES. Each attempt gets at most
-- the time left, so the wait ends within ready_timeout plus READY_MIN_ATTEMPT (and the exit
-- check's Engine call). A user req_adapter gets the same per-attempt `timeout` and must honour it.
local READY_ATTEMPT_CAP, READY_MIN_ATTEMPT, READY_MAX_BYTES = 5, 0.05, 64 * 1024

function A.wait_ready(run, port)
  local plan = run.plan
  local adapter = run.req_adapter
  local deadline = now() + plan.ready_timeout
  local url = ("http://127.0.0.1:%d%s"):format(port, plan.ready_path)
  local last, next_check = nil, now() + 1
  A.emit(run, "waiting_ready", plan.sandbox, { url = url })
  while true do
    local t = math.max(READY_MIN_ATTEMPT, math.min(READY_ATTEMPT_CAP, deadline - now()))
    local res, err
    if adapter then
      res, err = adapter { method = "GET", url = url, headers = {}, timeout = t }
    else
      res, err = core.http_probe(url, { timeout = t, max_bytes = READY_MAX_BYTES })
    end
    local status = type(res) == "table" and tonumber(res.status) or nil
    if status and status >= 200 and status < 300 then
      A.emit(run, "ready", plan.sandbox, { port = port })
      return true
    end
    last = status and ("HTTP " .. tostring(status)) or tostring(err)
    if now() >= next_check then -- once a second: has a service died meanwhile?
      next_check = now() + 1
      for _, c in ipairs(plan.containers) do
        local info = inspect(run.eng, c.name)
        local st = info and info.State and info.State.Status
        if st == "exited" or st == "dead" then return nil, exited_error(c, info) end
      end
    end
    if now() >= deadline then
      return nil, E.new("timeout", nil, ("%s did not answer 2xx within %gs (last: %s)"):format(url, plan.ready_timeout, last),
        { phase = "ready", service = plan.sandbox })
    end
    sleep(math.max(0, math.min(0.02, deadline - now())))
  end
end

-- Removes what this run created, newest first; failures here never hide the original error.
-- Marks every body of the plan with a label unique to this run: a create whose answer was
-- lost (a timeout) may still have happened, and the rollback finds it by that label.
function A.stamp(run)
  local core = require "sandstack.core"
  run.nonce = core.random_hex(8)
  for _, list in ipairs { run.plan.networks, run.plan.volumes, run.plan.containers } do
    for _, o in ipairs(list) do o.body.Labels["io.sandstack.run"] = run.nonce end
  end
end

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

return A
