-- The transport to the added proxy's control socket (internal to sandstack.docker; the commands
-- are egress_live.lua's). Two ways, chosen at start and kept in the stack's record as
-- plan.proxy.control:
--   "socket": the stack's control directory on the host, <ROOT>/<project>/ (mode 0700, the
--     module's), holds control/ (mode 0700, the proxy's uid), bind-mounted into the proxy's
--     container alone; the module connects to control/control.sock itself (core.control_request),
--     the proxy letting in its own uid and the module's.
--   "exec": an Engine exec of `sandstack-proxy --control VERB` in the proxy's container, for an
--     engine whose files are not this process's (a tcp or ssh DOCKER_HOST), or a process that
--     is not root (only root can give the directory to the proxy's uid), or a record that names
--     no way (an older one). An engine on a unix socket whose files are elsewhere (this process
--     in a container with the engine's socket) makes the bind's directory itself, where the
--     proxy cannot listen: it falls back to its abstract socket, no socket shows in this
--     process's directory, and the start records "exec".
-- The start makes the directory; down, reap and a rollback remove it (M.remove).
local core = require "sandstack.core"
local E = require "sandstack.error"
local target = require "sandstack.docker.target"

local M = {}

M.ROOT = "/run/sandstack"
M.PROXY_UID = 65534 -- the proxy image's USER (docker/images.lua)
local PROXY_PATH = "/usr/local/bin/sandstack-proxy"
local TIMEOUT = 30

function M.dir(project) return M.ROOT .. "/" .. project end
function M.socket(project) return M.dir(project) .. "/control/control.sock" end

-- "socket", or "exec" and why the socket cannot be used.
function M.choose(eng)
  local a = type(eng) == "table" and type(eng.host) == "string" and core.engine_address(eng.host)
  if not (a and a.unix_path) then return "exec", "the engine is not on this host's filesystem" end
  if core.euid() ~= 0 then return "exec", "this process is not root" end
  return "socket"
end

-- Makes the project's control directory when the socket can be used: its host path (for
-- model:plan's control_dir), or nil and why not (the stack then uses the exec).
function M.prepare(eng, project)
  local way, why = M.choose(eng)
  if way ~= "socket" then return nil, why end
  local ok, err = core.control_dir(M.dir(project), M.PROXY_UID, M.PROXY_UID)
  if not ok then return nil, err.message end
  return M.dir(project) .. "/control"
end

-- Removes the project's control directory if there is one (down, reap, rollback): only the
-- directory a start made, named by the project.
function M.remove(project)
  if type(project) ~= "string" or project == "" or project:find("/", 1, true) or project:sub(1, 1) == "." then
    return true
  end
  local st = core.file_stat(M.dir(project))
  if not st or st.type ~= "directory" then return true end
  return core.rmtree(M.dir(project))
end

-- The way to a stack whose record does not say (a warm pool's claim plans the stack again):
-- "socket" when this process could have made the directory and the proxy listens in it.
function M.found(eng, project)
  if M.choose(eng) == "socket" and core.control_is_socket(M.socket(project)) then return "socket" end
  return "exec"
end

-- The way a stack's proxy is reached: the record's, else "exec".
function M.way(stack)
  local px = stack.plan.proxy
  return type(px) == "table" and px.control == "socket" and "socket" or "exec"
end

-- The engine and container of the proxy sandstack added, from the plan or the record: a stack's
-- own engine and container, or a swarm session's node engine and task container
-- (docker/target.lua). (eng, container) or (nil, err).
function M.proxy_container(stack)
  local px = stack.plan.proxy
  if type(px) ~= "table" or not px.added then
    return nil, E.new("invalid", "no_added_proxy", "stack " .. tostring(stack.project) .. " has no proxy sandstack "
      .. "added (egress_policy without proxy_service), so its egress cannot be changed live", { project = stack.project })
  end
  return target.resolve(stack, px.service)
end

-- Linux caps one environment string at 128 KiB (MAX_ARG_STRLEN), the exec's payload included.
local MAX_PAYLOAD = 128 * 1024 - #"SANDSTACK_CONTROL_PAYLOAD=" - 1

local function by_exec(stack, eng, name, verb, payload)
  if payload and #payload > MAX_PAYLOAD then
    return nil, E.new("invalid", "too_large", ("%s: the payload is %d bytes; an exec's environment string holds at most %d")
      :format(verb, #payload, MAX_PAYLOAD), { size = #payload })
  end
  local res, err = eng:exec(name, { PROXY_PATH, "--control", verb },
    { env = payload and { SANDSTACK_CONTROL_PAYLOAD = payload } or nil, timeout = TIMEOUT })
  if not res then return nil, err end
  local line = (res.stdout or ""):match("[^\n]+")
  if not line then
    return nil, E.new("proxy", "no_control", ("the proxy in %s did not answer %s (exit %s): %s"):format(name, verb,
      tostring(res.exit_code), (res.stderr or ""):sub(1, 300)), { service = stack.plan.proxy.service })
  end
  return line
end

-- Sends one command (verb, payload string or nil), or with verb a list of {verb, payload} a batch
-- run in order up to the first refusal, in one connection; returns the proxy's answer line (JSON
-- text), or nil, err. The one entry point every control command uses.
-- A socket that is not there (a host that lost /run, a directory removed by hand) is not the
-- end: the exec reaches the proxy too.
local function by_socket(stack, request)
  local line, err = core.control_request(M.socket(stack.project), request, TIMEOUT)
  if line or err.reason ~= "unreachable" then return line, err end
  return nil, nil
end

function M.send(stack, verb, payload)
  local eng, name = M.proxy_container(stack)
  if not eng then return nil, name end
  local err
  local socket = M.way(stack) == "socket"
  if type(verb) == "table" then
    local list = {}
    for i, c in ipairs(verb) do list[i] = { verb = c[1], payload = c[2] } end
    if socket then
      local line; line, err = by_socket(stack, core.json_encode(list))
      if line or err then return line, err end
    end
    local answers = {} -- through the exec, one after another: the same answer shape
    for i, c in ipairs(verb) do
      local line; line, err = by_exec(stack, eng, name, c[1], c[2])
      if not line then return nil, err end
      answers[i] = core.json_decode(line)
      if type(answers[i]) ~= "table" or answers[i].ok ~= true then break end
    end
    local last = answers[#answers]
    return core.json_encode { ok = #answers == 0 or (type(last) == "table" and last.ok == true), answers = answers }
  end
  if socket then
    local line; line, err = by_socket(stack, core.json_encode { verb = verb, payload = payload })
    if line or err then return line, err end
  end
  return by_exec(stack, eng, name, verb, payload)
end

return M
