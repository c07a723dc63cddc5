-- Starting a Docker stack's containers and waiting for their health (internal to
-- sandstack.docker): dependency order, health by the healthcheck's own test run by exec and then
-- the engine's verdict, and the container exit check the shared readiness wait calls
-- (stack/readiness.lua). Docker-only: a swarm's services are started by the manager, placed and
-- watched as tasks (swarm/start.lua). Every wait is a pause of stack/run.lua.
local E = require "sandstack.error"
local run_ctx = require "sandstack.stack.run"
local readiness = require "sandstack.stack.readiness"

local M = {}
local now, pause, emit = run_ctx.now, run_ctx.pause, run_ctx.emit
local inspect, forwarder_of, exited_error = readiness.inspect, readiness.forwarder_of, readiness.exited_error

-- Runs the healthcheck's own test by exec: the engine waits a whole interval before its first
-- probe, while a passing test right after start already means "healthy" in the spec's sense.
local function probe(run, c)
  if not c.check or not run.eng.exec then return false end
  local t = c.check_timeout or 5
  local res = run.eng:exec(c.name, c.check, { timeout = t, max_bytes = 65536 })
  return res ~= nil and res.exit_code == 0
end

-- Starts the given containers in dependency order: a service starts when each dependency is
-- healthy (with a healthcheck) or running (without). Independent services start together, and
-- each answer is acted on when it comes, not when its whole wave has: a start whose answer lets
-- something go (a healthcheck to run, a service waiting on it) is watched, and the call returns
-- with it while the other starts are still in flight (engine perform's watch/pending). Those are
-- collected by the next call that starts something, or when nothing else is left to wait for,
-- so a start costs the crossings of the waves it replaces.
local function which_has(which, name)
  for _, c in pairs(which) do if c.name == name then return true end end
  return false
end

-- The plan's start request, with this call's own marks (watch, pending) on a copy.
local function start_request(c, pending)
  local s = c.start
  return { method = s.method, path = s.path, ok = s.ok, query = s.query, timeout = s.timeout, pending = pending }
end

-- Does c wait, after its start, for a healthcheck or a ready.<service> log or port?
local function waits(c) return c.healthcheck or c.ready_log or c.ready_port end

-- One look at a waiting service: true (ready, and by what), false (not yet), or nil, err (it
-- exited, turned unhealthy, or a read failed). got: what was seen already (readiness.waits_met).
local function health_now(run, c, got, fw_running)
  local eng = run.eng
  local by
  if c.healthcheck and not got.health then
    if probe(run, c) then
      got.health = "probe"
    else
      local info, err = inspect(eng, c)
      if not info then return nil, err end
      local st = info.State or {}
      local health = st.Health and st.Health.Status
      if st.Status == "exited" or st.Status == "dead" then return nil, exited_error(c, info) end
      if health == "unhealthy" then
        return nil, E.new("unhealthy", nil, "service " .. c.service .. " is unhealthy", { service = c.service })
      end
      if health ~= "healthy" then return false end
      got.health = "engine"
    end
    by = got.health
  end
  if c.ready_log or c.ready_port then
    local info, err = inspect(eng, c) -- its start time (the log's since), and whether it has ended
    if not info then return nil, err end
    local st = info.State or {}
    if st.Status == "exited" or st.Status == "dead" then return nil, exited_error(c, info) end
    got.since = got.since or readiness.epoch(st.StartedAt)
    local ok; ok, err = readiness.waits_met(eng, c, c.name, fw_running, got)
    if not ok then return ok, err end
    by = (c.ready_port and "port") or "log"
  end
  return true, by
end

function M.start_services(run, containers)
  local eng, plan = run.eng, run.plan
  local fw = plan.forwarder and forwarder_of(plan)
  local fw_name = fw and fw.name
  local state, started_at, inflight, got = {}, {}, {}, {}
  for _, c in ipairs(containers) do state[c.service] = "pending"; got[c.service] = {} end
  local function deps_ready(c)
    for _, d in ipairs(c.depends_on) do
      if state[d] and state[d] ~= "ready" then return false end
    end
    return true
  end
  -- the services some not yet started service waits for
  -- the services some not yet started service waits for (and the forwarder, while a port is
  -- waited for: the port is tried from it)
  local function awaited()
    local set = {}
    for _, c in ipairs(containers) do
      if state[c.service] == "pending" then for _, d in ipairs(c.depends_on) do set[d] = true end end
      if fw and c.ready_port and state[c.service] ~= "ready" then set[fw.service] = true end
    end
    return set
  end
  -- A failure leaves no start in flight: the rollback sees what each one did.
  local function fail(err)
    local reqs = {}
    for _, c in ipairs(containers) do
      if inflight[c.service] then reqs[#reqs + 1] = start_request(c, inflight[c.service]) end
    end
    if #reqs > 0 then eng:perform(reqs, 60) end
    return nil, err
  end
  local left = #containers
  while left > 0 do
    local progress = false
    local reqs, which = {}, {}
    for _, c in ipairs(containers) do
      if state[c.service] == "pending" and deps_ready(c) then
        reqs[#reqs + 1] = start_request(c)
        which[#reqs] = c
        state[c.service] = "starting"
      end
    end
    local health_wait = false
    for _, c in ipairs(containers) do health_wait = health_wait or state[c.service] == "health" end
    local blocked = awaited()
    for _, c in ipairs(containers) do
      local id = inflight[c.service]
      if id and (#reqs > 0 or not health_wait or blocked[c.service] or waits(c)) then
        reqs[#reqs + 1] = start_request(c, id)
        which[#reqs] = c
      end
    end
    if #reqs > 0 then
      for i, q in ipairs(reqs) do q.watch = (waits(which[i]) or blocked[which[i].service]) and true or nil end
      -- the call that settles the forwarder's start reads its published port too (read_port)
      local results, peek
      if fw_name and which_has(which, fw_name) then
        results, peek = eng:perform(reqs, 60, { fw.inspect })
        run.forwarder_info = peek and peek[1].ok and peek[1].body or nil
      else
        results = eng:perform(reqs, 60)
      end
      for i, r in ipairs(results) do
        local c = which[i]
        if r.pending then
          inflight[c.service] = r.pending
        else
          inflight[c.service] = nil
          if not r.ok then return fail(require("sandstack.docker.ports").start_error(plan, c, r.err)) end
          emit(run, "container_started", c.service, { container = c.name })
          if waits(c) then
            started_at[c.service] = results.at or now() -- when the start's answer came (perform's clock)
            state[c.service] = "health"
            emit(run, "waiting_health", c.service, { timeout = plan.health_timeout })
          else
            state[c.service] = "ready"
            left = left - 1
          end
          progress = true
        end
      end
    end
    for _, c in ipairs(containers) do
      if state[c.service] == "health" then
        local fw_running = fw and state[fw.service] == "ready" and fw.name or nil
        local ok, by = health_now(run, c, got[c.service], fw_running)
        if ok == nil then return fail(by) end
        if ok then
          state[c.service] = "ready"; left = left - 1; progress = true
          emit(run, "healthy", c.service, { by = by })
        elseif now() - started_at[c.service] > plan.health_timeout then
          return fail(readiness.waits_timeout(c, got[c.service], plan.health_timeout))
        end
      end
    end
    if left > 0 and not progress then pause(0.1) end
  end
  return true
end

-- Has a service exited? Every container read in one call.
function M.exited(run)
  local reqs = {}
  for i, c in ipairs(run.plan.containers) do reqs[i] = c.inspect end
  if #reqs == 0 then return nil end
  local results = run.eng:perform(reqs, 60)
  for i, c in ipairs(run.plan.containers) do
    local info = results[i] and results[i].ok and results[i].body
    local st = type(info) == "table" and info.State and info.State.Status
    if st == "exited" or st == "dead" then return exited_error(c, info) end
  end
end

return M
