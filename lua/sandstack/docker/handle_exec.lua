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

local KEYS = { env = true, cwd = true, user = true, stdin = true, timeout = true, max_bytes = true, service = true }
M.KEYS = KEYS

local function positive(v, name, whole)
  if v ~= nil and (type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge or (whole and v ~= math.floor(v))) then
    error(("exec: option '%s' must be a positive %s"):format(name, whole and "whole number" or "number"), 4)
  end
end

-- The user's environment plus the exec's token: {K = V} and {"K=V"} entries as the engine
-- client takes them.
local function env_with(env, token)
  if env ~= nil and type(env) ~= "table" then error("exec: option 'env' must be a table", 4) end
  local out = {}
  for k, v in pairs(env or {}) do out[k] = v end
  out[kill.ENV] = token
  return out
end

-- run(eng, container, cmd, opts, backend): opts checked by the caller (KEYS).
--   -> { code =, exit_code =, stdout =, stderr =, killed = false, seconds = }
--    | nil, err: kind "timeout" or "output_limit" with killed, stdout and stderr so far, seconds
--      (and kill_error when the kill failed); other kinds as the engine client gives them.
function M.run(eng, container, cmd, opts, backend)
  local argv = session.command_argv(cmd, 3)
  positive(opts.timeout, "timeout")
  positive(opts.max_bytes, "max_bytes", true)
  for _, k in ipairs { "cwd", "user" } do
    if opts[k] ~= nil and (type(opts[k]) ~= "string" or opts[k] == "") then
      error("exec: option '" .. k .. "' must be a non-empty string", 3)
    end
  end
  if opts.stdin ~= nil then
    if type(opts.stdin) ~= "string" then error("exec: option 'stdin' must be a string", 3) end
    return E.fail("unsupported", "exec", "exec: stdin is not supported on the " .. backend
      .. " backend yet; use h:spawn and write to the process", { backend = backend, method = "exec" })
  end
  local token = kill.token()
  local timeout = opts.timeout or M.DEFAULT_TIMEOUT
  local budget = opts.max_bytes or M.DEFAULT_MAX_BYTES
  local t0 = core.engine_clock()
  local r, err = eng:exec(container, argv, { env = env_with(opts.env, token), workdir = opts.cwd, user = opts.user,
    timeout = timeout, max_bytes = budget })
  if r then
    return { code = r.exit_code, exit_code = r.exit_code, stdout = r.stdout, stderr = r.stderr, killed = false,
      seconds = core.engine_clock() - t0 }
  end
  local over = err.kind == "output_limit"
  if not over and not (err.kind == "transport" and err.reason == "timeout") then return nil, err end
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
  target.check_open(self, 2)
  opts = E.check_keys(opts, KEYS, "exec")
  local container, err = target.container(self, opts.service)
  if not container then return nil, err end
  return M.run(self.eng, container, cmd, opts, "docker")
end

return M
