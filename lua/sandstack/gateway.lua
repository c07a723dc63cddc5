-- sandstack.gateway: the production OpenResty gateway (docs/gateway.md). One stack per agent
-- session, created by an authenticated tenant, reached with the session's secret, limited,
-- expired, adopted again after a restart, optionally handed out from a warm pool. These are the
-- nginx handlers; they run in the event loop and never block: every Engine call goes to the
-- thread pool (ngx.run_worker_thread, gateway/worker.lua). Policy is split by concept:
--   gateway/config.lua     the operator's configuration, checked
--   gateway/docker_backend.lua  the docker backend: this gateway's session table, stacks on its engine
--   gateway/auth.lua       tenant tokens and session secrets (digests, constant-time compare)
--   gateway/limits.lua     per-tenant and global caps
--   gateway/sessions.lua   the session table in the shared dict
--   gateway/expiry.lua     idle and max-age expiry (a timer)
--   gateway/adoption.lua   re-adopting the engine's stacks after a restart
--   gateway/metrics.lua    Prometheus text
--   gateway/nginx_conf.lua nginx.conf from the configuration (`sandstack gateway`)
local core = require "sandstack.core"
local auth = require "sandstack.gateway.auth"
local limits = require "sandstack.gateway.limits"
local S = require "sandstack.gateway.sessions"
local metrics = require "sandstack.gateway.metrics"

local M = {}

local WORKER = "sandstack.gateway.worker"
local KEY_PATTERN = "^[a-z0-9][a-z0-9_-]*$"
local KEY_MAX = 48

-- Set once by init() in the master and inherited by every worker; read-only afterwards.
local conf
-- The context the timers' modules (expiry, adoption) share with the handlers.
local G = {}
-- The session backends, by conf.backend: each { create, api, patch?, route, start_worker }, each
-- handler given G (gateway/docker_backend.lua, gateway/swarm.lua); init picks one, once.
local BACKENDS = {}

function M.init(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("*a")
  f:close()
  conf = assert(core.json_decode(text), "gateway: the rendered config is not JSON")
  G.conf = conf
  G.backend = assert(BACKENDS[conf.backend], "gateway: unknown backend")
end

local function reply(status, doc)
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  ngx.say(core.json_encode(doc))
  return ngx.exit(status)
end

local function fail(status, kind, message, extra)
  local e = { kind = kind, message = message }
  for k, v in pairs(extra or {}) do e[k] = v end
  return reply(status, { error = e })
end

-- run_in(module, fn, ...) -> true, value | false, err: one function of a worker module
-- (gateway/worker.lua, gateway/swarm_worker.lua) in the thread pool.
local function run_in(module, fn, ...)
  local ok, res, val = ngx.run_worker_thread("sandstack", module, fn, ...)
  if not ok then
    if res == "no available Lua vm" then return false, { kind = "busy", message = res } end
    return false, { kind = "gateway", message = tostring(res) }
  end
  return res, val
end
local function run(fn, ...) return run_in(WORKER, fn, ...) end
G.run, G.run_in = run, run_in

local function failure_status(err)
  if err.kind == "busy" then ngx.header["Retry-After"] = "1"; return 503 end
  if err.kind == "limit" then return 429 end -- a snapshot quota (gateway/snapshot_quota.lua)
  if err.kind == "timeout" then return 504 end
  return 502
end

local function dicts()
  G.dict = G.dict or ngx.shared.sandstack_sessions
  G.metrics = G.metrics or ngx.shared.sandstack_metrics
  return G.dict, G.metrics
end

-- The project of a tenant's key: <prefix><key>.<tag>, the tag being the first 8 hex digits of
-- SHA-256(tenant name) (config.lua refuses two tenants with one tag). A key holds no ".", so no
-- two (tenant, key) pairs, and no project of an older gateway (<prefix><key>), share a name. A
-- key too long for the 64 characters of a project name is replaced by 16 hex digits of its
-- SHA-256 (config.lua bounds project_prefix so that this always fits).
local function project_for(c, tenant, key)
  local tag = "." .. require("sandstack.gateway.config").tenant_tag(tenant)
  local p = c.project_prefix .. key .. tag
  if #p > 63 then p = c.project_prefix .. core.sha256_hex(key):sub(1, 16) .. tag end
  return p
end
M.project_for = project_for -- project_for(config, tenant name, key): for operators and the specs

-- Options of one cold start: the configured ones plus the session's own project, and the key
-- in the sandbox's env (SANDSTACK_SESSION) so that operators can tell stacks apart.
local function stack_options(tenant, key)
  local opts = core.json_decode(core.json_encode(conf.stack))
  opts.project_name = project_for(conf, tenant, key)
  local sandbox = opts.sandbox_service or "sandbox"
  for _, svc in ipairs(opts.services or {}) do
    if svc.name == sandbox then
      svc.env = svc.env or {}
      svc.env.SANDSTACK_SESSION = key
    end
  end
  return opts
end

-- snapshots go with it, but the kept ones (gateway/snapshots.lua).
function G.destroy(key, entry, reason)
  local dict, mdict = dicts()
  local marked, merr = S.mark(dict, key, entry, "stopping")
  if not marked then return nil, { kind = "gateway", message = "session table: " .. tostring(merr) } end
  local ok, err = run("destroy", entry.record, require("sandstack.gateway.snapshots").owner(G, entry))
  if not ok then
    S.ready(dict, key, entry)
    metrics.failure(mdict, err.kind)
    return nil, err
  end
  if err.snapshots_left then
    ngx.log(ngx.WARN, "sandstack gateway: snapshots of ", key, " left for the sweep: ", err.snapshots_left)
  end
  S.remove(dict, key, entry)
  limits.release(dict, entry.tenant)
  metrics.inc(mdict, "sandstack_gateway_destroyed_total", 'reason="' .. reason .. '"')
  ngx.log(ngx.NOTICE, "sandstack gateway: session ", key, " destroyed (", reason, ")")
  return true
end

local function valid_key(key)
  return type(key) == "string" and #key <= KEY_MAX and key:match(KEY_PATTERN) ~= nil and not key:match("^pool%-")
end

local function tenant_of_request()
  return auth.tenant(conf.tenants, auth.bearer(ngx.var.http_authorization))
end

-- POST /sessions[/<key>]: the key is the tenant's own (its key space is its own, so a key
-- another tenant holds is as free as any other: nothing here looks at other tenants' sessions).
-- console: the console's create (gateway/console.lua), answered without the secret.
local function create(tenant, key, fork_from, console)
  if not key then key = core.random_hex(8) end
  if not valid_key(key) then
    return fail(400, "invalid", "session key must match [a-z0-9][a-z0-9_-]* (at most 48, not pool-...)")
  end
  return G.backend.create(G, tenant, key, fork_from, console)
end

-- content of /sessions and /sessions/<key>: POST creates; GET and DELETE need the tenant's
-- token and the session's secret.
function M.api()
  local method = ngx.req.get_method()
  local key = ngx.var.sandstack_key
  if key == "" then key = nil end
  local tenant = tenant_of_request()
  if not tenant then
    ngx.header["WWW-Authenticate"] = 'Bearer realm="sandstack"'
    return fail(401, "unauthorized", "a tenant token is needed: Authorization: Bearer <token>")
  end
  if method == "POST" then return create(tenant, key) end
  if method == "PATCH" and key and G.backend.patch then return G.backend.patch(G, tenant, key) end
  if not key or (method ~= "GET" and method ~= "DELETE") then
    ngx.header["Allow"] = key and "GET, DELETE, PATCH, POST" or "POST"
    return fail(405, "gateway", "method not allowed")
  end
  if not valid_key(key) then return fail(404, "not_found", "no such session") end
  return G.backend.api(G, method, tenant, key)
end

-- The ttl of a PATCH /sessions/<key> body {"ttl": seconds}, or nil once the 400 is sent.
local function patch_ttl()
  ngx.req.read_body()
  local body = core.json_decode(ngx.req.get_body_data() or "")
  local ttl = type(body) == "table" and body.ttl
  if type(ttl) ~= "number" or ttl <= 0 or ttl ~= ttl or ttl == math.huge then
    fail(400, "invalid", 'PATCH takes {"ttl": seconds > 0}')
    return nil
  end
  return ttl
end

-- The upstream URI: the normalised path after /sessions/<key>, re-escaped segment by segment
-- (an encoded "?" or "%" stays data), plus the query string.
local function upstream_uri()
  local parts = {}
  for seg in (ngx.var.sandstack_path .. "/"):gmatch("([^/]*)/") do parts[#parts + 1] = ngx.escape_uri(seg) end
  local uri = table.concat(parts, "/")
  local args = ngx.var.args
  if args and args ~= "" then uri = uri .. "?" .. args end
  return uri
end

-- access of /sessions/<key>/...: the secret checked, then $sandstack_port/$sandstack_uri set.
function M.route() return G.backend.route(G, false) end

-- access of the named location nginx jumps to when connecting failed: the port re-read once.
function M.reroute() return G.backend.route(G, true) end

-- log phase of the proxied and console locations: a request that was let through has ended,
-- and a stream's places are given back (gateway/streams.lua).
function M.done()
  if ngx.var.sandstack_open == "1" then S.closed(dicts(), ngx.var.sandstack_sid) end
  require("sandstack.gateway.streams").done()
end

function M.health()
  local ok, res = run("health", conf.stack.docker_host)
  if not ok then return fail(failure_status(res), res.kind or "gateway", res.message or "health check failed") end
  res.node = conf.name
  return reply(200, res)
end

-- GET /openapi.json: the API as OpenAPI 3.1 (gateway/openapi.lua), for generated clients.
function M.openapi()
  ngx.header["Content-Type"] = "application/json"
  ngx.say(require("sandstack.gateway.openapi").json(conf))
end

function M.metrics()
  local dict, mdict = dicts()
  local pool
  if conf.pool then
    pool = { ready = mdict:get("gauge:pool_ready"), starting = mdict:get("gauge:pool_starting"),
      in_use = mdict:get("gauge:pool_in_use"), failed = mdict:get("gauge:pool_failed") }
  end
  ngx.header["Content-Type"] = "text/plain; version=0.0.4"
  ngx.print(metrics.render(mdict, S.states(dict), pool))
end

-- init_worker: worker 0 adopts the engine's stacks, runs expiry and keeps the pool filled.
function M.init_worker()
  dicts()
  if ngx.worker.id() ~= 0 then return end
  G.backend.start_worker(G)
end

-- content of /snapshots[/<id>]: a tenant's snapshots (gateway/snapshots.lua).
function M.snapshots()
  dicts()
  return require("sandstack.gateway.snapshots").api(G)
end

-- content of /console/api/...: the operator's console (gateway/console.lua).
function M.console()
  dicts()
  return require("sandstack.gateway.console").api(G)
end

-- What the swarm backend (gateway/swarm.lua) and the console share with these handlers.
G.reply, G.fail, G.failure_status, G.sid, G.stack_options, G.upstream_uri =
  reply, fail, failure_status, S.sid, stack_options, upstream_uri
G.create, G.tenant_of_request, G.valid_key = create, tenant_of_request, valid_key
G.patch_ttl, G.dicts = patch_ttl, dicts

BACKENDS.docker, BACKENDS.swarm = require "sandstack.gateway.docker_backend", require "sandstack.gateway.swarm"

return M
