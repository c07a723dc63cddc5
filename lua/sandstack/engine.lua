-- sandstack.engine: the Docker Engine API client (API.md, docs/engine.md).
-- The transport, the byte budgets and the stream parsers are C (csrc/engine via the
-- `engine_client` handle of sandstack.core). The Lua half is policy, one concept per file:
--   engine/options.lua   option checking, TLS settings, path/query/header/body encoding
--   engine/errors.lua    the error objects (engine_error: the one constructor of HTTP failures)
--   engine/requests.lua  request, call, ping, version, submit/poll/pending
--   engine/exec.lua      exec
--   engine/stream.lua    download and events
-- This file builds the client: the constructor, version negotiation and close.
local core = require "sandstack.core"
local E = require "sandstack.error"
local O = require "sandstack.engine.options"
local X = require "sandstack.engine.errors"

local M = {}
for k, v in pairs(O.DEFAULTS) do M[k] = v end
M.urlencode = O.urlencode
M.engine_error = X.engine_error

local Engine = {}
local engine_mt = { __index = Engine, __name = "sandstack.engine" }

for _, part in ipairs { "requests", "exec", "stream" } do
  for name, fn in pairs(require("sandstack.engine." .. part).methods) do Engine[name] = fn end
end

local NEW_KEYS = { host = true, timeout = true, api_version = true, tls = true, max_bytes = true }
local TLS_KEYS = { ca = true, cert = true, key = true, verify = true }

-- Idempotent; what is in flight is aborted. Using the client afterwards raises.
function Engine:close()
  if self._closed then return end
  self._closed = true
  self._h:close()
end

-- The transport handle has its own __gc; these make `local eng <close>` and 5.4's collector
-- close the client as well.
engine_mt.__close = Engine.close
engine_mt.__gc = Engine.close
engine_mt.__tostring = function(self)
  return "sandstack.engine(" .. self.host .. ", API " .. tostring(self.api_version) .. ")"
end

-- The transport settings from the options and the environment (raises on bad options).
local function config(opts)
  local host = opts.host
  if host ~= nil and type(host) ~= "string" then error("sandstack.engine: option 'host' must be a string", 3) end
  host = host or O.nonempty(os.getenv("DOCKER_HOST")) or "unix:///var/run/docker.sock"
  if opts.tls ~= nil and type(opts.tls) ~= "table" and opts.tls ~= false then
    error("sandstack.engine: option 'tls' must be a table or false", 3)
  end
  local cfg = { host = host }
  local tls = O.tls_config(opts.tls)
  if tls then
    cfg.tls, cfg.tls_verify, cfg.ca, cfg.cert, cfg.key = true, tls.verify, tls.ca, tls.cert, tls.key
  end
  return cfg
end

-- Unversioned /version runs at the daemon's maximum; ApiVersion is that maximum (never
-- MinAPIVersion), and every later request is prefixed with it.
local function negotiate(self)
  local v, err = self:call("GET", "/version")
  if not v then return nil, err end
  if type(v) ~= "table" or type(v.ApiVersion) ~= "string" or not v.ApiVersion:match("^%d+%.%d+$") then
    return nil, E.new("engine", "bad_version", "the engine's /version has no usable ApiVersion",
      { method = "GET", path = "/version" })
  end
  return v.ApiVersion
end

function M.new(opts)
  opts = E.check_keys(opts, NEW_KEYS, "sandstack.engine")
  O.check_number(opts.timeout, "sandstack.engine", "timeout", 2)
  O.check_number(opts.max_bytes, "sandstack.engine", "max_bytes", 2)
  local pinned = opts.api_version
  if pinned == nil then pinned = O.nonempty(os.getenv("DOCKER_API_VERSION")) end
  if pinned ~= nil and (type(pinned) ~= "string" or not pinned:match("^%d+%.%d+$")) then
    error("sandstack.engine: option 'api_version' must be a string like \"1.41\"", 2)
  end
  if type(opts.tls) == "table" then E.check_keys(opts.tls, TLS_KEYS, "sandstack.engine tls") end
  local cfg = config(opts)
  local h, err = core.engine_client(cfg)
  if not h then return nil, err end
  local self = setmetatable({
    _h = h, _cfg = cfg, host = cfg.host, timeout = opts.timeout or M.DEFAULT_TIMEOUT,
    max_bytes = opts.max_bytes or M.DEFAULT_MAX_BYTES, api_version = pinned,
    _subs = {}, _failed = {}, _next_id = 0, _pending = 0,
  }, engine_mt)
  if pinned then return self end
  self.api_version, err = negotiate(self)
  if not self.api_version then
    self:close()
    return nil, err
  end
  return self
end

return M
