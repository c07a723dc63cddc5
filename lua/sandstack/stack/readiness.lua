-- The readiness half of a start, shared by both backends' executors (docker/start.lua,
-- swarm/start.lua): the forwarder's published port and GET ready_path through it. The forwarder
-- is a plain container on an Engine on both (the host's, or the chosen node's), read with the
-- plan's own request. Whether a service has ended meanwhile is the backend's question (a
-- container's state, a task's): its `exited` callback. Every wait is a pause of stack/run.lua,
-- so a warm pool's fill can run several starts at once.
local core = require "sandstack.core"
local E = require "sandstack.error"
local run_ctx = require "sandstack.stack.run"

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
M.forwarder_of, M.exited_error = forwarder_of, exited_error

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
-- waiting, a service that has ended (the backend's `exited`) ends the wait with its error.
-- The agent is an untrusted peer: by default the wait is core.http_wait (csrc/probe), whose
-- attempts read the status only, under one overall deadline, follow no redirect (a 3xx is "not
-- ready"), use no proxy and drop the body after READY_MAX_BYTES. Each attempt gets at most the
-- time left, so the wait ends within ready_timeout plus READY_MIN_ATTEMPT (and the exit
-- check). The deadline is kept in C: an agent that is up costs one call, a slow one
-- returns every half second (EXIT_CHECK) for the exit check, and under a warm pool's fill after
-- every attempt, to pause (yield) between them. A user req_adapter gets the same per-attempt
-- `timeout` and must honour it; its loop is Lua's.
local READY_ATTEMPT_CAP, READY_MIN_ATTEMPT, READY_MAX_BYTES, READY_PAUSE, EXIT_CHECK = 5, 0.05, 64 * 1024, 0.02, 0.5

local function not_ready(url, plan, last)
  return E.new("timeout", "not_ready", ("the agent did not answer GET %s with 2xx within %gs (ready_timeout) through "
    .. "%s; last answer: %s. Is the agent listening on port %s in the sandbox? Does it answer GET %s? "
    .. "(options agent_port, ready_path, ready_timeout)"):format(plan.ready_path, plan.ready_timeout, url, tostring(last),
    tostring(plan.agent_port), plan.ready_path),
    { phase = "ready", service = plan.sandbox, port = plan.agent_port, path = plan.ready_path, last = last, url = url })
end

-- The wait with a user's req_adapter: each attempt is a call back into Lua.
local function wait_adapter(run, url, exited)
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
      local e = exited(run)
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
local function wait_probe(run, url, exited)
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
      local e = exited(run)
      if e then return nil, e end
    end
    if t >= deadline then return nil, not_ready(url, plan, last) end
    if coop then pause(math.max(0, math.min(READY_PAUSE, deadline - t))) end
  end
end

-- exited(run) -> an error when a service has ended (it ends the wait), or nil: the backend's.
function M.wait_ready(run, port, exited)
  if type(exited) ~= "function" then error("wait_ready: exited must be the backend's function", 2) end
  local plan = run.plan
  local url = ("http://127.0.0.1:%d%s"):format(port, plan.ready_path)
  emit(run, "waiting_ready", plan.sandbox, { url = url, path = plan.ready_path, agent_port = plan.agent_port,
    timeout = plan.ready_timeout })
  local ok, err
  if run.req_adapter then ok, err = wait_adapter(run, url, exited) else ok, err = wait_probe(run, url, exited) end
  if not ok then return nil, err end
  emit(run, "ready", plan.sandbox, { port = port })
  return true
end

return M
