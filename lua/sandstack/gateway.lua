-- sandstack.gateway: the production OpenResty gateway (docs/gateway.md). One stack per agent
-- session, created by an authenticated tenant, reached with the session's secret, limited,
-- expired, adopted again after a restart, optionally handed out from a warm pool. These are the
-- nginx handlers; they run in the event loop and never block: every Engine call goes to the
-- thread pool (ngx.run_worker_thread, gateway/worker.lua). Policy is split by concept:
--   gateway/config.lua     the operator's configuration, checked
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
-- The session backends, by conf.backend: each { create, api, patch?, route, start_worker }. The
-- docker one is this file's own (DOCKER, below); init picks one, once.
local BACKENDS, DOCKER = {}, {}

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

local function pool_options()
  return { name = conf.project_prefix .. "pool", size = conf.pool.size, max = conf.pool.max, stack = conf.stack }
end

-- destroy(key, entry, reason) -> true | nil, err: used by DELETE and by expiry. The session's
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

-- The docker backend's create: the session table of this gateway, then a start (or a pool's
-- acquire) on its engine.
function DOCKER.create(_, tenant, key, fork_from, console)
  local dict, mdict = dicts()
  local sid = S.sid(tenant.name, key)
  local ok, which = limits.claim(dict, tenant.name, tenant.max_sessions, conf.max_sessions)
  if not ok then
    ngx.header["Retry-After"] = "30"
    metrics.failure(mdict, "limit_" .. which)
    return fail(429, "limit", which == "tenant" and "tenant session limit reached" or "gateway session limit reached")
  end
  local secret, digest = auth.new_secret()
  local entry = { tenant = tenant.name, key = key, digest = digest, created = ngx.time() }
  local claimed, err = S.claim(dict, sid, entry)
  if not claimed then
    limits.release(dict, tenant.name)
    if err == "exists" then return fail(409, "conflict", "session exists", { key = key }) end
    return fail(503, "gateway", "session table: " .. tostring(err))
  end
  local meta = { node = conf.name, key = key, tenant = tenant.name, digest = digest, created = entry.created,
    fork_from = fork_from }
  local t0 = ngx.now()
  local started, res
  local snapshots = require "sandstack.gateway.snapshots"
  if conf.pool and not fork_from then
    started, res = run("acquire", sid, pool_options(), meta)
  elseif fork_from then -- the fork's snapshot is the child's, within the tenant's quota
    meta.snapshot_quota = snapshots.quota(G, tenant.name)
    started, res = snapshots.locked(G, tenant.name, run, "start", sid, stack_options(tenant.name, key), meta)
  else
    started, res = run("start", sid, stack_options(tenant.name, key), meta)
  end
  ngx.update_time()
  if not started then
    S.remove(dict, sid, entry)
    limits.release(dict, tenant.name)
    metrics.failure(mdict, res.kind)
    local message = res.message or "start failed"
    if console then message = require("sandstack.gateway.console").scrub(conf, message) end -- no project to a browser
    return fail(failure_status(res), res.kind or "gateway", message, { reason = res.reason })
  end
  local how = conf.pool and "pool" or "cold"
  metrics.observe(mdict, conf.pool and "sandstack_gateway_acquire_seconds" or "sandstack_gateway_start_seconds",
    ngx.now() - t0)
  metrics.inc(mdict, "sandstack_gateway_starts_total", 'how="' .. how .. '"')
  if conf.pool then
    -- the pool gauges until the next refill counts them: one ready stack fewer, one more in use
    if (mdict:get("gauge:pool_ready") or 0) > 0 then mdict:incr("gauge:pool_ready", -1, 0) end
    mdict:incr("gauge:pool_in_use", 1, 0)
  end
  entry.record = res
  local stored, serr = S.ready(dict, sid, entry)
  if not stored then
    run("destroy", res, snapshots.owner(G, entry)) -- nowhere to keep it: do not leak the stack (or its fork's snapshot)
    S.remove(dict, sid, entry)
    limits.release(dict, tenant.name)
    return fail(503, "gateway", "cannot keep the session: " .. tostring(serr))
  end
  local snapshot = res.fork_snapshot
  res.fork_snapshot = nil
  if console then secret = nil end
  return reply(201, { key = key, secret = secret, endpoint_path = "/sessions/" .. key .. "/", snapshot = snapshot })
end

-- The answer for a session that is not there: 503 while adoption after a restart is not done
-- (the session may be on its way back), else 404.
local function not_found(dict, key)
  if not require("sandstack.gateway.adoption").done(dict) then
    ngx.header["Retry-After"] = "1"
    return fail(503, "unavailable", "the gateway is still adopting its sessions")
  end
  return fail(404, "not_found", "no such session", { key = key })
end

-- GET and DELETE /sessions/<key>: the tenant's own session of that key, with its secret, or an
-- answer already sent. Only the tenant's own key space is looked at: another tenant's session of
-- the same key is not there, and can change no answer.
local function authorized(tenant, key)
  local dict = dicts()
  local sid = S.sid(tenant.name, key)
  local entry = S.get(dict, sid)
  if not entry or entry.tenant ~= tenant.name then return nil, not_found(dict, key) end
  if not auth.session_ok(entry, ngx.var.http_x_sandstack_session_secret) then
    return nil, fail(401, "unauthorized", "wrong or missing " .. auth.SECRET_HEADER)
  end
  return sid, entry
end

-- POST /sessions/<key>/<verb> with a tenant's token, and PATCH /sessions/<key>: a session over
-- time (gateway/lifecycle.lua), under the tenant rules of GET and DELETE.
local function lifecycle(tenant, key, verb, arg)
  if not valid_key(key) then return fail(404, "not_found", "no such session") end
  local sid, entry = authorized(tenant, key)
  if not sid then return entry end -- the answer was sent
  if verb == "fork" then -- a new session of the same tenant, with its own secret
    if entry.state ~= "ready" then return fail(409, "conflict", "session is " .. tostring(entry.state)) end
    return create(tenant, arg, entry.record)
  end
  return require("sandstack.gateway.lifecycle").handle(G, { reply = reply, fail = fail, failure_status = failure_status },
    sid, entry, verb, arg)
end

-- The proxied routes /sessions/<key>/...: the session is the one the secret opens, found by the
-- secret's digest; it must be of this key. No secret is 401 whatever the key; a secret that
-- opens no session of this key is 404, exactly as for a key that no one holds, so these routes,
-- which need no tenant token, never tell whether a key is held (by any tenant).
local function session_of_secret(key)
  local dict = dicts()
  local secret = ngx.var.http_x_sandstack_session_secret
  if type(secret) ~= "string" or secret == "" then
    return nil, fail(401, "unauthorized", "missing " .. auth.SECRET_HEADER)
  end
  local sid, entry
  if #secret <= 1024 then sid, entry = S.find(dict, auth.digest(secret)) end
  if not entry or entry.key ~= key or not auth.session_ok(entry, secret) then return nil, not_found(dict, key) end
  return sid, entry
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

-- PATCH /sessions/<key> {"ttl": seconds} on the docker backend: the session's expiry.
function DOCKER.patch(_, tenant, key)
  local ttl = patch_ttl()
  if not ttl then return end
  return lifecycle(tenant, key, "set_timeout", ttl)
end

-- GET and DELETE /sessions/<key> on the docker backend: this gateway's session table.
function DOCKER.api(_, method, tenant, key)
  local sid, entry = authorized(tenant, key)
  if not sid then return entry end -- the answer was sent
  if method == "GET" then return reply(200, S.view(key, entry)) end
  if entry.state ~= "ready" and entry.state ~= "hibernated" and entry.state ~= "paused" then
    return fail(409, "conflict", "session is " .. tostring(entry.state), { key = key })
  end
  local ok, err = G.destroy(sid, entry, "deleted")
  if not ok then
    return fail(failure_status(err), err.kind or "gateway", err.message or "destroy failed", { reason = err.reason })
  end
  return reply(200, { key = key, destroyed = true })
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

-- The forwarder's port re-read (the stack restarted) and stored, unless the session went away.
local function refresh(key, entry)
  local ok, res = run("reconnect", entry.record)
  if not ok then return nil, res end
  if type(res.port) ~= "number" then return nil, { kind = "busy", message = "the session's stack is not running" } end
  local now = S.get(dicts(), key)
  if not now or now.state ~= "ready" or now.digest ~= entry.digest then
    return nil, { kind = "gateway", message = "session went away" }
  end
  now.record = res
  S.ready(dicts(), key, now)
  return res
end

-- The docker backend's route: the session of the presented secret, in this gateway's table.
function DOCKER.route(_, force_refresh)
  local key = ngx.var.sandstack_key
  local dict = dicts()
  local asks = not force_refresh and require("sandstack.gateway.asks").route(ngx.var.sandstack_path)
  if asks then -- the egress asks (gateway/asks.lua): the gateway's with a tenant's token
    local tenant = tenant_of_request()
    if tenant then
      if not valid_key(key) then return fail(404, "not_found", "no such session") end
      local sid, entry = authorized(tenant, key)
      if not sid then return entry end -- the answer was sent
      return require("sandstack.gateway.asks").handle(G, { reply = reply, fail = fail, failure_status = failure_status },
        tenant, entry, asks)
    end
  end
  local verb = not force_refresh and ngx.req.get_method() == "POST"
    and require("sandstack.gateway.lifecycle").verb(ngx.var.sandstack_path)
  local tenant = verb and tenant_of_request()
  if tenant then return lifecycle(tenant, key, verb, require("sandstack.gateway.lifecycle").arg(verb)) end
  local sid, entry = session_of_secret(key)
  if not sid then return entry end -- the answer was sent
  ngx.var.sandstack_sid = sid
  if entry.state ~= "ready" then
    ngx.header["Retry-After"] = "1"
    return fail(503, "unavailable", "session is " .. tostring(entry.state), { key = key })
  end
  local record = entry.record
  -- A port is this session's only while the port index says so (ports are reused).
  if force_refresh or dict:get("port:" .. tostring(record.port)) ~= sid then
    local fresh, err = refresh(sid, entry)
    if not fresh then
      return fail(failure_status(err), err.kind or "gateway", err.message or "reconnect failed", { key = key })
    end
    record = fresh
  end
  if ngx.var.sandstack_open == "" then
    S.opened(dict, sid)
    ngx.var.sandstack_open = "1"
  end
  ngx.var.sandstack_port = tostring(record.port)
  ngx.var.sandstack_uri = upstream_uri()
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

-- The pool refill timer: fill to size, then publish the pool's counts for /metrics.
local function refill(premature)
  if premature then return end
  local dict, mdict = dicts()
  if not dict:add("lock:fill", true, 900) then return end
  local ok, st = run("fill", pool_options(), conf.pool.concurrency)
  dict:delete("lock:fill")
  if not ok then
    metrics.failure(mdict, st.kind)
    -- every thread-pool VM busy serving requests: the next refill fills, so not an error
    ngx.log(st.kind == "busy" and ngx.WARN or ngx.ERR, "sandstack gateway: pool fill: ", tostring(st.message))
    return
  end
  for _, s in ipairs { "ready", "starting", "in_use", "failed" } do metrics.gauge(mdict, "pool_" .. s, st[s] or 0) end
  if st.error then
    metrics.failure(mdict, st.error.kind)
    ngx.log(ngx.ERR, "sandstack gateway: pool fill: ", tostring(st.error.message))
  end
end

-- init_worker: worker 0 adopts the engine's stacks, runs expiry and keeps the pool filled.
function M.init_worker()
  dicts()
  if ngx.worker.id() ~= 0 then return end
  G.backend.start_worker(G)
end

-- The docker backend's worker 0: adoption of the engine's stacks, expiry, the pool's refill.
function DOCKER.start_worker()
  require("sandstack.gateway.adoption").start(G)
  require("sandstack.gateway.expiry").start(G)
  if conf.pool then
    ngx.timer.at(0, refill)
    ngx.timer.every(conf.pool.interval, refill)
  end
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
G.patch_ttl = patch_ttl

BACKENDS.docker, BACKENDS.swarm = DOCKER, require "sandstack.gateway.swarm"

return M
