-- The cluster as sandstack.swarm sees it (internal): the manager's Engine API (services, tasks,
-- nodes), and each node's own Engine API, found from the node's label io.sandstack.engine. The
-- manager is the only source of truth: nothing here is kept between calls but open clients.
local core = require "sandstack.core"
local E = require "sandstack.error"
local S = require "sandstack.swarm.spec"

local M = {}

-- The requests of a named operation (core.session_requests: the C core makes every path):
-- one per name of names, or one when names is nil.
function M.requests(action, names, args) return core.session_requests(action, names, args) end

-- One operation on eng, named: its answer's body, or nil, err (err.status: the engine's). The
-- third value is the status (a removal's 404 counts as done, and says so).
function M.op(eng, action, name, args)
  local r = eng:perform(core.session_requests(action, name and { name } or nil, args))[1]
  if r.ok then return r.body, nil, r.status end
  return nil, r.err, r.status
end

local function engine(host, opts)
  local sandstack = require "sandstack"
  return sandstack.engine { host = host, timeout = opts.timeout, api_version = opts.api_version }
end

-- The client of docker_host, not yet checked (check_manager).
function M.client(opts) return engine(opts.docker_host, opts) end

-- true, or the refusal, from eng's answer r to /info ({ok =, body =, err =}): sandstack.swarm
-- needs an active manager of a swarm.
function M.check_manager(eng, r)
  if not r.ok then return nil, r.err end
  local sw = type(r.body) == "table" and r.body.Swarm or {}
  if sw.LocalNodeState ~= "active" or sw.ControlAvailable ~= true then
    return E.fail("engine", "not_a_manager", ("%s is not a manager of an active swarm (LocalNodeState %s): "
      .. "sandstack.swarm needs docker_host to be a swarm manager's Engine API"):format(
        eng.host or "the engine", tostring(sw.LocalNodeState)), { host = eng.host })
  end
  return true
end

-- The manager's client, refused unless that engine is an active manager of a swarm.
function M.manager(opts)
  local eng, err = M.client(opts)
  if not eng then return nil, err end
  local ok; ok, err = M.check_manager(eng, eng:perform(core.session_requests("info"))[1])
  if not ok then eng:close(); return nil, err end
  return eng
end

-- Services carrying label (a "k" or "k=v" string).
function M.services(mgr, label)
  local r, err = M.op(mgr, "list_services", nil, { label = label })
  if not r then return nil, err end
  if type(r) ~= "table" then return E.fail("engine", "bad_answer", "the manager's service list is malformed") end
  return r
end

-- The tasks of the given services (names or ids), newest first within each service.
function M.tasks(mgr, services)
  if #services == 0 then return {} end
  local r, err = M.op(mgr, "list_tasks", nil, { services = services })
  if not r then return nil, err end
  if type(r) ~= "table" then return E.fail("engine", "bad_answer", "the manager's task list is malformed") end
  table.sort(r, function(a, b)
    if a.ServiceID ~= b.ServiceID then return tostring(a.ServiceID) < tostring(b.ServiceID) end
    return tostring(a.CreatedAt) > tostring(b.CreatedAt)
  end)
  return r
end

-- One node as a plain table: id, hostname, state (ready/down/unknown/disconnected),
-- availability (active/pause/drain), role, engine (the io.sandstack.engine label, or nil).
local function node_view(n)
  local spec, desc, st = n.Spec or {}, n.Description or {}, n.Status or {}
  return { id = n.ID, hostname = desc.Hostname, state = st.State, addr = st.Addr,
    availability = spec.Availability, role = spec.Role, engine = (spec.Labels or {})[S.ENGINE_LABEL],
    labels = spec.Labels or {} }
end

-- The node from the answer r to its inspect ({ok =, body =, err =}).
function M.node_answer(r, id)
  if not r.ok then
    if r.err and r.err.status == 404 then
      return E.fail("engine", "node_gone", "node " .. id .. " is no longer in the swarm", { node_id = id })
    end
    return nil, r.err
  end
  return node_view(r.body)
end

function M.node(mgr, id)
  return M.node_answer(mgr:perform(core.session_requests("inspect_node", { id }))[1], id)
end

function M.nodes(mgr)
  local r, err = M.op(mgr, "list_nodes")
  if not r then return nil, err end
  local out = {}
  for i, n in ipairs(r) do out[i] = node_view(n) end
  return out
end

-- The typed answer for a session whose node the manager reports lost.
function M.node_down(node, project)
  return E.new("engine", "node_down", ("the node %s holding %s is %s: the session went with it; "
    .. "reap removes what the manager still lists"):format(tostring(node.hostname), tostring(project), tostring(node.state)),
    { node = node.hostname, node_id = node.id, node_state = node.state, project = project })
end

-- A client on the node's own Engine API (exec, capture, the forwarder). The operator names it
-- with the node label io.sandstack.engine (docs/scale-out.md); TLS comes from the environment,
-- as for the manager.
function M.node_engine(node, opts)
  if node.state ~= "ready" then return nil, M.node_down(node, opts.project) end
  if type(node.engine) ~= "string" or node.engine == "" then
    return E.fail("engine", "no_node_api", ("node %s has no %s label: sandstack reaches each node's own "
      .. "Engine API (docker node update --label-add %s=tcp://ADDRESS:2376 %s; see docs/scale-out.md)"):format(
        tostring(node.hostname), S.ENGINE_LABEL, S.ENGINE_LABEL, tostring(node.hostname)),
      { node = node.hostname, node_id = node.id })
  end
  return engine(node.engine, opts)
end

-- The task of a one-replica service that the manager wants running (nil when there is none).
function M.current_task(tasks, service_id)
  for _, t in ipairs(tasks) do
    if t.ServiceID == service_id and t.DesiredState == "running" then return t end
  end
  for _, t in ipairs(tasks) do
    if t.ServiceID == service_id then return t end
  end
end

return M
