-- h:exec on a stack handle (sandstack.session; docs/session.md): a command in the sandbox or a
-- named sidecar, through the engine client's one-call exec (csrc/lua/engine_exec.c), stdin
-- included, ended by sandstack.docker.exec_kill when its timeout or output budget passes.
-- sandstack.swarm's handle runs the same M.run on a node's engine.
local core = require "sandstack.core"
local E = require "sandstack.error"
local target = require "sandstack.docker.target"
local kill = require "sandstack.docker.exec_kill"
local session = require "sandstack.session"

local M = {}

M.DEFAULT_TIMEOUT = 60               -- seconds
M.DEFAULT_MAX_BYTES = 8 * 1024 * 1024 -- stdout + stderr

-- the options and their rows in the reference (docs/api/session.md), one table
local KEYS = require("sandstack.docker.method_options").exec

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

-- run(eng, container, cmd, opts, backend): opts checked by the caller (M.options).
--   -> { code =, exit_code =, stdout =, stderr =, killed = false, seconds = }
--    | nil, err: kind "timeout" or "output_limit" with killed, stdout and stderr so far, seconds
--      (and kill_error when the kill failed); other kinds as the engine client gives them.
function M.run(eng, container, cmd, opts, backend)
  local argv = session.command_argv(cmd)
  local timeout = opts.timeout or M.DEFAULT_TIMEOUT
  local budget = opts.max_bytes or M.DEFAULT_MAX_BYTES
  local t0 = core.engine_clock()
  local token = kill.token()
  local r, err = eng:exec(container, argv, { env = env_with(opts.env, token), workdir = opts.cwd, user = opts.user,
    timeout = timeout, max_bytes = budget, stdin = opts.stdin })
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
  target.check_open(self)
  local err
  opts, err = M.options(opts)
  if not opts then return nil, err end
  local container; container, err = target.container(self, opts.service)
  if not container then return nil, err end
  return M.run(self.eng, container, cmd, opts, "docker")
end

return M
