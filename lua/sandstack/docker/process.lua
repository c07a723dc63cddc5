-- h:spawn and the process it returns, on a Docker engine (docs/process.md): an exec whose
-- attach is hijacked, so stdin streams in while stdout and stderr stream out. The wire is
-- reached through an `io` table, so the same process logic runs over the C core's hijacked
-- connection (csrc/engine/attach.c, blocking with timeouts) and over nginx cosockets
-- (sandstack.docker.cosocket, never blocking a worker):
--   io.call(method, path, body, opts) -> decoded body | nil, err   (eng:call's contract)
--   io.attach(path, body, timeout) -> conn | nil, err   conn: send, recv, shutdown, close
--   io.api_version
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local registry = require "sandstack.docker.process_registry"

local M = {}
local Process = {}
Process.__index = Process

-- The variable each spawned process carries: p:kill finds the process (and the children that
-- kept its environment) by it, since the Engine API has no way to signal an exec.
M.TOKEN_VAR = "SANDSTACK_EXEC"

local SPAWN_KEYS = require("sandstack.docker.method_options").spawn
local SIGNALS = { HUP = 1, INT = 2, QUIT = 3, KILL = 9, USR1 = 10, USR2 = 12, TERM = 15, CONT = 18, STOP = 19 }
local DEFAULT_MAX_BYTES = 16 * 1024 * 1024
M.DEFAULT_TIMEOUT = 30 -- seconds: each Engine request, a write, and read's and wait's default

-- A terminal size: a wrong type raises at the caller; out of 1..65535 is nil, err. -> v | nil, err
local function size_arg(v, name, what)
  E.want(v, "number", what, name, "a whole number")
  if v == nil then return nil end
  if math.type and math.type(v) == "float" and v == math.floor(v) then v = math.floor(v) end
  if v ~= math.floor(v) or v < 1 or v > 65535 then return E.refuse(what, name, "must be a whole number from 1 to 65535") end
  return v
end

-- The checked argv and options -> argv, opts | nil, err: a wrong type raises at the caller of
-- h:spawn, a refused value is invalid/invalid_option (docs/api/README.md, "Conventions").
function M.check(argv, opts)
  if type(argv) == "string" then argv = { "sh", "-c", argv } end
  E.want(argv, "table", "spawn", "argument 'argv'", "a non-empty list of strings or a string")
  if argv == nil or #argv == 0 then E.raise("spawn: argument 'argv' must be a non-empty list of strings or a string") end
  for _, a in ipairs(argv) do
    if type(a) ~= "string" then E.raise("spawn: argument 'argv' must be a list of strings, got a " .. type(a) .. " in it") end
  end
  local err
  opts, err = E.options(opts, SPAWN_KEYS, "spawn")
  if not opts then return nil, err end
  for _, k in ipairs { "cwd", "user", "service" } do
    if opts[k] == "" then return E.refuse("spawn", k, "must not be empty") end
  end
  opts.cols, opts.rows = size_arg(opts.cols, "cols", "spawn"), size_arg(opts.rows, "rows", "spawn")
  return argv, opts
end

-- {"K=V"} entries as given, then {K = "V"} sorted by name, then the process token.
local function env_list(env, token)
  local out, names = {}, {}
  for k, v in pairs(env or {}) do
    if type(k) == "number" then
      if type(v) ~= "string" or not v:find("=", 1, true) then E.raise("spawn: option 'env': entries must be 'K=V' strings") end
    elseif type(k) == "string" then
      names[#names + 1] = k
    else
      E.raise("spawn: option 'env': keys must be strings")
    end
  end
  for _, v in ipairs(env or {}) do out[#out + 1] = v end
  table.sort(names)
  for _, k in ipairs(names) do out[#out + 1] = k .. "=" .. tostring(env[k]) end
  out[#out + 1] = M.TOKEN_VAR .. "=" .. token
  return out
end

local function versioned(io, path)
  return io.api_version and ("/v" .. io.api_version .. path) or path
end

local function closed_error(self)
  return E.new("transport", "closed", "the process's output is over", { exec = self.id })
end

-- Starts argv in container over io. Returns the process, or nil, err (nothing is left running
-- when the attach fails: the exec is created but never started).
function M.spawn(io, container, argv, opts)
  local token = core.random_hex(16)
  local tty = opts.tty and true or false
  local timeout = opts.timeout or M.DEFAULT_TIMEOUT
  local t0 = core.engine_clock()
  local method, path = ops.target("exec_create", container)
  local created, err = io.call(method, path, {
    AttachStdin = true, AttachStdout = true, AttachStderr = true, Tty = tty, Cmd = argv,
    Env = env_list(opts.env, token), User = opts.user, WorkingDir = opts.cwd,
  }, { timeout = timeout })
  if not created then return nil, err end
  if type(created) ~= "table" or type(created.Id) ~= "string" then
    return E.fail("engine", "bad_json", "exec create answered without an Id")
  end
  local t1 = core.engine_clock()
  local body = tty and '{"Detach":false,"Tty":true}' or '{"Detach":false,"Tty":false}'
  local conn; conn, err = io.attach(versioned(io, ops.request("exec_start", created.Id).path), body, timeout)
  if not conn then return nil, err end
  local self = setmetatable({ io = io, conn = conn, id = created.Id, container = container, tty = tty,
    token = token, user = opts.user, timeout = timeout, on_output = opts.on_output, argv = argv, started = os.time(),
    max_bytes = opts.max_bytes or DEFAULT_MAX_BYTES, queue = {}, held = 0,
    frames = not tty and core.frame_reader() or nil,
    timings = { create = t1 - t0, attach = core.engine_clock() - t1 } }, Process)
  if tty then
    local t2 = core.engine_clock()
    local ok; ok, err = self:resize(opts.cols or 80, opts.rows or 24)
    if not ok then
      self:close()
      return nil, err
    end
    self.timings.resize = core.engine_clock() - t2
  end
  return self
end

-- The spawn's entry on the engine, and the listing and attach by id that read it
-- (docker/process_registry.lua).
M.register, M.list = registry.register, registry.list

-- h:attach(id): the live process this handle spawned, or a detached one from the entry
-- (docker/process_registry.lua).
function M.attach(io, project, id, live)
  return registry.attach(io, project, id, live, function(fields) return setmetatable(fields, Process) end)
end

local function detached_error(self, method)
  return E.new("unsupported", "detached", ("%s: process %s was attached by id: its stdin and output belong to "
    .. "the connection that spawned it, and the Engine API cannot open another; wait, kill and resize "
    .. "work"):format(method, self.id:sub(1, 12)), { exec = self.id, method = method })
end

local function stream_name(n) return n == 2 and "stderr" or "stdout" end

-- Reads once from the connection (up to timeout) and queues what came. Returns true when
-- something was queued, or nil, err (timeout, closed, or a transport failure).
local function fill(self, timeout)
  if self.eof then return nil, closed_error(self) end
  local data, why = self.conn:recv(timeout)
  if not data then
    if why == "timeout" then return nil, E.new("transport", "timeout", "no output in time", { timeout = timeout }) end
    if why == "eof" then
      self.eof = true
      if self.frames and self.frames:partial() then
        return nil, E.new("transport", "closed", "the stream ended inside a frame", { exec = self.id })
      end
      return nil, closed_error(self)
    end
    return nil, why
  end
  local pieces
  if self.frames then
    local perr
    pieces, perr = self.frames:feed(data)
    if not pieces then return nil, perr end
  else
    pieces = { 1, data }
  end
  for i = 1, #pieces, 2 do
    local s, d = stream_name(pieces[i]), pieces[i + 1]
    if self.on_output then
      self.on_output(d, s)
    else
      self.held = self.held + #d
      if self.held > self.max_bytes then
        return nil, E.new("output_limit", nil, ("the process's unread output passed %d bytes"):format(self.max_bytes),
          { limit = self.max_bytes })
      end
      self.queue[#self.queue + 1] = { d, s }
    end
  end
  return true
end

-- The next piece of output: data, "stdout" | "stderr"; or nil, err: err.reason "timeout" (read
-- again) or "closed" (the output is over). With on_output set, pieces go there instead and read
-- returns true once something was delivered.
local function check_timeout(timeout, what)
  E.want(timeout, "number", what, "argument 'timeout'", "a number of seconds")
  if timeout ~= nil and not (timeout >= 0) then return E.refuse(what, "argument 'timeout'", "must be a number of seconds >= 0") end
  return true
end

local function check_conn(self)
  if not self.conn then E.raise("the process is closed") end
end

function Process:read(timeout)
  if self.detached then return nil, detached_error(self, "read") end
  check_conn(self)
  local tok, terr = check_timeout(timeout, "read")
  if not tok then return nil, terr end
  local deadline = core.engine_clock() + (timeout or self.timeout)
  while #self.queue == 0 do
    local left = deadline - core.engine_clock()
    local ok, err = fill(self, left > 0 and left or 0)
    if not ok then return nil, err end
    if self.on_output then return true end
  end
  local piece = table.remove(self.queue, 1)
  self.held = self.held - #piece[1]
  return piece[1], piece[2]
end

function Process:write(data)
  if self.detached then return nil, detached_error(self, "write") end
  check_conn(self)
  if type(data) ~= "string" then E.raise("write: argument 'data' must be a string, got " .. type(data)) end
  if self.stdin_closed then return E.fail("invalid", "stdin_closed", "stdin was closed by close_stdin") end
  return self.conn:send(data, self.timeout)
end

-- The end of stdin (a half-close of the connection): the process reads EOF, output goes on.
function Process:close_stdin()
  if self.detached then return nil, detached_error(self, "close_stdin") end
  check_conn(self)
  if self.stdin_closed then return true end
  local ok, err = self.conn:shutdown()
  if not ok then return nil, err end
  self.stdin_closed = true
  return true
end

-- The terminal's size (tty only). The exec may not be running yet right after the attach: the
-- engine then refuses, and the resize is retried for up to 5 seconds, as the Docker CLI retries.
function Process:resize(cols, rows)
  if not self.detached then check_conn(self) end
  if cols == nil or rows == nil then E.raise("resize: arguments 'cols' and 'rows' must be whole numbers") end
  local c, cerr = size_arg(cols, "argument 'cols'", "resize")
  if not c then return nil, cerr end
  local r, rerr = size_arg(rows, "argument 'rows'", "resize")
  if not r then return nil, rerr end
  cols, rows = c, r
  if not self.tty then return E.fail("invalid", "not_a_tty", "resize needs a process spawned with tty = true") end
  local req = ops.request("exec_resize", self.id, { h = rows, w = cols })
  -- The engine holds the answer until the process runs (measured on 20.10: one request, as long
  -- as runc takes); a refusal (asked before the exec is known to run) is tried again every few
  -- milliseconds, so no coarse retry adds to the shell's first output.
  local deadline = core.engine_clock() + 5
  local pause = 0.002
  while true do
    local ok, err = self.io.call(req.method, req.path, nil, { query = req.query, timeout = self.timeout })
    if ok or core.engine_clock() > deadline or not (err and err.kind == "engine") then
      if ok then return true end
      return nil, err
    end
    (self.io.sleep or core.sleep)(pause)
    pause = math.min(pause * 1.5, 0.02)
  end
end

local function inspect(self)
  local method, path = ops.target("inspect_exec", self.id)
  local info, err = self.io.call(method, path, nil, { timeout = self.timeout })
  if not info then return nil, err end
  return info
end

-- The exit code, once the process has ended and its output is over (read or delivered; unread
-- output stays for p:read, up to max_bytes). nil, err: err.kind "timeout" when it has not ended
-- in time (the process runs on).
function Process:wait(timeout)
  if self.code then return self.code end
  local tok, terr = check_timeout(timeout, "wait")
  if not tok then return nil, terr end
  local deadline = core.engine_clock() + (timeout or self.timeout)
  while self.conn and not self.eof do
    local left = deadline - core.engine_clock()
    if left <= 0 then return E.fail("timeout", "wait", "the process has not ended in time", { timeout = timeout }) end
    local ok, err = fill(self, left)
    if not ok and err.reason ~= "closed" and err.reason ~= "timeout" then return nil, err end
  end
  local pause = 0.005
  while true do
    local info, err = inspect(self)
    if not info then return nil, err end
    if info.Running == false and type(info.ExitCode) == "number" then
      self.code = info.ExitCode
      if self.entry then registry.forget(self.io, self.entry, self.timeout); self.entry = nil end
      return self.code
    end
    if core.engine_clock() >= deadline then
      return E.fail("timeout", "wait", "the process has not ended in time", { timeout = timeout })
    end
    (self.io.sleep or core.sleep)(pause)
    pause = math.min(pause * 2, 0.1)
  end
end

-- Sends a signal (a name such as "TERM" or "KILL", or a number; default TERM) to the process
-- and to its descendants that kept its environment, found by the token: sandstack-reap in a
-- helper container sharing the sandbox's PID namespace, as h:exec's kill (docker/exec_kill.lua;
-- KILL also takes the process's group, session and descendants). Nothing runs in the sandbox,
-- so an image without a shell works. true, or nil, err: kind "exited" when no process carries
-- the token any more.
function Process:kill(signal)
  if signal == nil then signal = "TERM" end
  if type(signal) == "string" then
    local name = signal:upper():gsub("^SIG", "")
    if not SIGNALS[name] then return E.refuse("kill", "argument 'signal'", "names no signal sandstack sends: " .. name) end
    signal = SIGNALS[name]
  elseif type(signal) == "number" then
    if not (signal >= 1 and signal <= 64 and signal == math.floor(signal)) then
      return E.refuse("kill", "argument 'signal'", "must be a signal number from 1 to 64")
    end
    signal = math.floor(signal)
  else
    E.raise("kill: argument 'signal' must be a name such as \"TERM\" or a number, got " .. type(signal))
  end
  local io = self.io
  local ok, err = require("sandstack.docker.exec_kill").kill({ call = function(_, ...) return io.call(...) end },
    self.container, self.token, self.timeout, signal)
  if not ok then return nil, err end
  return true
end

-- Closes the connection (idempotent). The process is not killed: without a tty it reads EOF
-- on stdin; a shell on a tty gets SIGHUP from the engine closing its terminal.
function Process:close()
  if self.conn then self.conn:close() end
  self.conn = nil
  if self.live then self.live[self.id] = nil; self.live = nil end
end
Process.__gc = Process.close
Process.__close = Process.close

-- A command run to its end over io, for an io without an exec of its own (the cosocket io's
-- kill): {stdout =, stderr =, exit_code =} | nil, err.
function M.run(io, container, argv, opts)
  opts = opts or {}
  local p, err = M.spawn(io, container, argv, { user = opts.user, timeout = opts.timeout })
  if not p then return nil, err end
  local out = { stdout = {}, stderr = {} }
  while true do
    local data, stream = p:read()
    if not data then
      if stream.reason ~= "closed" then p:close(); return nil, stream end
      break
    end
    local t = out[stream]
    t[#t + 1] = data
  end
  local code; code, err = p:wait()
  p:close()
  if not code then return nil, err end
  return { stdout = table.concat(out.stdout), stderr = table.concat(out.stderr), exit_code = code }
end

-- The io of a sandstack.engine client (blocking, with timeouts).
function M.engine_io(eng)
  return {
    api_version = eng.api_version,
    call = function(method, path, body, opts) return eng:call(method, path, body, opts) end,
    attach = function(target, body, timeout) return core.engine_attach(eng._cfg, "POST", target, body, timeout) end,
    exec = function(container, argv, opts) return eng:exec(container, argv, opts) end,
  }
end

return M
