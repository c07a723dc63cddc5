-- What sandstack owns on a swarm, read from labels (internal to sandstack.swarm): removal of a
-- session, list and reap. The manager holds the services and the overlays; each node holds its
-- sessions' task containers, forwarders, publish networks and volumes. All carry the stack's
-- labels (io.sandstack.project, .session, .created, .run): no state of sandstack's own.
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"
local cluster = require "sandstack.swarm.cluster"
local run_ctx = require "sandstack.stack.run"

local M = {}

local LABEL = "io.sandstack.project"
local now, pause = run_ctx.now, run_ctx.pause

local function union(a, b)
  local seen, out = {}, {}
  for _, list in ipairs { a or {}, b or {} } do
    for _, x in ipairs(list) do if not seen[x] then seen[x] = true; out[#out + 1] = x end end
  end
  return out
end

-- The objects labelled `label` on one node's engine, in removal form. Swarm-scoped networks are
-- the manager's to remove; a node lists them too while a task of them runs there.
function M.node_objects(node_eng, label)
  local r = batch.run(node_eng, batch.list_requests(label), 60)
  local err = batch.first_error(r)
  if err then return nil, err end
  local objs = { containers = {}, networks = {}, volumes = {}, projects = {} }
  for _, c in ipairs(r[1].body) do
    objs.containers[#objs.containers + 1] = c.Id
    objs.projects[c.Labels[LABEL]] = objs.projects[c.Labels[LABEL]] or tonumber(c.Labels["io.sandstack.created"]) or 0
  end
  for _, n in ipairs(r[2].body) do
    if n.Scope ~= "swarm" then
      objs.networks[#objs.networks + 1] = n.Id
      objs.projects[n.Labels[LABEL]] = objs.projects[n.Labels[LABEL]] or tonumber(n.Labels["io.sandstack.created"]) or 0
    end
  end
  for _, v in ipairs(r[3].body.Volumes or {}) do
    objs.volumes[#objs.volumes + 1] = v.Name
    local p = (v.Labels or {})[LABEL]
    if p then objs.projects[p] = objs.projects[p] or tonumber(v.Labels["io.sandstack.created"]) or 0 end
  end
  return objs
end

-- Removes, for one label (a project's, or one start's run label):
--   1. the services (so the manager starts nothing more) - known ids and those listed;
--   2. on the node (when its engine is given): every labelled container, task containers
--      included (forced: a session's teardown does not wait for stop grace periods), then the
--      node's own networks and the volumes;
--   3. the overlays, once the manager has let go of the tasks attached to them.
-- known: { services = {ids}, overlays = {ids} }. opts.node_lost: the session's node is down, so
-- the manager keeps its tasks (and refuses to remove their overlays) until the node returns or
-- leaves the swarm (docker node rm): those overlays are tried once and, when refused, returned
-- as deferred instead of failing (the next reap's sweep removes them).
-- Returns true, deferred (a list of overlay names, possibly empty) or nil, err.
function M.remove(mgr, node_eng, label, known, opts)
  known = known or {}
  opts = opts or {}
  local first
  local listed, err = cluster.services(mgr, label)
  if not listed then return nil, err end
  local ids = {}
  for _, s in ipairs(listed) do ids[#ids + 1] = s.ID end
  first = batch.first_error(batch.run(mgr, cluster.requests("remove_service", union(known.services, ids)), 60))
  if node_eng then
    local objs; objs, err = M.node_objects(node_eng, label)
    if objs then
      local _, rerr = batch.remove(node_eng, objs)
      first = first or rerr
    else
      first = first or err
    end
  end
  local nets; nets, err = cluster.op(mgr, "list_networks", nil, { label = label })
  if not nets then return nil, first or err end
  local overlays, names = {}, {}
  for _, n in ipairs(nets) do
    if n.Scope == "swarm" then overlays[#overlays + 1] = n.Id; names[n.Id] = n.Name end
  end
  overlays = union(known.overlays, overlays)
  local deadline = now() + (opts.network_timeout or 30)
  local deferred = {}
  while #overlays > 0 do
    local r = batch.run(mgr, cluster.requests("remove_network", overlays), 60)
    local again = {}
    for i, x in ipairs(r) do if not x.ok then again[#again + 1] = overlays[i] end end
    if #again == 0 then break end
    if opts.node_lost then
      for i, x in ipairs(r) do
        if not x.ok then
          if x.err and x.err.cause == "in_use_by_task" then
            deferred[#deferred + 1] = names[overlays[i]] or overlays[i]
          else
            first = first or x.err
          end
        end
      end
      break
    end
    if now() >= deadline then
      first = first or batch.first_error(r)
      break
    end
    overlays = again
    pause(0.25)
  end
  if first then return nil, first end
  return true, deferred
end

-- The sessions on the swarm: { {project =, session_key =, created =, node =, node_id =,
-- node_state =, services = {name = task state}} }, sorted by project. From the manager only.
-- The options of sandstack.docker's list and reap, less its warm pool filters (a swarm pool's
-- sessions are listed by their claim): one set of names for both backends.
local function docker_keys(keys)
  local out = {}
  for k, v in pairs(keys) do if k ~= "pool" and k ~= "idle_only" then out[k] = v end end
  return out
end
local LIST_KEYS = docker_keys(require("sandstack.docker.inventory").LIST_KEYS)
function M.list(opts)
  local err
  opts, err = E.options(opts, LIST_KEYS, "sandstack.swarm.list")
  if not opts then return nil, err end
  local mgr; mgr, err = cluster.manager(opts)
  if not mgr then return nil, err end
  local out; out, err = M.list_with(mgr, opts.project)
  mgr:close()
  return out, err
end

function M.list_with(mgr, project)
  local services, err = cluster.services(mgr, project and (LABEL .. "=" .. project) or LABEL)
  if not services then return nil, err end
  local ids = {}
  for i, s in ipairs(services) do ids[i] = s.ID end
  local tasks; tasks, err = cluster.tasks(mgr, ids)
  if not tasks then return nil, err end
  local nodes; nodes, err = cluster.nodes(mgr)
  if not nodes then return nil, err end
  local node_by = {}
  for _, n in ipairs(nodes) do node_by[n.id] = n end
  local by, claims = {}, {}
  for _, s in ipairs(services) do
    local l = s.Spec and s.Spec.Labels or {}
    local p = l[LABEL]
    local mark = l["io.sandstack.mark"] -- a warm pool's (swarm/pool_marks.lua): no task, no service of the stack
    if type(p) == "string" and mark then
      if mark == "claim" then claims[p] = l["io.sandstack.session"] end
    elseif type(p) == "string" then
      local e = by[p]
      if not e then
        e = { project = p, session_key = l["io.sandstack.session"], created = tonumber(l["io.sandstack.created"]),
          version = l["io.sandstack.version"], services = {}, service_ids = {}, hibernated = {} }
        by[p] = e
      end
      local t = cluster.current_task(tasks, s.ID)
      local svc = l["io.sandstack.service"] or s.Spec.Name
      e.services[svc] = t and t.Status and t.Status.State or "none"
      local mode = s.Spec.Mode and s.Spec.Mode.Replicated
      if mode and mode.Replicas == 0 then e.hibernated[svc] = true end -- scaled to 0 by hibernate
      e.service_ids[#e.service_ids + 1] = s.ID
      -- the task's node; with no task (a hibernated service at 0 replicas: the manager removes
      -- its tasks), the node its pin names (hibernate pins every service)
      local at = t and t.NodeID ~= "" and t.NodeID or nil
      if not at and not e.node_id then
        local p = s.Spec.TaskTemplate and s.Spec.TaskTemplate.Placement or {}
        for _, c in ipairs(p.Constraints or {}) do at = at or c:match("^node%.id%s*==%s*(%S+)$") end
      end
      if at then
        local n = node_by[at] or { id = at, state = "gone" }
        e.node_id, e.node, e.node_state = n.id, n.hostname, n.state
      end
    end
  end
  local out = {}
  for _, e in pairs(by) do
    e.session_key = claims[e.project] or e.session_key -- a pooled session's key is its claim's
    out[#out + 1] = e
  end
  table.sort(out, function(a, b) return a.project < b.project end)
  return out, nil, nodes
end

-- Removes sessions: those older than older_than seconds, one project, or those whose project
-- starts with prefix, or (all = true) every one; no filter is refused, as docker's reap does. A session whose node is lost loses its services on the manager
-- (what the node held went with it); its overlays are refused by the manager while it still
-- tracks the lost node's tasks, and are returned as deferred. Then the sweeps: every reachable
-- node, for labelled objects whose project the manager no longer lists (a node that came back
-- after its sessions were reaped, a start that died half-way), and the manager, for overlays
-- without services. Returns removed (projects, sorted), deferred (overlays left for a lost
-- node: the next reap after it returns, or after `docker node rm` of it, removes them).
local REAP_KEYS = docker_keys(require("sandstack.docker.inventory").REAP_KEYS)
function M.reap(opts)
  local err
  opts, err = E.options(opts, REAP_KEYS, "sandstack.swarm.reap")
  if not opts then return nil, err end
  if not (opts.all or opts.older_than or opts.project or opts.prefix) then -- as sandstack.docker.reap
    return E.fail("invalid", "filter_required", "sandstack.swarm.reap: no filter would remove every session "
      .. "on the swarm: pass older_than, project or prefix, or all = true")
  end
  local mgr; mgr, err = cluster.manager(opts)
  if not mgr then return nil, err end
  local sessions, nodes
  sessions, err, nodes = M.list_with(mgr, opts.project)
  if not sessions then mgr:close(); return nil, err end
  local t = os.time()
  local function wanted(project, created)
    if opts.project and project ~= opts.project then return false end
    if opts.prefix and project:sub(1, #opts.prefix) ~= opts.prefix then return false end
    if opts.older_than and not (created and t - created >= opts.older_than) then return false end
    return true
  end
  local engines, node_by = {}, {}
  for _, n in ipairs(nodes) do node_by[n.id] = n end
  local function node_eng(id)
    if engines[id] == nil then
      local n = node_by[id]
      local e = n and n.state == "ready" and cluster.node_engine(n, { timeout = opts.timeout })
      engines[id] = e or false
    end
    return engines[id] or nil
  end
  local removed, deferred, first, seen = {}, {}, nil, {}
  local function take(project, eng, lost)
    local ok, e = M.remove(mgr, eng, LABEL .. "=" .. project, nil, { node_lost = lost })
    if not ok then first = first or e; return end
    for _, d in ipairs(e) do deferred[#deferred + 1] = d end
    if not seen[project] then seen[project] = true; removed[#removed + 1] = project end
  end
  local listed = {}
  for _, s in ipairs(sessions) do
    listed[s.project] = true
    if wanted(s.project, s.created) then
      local eng = s.node_id and node_eng(s.node_id)
      take(s.project, eng, not eng)
    end
  end
  -- the sweeps: orphans on every node that answers, then overlays without services
  for _, n in ipairs(nodes) do
    local eng = n.state == "ready" and n.engine and node_eng(n.id)
    if eng then
      local objs, e = M.node_objects(eng, LABEL)
      if not objs then
        first = first or e
      else
        for p, created in pairs(objs.projects) do
          if not listed[p] and wanted(p, created ~= 0 and created or nil) then take(p, eng, false) end
        end
      end
    end
  end
  local nets, e = cluster.op(mgr, "list_networks", nil, { label = LABEL })
  if not nets then
    first = first or e
  else
    local lost_nodes = false
    for _, n in ipairs(nodes) do if n.state ~= "ready" then lost_nodes = true end end
    for _, n in ipairs(nets) do
      local p = n.Scope == "swarm" and (n.Labels or {})[LABEL]
      if p and not listed[p] and not seen[p] and wanted(p, tonumber(n.Labels["io.sandstack.created"])) then
        take(p, nil, lost_nodes)
      end
    end
  end
  for _, eng in pairs(engines) do if eng then eng:close() end end
  mgr:close()
  table.sort(removed)
  if first then return nil, first end
  return removed, deferred
end

return M
