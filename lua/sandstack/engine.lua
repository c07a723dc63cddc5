-- sandstack.engine: the Docker Engine API client (API.md, docs/engine.md).
-- The transport, the byte budgets and the stream parsers are C (csrc/engine via the
-- `engine_client` handle of sandstack.core); this file holds what is policy: option checking,
-- path prefixing, query/body encoding, JSON decoding and turning answers into error objects.
local core = require "sandstack.core"
local E = require "sandstack.error"

local M = {}

local MiB = 1024 * 1024
M.DEFAULT_TIMEOUT = 30
M.DEFAULT_MAX_BYTES = 16 * MiB        -- a response body kept in memory
M.DEFAULT_EXEC_MAX_BYTES = 8 * MiB    -- stdout + stderr of one exec
M.DEFAULT_EVENTS_MAX_BYTES = 1 * MiB  -- event bytes held unread
M.MIN_EVENTS_MAX_BYTES = 64 * 1024    -- curl hands over up to 16 KiB at once
M.DEFAULT_DOWNLOAD_MAX_BYTES = 1024 * MiB

local Engine = {}
local engine_mt = { __index = Engine, __name = "sandstack.engine" }
local Events = {}
local events_mt = { __index = Events, __name = "sandstack.engine.events" }

local NEW_KEYS = { host = true, timeout = true, api_version = true, tls = true, max_bytes = true }
local TLS_KEYS = { ca = true, cert = true, key = true, verify = true }
local REQUEST_KEYS = { timeout = true, query = true, max_bytes = true, headers = true, raw = true,
  content_type = true }
local CALL_KEYS = { timeout = true, query = true, max_bytes = true, headers = true, raw = true,
  content_type = true, ok = true }
local EXEC_KEYS = { user = true, env = true, workdir = true, max_bytes = true, timeout = true }
local EVENTS_KEYS = { filters = true, since = true, ["until"] = true, max_bytes = true,
  timeout = true }
local DOWNLOAD_KEYS = { max_bytes = true, timeout = true, query = true, headers = true }

local REASONS = {
  [304] = "not_modified", [400] = "bad_request", [401] = "unauthorized", [403] = "forbidden",
  [404] = "not_found", [409] = "conflict", [500] = "server_error", [503] = "unavailable",
}

local check_opts = E.check_keys -- raises on an unknown key, at the public method's caller

local function check_number(v, what, name)
  if v ~= nil and (type(v) ~= "number" or v ~= v or v <= 0) then
    error(what .. ": option '" .. name .. "' must be a positive number", 3)
  end
  return v
end

local function nonempty(s)
  if s ~= nil and s ~= "" then return s end
  return nil
end

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- The TLS settings of the Go client and the CLI: DOCKER_CERT_PATH (default ~/.docker) holds
-- ca.pem, cert.pem, key.pem; DOCKER_TLS_VERIFY non-empty verifies the server; DOCKER_TLS
-- alone means TLS without verification.
local function tls_config(opts_tls)
  if opts_tls == false then return nil end
  local verify_env = nonempty(os.getenv("DOCKER_TLS_VERIFY"))
  local cert_path = nonempty(os.getenv("DOCKER_CERT_PATH"))
  local want = opts_tls ~= nil or verify_env or cert_path or nonempty(os.getenv("DOCKER_TLS"))
  if not want then return nil end
  local t = type(opts_tls) == "table" and opts_tls or {}
  local dir = cert_path or ((os.getenv("HOME") or "") .. "/.docker")
  local function pick(explicit, name)
    if explicit then return explicit end
    local p = dir .. "/" .. name
    return file_exists(p) and p or nil
  end
  local verify = t.verify
  if verify == nil then verify = verify_env ~= nil or opts_tls ~= nil end
  return { ca = pick(t.ca, "ca.pem"), cert = pick(t.cert, "cert.pem"), key = pick(t.key, "key.pem"),
    verify = verify and true or false }
end

local function urlencode(s)
  return (s:gsub("[^%w%-%._~]", function(c) return string.format("%%%02X", c:byte()) end))
end
M.urlencode = urlencode

local function query_value(v, what)
  local t = type(v)
  if t == "string" then return v end
  if t == "number" then
    if v == math.floor(v) and v > -2^53 and v < 2^53 then return string.format("%d", v) end
    return tostring(v)
  end
  if t == "boolean" then return v and "true" or "false" end
  if t == "table" then
    local s, err = core.json_encode(v)
    if not s then error(what .. ": query value cannot be JSON-encoded: " .. err.message, 4) end
    return s
  end
  error(what .. ": query values must be strings, numbers, booleans or tables", 4)
end

-- "?k=v&..." with keys sorted (stable URLs make logs and tests readable).
local function encode_query(query, what)
  if query == nil then return "" end
  if type(query) ~= "table" then error(what .. ": option 'query' must be a table", 3) end
  local keys = {}
  for k in pairs(query) do
    if type(k) ~= "string" then error(what .. ": query keys must be strings", 3) end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = urlencode(k) .. "=" .. urlencode(query_value(query[k], what))
  end
  return #parts > 0 and ("?" .. table.concat(parts, "&")) or ""
end

local function header_lines(headers, what)
  if headers == nil then return nil end
  if type(headers) ~= "table" then error(what .. ": option 'headers' must be a table", 3) end
  local out, names = {}, {}
  for k, v in pairs(headers) do
    local line
    if type(k) == "number" then
      line = v
    else
      names[#names + 1] = k
    end
    if line ~= nil then
      if type(line) ~= "string" or not line:find(":") then
        error(what .. ": header entries must be 'Name: value' strings", 3)
      end
      out[#out + 1] = line
    end
  end
  table.sort(names)
  for _, k in ipairs(names) do
    out[#out + 1] = tostring(k) .. ": " .. tostring(headers[k])
  end
  for _, line in ipairs(out) do
    if line:find("[\r\n]") then error(what .. ": header values must not contain CR or LF", 3) end
  end
  return out
end

-- The versioned target: "/v1.41/containers/json?all=true". Paths already carrying a version and
-- /_ping (which every version serves) are sent as they are.
function Engine:_target(path, query, what)
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then
    error(what .. ": path must be a string starting with '/'", 3)
  end
  local target = path
  if self.api_version and not path:match("^/v%d+%.%d+/") and not path:match("^/_ping") then
    target = "/v" .. self.api_version .. path
  end
  local q = encode_query(query, what)
  if q ~= "" then target = target .. (path:find("?", 1, true) and "&" .. q:sub(2) or q) end
  return target
end

local function encode_body(body, opts)
  if body == nil then return nil end
  if type(body) == "string" then return body, opts.content_type end
  if type(body) == "table" then
    local s, err = core.json_encode(body)
    if not s then return nil, nil, err end
    return s, "application/json"
  end
  error("body must be a table (sent as JSON) or a string", 4)
end

function Engine:_check_open()
  if self._closed then error("the engine client is closed", 3) end
end

-- Starts a buffered request; returns the transport id or nil, err.
function Engine:_start(method, path, body, opts, keys, what, extra)
  self:_check_open()
  if type(method) ~= "string" then error(what .. ": method must be a string", 3) end
  opts = check_opts(opts, keys, what)
  check_number(opts.timeout, what, "timeout")
  check_number(opts.max_bytes, what, "max_bytes")
  if opts.ok ~= nil and type(opts.ok) ~= "table" then error(what .. ": option 'ok' must be a table", 3) end
  local target = self:_target(path, opts.query, what)
  local payload, ctype, err = encode_body(body, opts)
  if err then return nil, err end
  local sub = {
    content_type = ctype,
    headers = header_lines(opts.headers, what),
    timeout = opts.timeout or self.timeout,
    max_bytes = opts.max_bytes or self.max_bytes,
  }
  for k, v in pairs(extra or {}) do sub[k] = v end
  return self._h:submit(method:upper(), target, payload, sub)
end

-- Blocks until transfer id is finished (every transfer has its own deadline) and takes it.
function Engine:_wait(id)
  self._h:run(id)
  local r = self._h:take(id)
  if r then return r end
  self._h:cancel(id)
  return { id = id, err = E.new("transport", "protocol", "the transfer could not be driven to its end") }
end

local function is_json(ctype)
  return ctype ~= nil and ctype:lower():find("json", 1, true) ~= nil
end

-- The body as request() returns it: decoded JSON when the answer says JSON and parses, else the
-- string as received (garbage is still an answer).
local function decoded(r, raw)
  if raw or r.body == "" or not is_json(r.content_type) then return r.body, false end
  local v = core.json_decode(r.body)
  if v == nil then return r.body, true end
  return v, false
end

local function fix_err(err, method, path)
  if err and err.path ~= nil then
    err.path = path
    err.method = method
  end
  return err
end

local function engine_error(status, method, path, message)
  if message == nil or message == "" then message = "HTTP " .. tostring(status) end
  return E.new("engine", REASONS[status] or ("http_" .. tostring(status)), message,
    { status = status, method = method, path = path })
end
M.engine_error = engine_error

-- call() semantics over a finished result: the decoded body (true when empty) for a 2xx or an
-- accepted status, else an error object.
-- opts.ok: {[304] = true}, or the list form {304, 404}.
local function accepts(ok, st)
  if type(ok) ~= "table" then return false end
  if ok[st] then return true end
  for _, v in ipairs(ok) do
    if v == st then return true end
  end
  return false
end

local function call_result(r, method, path, opts)
  if r.err then return nil, fix_err(r.err, method, path) end
  local st = r.status or 0
  local accepted = (st >= 200 and st < 300) or accepts(opts.ok, st)
  if not accepted then return nil, engine_error(st, method, path, r.message) end
  if r.body == "" then return true end
  local v, bad = decoded(r, opts.raw)
  if bad then
    return nil, E.new("engine", "bad_json", method .. " " .. path .. ": the answer is not valid JSON",
      { status = st, method = method, path = path })
  end
  return v
end

function Engine:request(method, path, body, opts)
  local id, err = self:_start(method, path, body, opts, REQUEST_KEYS, "request")
  if not id then return nil, err end
  local r = self:_wait(id)
  if r.err then return nil, fix_err(r.err, method:upper(), path) end
  return r.status, (decoded(r, opts and opts.raw)), r.headers
end

function Engine:call(method, path, body, opts)
  local id, err = self:_start(method, path, body, opts, CALL_KEYS, "call")
  if not id then return nil, err end
  return call_result(self:_wait(id), method:upper(), path, opts or {})
end

function Engine:ping()
  local v, err = self:call("GET", "/_ping", nil, { raw = true })
  if v == nil then return nil, err end
  return true
end

function Engine:version()
  return self:call("GET", "/version")
end

-- Concurrency: submit() starts a request and returns an id; poll() hands back finished ones.
-- Blocking calls made meanwhile drive the same transfers, so mixing them is safe.
function Engine:submit(method, path, body, opts)
  local tid, err = self:_start(method, path, body, opts, CALL_KEYS, "submit")
  self._next_id = self._next_id + 1
  local id = self._next_id
  self._pending = self._pending + 1
  if not tid then
    self._failed[#self._failed + 1] = { id = id, ok = false, err = err }
  else
    self._subs[tid] = { id = id, method = method:upper(), path = path, opts = opts or {} }
  end
  return id
end

function Engine:poll(timeout)
  self:_check_open()
  if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout < 0) then
    error("poll: timeout must be a number of seconds", 2)
  end
  local out = {}
  for i, f in ipairs(self._failed) do out[i] = f end
  self._failed = {}
  local h = self._h
  if #out == 0 and h:finished() == 0 then h:run(0, timeout or 0) else h:run(0, 0) end
  while true do
    local r = h:take(0)
    if not r then break end
    local s = self._subs[r.id]
    if s then -- results of blocking calls never wait here; anything else is stale
      self._subs[r.id] = nil
      local v, err = call_result(r, s.method, s.path, s.opts)
      out[#out + 1] = { id = s.id, ok = v ~= nil, status = r.status, body = v, err = err }
    end
  end
  self._pending = self._pending - #out
  return out
end

function Engine:pending()
  return self._pending
end

-- Sleeps while keeping submitted transfers moving.
function Engine:_sleep(seconds)
  self._h:run(-1, seconds)
end

local function env_list(env)
  if env == nil then return nil end
  if type(env) ~= "table" then error("exec: option 'env' must be a table", 4) end
  local out, keys = {}, {}
  for k, v in pairs(env) do
    if type(k) == "number" then
      if type(v) ~= "string" or not v:find("=", 1, true) then
        error("exec: env entries must be 'K=V' strings", 4)
      end
    elseif type(k) == "string" then
      keys[#keys + 1] = k
    else
      error("exec: env keys must be strings", 4)
    end
  end
  for i, v in ipairs(env) do out[i] = v end
  table.sort(keys)
  for _, k in ipairs(keys) do out[#out + 1] = k .. "=" .. tostring(env[k]) end
  return out
end

local now = core.engine_clock

-- exec: create, start without a hijack (the answer is the raw framed stream until EOF),
-- demultiplex byte-exact under the budget, then read the exit code.
function Engine:exec(container, argv, opts)
  self:_check_open()
  if type(container) ~= "string" or container == "" then error("exec: container must be a string", 2) end
  if type(argv) ~= "table" or #argv == 0 then error("exec: argv must be a non-empty list of strings", 2) end
  for _, a in ipairs(argv) do
    if type(a) ~= "string" then error("exec: argv must be a list of strings", 2) end
  end
  opts = check_opts(opts, EXEC_KEYS, "exec")
  check_number(opts.timeout, "exec", "timeout")
  check_number(opts.max_bytes, "exec", "max_bytes")
  local timeout = opts.timeout or self.timeout
  local deadline = now() + timeout + 1
  local function left() return math.max(0.001, math.min(timeout, deadline - now())) end
  local cpath = "/containers/" .. urlencode(container) .. "/exec"
  local created, err = self:call("POST", cpath, {
    AttachStdin = false, AttachStdout = true, AttachStderr = true, Tty = false,
    Cmd = argv, Env = env_list(opts.env), User = opts.user, WorkingDir = opts.workdir,
  }, { timeout = left() })
  if not created then return nil, err end
  if type(created) ~= "table" or type(created.Id) ~= "string" then
    return nil, E.new("engine", "bad_json", "exec create answered without an Id",
      { method = "POST", path = cpath })
  end
  local id = created.Id
  local spath = "/exec/" .. urlencode(id) .. "/start"
  local tid
  tid, err = self._h:submit("POST", self:_target(spath, nil, "exec"), '{"Detach":false,"Tty":false}', {
    content_type = "application/json", timeout = left(), mode = "demux",
    max_bytes = opts.max_bytes or M.DEFAULT_EXEC_MAX_BYTES,
  })
  if not tid then return nil, err end
  local r = self:_wait(tid)
  if r.err then return nil, fix_err(r.err, "POST", spath) end
  if r.status < 200 or r.status >= 300 then return nil, engine_error(r.status, "POST", spath, r.message) end
  -- The stream ends when the process closes its output; the daemon may still be recording the
  -- exit for a moment, so ExitCode (null while running) is re-read briefly.
  local ipath = "/exec/" .. urlencode(id) .. "/json"
  local pause = 0.01
  while true do
    local info
    info, err = self:call("GET", ipath, nil, { timeout = left() })
    if not info then return nil, err end
    if info.Running == false and type(info.ExitCode) == "number" then
      return { stdout = r.stdout, stderr = r.stderr, exit_code = info.ExitCode }
    end
    if now() >= deadline then
      return nil, E.new("transport", "timeout", "exec " .. id .. ": no exit code in time",
        { method = "GET", path = ipath })
    end
    self:_sleep(pause)
    pause = math.min(pause * 2, 0.2)
  end
end

-- download: a GET whose 2xx body streams to a file (mode 0600), bounded by max_bytes. On any
-- failure the partial file is removed.
function Engine:download(path, filename, opts)
  self:_check_open()
  if type(filename) ~= "string" or filename == "" then error("download: filename must be a string", 2) end
  opts = check_opts(opts, DOWNLOAD_KEYS, "download")
  check_number(opts.timeout, "download", "timeout")
  check_number(opts.max_bytes, "download", "max_bytes")
  local tid, err = self._h:submit("GET", self:_target(path, opts.query, "download"), nil, {
    headers = header_lines(opts.headers, "download"), timeout = opts.timeout or self.timeout,
    mode = "file", file = filename, max_bytes = opts.max_bytes or M.DEFAULT_DOWNLOAD_MAX_BYTES,
  })
  if not tid then return nil, err end
  local r = self:_wait(tid)
  if r.err or r.status < 200 or r.status >= 300 then
    os.remove(filename)
    if r.err then return nil, fix_err(r.err, "GET", path) end
    return nil, engine_error(r.status, "GET", path, r.message)
  end
  return true, r.file_bytes
end

-- events: a stream on its own connection (a second client), read line by line.
function Engine:events(opts)
  self:_check_open()
  opts = check_opts(opts, EVENTS_KEYS, "events")
  check_number(opts.max_bytes, "events", "max_bytes")
  check_number(opts.timeout, "events", "timeout")
  local q = {}
  if opts.filters ~= nil then
    if type(opts.filters) ~= "table" then error("events: option 'filters' must be a table", 2) end
    q.filters = opts.filters
  end
  q.since = opts.since
  q["until"] = opts["until"]
  local h, err = core.engine_client(self._cfg)
  if not h then return nil, err end
  local max = math.max(opts.max_bytes or M.DEFAULT_EVENTS_MAX_BYTES, M.MIN_EVENTS_MAX_BYTES)
  local tid
  tid, err = h:submit("GET", self:_target("/events", q, "events"), nil, {
    timeout = 0, connect_timeout = self.timeout, mode = "lines", max_bytes = max,
  })
  if not tid then h:close() return nil, err end
  -- The request only goes out while transfers are driven: wait for the answer's headers so the
  -- daemon has subscribed before events() returns (events after that are not missed).
  if not h:await_headers(tid, self.timeout) then
    h:close()
    return nil, E.new("transport", "timeout", "GET /events: no answer in time", { method = "GET", path = "/events" })
  end
  return setmetatable({ _h = h, _id = tid, timeout = opts.timeout or self.timeout }, events_mt)
end

-- s:read(timeout) -> event | nil, "timeout" | nil, "closed" (the daemon ended the stream,
-- e.g. `until` passed) | nil, err
function Events:read(timeout)
  if self._closed then return nil, "closed" end
  if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout < 0) then
    error("read: timeout must be a number of seconds", 2)
  end
  local h, id = self._h, self._id
  local deadline = now() + (timeout or self.timeout)
  local drove = false
  while true do
    local line = h:line(id)
    if line then
      if line:find("%S") then
        local ev = core.json_decode(line)
        if type(ev) ~= "table" then
          return nil, E.new("engine", "bad_json", "events: a line is not a JSON object",
            { method = "GET", path = "/events" })
        end
        return ev
      end
    elseif h:state(id) == "done" then
      local r = h:take(id)
      self:close()
      if r.err then return nil, fix_err(r.err, "GET", "/events") end
      if r.status < 200 or r.status >= 300 then
        return nil, engine_error(r.status, "GET", "/events", r.message)
      end
      return nil, "closed"
    else
      local left = deadline - now()
      if left <= 0 and drove then return nil, "timeout" end
      h:run(id, math.max(left, 0)) -- read(0) still collects what already arrived
      drove = true
    end
  end
end

-- One idempotent close for both objects: each owns one transport handle.
local function close_handle(self)
  if self._closed then return end
  self._closed = true
  self._h:close()
end

Events.close = close_handle
events_mt.__close = close_handle
events_mt.__gc = close_handle

Engine.close = close_handle

engine_mt.__close = close_handle
engine_mt.__gc = close_handle
engine_mt.__tostring = function(self)
  return "sandstack.engine(" .. self.host .. ", API " .. tostring(self.api_version) .. ")"
end

function M.new(opts)
  opts = check_opts(opts, NEW_KEYS, "sandstack.engine")
  local host = opts.host
  if host ~= nil and type(host) ~= "string" then error("sandstack.engine: option 'host' must be a string", 2) end
  host = host or nonempty(os.getenv("DOCKER_HOST")) or "unix:///var/run/docker.sock"
  check_number(opts.timeout, "sandstack.engine", "timeout")
  check_number(opts.max_bytes, "sandstack.engine", "max_bytes")
  local pinned = opts.api_version
  if pinned == nil then pinned = nonempty(os.getenv("DOCKER_API_VERSION")) end
  if pinned ~= nil and (type(pinned) ~= "string" or not pinned:match("^%d+%.%d+$")) then
    error("sandstack.engine: option 'api_version' must be a string like \"1.41\"", 2)
  end
  if opts.tls ~= nil and type(opts.tls) ~= "table" and opts.tls ~= false then
    error("sandstack.engine: option 'tls' must be a table or false", 2)
  end
  if type(opts.tls) == "table" then check_opts(opts.tls, TLS_KEYS, "sandstack.engine tls") end
  local cfg = { host = host }
  local tls = tls_config(opts.tls)
  if tls then
    cfg.tls, cfg.tls_verify, cfg.ca, cfg.cert, cfg.key = true, tls.verify, tls.ca, tls.cert, tls.key
  end
  local h, err = core.engine_client(cfg)
  if not h then return nil, err end
  local self = setmetatable({
    _h = h, _cfg = cfg, host = host, timeout = opts.timeout or M.DEFAULT_TIMEOUT,
    max_bytes = opts.max_bytes or M.DEFAULT_MAX_BYTES,
    _subs = {}, _failed = {}, _next_id = 0, _pending = 0,
  }, engine_mt)
  if pinned then
    self.api_version = pinned
    return self
  end
  -- Unversioned /version runs at the daemon's maximum; ApiVersion is that maximum (never
  -- MinAPIVersion), and every later request is prefixed with it.
  local v
  v, err = self:call("GET", "/version")
  if not v then self:close() return nil, err end
  if type(v) ~= "table" or type(v.ApiVersion) ~= "string" or not v.ApiVersion:match("^%d+%.%d+$") then
    self:close()
    return nil, E.new("engine", "bad_version", "the engine's /version has no usable ApiVersion",
      { method = "GET", path = "/version" })
  end
  self.api_version = v.ApiVersion
  return self
end

return M
