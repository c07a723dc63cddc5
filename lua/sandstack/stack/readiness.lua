-- The readiness half of a start, shared by both backends' executors (docker/start.lua,
-- swarm/start.lua): the forwarder's published port and GET ready_path through it. The forwarder
-- is a plain container on an Engine on both (the host's, or the chosen node's), read with the
-- plan's own request. Whether a service has ended meanwhile is the backend's question (a
-- container's state, a task's): its `exited` callback. Every wait is a pause of stack/run.lua,
-- so a warm pool's fill can run several starts at once.
local ops = require "sandstack.engine.ops"
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

-- The host port an inspect of the forwarder shows published for the agent's port, or nil.
local function published(info, agent_port)
  local ports = info.NetworkSettings and info.NetworkSettings.Ports or {}
  local b = ports[("%d/tcp"):format(agent_port)]
  b = type(b) == "table" and b[1]
  return b and tonumber(b.HostPort) or nil
end

-- The forwarder's published host port: every start allocates a new one.
function M.read_port(run)
  local fw = run.plan.forwarder
  for _ = 1, 50 do
    local info, err = run.forwarder_info, nil -- read with the forwarder's start, when it was
    run.forwarder_info = nil
    if not info then info, err = inspect(run.eng, forwarder_of(run.plan)) end
    if not info then return nil, err end
    local port = published(info, run.plan.agent_port)
    if port then return port end
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

-- What the forwarder's port says now, for a wait that never reached the agent: a refused
-- connection means nothing listens on the host's side (the forwarder, or the engine's proxy of
-- its published port, is gone); the port it publishes now tells a port that moved.
local function forwarder_now(run)
  local c = forwarder_of(run.plan)
  local info = c and inspect(run.eng, c)
  if type(info) ~= "table" then return nil end
  return { state = info.State and info.State.Status, host_port = published(info, run.plan.agent_port) }
end

-- last: the last attempt's outcome; answer: the last status the agent answered, if any. The
-- last attempt may be cut short by the deadline (READY_MIN_ATTEMPT on a loaded host), and its
-- "timeout" alone would hide the 302 or 503 the agent kept answering.
local function not_ready(run, url, last, answer)
  local plan = run.plan
  local fw = type(last) == "string" and last:find("cannot connect", 1, true) and forwarder_now(run) or nil
  local said = tostring(last)
  if answer and answer ~= last then said = ("%s (the attempt after it: %s)"):format(answer, said) end
  return E.new("timeout", "not_ready", ("the agent did not answer GET %s with 2xx within %gs (ready_timeout) through "
    .. "%s; last answer: %s%s. Is the agent listening on port %s in the sandbox? Does it answer GET %s? "
    .. "(options agent_port, ready_path, ready_timeout)"):format(plan.ready_path, plan.ready_timeout, url, said,
    fw and (" (the forwarder is %s, publishing port %s)"):format(tostring(fw.state), tostring(fw.host_port)) or "",
    tostring(plan.agent_port), plan.ready_path),
    { phase = "ready", service = plan.sandbox, port = plan.agent_port, path = plan.ready_path, last = last, url = url,
      answer = answer, forwarder = fw })
end

-- The wait with a user's req_adapter: each attempt is a call back into Lua.
local function wait_adapter(run, url, exited)
  local plan, adapter = run.plan, run.req_adapter
  local deadline = now() + plan.ready_timeout
  local last, answer, next_check = nil, nil, now() + EXIT_CHECK
  while true do
    local t = math.max(READY_MIN_ATTEMPT, math.min(READY_ATTEMPT_CAP, deadline - now()))
    local res, err = adapter { method = "GET", url = url, headers = {}, timeout = t }
    local status = type(res) == "table" and tonumber(res.status) or nil
    if status and status >= 200 and status < 300 then return true end
    last = status and ("HTTP " .. tostring(status)) or tostring(err)
    if status then answer = last end
    if now() >= next_check then -- every EXIT_CHECK: has a service died meanwhile?
      next_check = now() + EXIT_CHECK
      local e = exited(run)
      if e then return nil, e end
    end
    if now() >= deadline then return nil, not_ready(run, url, last, answer) end
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
  local deadline, next_check, answer
  local cap = EXIT_CHECK
  while true do
    local ready, last, t, answered
    ready, last, deadline, t, answered = core.http_wait(url, { timeout = plan.ready_timeout, deadline = deadline,
      slice = coop and 0 or EXIT_CHECK, attempt_cap = cap, min_attempt = READY_MIN_ATTEMPT,
      pause = READY_PAUSE, max_bytes = READY_MAX_BYTES })
    if ready then return true end
    answer = answered or answer
    if type(last) == "string" and last:find("^timeout") then cap = math.min(READY_ATTEMPT_CAP, cap * 2) end
    next_check = next_check or (coop and t + EXIT_CHECK or t) -- not cooperating, a slice was EXIT_CHECK
    if t >= next_check then
      next_check = t + EXIT_CHECK
      local e = exited(run)
      if e then return nil, e end
    end
    if t >= deadline then return nil, not_ready(run, url, last, answer) end
    if coop then pause(math.max(0, math.min(READY_PAUSE, deadline - t))) end
  end
end

-- exited(run) -> an error when a service has ended (it ends the wait), or nil: the backend's.
-- ready_path = false: no HTTP wait (the agent is not HTTP; readiness is a ready.<service> wait).
function M.wait_ready(run, port, exited)
  if type(exited) ~= "function" then error("wait_ready: exited must be the backend's function", 2) end
  local plan = run.plan
  if plan.ready_path == false then
    emit(run, "ready", plan.sandbox, { port = port, by = "none" })
    return true
  end
  local url = ("http://127.0.0.1:%d%s"):format(port, plan.ready_path)
  emit(run, "waiting_ready", plan.sandbox, { url = url, path = plan.ready_path, agent_port = plan.agent_port,
    timeout = plan.ready_timeout })
  local ok, err
  if run.req_adapter then ok, err = wait_adapter(run, url, exited) else ok, err = wait_probe(run, url, exited) end
  if not ok then return nil, err end
  emit(run, "ready", plan.sandbox, { port = port })
  return true
end

-- Readiness by a log text or an open port (ready.<service>.log / .port), beside the healthcheck:
-- the backends' waits (docker/services.lua, swarm/start.lua) call these with their own engine.

-- Seconds since the epoch of an engine time ("2024-05-01T12:34:56.123456789Z", always UTC).
function M.epoch(t)
  local y, mo, d, h, mi, sec = tostring(t):match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)")
  if not y then return nil end
  local fl = math.floor
  y, mo = tonumber(y), tonumber(mo)
  if mo <= 2 then y = y - 1 end
  local era = fl(y / 400)
  local yoe = y - era * 400
  local doy = fl((153 * (mo + (mo > 2 and -3 or 9)) + 2) / 5) + tonumber(d) - 1
  local days = era * 146097 + yoe * 365 + fl(yoe / 4) - fl(yoe / 100) + doy - 719468
  return days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(sec)
end

M.READY_LOG_MAX = 8 * 1024 * 1024

local function count(hay, text)
  local n, at = 0, 1
  while true do
    local i = hay:find(text, at, true) -- plain: the caller's text is never a pattern
    if not i then return n end
    n, at = n + 1, i + #text
  end
end

-- How often c.ready_log occurs in the container's output since `since` (unix seconds): both
-- streams read whole, up to READY_LOG_MAX (past it, output_limit: the guest decides how much it
-- writes, not how much the host reads).
function M.log_count(eng, container, text, since)
  local get = ops.request("logs", container, { since = since })
  local r, err = eng:demux(get.path, { query = get.query, max_bytes = M.READY_LOG_MAX, timeout = 30 })
  if not r then return nil, err end
  return count(r.stdout, text) + count(r.stderr, text)
end

-- Whether host:port accepts a TCP connection from the stack's network: socat, which every
-- forwarder image has, run by exec in the forwarder (on the sandbox network, like a dependent).
function M.port_open(eng, forwarder, host, port)
  local res, err = eng:exec(forwarder, { "socat", "-u", "OPEN:/dev/null",
    ("TCP:%s:%d,connect-timeout=1"):format(host, port) }, { timeout = 5, max_bytes = 4096 })
  if not res then return nil, err end
  return res.exit_code == 0
end

-- One look at what c waits for beyond its healthcheck: true when its log showed the text (so many
-- times) and its port accepts; false while not yet. got: what was already seen (kept by the
-- caller between looks; got.since the container's start, unix seconds). fw: the forwarder's
-- container, or nil while it is not running (the port then waits).
function M.waits_met(eng, c, container, fw, got)
  if c.ready_log and not got.log then
    local n, err = M.log_count(eng, container, c.ready_log, got.since)
    if not n then return nil, err end
    if n < (c.ready_times or 1) then return false end
    got.log = true
  end
  if c.ready_port and not got.port then
    if not fw then return false end
    local open, err = M.port_open(eng, fw, c.service, c.ready_port)
    if open == nil then return nil, err end
    if not open then return false end
    got.port = true
  end
  return true
end

-- The timeout of such a wait, naming what was not seen.
function M.waits_timeout(c, got, seconds)
  local missing = {}
  if c.ready_log and not got.log then
    missing[#missing + 1] = ("its log did not show %q%s"):format(c.ready_log,
      (c.ready_times or 1) > 1 and (" " .. c.ready_times .. " times") or "")
  end
  if c.ready_port and not got.port then
    missing[#missing + 1] = ("nothing accepted a connection on %s:%d"):format(c.service, c.ready_port)
  end
  if #missing == 0 then missing[1] = "its healthcheck did not pass" end
  return E.new("timeout", nil, ("service %s was not ready within %gs: %s (ready.%s, health_timeout)"):format(c.service,
    seconds, table.concat(missing, "; "), c.service), { phase = "health", service = c.service })
end

return M
