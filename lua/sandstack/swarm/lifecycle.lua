-- A swarm session over time (internal to sandstack.swarm; mixed into its handle):
--   pause, resume      the session's task containers frozen and thawed on their node's engine
--                      (the manager keeps the tasks running: a paused container is a running task),
--                      but the forwarder and the added proxy, which keep running;
--   hibernate, wake    every service but the proxy sandstack added scaled to 0 replicas and back
--                      to 1, each pinned to the session's node (a constraint node.id==...), so
--                      the new task lands where the session's named volumes are; the forwarder
--                      (a container on the node's engine) stopped, and started again with a new
--                      port. The proxy keeps running: it holds the live egress policy and
--                      credentials in memory only (no record may hold a secret), as on docker.
--                      What the sandbox wrote outside its volumes (the container's writable
--                      layer) is lost: the task after a wake is a new container;
--   set_timeout, expires   swarm/expiry.lua (mixed in by swarm/handle.lua: the expiry pass
--                      hibernates through this file, which therefore does not require it).
-- Snapshots, forks and changes are typed unsupported.
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"
local cluster = require "sandstack.swarm.cluster"
local run_ctx = require "sandstack.stack.run"

local M = {}
local R = core.session_requests
local now, pause = run_ctx.now, run_ctx.pause
local PROJECT = "io.sandstack.project"

-- The engine's action on the session's task containers; kept: leave out the forwarder and the
-- proxy sandstack added, as a pause on docker does (they hold none of the session's work, and the
-- live egress calls and asks reach the proxy while the session is paused).
local function each(self, action, kept)
  local px = self.plan.proxy
  local skip = kept and type(px) == "table" and px.added and px.service
  local ids = {}
  for _, c in ipairs(self.plan.containers) do
    if not (kept and (c.role == "forwarder" or c.service == skip)) then
      local id, err = self:container(c.service)
      if not id then return nil, err end
      ids[#ids + 1] = id
    end
  end
  local r = batch.run(self.node_eng, core.session_requests(action, ids), 60)
  for _, x in ipairs(r) do
    -- already in that state (the engine says so: a 409, or a 500 from a node's 20.10 engine),
    -- which is where the call wants it
    local cause = x.err and x.err.cause
    if not x.ok and x.status ~= 409 and cause ~= "not_paused" and cause ~= "already_paused" then
      return nil, x.err
    end
  end
  return true
end

local ENDED = { failed = true, rejected = true, complete = true, shutdown = true, orphaned = true, remove = true }

local function replicas(s)
  local r = s.Spec and s.Spec.Mode and s.Spec.Mode.Replicated
  return r and r.Replicas
end

-- One service's replicas set to n, with the pin to node_id added when it has none (the first
-- service of a start is placed by Swarm, unpinned): an update at the version read, read again
-- when another writer came in between. true, or nil, err.
local function scale(mgr, id, n, node_id)
  return require("sandstack.swarm.service_update").update(mgr, id, function(spec)
    spec.Mode = { Replicated = { Replicas = n } }
    local p = spec.TaskTemplate.Placement or {}
    spec.TaskTemplate.Placement = p
    local pin = "node.id==" .. node_id
    for _, c in ipairs(p.Constraints or {}) do if c:gsub("%s", "") == pin then return true end end
    p.Constraints = p.Constraints or {}
    p.Constraints[#p.Constraints + 1] = pin
    return true
  end)
end

-- Waits until no task of the services (ids) runs: their memory is freed. true, or nil, err.
local function wait_down(mgr, ids, seconds)
  local deadline = now() + seconds
  while true do
    local tasks, err = cluster.tasks(mgr, ids)
    if not tasks then return nil, err end
    local up = 0
    for _, t in ipairs(tasks) do
      if not ENDED[(t.Status or {}).State] then up = up + 1 end
    end
    if up == 0 then return true end
    if now() >= deadline then
      return E.fail("timeout", nil, ("hibernate: %d tasks still run after %gs"):format(up, seconds), { phase = "hibernate" })
    end
    pause(0.1)
  end
end

-- The services of project (the manager's list) and the name of its forwarder container.
local function services(mgr, project)
  return cluster.services(mgr, PROJECT .. "=" .. project)
end

-- Hibernates project, known by its labels: every service but the proxy (service "proxy": the
-- one sandstack adds has that name) scaled to 0 and pinned to node_id, then the forwarder (role
-- forwarder, on node_eng) stopped. opts.timeout: the grace seconds the tasks may take to end
-- (default 5, plus the manager's own time). true, or nil, err.
function M.hibernate_project(mgr, node_eng, project, node_id, opts)
  local list, err = services(mgr, project)
  if not list then return nil, err end
  local ids = {}
  for _, s in ipairs(list) do
    local l = s.Spec.Labels or {}
    if l["io.sandstack.service"] ~= "proxy" then
      ids[#ids + 1] = s.ID
      if replicas(s) ~= 0 then
        local ok; ok, err = scale(mgr, s.ID, 0, node_id)
        if not ok then return nil, err end
      end
    end
  end
  local ok; ok, err = wait_down(mgr, ids, (opts.timeout or 5) + 60)
  if not ok then return nil, err end
  local r = batch.run(node_eng, R("list_containers", nil, { label = PROJECT .. "=" .. project }), 60)[1]
  if not r.ok then return nil, r.err end
  local fw = {}
  for _, c in ipairs(type(r.body) == "table" and r.body or {}) do
    if (c.Labels or {})["io.sandstack.role"] == "forwarder" and c.State ~= "exited" then fw[#fw + 1] = c.Id end
  end
  err = batch.first_error(batch.run(node_eng, R("stop", fw, { t = 0 }), 60))
  if err then return nil, err end
  return true
end

local HIBERNATE_KEYS = { memory = true, timeout = true }

-- The handle's set_port(self, port), handed over by M.mix: the handle requires this file, so
-- this file never requires the handle.
local set_port

-- h:hibernate{timeout =}: see the top of this file. A paused session is thawed first (a frozen
-- process cannot take its stop signal). hibernate{memory = true} is refused before anything is
-- touched: Swarm has no checkpoint. true, or nil, err.
local function hibernate(self, opts)
  if not self.mgr then require("sandstack.session").closed("sandstack.swarm.reconnect") end
  opts = E.check_keys(opts, HIBERNATE_KEYS, "hibernate")
  local t = opts.timeout or 5
  if type(t) ~= "number" or t < 0 then error("hibernate: option 'timeout' must be a number >= 0", 2) end
  if opts.memory ~= nil and type(opts.memory) ~= "boolean" then error("hibernate: option 'memory' must be a boolean", 2) end
  if opts.memory then
    return E.fail("engine", "checkpoint_unsupported", "hibernate{memory = true}: Swarm has no checkpoint of a task; "
      .. "hibernate without memory (the volumes are kept), or pause to keep the processes", { backend = "swarm" })
  end
  local list, err = services(self.mgr, self.project)
  if not list then return nil, err end
  local asleep = true
  for _, s in ipairs(list) do
    if (s.Spec.Labels or {})["io.sandstack.service"] == self.plan.sandbox and replicas(s) ~= 0 then asleep = false end
  end
  if not asleep then
    local ok; ok, err = each(self, "unpause")
    if not ok then return nil, err end
  end
  local ok; ok, err = M.hibernate_project(self.mgr, self.node_eng, self.project, self.node_id, { timeout = t })
  set_port(self, nil)
  if not ok then return nil, err end
  return true
end

-- Waits until the task of service (its inspect) runs on node_id, its ready test (c.check) passing
-- when it has one. true, or nil, err.
local function wait_up(self, s, c, seconds)
  local deadline = now() + seconds
  local delay = 0.05
  while true do
    local tasks, err = cluster.tasks(self.mgr, { s.ID })
    if not tasks then return nil, err end
    local task = cluster.current_task(tasks, s.ID)
    local st = task and task.Status or {}
    if task and task.DesiredState == "running" and ENDED[st.State] then
      return E.fail("engine", "task_failed", ("wake: the task of %s is %s: %s"):format(s.Spec.Name, tostring(st.State),
        tostring(st.Err or st.Message)), { service = c and c.service, state = st.State })
    end
    -- as at the start: running (Swarm says so once a healthcheck passes), or starting with
    -- its ready test passing by exec on the node
    local cid = st.ContainerStatus and st.ContainerStatus.ContainerID
    if task and task.DesiredState == "running" then
      if st.State == "running" then return true end
      if st.State == "starting" and c and c.check and cid and cid ~= "" then
        local r = self.node_eng:exec(cid, c.check, { timeout = c.check_timeout or 5, max_bytes = 65536 })
        if r and r.exit_code == 0 then return true end
      end
    end
    if now() >= deadline then
      return E.fail("timeout", nil, ("wake: the task of %s did not start within %gs (state %s; the session is pinned "
        .. "to node %s)"):format(s.Spec.Name, seconds, tostring(st.State), tostring(self.node)),
        { phase = "wake", service = c and c.service, state = st.State })
    end
    pause(delay)
    delay = math.min(delay * 1.5, 0.25)
  end
end

-- h:wake(): every hibernated service back to 1 replica in dependency order (each once the ones
-- before it run and pass their ready test), then the forwarder started (a new port) and the
-- agent's readiness through it (swarm/ready.lua). A running session is left as it is. true,
-- or nil, err.
local function wake(self)
  if not self.mgr then require("sandstack.session").closed("sandstack.swarm.reconnect") end
  local list, err = services(self.mgr, self.project)
  if not list then return nil, err end
  local by = {}
  for _, s in ipairs(list) do by[(s.Spec.Labels or {})["io.sandstack.service"] or s.Spec.Name] = s end
  local seconds = self.plan.ready_timeout or 60
  for _, c in ipairs(self.plan.containers) do
    local s = by[c.service]
    if s and c.role ~= "forwarder" then
      if replicas(s) == 0 then
        local ok; ok, err = scale(self.mgr, s.ID, 1, self.node_id)
        if not ok then return nil, err end
      end
      local ok; ok, err = wait_up(self, s, c, seconds)
      if not ok then return nil, err end
    end
  end
  local fw = self.plan.project .. "-" .. self.plan.forwarder
  err = batch.first_error(batch.run(self.node_eng, R("start", { fw }), 60))
  if err then return nil, err end
  local port; port, err = self:reconnect()
  if not port then return nil, err end
  local ids = {}
  for _, s in pairs(by) do ids[#ids + 1] = s.ID end
  local run = { node_eng = self.node_eng, forwarder_container = fw, port = port,
    plan = { sandbox = self.plan.sandbox, agent_port = self.plan.agent_port, ready_path = self.plan.ready_path == nil and "/" or self.plan.ready_path,
      ready_timeout = seconds },
    check_tasks = function()
      local tasks, terr = cluster.tasks(self.mgr, ids)
      if not tasks then return nil, terr end
      for _, id in ipairs(ids) do
        local t = cluster.current_task(tasks, id)
        if not t or ENDED[(t.Status or {}).State] then
          return E.fail("engine", "task_failed", "wake: a task of " .. self.project .. " ended before it was ready")
        end
      end
      return true
    end }
  return require("sandstack.swarm.ready").wait(run)
end

-- Why a swarm session has no snapshot, fork or changes: the session class answers them typed
-- unsupported (sandstack.session).
M.WHY = {}
for _, m in ipairs { "snapshot", "fork", "changes" } do
  M.WHY[m] = "a swarm task is a new container at each wake: the sandbox's filesystem outside its volumes is not "
    .. "kept, and Swarm has no per-task image commit or diff; hibernate keeps the volumes"
end

-- Gives the handle's driver operations (ops) pause, resume and hibernate; handle_set_port(self,
-- port) is the handle's. wake is the handle's own method (no session one): M.wake.
function M.mix(ops, handle_set_port)
  set_port = handle_set_port
  function ops:pause() return each(self, "pause", true) end
  function ops:resume() return each(self, "unpause", true) end
  ops.hibernate = hibernate
end
M.wake = wake

return M
