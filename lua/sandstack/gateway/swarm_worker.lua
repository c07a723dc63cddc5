-- sandstack.gateway.swarm_worker: the blocking half of the gateway's swarm backend
-- (docs/gateway.md "On a swarm"). Runs in ngx.run_worker_thread like gateway/worker.lua, with
-- the same contract: plain data in, `true, value` or `false, {kind=, reason=, message=}` out,
-- no state kept between calls.
--
-- The manager is the only table of sessions. A gateway session is a sandstack.swarm stack whose
-- sandbox service carries, besides the stack's own labels:
--   io.sandstack.gateway=<name of the gateway that created it>
--   io.sandstack.gateway.session/.tenant/.created  the key, the tenant, the birth
--   io.sandstack.gateway.secret-sha256             the digest of the secret, never the secret
--   io.sandstack.gateway.record                    the stack's record (JSON, no secrets)
-- Service labels are not part of the task template, so adding them restarts no task. Any
-- gateway of the cluster finds any session there; where it runs is the manager's answer too
-- (the task's node), and how to reach that node's gateway is the node's label
-- io.sandstack.gateway=<host:port>.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local auth = require "sandstack.gateway.auth"
local guarded = require("sandstack.gateway.worker_result").guarded

local M = {}

local MARK = "io.sandstack.gateway"
local PROJECT = "io.sandstack.project"
M.NODE_GATEWAY_LABEL = MARK

local function swarm() return require("sandstack").swarm end
local function cluster() return require "sandstack.swarm.cluster" end

local function manager(a)
  return cluster().manager { docker_host = a.docker_host, timeout = a.timeout }
end

-- The gateway sessions the manager lists under `label`, of this cluster's project prefix:
-- { [project] = {project =, key =, tenant =, digest =, created =, record =} }.
local function marked(mgr, label, prefix)
  local services, err = cluster().services(mgr, label)
  if not services then return nil, err end
  local out = {}
  for _, s in ipairs(services) do
    local l = s.Spec and s.Spec.Labels or {}
    local p = l[PROJECT]
    if type(p) == "string" and p:sub(1, #prefix) == prefix and l[MARK .. ".session"] then
      out[p] = { project = p, key = l[MARK .. ".session"], tenant = l[MARK .. ".tenant"],
        digest = l[MARK .. ".secret-sha256"], created = tonumber(l[MARK .. ".created"]),
        record = core.json_decode(l[MARK .. ".record"] or "") }
    end
  end
  return out
end

-- Caps counted on the manager, so they hold for the whole cluster (a start still being made
-- is not counted yet: two gateways may each let one through at the last place).
local function over_limit(mgr, a)
  local all, err = marked(mgr, MARK .. ".session", a.prefix)
  if not all then return nil, err end
  local total, mine = 0, 0
  for _, s in pairs(all) do
    total = total + 1
    if s.tenant == a.meta.tenant then mine = mine + 1 end
  end
  if a.tenant_max and mine >= a.tenant_max then return "tenant" end
  if a.global_max and total >= a.global_max then return "global" end
  return false
end

-- The labels above, added to the sandbox service's spec (read, changed, written back at its
-- version: an update that touches no task).
local function mark(mgr, record, meta)
  local name = record.project .. "-" .. tostring(record.sandbox)
  local svc, err = ops.call(mgr, "inspect_service", name)
  if not svc then return nil, err end
  local spec = svc.Spec
  spec.Labels = spec.Labels or {}
  spec.Labels[MARK] = meta.gateway
  spec.Labels[MARK .. ".session"] = meta.key
  spec.Labels[MARK .. ".tenant"] = meta.tenant
  spec.Labels[MARK .. ".created"] = tostring(meta.created)
  spec.Labels[MARK .. ".secret-sha256"] = meta.digest
  spec.Labels[MARK .. ".record"] = core.json_encode(record)
  return ops.call(mgr, "update_service", svc.ID, { body = spec, version = svc.Version.Index })
end

-- start(a) -> true, {record =, node =}. a: sid, opts (the stack options, docker_host the
-- manager's), meta {gateway, key, tenant, digest, created}, prefix, tenant_max, global_max,
-- docker_host, timeout.
function M.start(a)
  return guarded(function()
    local mgr, err = manager(a)
    if not mgr then return nil, err end
    local taken; taken, err = cluster().services(mgr, PROJECT .. "=" .. a.opts.project_name)
    if taken and #taken > 0 then
      mgr:close()
      return E.fail("conflict", "exists", "session exists", { key = a.meta.key })
    end
    local over; over, err = over_limit(mgr, a)
    if over == nil then mgr:close(); return nil, err end
    if over then
      mgr:close()
      return E.fail("limit", over, over == "tenant" and "tenant session limit reached" or "cluster session limit reached")
    end
    local stack; stack, err = swarm().start(a.sid, a.opts)
    if not stack then mgr:close(); return nil, err end
    local record = stack:record()
    local ok; ok, err = mark(mgr, record, a.meta)
    mgr:close()
    if not ok then
      stack:destroy() -- never found again without its labels: the client is told the start failed
      stack:close()
      return nil, err
    end
    local node = stack.node
    stack:close()
    return { record = record, node = node }
  end)
end

-- find(a) -> true, {entry =} (none: no such session). a: key, tenant (the API routes: that tenant's
-- session of the key) and/or digest (the proxied routes: the session this secret opens),
-- prefix, node (this gateway's node hostname), docker_host, timeout.
-- entry: {project, key, tenant, digest, created, node, gateway (the node's gateway, host:port),
-- state = "running" | "hibernated" | "node_down" | "ended", port (the forwarder's, on this node only), detail}.
function M.find(a)
  return guarded(function()
    local mgr, err = manager(a)
    if not mgr then return nil, err end
    local list; list, err = marked(mgr, MARK .. ".session=" .. a.key, a.prefix)
    if not list then mgr:close(); return nil, err end
    local hit
    for _, s in pairs(list) do
      if s.key == a.key and (not a.tenant or s.tenant == a.tenant) and (not a.digest or auth.equal(s.digest, a.digest)) then
        hit = s
      end
    end
    if not hit then mgr:close(); return {} end
    local where; where, err = require("sandstack.swarm.inventory").list_with(mgr, hit.project)
    local s = where and where[1]
    if not s then mgr:close(); return where and {} or nil, err end
    hit.record = type(hit.record) == "table" and hit.record or nil
    hit.node, hit.state = s.node, "running"
    local node = s.node_id and cluster().node(mgr, s.node_id)
    mgr:close()
    hit.gateway = node and node.labels[M.NODE_GATEWAY_LABEL] or nil
    if s.node_state ~= "ready" then
      hit.state, hit.detail = "node_down", "node " .. tostring(s.node) .. " is " .. tostring(s.node_state)
    else
      for svc, st in pairs(s.services) do
        if st ~= "running" and not s.hibernated[svc] then
          hit.state, hit.detail = "ended", ("its service %s is %s"):format(svc, tostring(st))
        end
      end
      -- scaled to 0 by a hibernation: its wake brings it back
      if hit.state == "running" and next(s.hibernated) then hit.state, hit.detail = "hibernated", "it is hibernated" end
    end
    if hit.state == "running" and a.node == s.node and hit.record then
      local stack, rerr = swarm().reconnect(hit.record)
      if not stack then
        if rerr and rerr.reason == "node_down" then hit.state = "node_down"
        elseif rerr and rerr.reason == "session_ended" then hit.state = "ended"
        else return nil, rerr end
        hit.detail = rerr.message
      else
        hit.port = stack.port
        stack:close()
      end
    end
    return { entry = hit }
  end)
end

-- destroy(a) -> true, {deferred =}: the session's services, overlays and node objects, by its
-- project (sandstack.swarm.reap: it also copes with a lost node). a: project, docker_host, timeout.
function M.destroy(a)
  return guarded(function()
    local removed, deferred = swarm().reap { docker_host = a.docker_host, timeout = a.timeout, project = a.project }
    if not removed then return nil, deferred end
    return { deferred = deferred }
  end)
end

return M
