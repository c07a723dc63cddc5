-- spawn inside an nginx worker (OpenResty), never blocking it (docs/process.md, "In
-- OpenResty"): the process of docker/process.lua over nginx cosockets instead of the C core's
-- blocking connection. Every engine request is a cosocket of its own (HTTP/1.0, so the answer
-- ends where the daemon closes); the hijacked attach is one cosocket kept open.
--
--   local cosocket = require "sandstack.docker.cosocket"
--   local p = assert(cosocket.spawn(record, { "sh" }, { tty = true }))   -- record: stack:record()
--
-- Limits (lua-nginx-module 0.10.23): a cosocket cannot half-close, so p:close_stdin returns
-- kind "unsupported" (end the process with p:kill, or a protocol message); a TLS DOCKER_HOST
-- is refused (the cosocket API of that version sends no client certificate).
local core = require "sandstack.core"
local E = require "sandstack.error"
local X = require "sandstack.engine.errors"
local process = require "sandstack.docker.process"

local M = {}

-- The engine's address for ngx.socket.tcp: unix:///path, or tcp:// / http:// host:port.
local function endpoint(host)
  host = host or "unix:///var/run/docker.sock"
  -- read by the engine client's own parser (core.engine_address): the base has its port
  local a = core.engine_address(host)
  if a and a.unix_path then return { unix = "unix:" .. a.unix_path, authority = "localhost" } end
  local hp = a and a.base:match("^http://(.+)$")
  if hp then
    local name, port = hp:match("^%[(.+)%]:(%d+)$")
    if not name then name, port = hp:match("^([^:]+):(%d+)$") end
    return { name = name, port = tonumber(port), authority = hp }
  end
  return nil, E.new("unsupported", "cosocket_host", ("engine host %s cannot be reached from nginx cosockets "
    .. "(unix:// and plain tcp:// can; TLS needs a client certificate the cosocket API does not send)"):format(host),
    { backend = "docker", host = host })
end

local function connect(ep, timeout)
  local sock = ngx.socket.tcp()
  local ms = math.max(1, math.floor(timeout * 1000))
  sock:settimeouts(ms, ms, ms)
  local ok, err
  if ep.unix then ok, err = sock:connect(ep.unix) else ok, err = sock:connect(ep.name, ep.port) end
  if not ok then
    return nil, E.new("transport", "unreachable", "cannot reach the engine: " .. tostring(err))
  end
  return sock
end

local function head_of(sock, method, path)
  local head, err = sock:receiveuntil("\r\n\r\n")()
  if not head then
    return nil, E.new("transport", err == "timeout" and "timeout" or "closed",
      ("%s %s: no answer: %s"):format(method, path, tostring(err)), { method = method, path = path })
  end
  local status = tonumber(head:match("^HTTP/1%.%d (%d%d%d)"))
  if not status then
    return nil, E.new("transport", "protocol", method .. " " .. path .. ": not an HTTP answer", { method = method, path = path })
  end
  return status, head
end

-- eng:call's contract: the decoded body (true when empty) on 2xx, else nil, the engine error.
local function call(ep, timeout, method, path, body, opts)
  opts = opts or {}
  local sock, err = connect(ep, opts.timeout or timeout)
  if not sock then return nil, err end
  -- a body with content_type is sent as given (the kill helper's program, a tar), else as JSON
  local raw = opts.content_type ~= nil and type(body) == "string"
  local payload = raw and body or body ~= nil and assert(core.json_encode(body)) or ""
  -- the path and its query (an operation's, as C made it) joined and percent-encoded by the C core,
  -- as the engine client's own requests are; no version prefix, as the other calls here send them
  local req = ("%s %s HTTP/1.0\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s")
    :format(method, core.engine_target(nil, path, opts.query, "call", 2), ep.authority,
      raw and opts.content_type or "application/json", #payload, payload)
  local ok; ok, err = sock:send(req)
  if not ok then sock:close(); return nil, E.new("transport", "closed", method .. " " .. path .. ": " .. tostring(err)) end
  local status, head = head_of(sock, method, path)
  if not status then sock:close(); return nil, head end
  local rest; rest, err = sock:receive("*a") -- HTTP/1.0: the body ends where the daemon closes
  sock:close()
  if not rest then return nil, E.new("transport", "closed", method .. " " .. path .. ": " .. tostring(err)) end
  local decoded = rest
  if head:lower():find("content-type: application/json", 1, true) and #rest > 0 then
    decoded = core.json_decode(rest)
  end
  if status >= 200 and status < 300 then
    if rest == "" then return true end
    return decoded
  end
  return nil, X.engine_error(status, method, path, decoded)
end

local Conn = {}
Conn.__index = Conn

function Conn:send(data, timeout)
  self.sock:settimeout(math.max(1, math.floor((timeout or 30) * 1000)))
  local ok, err = self.sock:send(data)
  if ok then return true end
  return nil, E.new("transport", err == "timeout" and "timeout" or "closed", "sending to the process: " .. tostring(err))
end

function Conn:recv(timeout)
  self.sock:settimeout(math.max(1, math.floor((timeout or 0) * 1000)))
  local data, err = self.sock:receiveany(65536)
  if data then return data end
  if err == "timeout" then return nil, "timeout" end
  if err == "closed" then return nil, "eof" end
  return nil, E.new("transport", "closed", "reading from the process: " .. tostring(err))
end

function Conn:shutdown()
  return nil, E.new("unsupported", "close_stdin", "close_stdin is not supported over nginx cosockets "
    .. "(lua-nginx-module has no half-close): end the process with p:kill or through its own protocol",
    { backend = "docker", method = "close_stdin" })
end

function Conn:buffered() return 0 end

function Conn:close()
  if self.sock then self.sock:close() end
  self.sock = nil
end

local function attach(ep, target, body, timeout)
  local sock, err = connect(ep, timeout)
  if not sock then return nil, err end
  local ok; ok, err = sock:send(("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
    .. "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n%s"):format(target, ep.authority, #body, body))
  local path = target:gsub("^/v%d+%.%d+", "")
  if not ok then sock:close(); return nil, E.new("transport", "closed", "POST " .. path .. ": " .. tostring(err)) end
  local status, head = head_of(sock, "POST", path)
  if not status then sock:close(); return nil, head end
  if status ~= 101 and status ~= 200 then
    local n = tonumber(head:lower():match("content%-length:%s*(%d+)")) or 0
    local answer = n > 0 and sock:receive(math.min(n, 65536)) or nil
    sock:close()
    return nil, X.engine_error(status, "POST", path, answer and core.json_decode(answer) or answer)
  end
  return setmetatable({ sock = sock }, Conn)
end

-- The io of docker/process.lua over cosockets. opts: host (default the record's docker_host,
-- else unix:///var/run/docker.sock), timeout (30 s).
function M.io(host, timeout)
  local ep, err = endpoint(host)
  if not ep then return nil, err end
  timeout = timeout or 30
  local io = { sleep = ngx.sleep }
  io.call = function(method, path, body, opts) return call(ep, timeout, method, path, body, opts) end
  io.attach = function(target, body, t) return attach(ep, target, body, t or timeout) end
  io.exec = function(container, argv, opts) return process.run(io, container, argv, opts) end
  return io
end

-- spawn(record, argv, opts): h:spawn's options, on the stack a record (stack:record()) names.
function M.spawn(record, argv, opts)
  if type(record) ~= "table" or type(record.project) ~= "string" then
    E.raise("cosocket.spawn: argument 'record' must be a record from stack:record()")
  end
  argv, opts = process.check(argv, opts)
  if not argv then return nil, opts end
  local io, err = M.io(record.docker_host, opts.timeout)
  if not io then return nil, err end
  local service = opts.service or record.sandbox
  local known = false
  for _, c in ipairs(record.containers or {}) do known = known or c.service == service end
  if not known then
    return E.fail("invalid", "unknown_service", ("stack %s has no service %q"):format(record.project, tostring(service)),
      { service = service })
  end
  return process.spawn(io, record.project .. "-" .. service, argv, opts)
end

return M
