-- Starting services and waiting for them (internal to sandstack.docker): dependency order,
-- health (by the healthcheck's own test run by exec, then the engine's verdict), the forwarder's
-- published port, and readiness through it. Every wait is a pause of docker/run.lua, so a warm
-- pool's fill can run several starts at once.
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.docker.batch"
local run_ctx = require "sandstack.docker.run"

local M = {}
local now, pause, emit = run_ctx.now, run_ctx.pause, run_ctx.emit

local function inspect(eng, name)
  return eng:call("GET", "/containers/" .. name .. "/json")
end
M.inspect = inspect

local function exited_error(c, info)
  local code = info.State and info.State.ExitCode
  return E.new("exited", nil, ("service %s exited with code %s"):format(c.service, tostring(code)),
    { service = c.service, exit_code = code })
end

-- Runs the healthcheck's own test by exec: the engine waits a whole interval before its first
-- probe, while a passing test right after start already means "healthy" in the spec's sense.
local function probe(run, c)
  if not c.check or not run.eng.exec then return false end
  local t = c.check_timeout or 5
  local res = run.eng:exec(c.name, c.check, { timeout = t, max_bytes = 65536 })
  return res ~= nil and res.exit_code == 0
end

-- Starts the given containers in dependency order: a service starts when each dependency is
-- healthy (with a healthcheck) or running (without). Independent services start together.
function M.start_services(run, containers)
  local eng, plan = run.eng, run.plan
  local state, started_at = {}, {}
  for _, c in ipairs(containers) do state[c.service] = "pending" end
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
      emit(run, "container_started", c.service, { container = c.name })
      if c.healthcheck then
        state[c.service] = "health"
        emit(run, "waiting_health", c.service)
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
          emit(run, "healthy", c.service, { by = "probe" })
        else
          local info, err = inspect(eng, c.name)
          if not info then return nil, err end
          local st = info.State or {}
          local health = st.Health and st.Health.Status
          if st.Status == "exited" or st.Status == "dead" then return nil, exited_error(c, info) end
          if health == "healthy" then
            state[c.service] = "ready"; left = left - 1; progress = true
            emit(run, "healthy", c.service, { by = "engine" })
          elseif health == "unhealthy" then
            return nil, E.new("unhealthy", nil, "service " .. c.service .. " is unhealthy", { service = c.service })
          elseif now() - started_at[c.service] > plan.health_timeout then
            return nil, E.new("timeout", nil, ("service %s was not healthy within %gs"):format(c.service, plan.health_timeout),
              { phase = "health", service = c.service })
          end
        end
      end
    end
    if left > 0 and not progress then pause(0.1) end
  end
  return true
end

-- The forwarder's published host port: every start allocates a new one.
function M.read_port(run)
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
    pause(0.05)
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

function M.wait_ready(run, port)
  local plan = run.plan
  local adapter = run.req_adapter
  local deadline = now() + plan.ready_timeout
  local url = ("http://127.0.0.1:%d%s"):format(port, plan.ready_path)
  local last, next_check = nil, now() + 1
  emit(run, "waiting_ready", plan.sandbox, { url = url })
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
      emit(run, "ready", plan.sandbox, { port = port })
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
    pause(math.max(0, math.min(0.02, deadline - now())))
  end
end

return M
