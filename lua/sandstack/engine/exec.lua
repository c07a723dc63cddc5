-- exec in a container (internal to sandstack.engine): create, start without a hijack (the
-- answer is the raw framed stream until EOF), demultiplex byte-exact under the budget in the
-- C core, then read the exit code.
local core = require "sandstack.core"
local E = require "sandstack.error"
local O = require "sandstack.engine.options"
local R = require "sandstack.engine.requests"
local X = require "sandstack.engine.errors"

local EXEC_KEYS = { user = true, env = true, workdir = true, max_bytes = true, timeout = true }

local now = core.engine_clock

-- {"K=V"} or {K = "V"} (sorted) as the Env list; raises at the caller of exec.
local function env_list(env)
  if env == nil then return nil end
  if type(env) ~= "table" then error("exec: option 'env' must be a table", 3) end
  local out, keys = {}, {}
  for k, v in pairs(env) do
    if type(k) == "number" then
      if type(v) ~= "string" or not v:find("=", 1, true) then
        error("exec: env entries must be 'K=V' strings", 3)
      end
    elseif type(k) == "string" then
      keys[#keys + 1] = k
    else
      error("exec: env keys must be strings", 3)
    end
  end
  for i, v in ipairs(env) do out[i] = v end
  table.sort(keys)
  for _, k in ipairs(keys) do out[#out + 1] = k .. "=" .. tostring(env[k]) end
  return out
end

local function check_args(container, argv)
  if type(container) ~= "string" or container == "" then error("exec: container must be a string", 3) end
  if type(argv) ~= "table" or #argv == 0 then error("exec: argv must be a non-empty list of strings", 3) end
  for _, a in ipairs(argv) do
    if type(a) ~= "string" then error("exec: argv must be a list of strings", 3) end
  end
end

-- The stream ends when the process closes its output; the daemon may still be recording the
-- exit for a moment, so ExitCode (null while running) is re-read briefly.
local function exit_code(eng, id, deadline, left)
  local ipath = "/exec/" .. O.urlencode(id) .. "/json"
  local pause = 0.01
  while true do
    local info, err = R.call(eng, "GET", ipath, nil, { timeout = left() }, 2)
    if not info then return nil, err end
    if info.Running == false and type(info.ExitCode) == "number" then return info.ExitCode end
    if now() >= deadline then
      return nil, E.new("transport", "timeout", "exec " .. id .. ": no exit code in time",
        { method = "GET", path = ipath })
    end
    R.sleep(eng, pause)
    pause = math.min(pause * 2, 0.2)
  end
end

local M = {}

function M.exec(eng, container, argv, opts)
  R.check_open(eng, 2)
  check_args(container, argv)
  opts = E.check_keys(opts, EXEC_KEYS, "exec")
  O.check_number(opts.timeout, "exec", "timeout", 2)
  O.check_number(opts.max_bytes, "exec", "max_bytes", 2)
  local env = env_list(opts.env)
  local timeout = opts.timeout or eng.timeout
  local deadline = now() + timeout + 1
  local function left() return math.max(0.001, math.min(timeout, deadline - now())) end
  local cpath = "/containers/" .. O.urlencode(container) .. "/exec"
  local created, err = R.call(eng, "POST", cpath, {
    AttachStdin = false, AttachStdout = true, AttachStderr = true, Tty = false,
    Cmd = argv, Env = env, User = opts.user, WorkingDir = opts.workdir,
  }, { timeout = left() }, 2)
  if not created then return nil, err end
  if type(created) ~= "table" or type(created.Id) ~= "string" then
    return nil, X.bad_json("POST", cpath, "exec create answered without an Id")
  end
  local id = created.Id
  local spath = "/exec/" .. O.urlencode(id) .. "/start"
  local tid
  tid, err = eng._h:submit("POST", O.target(eng.api_version, spath, nil, "exec"), '{"Detach":false,"Tty":false}', {
    content_type = "application/json", timeout = left(), mode = "demux",
    max_bytes = opts.max_bytes or O.DEFAULTS.DEFAULT_EXEC_MAX_BYTES,
  })
  if not tid then return nil, err end
  local r = R.wait(eng, tid)
  if r.err then return nil, X.with_path(r.err, "POST", spath) end
  if r.status < 200 or r.status >= 300 then return nil, X.engine_error(r.status, "POST", spath, r.message) end
  local code
  code, err = exit_code(eng, id, deadline, left)
  if not code then return nil, err end
  return { stdout = r.stdout, stderr = r.stderr, exit_code = code }
end

return { methods = M }
