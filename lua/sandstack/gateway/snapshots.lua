-- sandstack.gateway.snapshots: a session's snapshots have an owner and a quota (docs/gateway.md,
-- "Snapshots"). The handlers' half, in the event loop; the engine's is
-- gateway/snapshots_worker.lua, the accounting gateway/snapshot_quota.lua.
--   POST   /sessions/<key>/snapshot?name=N[&keep=1]   (gateway/lifecycle.lua) within the quota
--   GET    /snapshots            the tenant's snapshots, what they use and its quota
--   DELETE /snapshots/<id>       one of them (a kept one, typically, whose session is gone)
-- A tenant takes one snapshot or fork at a time (a dict lock, waited for), so that its quota is
-- checked against what it holds, never against two snapshots being made at once.
local S = require "sandstack.gateway.sessions"
local Q = require "sandstack.gateway.snapshot_quota"

local M = {}

local WORKER = "sandstack.gateway.snapshots_worker"
M.LOCK_WAIT = 60 -- seconds a snapshot or fork waits for the tenant's one before it is refused

-- owner(G, entry) -> the labels' owner of a session's snapshots
function M.owner(G, entry)
  return { node = G.conf.name, tenant = entry.tenant, key = entry.key, created = entry.created }
end

-- quota(G, tenant name) -> {count =, bytes =}: the tenant's own, else the gateway's (config.lua)
function M.quota(G, name)
  for _, t in ipairs(G.conf.tenants) do
    if t.name == name and t.snapshot_quota then return t.snapshot_quota end
  end
  return G.conf.snapshot_quota
end

-- locked(G, tenant, fn, ...) -> fn's values, with the tenant's snapshot lock held; nil, err when
-- it stayed taken for LOCK_WAIT seconds. The lock's TTL frees it if a worker dies holding it.
function M.locked(G, tenant, fn, ...)
  local key = "lock:snapshot:" .. tenant
  local deadline = ngx.now() + M.LOCK_WAIT
  while not G.dict:add(key, true, S.MARK_TTL) do
    if ngx.now() >= deadline then
      return false, { kind = "busy", reason = "snapshot_busy",
        message = "another snapshot or fork of this tenant took over " .. M.LOCK_WAIT .. " s: retry" }
    end
    ngx.sleep(0.2)
  end
  local ok, a, b = pcall(fn, ...)
  G.dict:delete(key)
  if not ok then error(a, 0) end
  return a, b
end

-- call(G, entry, arg) -> true, {record =, snapshot =} | false, err: POST .../snapshot within
-- the tenant's quota (gateway/lifecycle.lua answers). arg = {name =, keep =}.
function M.call(G, entry, arg)
  arg = arg or {}
  return M.locked(G, entry.tenant, G.run_in, WORKER, "snapshot", entry.record, M.owner(G, entry),
    M.quota(G, entry.tenant), { name = arg.name, keep = arg.keep })
end

-- content of /snapshots and /snapshots/<id>, with a tenant's token.
function M.api(G)
  local tenant = G.tenant_of_request()
  if not tenant then
    ngx.header["WWW-Authenticate"] = 'Bearer realm="sandstack"'
    return G.fail(401, "unauthorized", "a tenant token is needed: Authorization: Bearer <token>")
  end
  local id = ngx.var.sandstack_snapshot
  local method = ngx.req.get_method()
  local c = G.conf
  if (id == nil or id == "") and method == "GET" then
    local ok, res = G.run_in(WORKER, "list", c.name, tenant.name, c.stack.docker_host, c.stack.timeout)
    if not ok then return G.fail(G.failure_status(res), res.kind or "gateway", res.message or "listing failed") end
    res.quota = M.quota(G, tenant.name)
    if #res.snapshots == 0 then res.snapshots = nil end -- encoded as [] below, not {}
    local text = require("sandstack.core").json_encode(res)
    if not res.snapshots then text = text:gsub("}$", ',"snapshots":[]}') end
    ngx.header["Content-Type"] = "application/json"
    ngx.say(text)
    return ngx.exit(200)
  end
  if id and id:match("^snap%-%x+$") and method == "DELETE" then
    local ok, res = G.run_in(WORKER, "delete", c.name, tenant.name, id, c.stack.docker_host, c.stack.timeout)
    if not ok then
      local status = res.kind == "not_found" and 404 or res.reason == "in_use" and 409 or G.failure_status(res)
      return G.fail(status, res.kind or "gateway", res.message or "delete failed", { id = id })
    end
    return G.reply(200, { id = id, removed = true })
  end
  if id and id ~= "" and method == "DELETE" then return G.fail(404, "not_found", "no such snapshot", { id = id }) end
  ngx.header["Allow"] = (id and id ~= "") and "DELETE" or "GET"
  return G.fail(405, "gateway", "method not allowed")
end

-- sweep(G): the expiry pass's last step on the docker backend: the snapshots of this gateway
-- whose session is gone and that were not kept (one the timers or the stack's own ttl ended, or
-- left by a gateway that stopped mid-call). Only once adoption is done: before, the table does
-- not yet hold every live session.
function M.sweep(G)
  if G.conf.backend ~= "docker" or not require("sandstack.gateway.adoption").done(G.dict) then return end
  local alive = {}
  for _, sid in ipairs(S.keys(G.dict)) do
    local e = S.get(G.dict, sid)
    if e then alive[Q.owner_key(e.tenant, e.key, e.created)] = true end
  end
  local c = G.conf
  local ok, res = G.run_in(WORKER, "sweep", c.name, alive, ngx.now(), c.stack.docker_host, c.stack.timeout)
  if not ok then
    -- every thread-pool VM busy serving requests: the next pass sweeps, so not an error
    ngx.log(res and res.kind == "busy" and ngx.WARN or ngx.ERR, "sandstack gateway: snapshot sweep: ",
      tostring(res and res.message))
    return
  end
  for _, id in ipairs(res.removed) do
    ngx.log(ngx.NOTICE, "sandstack gateway: snapshot ", id, " removed (its session is gone)")
  end
end

return M
