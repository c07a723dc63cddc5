-- sandstack.gateway.swarm: the gateway's swarm backend, event-loop half (docs/gateway.md "On a
-- swarm", docs/scale-out.md "The gateway on a swarm"). The gateway runs on every node of the
-- swarm, all with one configuration but `name` and `swarm.node`. Any of them takes any request:
--   POST /sessions        sandstack.swarm.start through the manager: Swarm places the session;
--   /sessions/<key>/...   the session is looked up on the manager (by key, then by the digest of
--                         the presented secret), cached for swarm.cache_ttl seconds, and the
--                         request goes to the forwarder's port on this node's loopback when the
--                         session is here, else to the gateway of the node that holds it (that
--                         node's label io.sandstack.gateway=<host:port>), which does the same;
--   GET/DELETE /sessions/<key>  looked up on the manager (never cached); a DELETE of a session
--                         on another node that answers goes to that node's gateway.
-- No hash and no table of our own: the manager's labels are the sessions. A session whose node
-- the manager reports down, or whose node's gateway does not answer, gets 502 node_down; one
-- whose tasks ended (a drained node) gets 410 session_ended; once removed (reaped, deleted) it is
-- 404 not_found, the answer of a key never held. Every answer drops the cached entry but a live
-- one.
local auth = require "sandstack.gateway.auth"
local metrics = require "sandstack.gateway.metrics"

local M = {}

local WORKER = "sandstack.gateway.swarm_worker"


local function conn(G, extra)
  local c = G.conf
  local a = { docker_host = c.stack.docker_host, timeout = c.stack.timeout, prefix = c.project_prefix,
    node = c.swarm.node }
  for k, v in pairs(extra or {}) do a[k] = v end
  return a
end

-- The cache: c:<digest> -> the entry find() returned for a live session (with the dict's own
-- expiry), and p:<port> -> the digest whose session was last seen on this node's port (a port
-- is only trusted while that says so: ports are reused).
local function cached(dict, digest)
  local text = dict:get("c:" .. digest)
  return text and require("sandstack.core").json_decode(text) or nil
end

local function keep(G, digest, e)
  local dict = G.dict
  local ttl = G.conf.swarm.cache_ttl
  dict:safe_set("c:" .. digest, require("sandstack.core").json_encode(e), ttl)
  if e.port then dict:safe_set("p:" .. e.port, digest, ttl) end
end

local function drop(G, digest) G.dict:delete("c:" .. digest) end

-- The answer for an entry that is not live: 503 hibernated, 502 node_down, 410 session_ended.
local function not_live(G, e, key)
  if e.state == "hibernated" then
    ngx.header["Retry-After"] = "1"
    return G.fail(503, "unavailable", "session is hibernated: wake it first", { key = key })
  end
  metrics.failure(G.metrics, e.state)
  if e.state == "node_down" then
    return G.fail(502, "node_down", "the node holding this session is down: " .. tostring(e.detail),
      { key = key, node = e.node })
  end
  return G.fail(410, "session_ended", "the session has ended: " .. tostring(e.detail), { key = key, node = e.node })
end

local function failed(G, err)
  return G.fail(G.failure_status(err), err.kind or "gateway", err.message or "manager lookup failed",
    { reason = err.reason })
end

-- POST /sessions[/<key>] on a swarm.
function M.create(G, tenant, key)
  local c = G.conf
  local sid = G.sid(tenant.name, key)
  -- one start per key at a time on this gateway (the manager refuses a second one's services)
  if not G.dict:add("creating:" .. sid, true, c.create_timeout) then
    return G.fail(409, "conflict", "session exists", { key = key })
  end
  local secret, digest = auth.new_secret()
  local created = ngx.time()
  local t0 = ngx.now()
  -- the project as on one engine, but "-" before the tenant's tag: a Swarm service name is a DNS
  -- label (no "."); still one name per (tenant, key), the tag being the fixed-length tail
  local opts = G.stack_options(tenant.name, key)
  opts.project_name = opts.project_name:gsub("%.(%x+)$", "-%1")
  local ok, res = G.run_in(WORKER, "start", conn(G, { sid = sid, opts = opts,
    meta = { gateway = c.name, key = key, tenant = tenant.name, digest = digest, created = created },
    tenant_max = tenant.max_sessions, global_max = c.max_sessions }))
  G.dict:delete("creating:" .. sid)
  ngx.update_time()
  if not ok then
    metrics.failure(G.metrics, res.kind == "limit" and ("limit_" .. tostring(res.reason)) or res.kind)
    if res.kind == "limit" then
      ngx.header["Retry-After"] = "30"
      return G.fail(429, "limit", res.message)
    end
    if res.kind == "conflict" then return G.fail(409, "conflict", "session exists", { key = key }) end
    return failed(G, res)
  end
  metrics.observe(G.metrics, "sandstack_gateway_start_seconds", ngx.now() - t0)
  metrics.inc(G.metrics, "sandstack_gateway_starts_total", 'how="swarm"')
  ngx.log(ngx.NOTICE, "sandstack gateway: session ", key, " started on node ", tostring(res.node))
  return G.reply(201, { key = key, secret = secret, endpoint_path = "/sessions/" .. key .. "/", node = res.node })
end

-- GET and DELETE /sessions/<key> on a swarm.
function M.api(G, method, tenant, key)
  local secret = ngx.var.http_x_sandstack_session_secret
  local ok, res = G.run_in(WORKER, "find", conn(G, { key = key, tenant = tenant.name }))
  if not ok then return failed(G, res) end
  local e = res.entry
  if not e then return G.fail(404, "not_found", "no such session", { key = key }) end
  if not auth.session_ok(e, secret) then
    return G.fail(401, "unauthorized", "wrong or missing " .. auth.SECRET_HEADER)
  end
  if method == "GET" then
    return G.reply(200, { key = key, state = e.state == "running" and "ready" or e.state, tenant = e.tenant,
      created = e.created, node = e.node, endpoint_path = "/sessions/" .. key .. "/" })
  end
  -- a DELETE for a live session on another node is that node's gateway's (its cache goes too)
  if e.state == "running" and e.node ~= G.conf.swarm.node and e.gateway and not ngx.var["http_x_sandstack_forwarded"] then
    ngx.var.sandstack_upstream = e.gateway
    return ngx.exec("@sandstack_forward")
  end
  local done; done, res = G.run_in(WORKER, "destroy", conn(G, { project = e.project }))
  drop(G, e.digest)
  if not done then return failed(G, res) end
  metrics.inc(G.metrics, "sandstack_gateway_destroyed_total", 'reason="deleted"')
  return G.reply(200, { key = key, destroyed = true, deferred = #(res.deferred or {}) > 0 or nil })
end

-- POST /sessions/<key>/<verb> (pause, resume, hibernate, wake; snapshot and fork answer
-- unsupported) and PATCH's set_timeout on a swarm, with the tenant's token and the session's
-- secret: the calls reach the manager and the session's node from any gateway
-- (gateway/lifecycle_worker.lua, the record's backend).
local function lifecycle(G, tenant, key, verb, arg)
  local ok, res = G.run_in(WORKER, "find", conn(G, { key = key, tenant = tenant.name }))
  if not ok then return failed(G, res) end
  local e = res.entry
  if not e then return G.fail(404, "not_found", "no such session", { key = key }) end
  if not auth.session_ok(e, ngx.var.http_x_sandstack_session_secret) then
    return G.fail(401, "unauthorized", "wrong or missing " .. auth.SECRET_HEADER)
  end
  if e.state == "node_down" or e.state == "ended" then return not_live(G, e, key) end
  local want = verb == "wake" and "hibernated" or "running"
  if e.state ~= want and not (verb == "set_timeout" and e.state == "hibernated") then
    local name = { running = "ready" }
    return G.fail(409, "conflict", ("session is %s: %s needs it %s"):format(name[e.state] or e.state, verb,
      name[want] or want), { key = key })
  end
  local done; done, res = G.run_in("sandstack.gateway.lifecycle_worker", "call", e.record, verb, arg)
  drop(G, e.digest)
  if not done and res.kind == "unsupported" then return G.fail(501, "unsupported", res.message, { key = key }) end
  if not done then return failed(G, res) end
  local state = verb == "hibernate" and "hibernated" or (verb == "set_timeout" and e.state == "hibernated")
    and "hibernated" or "ready"
  return G.reply(200, { key = key, state = state, expires = res.expires })
end

-- PATCH /sessions/<key> {"ttl": seconds} on a swarm: the session's expiry (swarm/expiry.lua).
function M.patch(G, tenant, key)
  local ttl = G.patch_ttl()
  if not ttl then return end
  return lifecycle(G, tenant, key, "set_timeout", ttl)
end

-- access of /sessions/<key>/... on a swarm: $sandstack_upstream, $sandstack_uri and the two
-- headers of the next hop set, or an answer sent. again: nginx could not reach the upstream
-- the first pass chose (the named location): the manager is asked afresh, and a session still
-- placed where it could not be reached is answered node_down.
function M.route(G, again)
  local key = ngx.var.sandstack_key
  local verb = not again and ngx.req.get_method() == "POST"
    and require("sandstack.gateway.lifecycle").verb(ngx.var.sandstack_path)
  local tenant = verb and G.tenant_of_request()
  if tenant then -- the gateway's, never the agent's (a tenant's token is never sent on)
    return lifecycle(G, tenant, key, verb, verb == "hibernate" and tonumber(ngx.var.arg_timeout) or nil)
  end
  local secret = ngx.var.http_x_sandstack_session_secret
  if type(secret) ~= "string" or secret == "" then
    return G.fail(401, "unauthorized", "missing " .. auth.SECRET_HEADER)
  end
  if #secret > 1024 then return G.fail(404, "not_found", "no such session", { key = key }) end
  local digest = auth.digest(secret)
  local e = not again and cached(G.dict, digest) or nil
  if e and (e.key ~= key or (e.port and G.dict:get("p:" .. e.port) ~= digest)) then e = nil end
  if not e then
    local ok, res = G.run_in(WORKER, "find", conn(G, { key = key, digest = digest }))
    if not ok then return failed(G, res) end
    e = res.entry
    if not e then
      drop(G, digest)
      return G.fail(404, "not_found", "no such session", { key = key })
    end
    if e.state == "running" then keep(G, digest, e) end
  end
  if e.state ~= "running" then drop(G, digest); return not_live(G, e, key) end
  local here = e.node == G.conf.swarm.node
  local upstream = here and e.port and ("127.0.0.1:" .. e.port) or (not here and e.gateway) or nil
  if again and upstream == ngx.var.sandstack_upstream then
    drop(G, digest)
    return not_live(G, { state = "node_down", node = e.node, detail = "its " .. (here and "forwarder" or "gateway")
      .. " at " .. upstream .. " does not answer" }, key)
  end
  if not upstream then
    return G.fail(502, "gateway", here and "the session's forwarder publishes no port"
      or ("node " .. tostring(e.node) .. " has no label io.sandstack.gateway=<host:port>"), { key = key })
  end
  if not here and ngx.var["http_x_sandstack_forwarded"] then
    -- a gateway sent it here, yet the manager places it elsewhere: never a second hop
    return G.fail(502, "gateway", "misrouted: forwarded for a session on node " .. tostring(e.node), { key = key })
  end
  ngx.var.sandstack_upstream = upstream
  if here then
    ngx.var.sandstack_uri = G.upstream_uri()
    ngx.var.sandstack_fwd_secret = ""
    ngx.var.sandstack_forwarded = ""
  else
    ngx.var.sandstack_uri = ngx.var.request_uri
    ngx.var.sandstack_fwd_secret = secret
    ngx.var.sandstack_forwarded = "1"
  end
end

-- The expiry pass's sessions acted on (gateway/lifecycle.lua's scan; by: { [project] = {action
-- =, reason =} }): their cached entries go, so the next request asks the manager (not_found for
-- a destroyed one, hibernated for a hibernated one). Other gateways' caches keep theirs up to
-- swarm.cache_ttl; a request sent there meanwhile finds no forwarder and is looked up again.
function M.expired(G, by)
  for _, k in ipairs(G.dict:get_keys(0)) do
    local digest = k:match("^c:(.+)$")
    local e = digest and cached(G.dict, digest)
    if e and by[e.project] then
      drop(G, digest)
      if e.port and G.dict:get("p:" .. e.port) == digest then G.dict:delete("p:" .. e.port) end
    end
  end
end

-- Worker 0's timer: the expiry pass (gateway/expiry.lua's, the docker backend's timer, every
-- expiry_interval seconds) with sandstack.swarm.reap{expired = true} over this gateway's
-- project prefix. The manager holds the sessions, so there is nothing to adopt
-- (docs/gateway.md). Every gateway of the cluster runs the pass over the same prefix: what one
-- destroyed the next no longer lists, what one hibernated has lost its ttl, and passes at the
-- same instant meet at the claim swarm/expiry.lua writes at the service's version (one acts).
function M.start_worker(G)
  require("sandstack.gateway.expiry").start(G)
end

return M
