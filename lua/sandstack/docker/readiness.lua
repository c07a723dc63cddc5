-- Starting services and waiting for them (internal to sandstack.docker): dependency order,
-- health (by the healthcheck's own test run by exec, then the engine's verdict), the forwarder's
-- published port, and readiness through it. Every wait is a pause of docker/run.lua, so a warm
-- pool's fill can run several starts at once.
local core = require "sandstack.core"
local E = require "sandstack.error"
local run_ctx = require "sandstack.docker.run"

local M = {}
local now, pause, emit = run_ctx.now, run_ctx.pause, run_ctx.emit

-- A container of the plan, read with the plan's own request (csrc/stack/requests.c).
local function inspect(eng, c)
  local r = eng:perform({ c.inspect }, 60)[1]
  if r.ok then return r.body end
  return nil, r.err
end
M.inspect = inspect

local function forwarder_of(plan)
  local name = plan.project .. "-" .. plan.forwarder
  for _, c in ipairs(plan.containers) do
    if c.name == name then return c end
  end
end

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

function M.start_services(run, containers)
  local eng, plan = run.eng, run.plan
  local fw = plan.forwarder and forwarder_of(plan)
  local fw_name = fw and fw.name
  local state, started_at, inflight = {}, {}, {}
  for _, c in ipairs(containers) do state[c.service] = "pending" end
  local function deps_ready(c)
    for _, d in ipairs(c.depends_on) do
      if state[d] and state[d] ~= "ready" then return false end
    end
    return true
  end
  -- the services some not yet started service waits for
  local function awaited()
    local set = {}
    for _, c in ipairs(containers) do
      if state[c.service] == "pending" then for _, d in ipairs(c.depends_on) do set[d] = true end end
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
      if id and (#reqs > 0 or not health_wait or blocked[c.service] or c.healthcheck) then
        reqs[#reqs + 1] = start_request(c, id)
        which[#reqs] = c
      end
    end
    if #reqs > 0 then
      for i, q in ipairs(reqs) do q.watch = (which[i].healthcheck or blocked[which[i].service]) and true or nil end
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
          if not r.ok then return fail(r.err) end
          emit(run, "container_started", c.service, { container = c.name })
          if c.healthcheck then
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
        if probe(run, c) then
          state[c.service] = "ready"; left = left - 1; progress = true
          emit(run, "healthy", c.service, { by = "probe" })
        else
          local info, err = inspect(eng, c)
          if not info then return fail(err) end
          local st = info.State or {}
          local health = st.Health and st.Health.Status
          if st.Status == "exited" or st.Status == "dead" then return fail(exited_error(c, info)) end
          if health == "healthy" then
            state[c.service] = "ready"; left = left - 1; progress = true
            emit(run, "healthy", c.service, { by = "engine" })
          elseif health == "unhealthy" then
            return fail(E.new("unhealthy", nil, "service " .. c.service .. " is unhealthy", { service = c.service }))
          elseif now() - started_at[c.service] > plan.health_timeout then
            return fail(E.new("timeout", nil, ("service %s was not healthy within %gs"):format(c.service, plan.health_timeout),
              { phase = "health", service = c.service }))
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
    local info, err = run.forwarder_info, nil -- read with the forwarder's start, when it was
    run.forwarder_info = nil
    if not info then info, err = inspect(run.eng, forwarder_of(run.plan)) end
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
-- The agent is an untrusted peer: by default the wait is core.http_wait (csrc/probe), whose
-- attempts read the status only, under one overall deadline, follow no redirect (a 3xx is "not
-- ready"), use no proxy and drop the body after READY_MAX_BYTES. Each attempt gets at most the
-- time left, so the wait ends within ready_timeout plus READY_MIN_ATTEMPT (and the exit check's
-- Engine call). The deadline is kept in C: an agent that is up costs one call, a slow one
-- returns every half second (EXIT_CHECK) for the exit check, and under a warm pool's fill after
-- every attempt, to pause (yield) between them. A user req_adapter gets the same per-attempt
-- `timeout` and must honour it; its loop is Lua's.
local READY_ATTEMPT_CAP, READY_MIN_ATTEMPT, READY_MAX_BYTES, READY_PAUSE, EXIT_CHECK = 5, 0.05, 64 * 1024, 0.02, 0.5

-- Has a service exited? Every container read in one call.
local function exited_service(run)
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

local function not_ready(url, plan, last)
  return E.new("timeout", "not_ready", ("the agent did not answer GET %s with 2xx within %gs (ready_timeout) through "
    .. "%s; last answer: %s. Is the agent listening on port %s in the sandbox? Does it answer GET %s? "
    .. "(options agent_port, ready_path, ready_timeout)"):format(plan.ready_path, plan.ready_timeout, url, tostring(last),
    tostring(plan.agent_port), plan.ready_path),
    { phase = "ready", service = plan.sandbox, port = plan.agent_port, path = plan.ready_path, last = last, url = url })
end

-- The wait with a user's req_adapter: each attempt is a call back into Lua.
local function wait_adapter(run, url)
  local plan, adapter = run.plan, run.req_adapter
  local deadline = now() + plan.ready_timeout
  local last, next_check = nil, now() + EXIT_CHECK
  while true do
    local t = math.max(READY_MIN_ATTEMPT, math.min(READY_ATTEMPT_CAP, deadline - now()))
    local res, err = adapter { method = "GET", url = url, headers = {}, timeout = t }
    local status = type(res) == "table" and tonumber(res.status) or nil
    if status and status >= 200 and status < 300 then return true end
    last = status and ("HTTP " .. tostring(status)) or tostring(err)
    if now() >= next_check then -- every EXIT_CHECK: has a service died meanwhile?
      next_check = now() + EXIT_CHECK
      local e = exited_service(run)
      if e then return nil, e end
    end
    if now() >= deadline then return nil, not_ready(url, plan, last) end
    pause(math.max(0, math.min(READY_PAUSE, deadline - now())))
  end
end

-- The wait in C, a slice at a time. An attempt is capped at EXIT_CHECK at first, so a service
-- that exits is seen within about a second even when an attempt would hang (the forwarder
-- still resolving a sandbox that is gone); each attempt that times out doubles the cap, up to
-- READY_ATTEMPT_CAP, so an agent slow to answer is still waited for.
local function wait_probe(run, url)
  local plan = run.plan
  local coop = run_ctx.cooperating()
  local deadline, next_check
  local cap = EXIT_CHECK
  while true do
    local ready, last, t
    ready, last, deadline, t = core.http_wait(url, { timeout = plan.ready_timeout, deadline = deadline,
      slice = coop and 0 or EXIT_CHECK, attempt_cap = cap, min_attempt = READY_MIN_ATTEMPT,
      pause = READY_PAUSE, max_bytes = READY_MAX_BYTES })
    if ready then return true end
    if type(last) == "string" and last:find("^timeout") then cap = math.min(READY_ATTEMPT_CAP, cap * 2) end
    next_check = next_check or (coop and t + EXIT_CHECK or t) -- not cooperating, a slice was EXIT_CHECK
    if t >= next_check then
      next_check = t + EXIT_CHECK
      local e = exited_service(run)
      if e then return nil, e end
    end
    if t >= deadline then return nil, not_ready(url, plan, last) end
    if coop then pause(math.max(0, math.min(READY_PAUSE, deadline - t))) end
  end
end

function M.wait_ready(run, port)
  local plan = run.plan
  local url = ("http://127.0.0.1:%d%s"):format(port, plan.ready_path)
  emit(run, "waiting_ready", plan.sandbox, { url = url, path = plan.ready_path, agent_port = plan.agent_port,
    timeout = plan.ready_timeout })
  local ok, err
  if run.req_adapter then ok, err = wait_adapter(run, url) else ok, err = wait_probe(run, url) end
  if not ok then return nil, err end
  emit(run, "ready", plan.sandbox, { port = port })
  return true
end

return M
