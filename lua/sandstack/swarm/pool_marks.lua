-- A warm pool's marks on a swarm (internal to sandstack.swarm.pool). A mark is a service with no
-- replica: nothing runs, the manager alone holds it, and its labels are the pool's state:
--   <project>-ready  the filler's mark that the stack passed readiness, naming the node the
--                    session's tasks run on and the forwarder's port there
--   <project>-claim  the claim: created under a name derived from the project, which the
--                    manager gives to one create only (a second is refused, 409), whatever
--                    process sends it; it carries the session's key, so the claim is also the
--                    record of who holds the stack (one request)
-- Both carry the project's label, so a stack's removal (destroy, reap) takes them with it.
local M = {}

M.LABEL = "io.sandstack.mark"
local PROJECT, POOL = "io.sandstack.project", "io.sandstack.pool"

-- The create body of a mark. image: any image the swarm knows (no task is ever made of it).
function M.body(project, pool, role, image, labels)
  local l = { [PROJECT] = project, [POOL] = pool, [M.LABEL] = role }
  for k, v in pairs(labels or {}) do l[k] = v end
  return { Name = project .. "-" .. role, Labels = l,
    TaskTemplate = { ContainerSpec = { Image = image }, RestartPolicy = { Condition = "none", MaxAttempts = 0 } },
    Mode = { Replicated = { Replicas = 0 } }, EndpointSpec = { Mode = "dnsrr" } }
end

-- The ready mark's labels: where the stack is.
function M.ready_labels(stack)
  return { ["io.sandstack.node_id"] = stack.node_id, ["io.sandstack.port"] = tostring(stack.port) }
end

-- The pool as the manager's lists show it: services (labelled with the pool) and their tasks.
-- shape: { services = {service names}, sandbox = name }. A stack is idle when its ready mark is
-- unclaimed and every service's task runs. Returns { idle = {{project =, node_id =, port =,
-- env =}}, dead = {projects}, stale = {projects}, in_use = {projects}, node_of = {[project] = node id of
-- its ready mark}, claimed =, starting = }.
function M.survey(services, tasks, shape, grace, now, pick)
  local running = {}
  for _, t in ipairs(tasks or {}) do
    if t.DesiredState == "running" and t.Status and t.Status.State == "running" then running[t.ServiceID] = true end
  end
  local by = {}
  for _, s in ipairs(services) do
    local l = type(s.Spec) == "table" and s.Spec.Labels or {}
    local p = l[PROJECT]
    if type(p) == "string" then
      local e = by[p] or { services = {} }
      by[p] = e
      local role = l[M.LABEL]
      if role == "claim" then e.claimed = true
      elseif role == "ready" then e.ready = { node_id = l["io.sandstack.node_id"], port = tonumber(l["io.sandstack.port"]) }
      else
        local svc = l["io.sandstack.service"]
        e.created = e.created or tonumber(l["io.sandstack.created"])
        if svc then
          e.services[svc] = running[s.ID] or false
          if svc == shape.sandbox then
            local cs = ((s.Spec.TaskTemplate or {}).ContainerSpec or {})
            e.env = cs.Env or {}
          end
        end
      end
    end
  end
  local view = { idle = {}, dead = {}, stale = {}, in_use = {}, node_of = {}, claimed = 0, starting = 0 }
  for p, e in pairs(by) do
    if e.claimed then
      view.claimed = view.claimed + 1
      view.in_use[#view.in_use + 1] = p
      view.node_of[p] = e.ready and e.ready.node_id
    elseif e.ready then
      local healthy = e.ready.node_id ~= nil and e.ready.port ~= nil
      for _, svc in ipairs(shape.services) do if not e.services[svc] then healthy = false end end
      if healthy then
        view.idle[#view.idle + 1] = { project = p, node_id = e.ready.node_id, port = e.ready.port, env = e.env }
      else
        view.dead[#view.dead + 1] = p
      end
    elseif e.created and now - e.created < grace then view.starting = view.starting + 1
    else view.stale[#view.stale + 1] = p end
  end
  table.sort(view.idle, function(a, b) return a.project < b.project end)
  -- tried in random order, so that processes acquiring at once rarely collide
  local idle = view.idle
  for i = #idle, 2, -1 do
    local j = pick(i)
    idle[i], idle[j] = idle[j], idle[i]
  end
  return view
end

return M
