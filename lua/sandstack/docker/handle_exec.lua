-- h:exec on a stack handle (sandstack.session; docs/session.md): a command in the sandbox or a
-- named sidecar, through the engine client's one-call exec (csrc/lua/engine_exec.c), ended by
-- sandstack.docker.exec_kill when its timeout or output budget passes. sandstack.swarm's handle
-- runs the same M.run on a node's engine.
local core = require "sandstack.core"
local E = require "sandstack.error"
local target = require "sandstack.docker.target"
local kill = require "sandstack.docker.exec_kill"
local session = require "sandstack.session"

local M = {}

M.DEFAULT_TIMEOUT = 60               -- seconds
M.DEFAULT_MAX_BYTES = 8 * 1024 * 1024 -- stdout + stderr

local KEYS = { env = "table", cwd = "string", user = "string", stdin = "string", service = "string",
  timeout = { "number", above = 0, max = 1e9, says = "a number of seconds above 0", wanted = "a number of seconds" },
  max_bytes = E.BYTES }

-- h:exec's options, as every backend on the engine takes them -> opts | nil, err (a wrong type
-- raises at the caller; docs/api/README.md, "Conventions").
function M.options(opts)
  local err
  opts, err = E.options(opts, KEYS, "exec")
  if not opts then return nil, err end
  for _, k in ipairs { "cwd", "user" } do
    if opts[k] == "" then return E.refuse("exec", k, "must not be empty") end
  end
  return opts
end

-- The user's environment plus the exec's token: {K = V} and {"K=V"} entries as the engine
-- client takes them.
local function env_with(env, token)
  local out = {}
  for k, v in pairs(env or {}) do out[k] = v end
  out[kill.ENV] = token
  return out
end

-- An exec whose stdin is given: the engine client's one-call exec has no stdin, so the command
-- runs as a spawned process (docker/process.lua: the hijacked attach) with stdin written in
-- pieces while its output is drained between them (a command that echoes its input, as `cat`
-- does, would otherwise block on a full output pipe while the write waits for it to read), then
-- a half-close, then the output to its end under the same deadline and budget as eng:exec.
-- Returns the engine client's shapes: {exit_code, stdout, stderr} | nil, err (a transport
-- timeout or output_limit with the output so far), and the process's token for the kill.
local STDIN_PIECE = 32 * 1024

-- The command's time counts from its process running, as eng:exec's does
-- (csrc/lua/engine_exec.c): polled from 50 ms after the start, the pauses doubling to 100 ms,
-- until the process shows it ran, or for the engine client's request timeout at most (a failed
-- poll counts from then). clock() -> seconds to wait now, and whether that is the deadline (not
-- the next poll).
local POLL_FIRST, POLL_MAX = 0.05, 0.1
local function run_clock(p, timeout, run_wait)
  local now = core.engine_clock()
  local deadline, pause, next_poll, wait_end = nil, POLL_FIRST, now + POLL_FIRST, now + run_wait
  return function()
    if deadline then return deadline - core.engine_clock(), true end
    now = core.engine_clock()
    if now >= wait_end then deadline = now + timeout
    elseif now >= next_poll then
      if p:has_run() ~= false then deadline = core.engine_clock() + timeout end
      pause = math.min(pause * 2, POLL_MAX)
      next_poll = core.engine_clock() + pause
    end
    if deadline then return deadline - core.engine_clock(), true end
    return math.max(0, math.min(next_poll, wait_end) - core.engine_clock()), false
  end
end

local function with_stdin(eng, container, argv, opts, timeout, budget)
  local process = require "sandstack.docker.process"
  local out, held = { stdout = {}, stderr = {} }, 0
  local p, err = process.spawn(process.engine_io(eng), container, argv, { env = opts.env, cwd = opts.cwd,
    user = opts.user, timeout = timeout,
    on_output = function(data, stream)
      held = held + #data
      local t = out[stream]
      t[#t + 1] = data
    end })
  if not p then return nil, err end
  local clock = run_clock(p, timeout, math.max(eng.timeout or 0, timeout))
  local function so_far(e)
    e.stdout, e.stderr = table.concat(out.stdout), table.concat(out.stderr)
    if #e.stdout + #e.stderr > budget then -- what passed the budget is not returned
      e.stdout = e.stdout:sub(1, budget)
      e.stderr = e.stderr:sub(1, math.max(0, budget - #e.stdout))
    end
    return e
  end
  local function ended(e)
    p:close()
    return nil, so_far(e), p.token
  end
  local function over() return held > budget end
  local function late()
    local left, final = clock()
    return final and left <= 0
  end
  local function timed_out()
    return ended(E.new("transport", "timeout", ("exec: the command ran past %gs"):format(timeout)))
  end
  local function limited()
    return ended(E.new("output_limit", nil, ("exec: the output passed %d bytes"):format(budget), { limit = budget }))
  end
  -- drains what has come, without waiting; false when the output is over or failed
  local function drain()
    while true do
      local ok, rerr = p:read(0)
      if not ok then return rerr.reason == "timeout" end
    end
  end
  local data, at = opts.stdin, 1
  while at <= #data do
    if late() then return timed_out() end
    local ok, werr = p:write(data:sub(at, at + STDIN_PIECE - 1))
    if not ok then
      if werr and werr.reason == "timeout" then return timed_out() end
      break -- the process stopped reading (it exited): its output still counts
    end
    at = at + STDIN_PIECE
    if not drain() or over() then break end
  end
  if over() then return limited() end
  p:close_stdin()
  while true do
    if over() then return limited() end
    local left, final = clock()
    if final and left <= 0 then return timed_out() end
    local ok, rerr = p:read(left)
    if not ok then
      if rerr.reason == "closed" then break end
      if rerr.reason ~= "timeout" then return ended(rerr) end
      if final then return timed_out() end
    end
  end
  local code
  while true do
    local left, final = clock()
    code, err = p:wait(left > 0 and left or 0)
    if code then break end
    if err.kind ~= "timeout" then return ended(err) end
    if final then return timed_out() end
  end
  p:close()
  if p.ran == false then -- never ran: what came was the engine's message, as eng:exec gives it
    return { exit_code = code, stdout = "", stderr = table.concat(out.stdout) .. table.concat(out.stderr) }
  end
  return { exit_code = code, stdout = table.concat(out.stdout), stderr = table.concat(out.stderr) }
end

-- run(eng, container, cmd, opts, backend): opts checked by the caller (M.options).
--   -> { code =, exit_code =, stdout =, stderr =, killed = false, seconds = }
--    | nil, err: kind "timeout" or "output_limit" with killed, stdout and stderr so far, seconds
--      (and kill_error when the kill failed); other kinds as the engine client gives them.
function M.run(eng, container, cmd, opts, backend)
  local argv = session.command_argv(cmd)
  local timeout = opts.timeout or M.DEFAULT_TIMEOUT
  local budget = opts.max_bytes or M.DEFAULT_MAX_BYTES
  local t0 = core.engine_clock()
  local r, err, token
  if opts.stdin ~= nil then
    r, err, token = with_stdin(eng, container, argv, opts, timeout, budget)
  else
    token = kill.token()
    r, err = eng:exec(container, argv, { env = env_with(opts.env, token), workdir = opts.cwd, user = opts.user,
      timeout = timeout, max_bytes = budget })
  end
  if r then
    return { code = r.exit_code, exit_code = r.exit_code, stdout = r.stdout, stderr = r.stderr, killed = false,
      seconds = core.engine_clock() - t0 }
  end
  local over = err.kind == "output_limit"
  if not token or (not over and not (err.kind == "transport" and err.reason == "timeout")) then return nil, err end
  local killed, kerr = kill.kill(eng, container, token)
  local fields = { killed = killed == true, stdout = err.stdout or "", stderr = err.stderr or "",
    seconds = core.engine_clock() - t0, exec_id = err.exec_id, kill_error = kerr, container = container }
  local extra = killed and "" or ("; the kill failed: " .. tostring(kerr))
  if over then
    fields.limit = budget
    return E.fail("output_limit", "exec", ("the command's output passed %d bytes and its processes were killed%s")
      :format(budget, extra), fields)
  end
  return E.fail("timeout", "exec", ("the command ran past %gs and its processes were killed%s"):format(timeout, extra),
    fields)
end

M.methods = {}

-- h:exec(argv | string, { env, cwd, user, stdin, timeout, max_bytes, service })
function M.methods.exec(self, cmd, opts)
  target.check_open(self)
  local err
  opts, err = M.options(opts)
  if not opts then return nil, err end
  local container; container, err = target.container(self, opts.service)
  if not container then return nil, err end
  return M.run(self.eng, container, cmd, opts, "docker")
end

return M
