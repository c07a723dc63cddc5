-- Readiness on a cluster (internal to sandstack.swarm): GET ready_path through the forwarder,
-- from any process that reaches the node's Engine API. The forwarder publishes on the node's own
-- 127.0.0.1, which a caller on another machine cannot reach, so the request is made inside the
-- forwarder container by exec, over the same path the forwarder uses (the sandbox's name on the
-- session's overlay), with the one tool a forwarder image must have: socat.
--
-- socat has no address that sends a literal; the request is therefore carried in socat's own
-- command line (its -lp option, the program name for its log lines) and read back from
-- /proc/self/cmdline: seek= skips "socat\0-lp", readbytes= stops at the request's end. The
-- answer's first bytes (the status line) go to stdout; readbytes= on the TCP side ends the
-- transfer after them, so an agent that drips or sends without end holds the probe for at most
-- READ_STATUS inactivity timeouts.
local E = require "sandstack.error"
local run_ctx = require "sandstack.stack.run"

local M = {}
local now, pause, emit = run_ctx.now, run_ctx.pause, run_ctx.emit

local READ_STATUS = 32  -- "HTTP/1.1 200 OK\r\n" and some slack
local ATTEMPT_CAP = 5   -- seconds per attempt at most

-- The exec argv of one attempt (conform.lua's probe runs it too).
function M.argv(host, port, path, seconds)
  if not tostring(path):match("^/[%w%-%._~!$&'()*+,;=:@/%%?]*$") then
    error("sandstack.swarm: ready_path must be a plain absolute path: " .. tostring(path), 2)
  end
  local req = ("GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n"):format(path, host)
  local t = math.max(1, math.ceil(seconds))
  return {
    "socat", "-lp" .. req, "-t" .. t, "-T" .. t,
    ("OPEN:/proc/self/cmdline,seek=%d,readbytes=%d!!STDOUT"):format(#"socat" + 1 + #"-lp", #req),
    ("TCP:%s:%d,connect-timeout=%d,readbytes=%d"):format(host, port, t, READ_STATUS),
  }
end

function M.status(stdout)
  return tonumber(tostring(stdout or ""):match("^HTTP/%d%.%d (%d%d%d)"))
end

-- run: { node_eng =, plan =, forwarder_container =, check_tasks = function() -> true | nil, err }
-- Waits for a 2xx within plan.ready_timeout. A task that ends meanwhile ends the wait.
function M.wait(run)
  local plan = run.plan
  if plan.ready_path == false then -- no HTTP wait: the agent is not HTTP
    emit(run, "ready", plan.sandbox, { port = run.port, by = "none" })
    return true
  end
  local deadline = now() + plan.ready_timeout
  local last, next_check = "no answer yet", now() + 1
  emit(run, "waiting_ready", plan.sandbox, { via = "exec", container = run.forwarder_container })
  while true do
    local t = math.max(1, math.min(ATTEMPT_CAP, deadline - now()))
    local res, err = run.node_eng:exec(run.forwarder_container, M.argv(plan.sandbox, plan.agent_port, plan.ready_path, t),
      { timeout = t + 2, max_bytes = 4096 })
    if not res then return nil, err end
    local status = M.status(res.stdout)
    if status and status >= 200 and status < 300 then
      emit(run, "ready", plan.sandbox, { port = run.port })
      return true
    end
    last = status and ("HTTP " .. status) or ("socat exit " .. tostring(res.exit_code))
    if now() >= next_check then
      next_check = now() + 1
      local ok, terr = run.check_tasks()
      if not ok then return nil, terr end
    end
    if now() >= deadline then
      return nil, E.new("timeout", nil, ("%s:%d%s did not answer 2xx within %gs (last: %s)"):format(plan.sandbox,
        plan.agent_port, plan.ready_path, plan.ready_timeout, last), { phase = "ready", service = plan.sandbox })
    end
    pause(0.1)
  end
end

return M
