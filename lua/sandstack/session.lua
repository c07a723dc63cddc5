-- sandstack.session: the one interface of a session handle, the same on every backend
-- (sandstack.docker stacks, sandstack.sbx boxes, sandstack.swarm stacks; docs/session.md).
-- A backend that cannot do something still has the method: it returns nil and an error with
-- kind = "unsupported" that names the backend and the method, so code written against one
-- backend fails in a way it can test for on another, never with "attempt to call a nil value".
local E = require "sandstack.error"

local M = {}

-- Every method a session handle has, in the order docs/session.md describes them.
M.METHODS = {
  -- commands and processes
  "exec", "spawn", "processes", "attach",
  -- files
  "read", "write", "list", "stat", "remove", "upload", "download",
  -- observing
  "logs", "stats", "ports",
  -- lifecycle
  "pause", "resume", "hibernate", "snapshot", "fork", "changes", "set_timeout", "expires",
  "stop", "start", "restart",
  -- egress and credentials, changed live
  "set_egress", "egress", "set_credentials", "set_model_key", "credentials",
  -- egress asks
  "egress_asks", "answer", "serve",
}

local KNOWN = {}
for _, m in ipairs(M.METHODS) do KNOWN[m] = true end
M.KNOWN = KNOWN

-- The closed state, said once for every backend: a method of a closed handle is a programming
-- error, raised at the caller's line. reopen names what makes a new handle
-- ("sandstack.docker.reconnect or open").
function M.closed(reopen)
  E.raise("the stack handle is closed: make a new one with " .. reopen)
end

-- The argv of a command as every backend's exec takes it: a non-empty list of strings, or one
-- string that /bin/sh -c runs. A wrong one raises at the caller (sandstack.error).
function M.command_argv(cmd)
  if type(cmd) == "string" then
    if cmd == "" then E.raise("exec: the command string is empty") end
    return { "/bin/sh", "-c", cmd }
  end
  if type(cmd) ~= "table" or #cmd == 0 then
    E.raise("exec: argument 'cmd' must be a non-empty list of strings or a string, got " .. type(cmd))
  end
  for i, a in ipairs(cmd) do
    if type(a) ~= "string" then E.raise("exec: argv[" .. i .. "] is not a string") end
  end
  return cmd
end

-- The error a missing capability returns: kind "unsupported", reason the method, with the
-- backend and the method as fields.
function M.unsupported(backend, method, why)
  return E.new("unsupported", method, ("%s is not supported on the %s backend%s"):format(
    method, backend, why and ("; " .. why) or ""), { backend = backend, method = method })
end

local stubs = setmetatable({}, { __mode = "k" }) -- the functions M.stub made

-- A stub for `method` on `backend`: nil, the unsupported error (the arguments are not looked at).
function M.stub(backend, method, why)
  local f = function() return nil, M.unsupported(backend, method, why) end
  stubs[f] = true
  return f
end

-- Gives the method table `cls` (a handle's metatable __index) every method of the interface it
-- does not define itself, as a stub. `why` optionally maps a method name to a reason shown in
-- the error (what to use instead). Returns cls.
function M.install(cls, backend, why)
  for _, m in ipairs(M.METHODS) do
    if rawget(cls, m) == nil then cls[m] = M.stub(backend, m, why and why[m]) end
  end
  return cls
end

-- The interface methods `cls` implements for real (not stubs), in M.METHODS order.
function M.implemented(cls)
  local out = {}
  for _, m in ipairs(M.METHODS) do
    local f = cls[m]
    if f and not stubs[f] then out[#out + 1] = m end
  end
  return out
end

return M
