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

-- Where each method's options table stands among its arguments (after self): the class checks
-- it is a table (or nil) before the backend is asked, with the message every options check
-- gives (sandstack.error's check_keys). A method that takes no options table is absent.
local OPTS_AT = { exec = 2, spawn = 2, read = 2, write = 3, list = 2, stat = 2, remove = 2, upload = 3,
  download = 3, logs = 1, stats = 1, hibernate = 1, snapshot = 1, fork = 2, changes = 1, stop = 1, start = 1,
  restart = 1, answer = 3, serve = 2 }
local NO_KEYS = {}
-- Where a method's path in the sandbox stands: the class checks it is a string.
local PATH_AT = { read = 1, write = 1, list = 1, stat = 1, remove = 1, upload = 2, download = 1 }

local made = setmetatable({}, { __mode = "k" }) -- the methods M.class made: function -> name

-- exec(service, argv, opts), the older form swarm still takes (docs/session.md): its argv is
-- the engine client's to check.
local function older_exec(_, argv)
  return type(argv) == "table" and argv[1] ~= nil
end

-- The one session class. Every backend's handle has its method table from here: the closed
-- state, the options table's check and the unsupported answer are said once, and a backend
-- supplies only what differs, a driver:
--   backend  the name its unsupported errors carry ("docker", "swarm", "sbx");
--   ops      { method = function(self, ...) }: what the backend does, interface methods only;
--   why      { method = reason }: what to use instead, for a method ops lacks (optional);
--   path     what a path in the sandbox is there ("an absolute path in the container");
--   reopen   what makes a new handle, said by the closed sentence (M.closed), and
--   is_open  function(self) -> boolean; both absent: the handle never closes (an sbx box: its
--            close releases host resources only, the box answers on);
--   settle   function(self) -> true, or false, err: a state of the handle to finish before any
--            method runs (docker: a pooled claim answered early, docker/pool_pending.lua); its
--            error is the method's answer (optional).
-- A method ops lacks is the stub of M.stub: nil, the unsupported error, whatever the arguments
-- or the handle's state. Every other method raises a programming error (sandstack.error, at the
-- caller's line) for a call without a handle (h.exec() for h:exec()), a closed handle, a path
-- that is no string, exec's command (M.command_argv) and an options table that is not one, in
-- that order, then calls the backend's op.
-- cls is the backend's own table of its other methods (record, destroy, close, ...); it may not
-- define an interface method itself. Returns cls, its own __index.
function M.class(driver, cls)
  local backend, ops, why = driver.backend, driver.ops, driver.why or {}
  local is_open, reopen, path_says, settle = driver.is_open, driver.reopen, driver.path, driver.settle
  for name in pairs(ops) do
    if not KNOWN[name] then
      error("sandstack.session.class: " .. name .. " is no session method (put it on the class table)", 2)
    end
  end
  for _, name in ipairs(M.METHODS) do
    if rawget(cls, name) ~= nil then
      error(("sandstack.session.class: the %s handle defines %s itself (put it in the driver's ops)"):format(
        backend, name), 2)
    end
    local op, at, path_at = ops[name], OPTS_AT[name], PATH_AT[name]
    if op == nil then
      cls[name] = M.stub(backend, name, why[name])
    else
      local f = function(self, ...)
        if type(self) ~= "table" then E.raise(name .. ": call it on a handle, as h:" .. name .. "(...)") end
        if settle then
          local ok, err = settle(self)
          if not ok then return nil, err end
        end
        if is_open and not is_open(self) then M.closed(reopen) end
        if path_at then
          local p = select(path_at, ...)
          if type(p) ~= "string" then
            E.raise(("%s: argument 'path' must be %s, got %s"):format(name, path_says, type(p)))
          end
        end
        if name == "exec" and not older_exec(...) then M.command_argv((...)) end -- checked only: handed on as given
        if at then
          local o = select(at, ...)
          if o ~= nil and type(o) ~= "table" then E.check_keys(o, NO_KEYS, name) end
        end
        return op(self, ...)
      end
      made[f] = name
      cls[name] = f
    end
  end
  cls.__index = cls
  return cls
end

-- The name of the session method f, when the one class made it (M.class), else nil.
function M.class_method(f) return made[f] end

return M
