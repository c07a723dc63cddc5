-- sandstack.gateway.docker_backend: the gateway's docker backend (internal to sandstack.gateway,
-- which hands each handler its context G): the session table of this gateway in the shared dict,
-- each session a stack started (or acquired from a warm pool) on the gateway's engine. Its
-- handlers: create (POST /sessions), patch (PATCH /sessions/<key>), api (GET and DELETE
-- /sessions/<key>), route (the proxied /sessions/<key>/...) and start_worker (worker 0's timers:
-- adoption, expiry, the pool's refill). What the handlers share (reply, fail, run, dicts, the
-- configuration, ...) comes from G, so this module requires nothing of sandstack.gateway's own.
local auth = require "sandstack.gateway.auth"
local limits = require "sandstack.gateway.limits"
local S = require "sandstack.gateway.sessions"
local metrics = require "sandstack.gateway.metrics"

local DOCKER = {}

local function pool_options(G)
  return { name = G.conf.project_prefix .. "pool", size = G.conf.pool.size, max = G.conf.pool.max, stack = G.conf.stack }
end


-- The docker backend's create: the session table of this gateway, then a start (or a pool's
-- acquire) on its engine.
function DOCKER.create(G, tenant, key, fork_from, console)
  local dict, mdict = G.dicts()
  local sid = S.sid(tenant.name, key)
  local ok, which = limits.claim(dict, tenant.name, tenant.max_sessions, G.conf.max_sessions)
  if not ok then
    ngx.header["Retry-After"] = "30"
    metrics.failure(mdict, "limit_" .. which)
    return G.fail(429, "limit", which == "tenant" and "tenant session limit reached" or "gateway session limit reached")
  end
  local secret, digest = auth.new_secret()
  local entry = { tenant = tenant.name, key = key, digest = digest, created = ngx.time() }
  local claimed, err = S.claim(dict, sid, entry)
  if not claimed then
    limits.release(dict, tenant.name)
    if err == "exists" then return G.fail(409, "conflict", "session exists", { key = key }) end
    return G.fail(503, "gateway", "session table: " .. tostring(err))
  end
  local meta = { node = G.conf.name, key = key, tenant = tenant.name, digest = digest, created = entry.created,
    fork_from = fork_from }
  local t0 = ngx.now()
  local started, res
  local snapshots = require "sandstack.gateway.snapshots"
  if G.conf.pool and not fork_from then
    started, res = G.run("acquire", sid, pool_options(G), meta)
  elseif fork_from then -- the fork's snapshot is the child's, within the tenant's quota
    meta.snapshot_quota = snapshots.quota(G, tenant.name)
    started, res = snapshots.locked(G, tenant.name, G.run, "start", sid, G.stack_options(tenant.name, key), meta)
  else
    started, res = G.run("start", sid, G.stack_options(tenant.name, key), meta)
  end
  ngx.update_time()
  if not started then
    S.remove(dict, sid, entry)
    limits.release(dict, tenant.name)
    metrics.failure(mdict, res.kind)
    local message = res.message or "start failed"
    if console then message = require("sandstack.gateway.console").scrub(G.conf, message) end -- no project to a browser
    return G.fail(G.failure_status(res), res.kind or "gateway", message, { reason = res.reason })
  end
  local how = G.conf.pool and "pool" or "cold"
  metrics.observe(mdict, G.conf.pool and "sandstack_gateway_acquire_seconds" or "sandstack_gateway_start_seconds",
    ngx.now() - t0)
  metrics.inc(mdict, "sandstack_gateway_starts_total", 'how="' .. how .. '"')
  if G.conf.pool then
    -- the pool gauges until the next refill counts them: one ready stack fewer, one more in use
    if (mdict:get("gauge:pool_ready") or 0) > 0 then mdict:incr("gauge:pool_ready", -1, 0) end
    mdict:incr("gauge:pool_in_use", 1, 0)
  end
  entry.record = res
  local stored, serr = S.ready(dict, sid, entry)
  if not stored then
    G.run("destroy", res, snapshots.owner(G, entry)) -- nowhere to keep it: do not leak the stack (or its fork's snapshot)
    S.remove(dict, sid, entry)
    limits.release(dict, tenant.name)
    return G.fail(503, "gateway", "cannot keep the session: " .. tostring(serr))
  end
  local snapshot = res.fork_snapshot
  res.fork_snapshot = nil
  if console then secret = nil end
  return G.reply(201, { key = key, secret = secret, endpoint_path = "/sessions/" .. key .. "/", snapshot = snapshot })
end

-- The answer for a session that is not there: 503 while adoption after a restart is not done
-- (the session may be on its way back), else 404.
local function not_found(G, dict, key)
  if not require("sandstack.gateway.adoption").done(dict) then
    ngx.header["Retry-After"] = "1"
    return G.fail(503, "unavailable", "the gateway is still adopting its sessions")
  end
  return G.fail(404, "not_found", "no such session", { key = key })
end

-- GET and DELETE /sessions/<key>: the tenant's own session of that key, with its secret, or an
-- answer already sent. Only the tenant's own key space is looked at: another tenant's session of
-- the same key is not there, and can change no answer.
local function authorized(G, tenant, key)
  local dict = G.dicts()
  local sid = S.sid(tenant.name, key)
  local entry = S.get(dict, sid)
  if not entry or entry.tenant ~= tenant.name then return nil, not_found(G, dict, key) end
  if not auth.session_ok(entry, ngx.var.http_x_sandstack_session_secret) then
    return nil, G.fail(401, "unauthorized", "wrong or missing " .. auth.SECRET_HEADER)
  end
  return sid, entry
end

-- POST /sessions/<key>/<verb> with a tenant's token, and PATCH /sessions/<key>: a session over
-- time (gateway/lifecycle.lua), under the tenant rules of GET and DELETE.
local function lifecycle(G, tenant, key, verb, arg)
  if not G.valid_key(key) then return G.fail(404, "not_found", "no such session") end
  local sid, entry = authorized(G, tenant, key)
  if not sid then return entry end -- the answer was sent
  if verb == "fork" then -- a new session of the same tenant, with its own secret
    if entry.state ~= "ready" then return G.fail(409, "conflict", "session is " .. tostring(entry.state)) end
    return G.create(tenant, arg, entry.record)
  end
  return require("sandstack.gateway.lifecycle").handle(G, { reply = G.reply, fail = G.fail, failure_status = G.failure_status },
    sid, entry, verb, arg)
end

-- The proxied routes /sessions/<key>/...: the session is the one the secret opens, found by the
-- secret's digest; it must be of this key. No secret is 401 whatever the key; a secret that
-- opens no session of this key is 404, exactly as for a key that no one holds, so these routes,
-- which need no tenant token, never tell whether a key is held (by any tenant).
local function session_of_secret(G, key)
  local dict = G.dicts()
  local secret = ngx.var.http_x_sandstack_session_secret
  if type(secret) ~= "string" or secret == "" then
    return nil, G.fail(401, "unauthorized", "missing " .. auth.SECRET_HEADER)
  end
  local sid, entry
  if #secret <= 1024 then sid, entry = S.find(dict, auth.digest(secret)) end
  if not entry or entry.key ~= key or not auth.session_ok(entry, secret) then return nil, not_found(G, dict, key) end
  return sid, entry
end

-- PATCH /sessions/<key> {"ttl": seconds} on the docker backend: the session's expiry.
function DOCKER.patch(G, tenant, key)
  local ttl = G.patch_ttl()
  if not ttl then return end
  return lifecycle(G, tenant, key, "set_timeout", ttl)
end

-- GET and DELETE /sessions/<key> on the docker backend: this gateway's session table.
function DOCKER.api(G, method, tenant, key)
  local sid, entry = authorized(G, tenant, key)
  if not sid then return entry end -- the answer was sent
  if method == "GET" then return G.reply(200, S.view(key, entry)) end
  if entry.state ~= "ready" and entry.state ~= "hibernated" and entry.state ~= "paused" then
    return G.fail(409, "conflict", "session is " .. tostring(entry.state), { key = key })
  end
  local ok, err = G.destroy(sid, entry, "deleted")
  if not ok then
    return G.fail(G.failure_status(err), err.kind or "gateway", err.message or "destroy failed", { reason = err.reason })
  end
  return G.reply(200, { key = key, destroyed = true })
end

-- The forwarder's port re-read (the stack restarted) and stored, unless the session went away.
local function refresh(G, key, entry)
  local ok, res = G.run("reconnect", entry.record)
  if not ok then return nil, res end
  if type(res.port) ~= "number" then return nil, { kind = "busy", message = "the session's stack is not running" } end
  local now = S.get(G.dicts(), key)
  if not now or now.state ~= "ready" or now.digest ~= entry.digest then
    return nil, { kind = "gateway", message = "session went away" }
  end
  now.record = res
  S.ready(G.dicts(), key, now)
  return res
end

-- The docker backend's route: the session of the presented secret, in this gateway's table.
function DOCKER.route(G, force_refresh)
  local key = ngx.var.sandstack_key
  local dict = G.dicts()
  local asks = not force_refresh and require("sandstack.gateway.asks").route(ngx.var.sandstack_path)
  if asks then -- the egress asks (gateway/asks.lua): the gateway's with a tenant's token
    local tenant = G.tenant_of_request()
    if tenant then
      if not G.valid_key(key) then return G.fail(404, "not_found", "no such session") end
      local sid, entry = authorized(G, tenant, key)
      if not sid then return entry end -- the answer was sent
      return require("sandstack.gateway.asks").handle(G, { reply = G.reply, fail = G.fail, failure_status = G.failure_status },
        tenant, entry, asks)
    end
  end
  local verb = not force_refresh and ngx.req.get_method() == "POST"
    and require("sandstack.gateway.lifecycle").verb(ngx.var.sandstack_path)
  local tenant = verb and G.tenant_of_request()
  if tenant then return lifecycle(G, tenant, key, verb, require("sandstack.gateway.lifecycle").arg(verb)) end
  local sid, entry = session_of_secret(G, key)
  if not sid then return entry end -- the answer was sent
  ngx.var.sandstack_sid = sid
  if entry.state ~= "ready" then
    ngx.header["Retry-After"] = "1"
    return G.fail(503, "unavailable", "session is " .. tostring(entry.state), { key = key })
  end
  local record = entry.record
  -- A port is this session's only while the port index says so (ports are reused).
  if force_refresh or dict:get("port:" .. tostring(record.port)) ~= sid then
    local fresh, err = refresh(G, sid, entry)
    if not fresh then
      return G.fail(G.failure_status(err), err.kind or "gateway", err.message or "reconnect failed", { key = key })
    end
    record = fresh
  end
  if ngx.var.sandstack_open == "" then
    S.opened(dict, sid)
    ngx.var.sandstack_open = "1"
  end
  ngx.var.sandstack_port = tostring(record.port)
  ngx.var.sandstack_uri = G.upstream_uri()
end

-- The pool refill timer: fill to size, then publish the pool's counts for /metrics.
local function refill(G, premature)
  if premature then return end
  local dict, mdict = G.dicts()
  if not dict:add("lock:fill", true, 900) then return end
  local ok, st = G.run("fill", pool_options(G), G.conf.pool.concurrency)
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

-- The docker backend's worker 0: adoption of the engine's stacks, expiry, the pool's refill.
function DOCKER.start_worker(G)
  require("sandstack.gateway.adoption").start(G)
  require("sandstack.gateway.expiry").start(G)
  if G.conf.pool then
    local function tick(premature) return refill(G, premature) end
    ngx.timer.at(0, tick)
    ngx.timer.every(G.conf.pool.interval, tick)
  end
end

return DOCKER
