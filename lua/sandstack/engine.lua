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

-- literal requires, which spec/module_graph_spec.lua reads
for _, part in ipairs { require "sandstack.engine.requests", require "sandstack.engine.exec",
  (require "sandstack.engine.stream") } do -- (...): require's second value kept out of the list
  for name, fn in pairs(part.methods) do Engine[name] = fn end
end

local NEW_KEYS = E.described {
  { "host", type = "string", default = "`$DOCKER_HOST`, else `unix:///var/run/docker.sock`",
    refused = "not a string; `unix://`, `tcp://` (2375, or 2376 with TLS), `http://`, `https://`" },
  { "timeout", type = "seconds", default = "`30`",
    refused = "not above 0: each request's deadline" },
  { "api_version", type = "string `\"1.41\"`", default = "`$DOCKER_API_VERSION`, else negotiated",
    refused = "not `major.minor`" },
  { "tls", type = "table, or `false` (no TLS whatever the environment says)", default = "as the Docker CLI: `DOCKER_CERT_PATH` (default `~/.docker`), `DOCKER_TLS_VERIFY`, `DOCKER_TLS`",
    refused = "see below" },
  { "max_bytes", type = "bytes", default = "16 MiB",
    refused = "not above 0: the largest response body kept" },
}
local TLS_KEYS = E.described {
  { "ca", type = "string, a path", default = "`$DOCKER_CERT_PATH/ca.pem`",
    refused = "not a string" },
  { "cert", type = "string, a path", default = "`$DOCKER_CERT_PATH/cert.pem`",
    refused = "not a string" },
  { "key", type = "string, a path", default = "`$DOCKER_CERT_PATH/key.pem`",
    refused = "not a string" },
  { "verify", type = "boolean", default = "`true` when a `tls` table or `DOCKER_TLS_VERIFY` is given",
    refused = "not a boolean" },
}

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
  E.want(host, "string", "sandstack.engine", "host")
  host = host or O.nonempty(os.getenv("DOCKER_HOST")) or "unix:///var/run/docker.sock"
  if opts.tls ~= nil and type(opts.tls) ~= "table" and opts.tls ~= false then
    E.raise("sandstack.engine: option 'tls' must be a table or false, got " .. type(opts.tls))
  end
  if type(opts.tls) == "table" then
    for _, k in ipairs { "ca", "cert", "key" } do E.want(opts.tls[k], "string", "sandstack.engine tls", k) end
    E.want(opts.tls.verify, "boolean", "sandstack.engine tls", "verify")
  end
  local cfg = { host = host }
  local tls = O.tls_config(opts.tls)
  if tls then
    cfg.tls, cfg.tls_verify, cfg.ca, cfg.cert, cfg.key = true, tls.verify, tls.ca, tls.cert, tls.key
  end
  return cfg
end

-- The client from options already checked (the public constructor's, or a caller's own table
-- such as the stack start's, made from options the stack model checked). A wrong type raises
-- at the caller; a refused value is nil, err.
local function connect(opts)
  for _, k in ipairs { "timeout", "max_bytes" } do
    local ok, err = O.check_number(opts[k], "sandstack.engine", k)
    if not ok then return nil, err end
  end
  local pinned = E.want(opts.api_version, "string", "sandstack.engine", "api_version", 'a string like "1.41"')
  if pinned == nil then pinned = O.nonempty(os.getenv("DOCKER_API_VERSION")) end
  if pinned ~= nil and not pinned:match("^%d+%.%d+$") then
    return E.refuse("sandstack.engine", "api_version", 'must be major.minor, like "1.41" (from the option or $DOCKER_API_VERSION)')
  end
  local cfg = config(opts)
  local timeout = opts.timeout or M.DEFAULT_TIMEOUT
  -- Unless pinned, the version is negotiated in the same call (csrc/lua/engine.c): unversioned
  -- /version runs at the daemon's maximum; its ApiVersion is that maximum (never
  -- MinAPIVersion), and every later request is prefixed with it.
  local h, version = core.engine_client(cfg, not pinned and timeout or nil)
  if not h then return nil, version end
  return setmetatable({
    _h = h, _cfg = cfg, host = cfg.host, timeout = timeout,
    max_bytes = opts.max_bytes or M.DEFAULT_MAX_BYTES, api_version = pinned or version,
    _subs = {}, _failed = {}, _next_id = 0, _pending = 0,
  }, engine_mt)
end

function M.new(opts)
  opts = E.check_keys(opts, NEW_KEYS, "sandstack.engine")
  if type(opts.tls) == "table" then E.check_keys(opts.tls, TLS_KEYS, "sandstack.engine tls") end
  local eng, err = connect(opts)
  return eng, err
end

-- Internal (sandstack.docker): a client from a table the caller made and checked itself.
function M.connect(opts)
  local eng, err = connect(opts)
  return eng, err
end

return M
