-- The handle on a session on a swarm (internal to sandstack.swarm). It holds two clients: the
-- manager's (services, tasks, the node's state) and the node's own (exec, capture, the
-- forwarder). It keeps names, order and checks from the plan, never a body or a secret.
local core = require "sandstack.core"
local E = require "sandstack.error"
local store = require "sandstack.store"
local dhandle = require "sandstack.docker.handle"
local cluster = require "sandstack.swarm.cluster"
local inventory = require "sandstack.swarm.inventory"
local session = require "sandstack.session"
local dexec = require "sandstack.docker.handle_exec"
local live = require "sandstack.docker.egress_live"
local capture = require "sandstack.stack.capture"

local M = {}
-- The handle's own methods (record, status, container, destroy, close, ...), and Op: the
-- driver's operations of the session interface, which the one session class wraps
-- (sandstack.session).
local Stack, Op = {}, {}

-- The proxy sandstack added (egress_live.lua reaches it through the node's engine): its service.
local function added_proxy(px)
  if type(px) == "table" and px.added then return { service = px.service, added = true } end
end

local function slim(plan)
  local cs = {}
  for i, c in ipairs(plan.containers) do -- the ready test: a wake waits for it, as the start does
    cs[i] = { service = c.service, name = c.name, role = c.role, check = c.check, check_timeout = c.check_timeout }
  end
  return { project = plan.project, session_key = plan.session_key, agent_port = plan.agent_port,
    ready_path = plan.ready_path, ready_timeout = plan.ready_timeout, capture_path = plan.capture_path, sandbox = plan.sandbox,
    forwarder = plan.forwarder, containers = cs, docker_host = plan.docker_host, timeout = plan.timeout,
    credentials = store.credentials(plan.credentials), placeholders = store.placeholders(plan),
    proxy = added_proxy(plan.proxy) }
end

local function set_port(self, port)
  self.port = port
  -- the node's loopback: reachable on that node only (the gateway there, or a process in its
  -- network namespace)
  self.endpoint = port and ("http://127.0.0.1:%d"):format(port) or nil
end

-- mgr, node_eng: open clients (the handle owns them); node: cluster.node's view.
function M.new(mgr, node_eng, node, plan, opts)
  local self = setmetatable({ mgr = mgr, node_eng = node_eng, plan = plan.containers and slim(plan) or plan,
    hooks = opts and opts.hooks or {} }, Stack)
  self.project, self.session_key = self.plan.project, self.plan.session_key
  self.node, self.node_id, self.node_engine = node.hostname, node.id, node.engine
  self.docker_host = opts and opts.docker_host
  self.api_timeout = opts and opts.timeout
  return self
end

local function check_open(self)
  if not self.mgr then require("sandstack.session").closed("sandstack.swarm.reconnect") end
end

local function forwarder_name(self) return self.plan.project .. "-" .. self.plan.forwarder end

-- Re-reads the forwarder's published port on the node (the manager first: is the node there?).
function Stack:reconnect()
  check_open(self)
  local node, err = cluster.node(self.mgr, self.node_id)
  if not node then return nil, err end
  if node.state ~= "ready" then
    set_port(self, nil)
    return nil, cluster.node_down(node, self.project)
  end
  local info, status
  info, err, status = cluster.op(self.node_eng, "inspect", forwarder_name(self))
  if status == 404 then -- counted as an answer by the operation: here it means no forwarder
    info, err = nil, E.new("engine", "not_found", "no forwarder " .. forwarder_name(self) .. " on the node",
      { status = 404 })
  end
  if not info then set_port(self, nil); return nil, err end
  local b = ((info.NetworkSettings or {}).Ports or {})[("%d/tcp"):format(self.plan.agent_port)]
  local port = type(b) == "table" and b[1] and tonumber(b[1].HostPort) or nil
  set_port(self, port)
  if not port then return E.fail("engine", "no_port", "the forwarder publishes no port (state "
    .. tostring(info.State and info.State.Status) .. ")") end
  return port
end

-- h:ports(): the agent's port, published by the forwarder on the node's 127.0.0.1 (a swarm
-- session publishes no other: the start refuses `ports`).
function Op:ports()
  return require("sandstack.docker.ports").list(self.node_eng, { { service = self.plan.forwarder,
    name = forwarder_name(self) } }, self.plan.forwarder)
end

function Stack:record()
  check_open(self)
  local r = {}
  for k, v in pairs(self.plan) do r[k] = v end
  r.kind = "sandstack.swarm"
  r.version = core.VERSION
  r.port, r.node, r.node_id = self.port, self.node, self.node_id
  r.docker_host = self.docker_host
  return store.scrub(r)
end

-- The task container of one service on the node: its id, or nil, err.
function Stack:container(service)
  check_open(self)
  service = service or self.plan.sandbox
  if service == self.plan.forwarder then return forwarder_name(self) end
  local name = self.plan.project .. "-" .. service
  local tasks, err = cluster.tasks(self.mgr, { name })
  if not tasks then return nil, err end
  for _, t in ipairs(tasks) do
    local cs = t.Status and t.Status.ContainerStatus
    if t.DesiredState == "running" and cs and cs.ContainerID and cs.ContainerID ~= "" then
      if t.NodeID ~= self.node_id then
        return E.fail("engine", "moved", ("the task of %s runs on node %s, not on the session's %s"):format(
          name, tostring(t.NodeID), tostring(self.node_id)), { service = service })
      end
      return cs.ContainerID
    end
  end
  local node = cluster.node(self.mgr, self.node_id)
  if node and node.state ~= "ready" then return nil, cluster.node_down(node, self.project) end
  return E.fail("engine", "not_found", ("service %s has no running task"):format(name), { service = service })
end

-- h:spawn in one of the session's task containers (default: the sandbox), through the node's
-- engine as on sandstack.docker (docker/process.lua).
function Op:spawn(argv, opts)
  local process = require "sandstack.docker.process"
  argv, opts = process.check(argv, opts)
  if not argv then return nil, opts end
  local id, err = self:container(opts.service)
  if not id then return nil, err end
  return require("sandstack.docker.handle_spawn").spawn_on(self, self.node_eng, id, argv, opts)
end

-- h:processes() and h:attach(id), on the node's engine as docker's (docker/process.lua).
function Op:processes()
  local process = require "sandstack.docker.process"
  return process.list(process.engine_io(self.node_eng), self.project)
end

function Op:attach(id)
  local process = require "sandstack.docker.process"
  return process.attach(process.engine_io(self.node_eng), self.project, id,
    require("sandstack.docker.handle_spawn").live(self))
end

-- exec in one of the session's containers, on the node's engine. The session interface's
-- form, exec(argv | string, {service =, timeout =, max_bytes =, ...}), runs docker's session
-- exec (the kill on a timeout or budget included); the older exec(service, argv, opts) is the
-- engine client's exec, kept for its callers.
function Op:exec(a, b, c)
  if type(b) == "table" and b[1] ~= nil then
    local id, err = self:container(a)
    if not id then return nil, err end
    return self.node_eng:exec(id, b, c)
  end
  local opts, err = dexec.options(b)
  if not opts then return nil, err end
  local id; id, err = self:container(opts.service)
  if not id then return nil, err end
  return dexec.run(self.node_eng, id, a, opts, "swarm")
end

-- { node =, node_state =, port =, services = { name = { state =, health =, exit_code = } } }
function Stack:status()
  check_open(self)
  local out = { node = self.node, services = {} }
  local node, err = cluster.node(self.mgr, self.node_id)
  if not node then return nil, err end
  out.node_state = node.state
  local names = {}
  for _, c in ipairs(self.plan.containers) do
    if c.role ~= "forwarder" then names[#names + 1] = self.plan.project .. "-" .. c.service end
  end
  local services; services, err = cluster.services(self.mgr, "io.sandstack.project=" .. self.project)
  if not services then return nil, err end
  local ids = {}
  for i, s in ipairs(services) do ids[i] = s.ID end
  local tasks; tasks, err = cluster.tasks(self.mgr, ids)
  if not tasks then return nil, err end
  for _, s in ipairs(services) do
    local t = cluster.current_task(tasks, s.ID)
    local svc = (s.Spec.Labels or {})["io.sandstack.service"] or s.Spec.Name
    local st = t and t.Status or {}
    out.services[svc] = { state = st.State or "none",
      exit_code = st.ContainerStatus and st.ContainerStatus.ExitCode ~= 0 and st.ContainerStatus.ExitCode or nil,
      error = st.Err }
  end
  for _, n in ipairs(names) do
    local svc = n:sub(#self.project + 2)
    out.services[svc] = out.services[svc] or { state = "missing" }
  end
  if node.state == "ready" then
    local info = cluster.op(self.node_eng, "inspect", forwarder_name(self))
    local st = type(info) == "table" and info.State
    out.services[self.plan.forwarder] = { state = st and st.Status or "missing" }
    if st and st.Status == "running" then out.port = self:reconnect() end
  else
    out.services[self.plan.forwarder] = { state = "lost" }
    set_port(self, nil)
  end
  return out
end

-- Copies capture_path out of the sandbox's task container on the node (stack/capture.lua).
function Stack:capture(dir, opts)
  check_open(self)
  local err
  opts, err = capture.args(dir, opts)
  if not opts then return nil, err end
  local path = self.plan.capture_path
  if not path then return E.fail("invalid", "no_capture_path", "this stack has no capture_path") end
  local id; id, err = self:container(self.plan.sandbox)
  if not id then return nil, err end
  return capture.take(self.node_eng, id, path, dir, opts)
end

-- Removes the session: its services and overlays on the manager, and what its node holds (when
-- the node answers; a lost node's objects went with it). Idempotent.
function Stack:destroy(opts)
  check_open(self)
  opts = opts or {}
  if opts.capture and self.plan.capture_path then self:capture(opts.capture) end
  local node = cluster.node(self.mgr, self.node_id)
  local eng = node and node.state == "ready" and self.node_eng or nil
  local ok, err = inventory.remove(self.mgr, eng, "io.sandstack.project=" .. self.project, nil, { node_lost = not eng })
  if not ok then return nil, err end
  -- overlays a lost node's tasks still hold for the manager: reap removes them later
  self.deferred = #err > 0 and err or nil
  set_port(self, nil)
  if self.hooks.on_event then pcall(self.hooks.on_event, { phase = "destroyed", project = self.project }) end
  return true
end

-- The credentials' placeholders (never a secret), as on sandstack.docker; kept by the record.
Op.credentials = dhandle.ops.credentials

-- The egress and the credentials of the running session, changed live through its added proxy
-- on the node: the same control calls as sandstack.docker's (docker/egress_live.lua), which
-- reach the proxy's task container through the node's engine.
-- The ask hook too: the requests the proxy holds, the host's answer, and the loop that answers.
local LIVE = { set_egress = live.set_egress, egress = live.egress, set_credentials = live.set_credentials,
  set_model_key = live.set_model_key, egress_asks = live.asks, answer = live.answer,
  serve = function(self, ...) return require("sandstack.ask_serve").serve(self, ...) end }
for name, call in pairs(LIVE) do Op[name] = call end

-- stop, start and restart are not offered: the class answers them typed unsupported
-- (sandstack.session), as what else Swarm cannot do (WHY, with the lifecycle's).
local lifecycle = require "sandstack.swarm.lifecycle"
local WHY = {}
for _, m in ipairs { "stop", "start", "restart" } do
  WHY[m] = "a session there is started once and destroyed: a task that stops is not started again on the same "
    .. "node (pause and resume are offered)"
end
for m, why in pairs(lifecycle.WHY) do WHY[m] = why end
lifecycle.mix(Op, set_port) -- pause, resume, hibernate
Stack.wake = lifecycle.wake
local expiry = require "sandstack.swarm.expiry"
Op.set_timeout, Op.expires = expiry.set_timeout, expiry.expires

function Stack:close()
  if self.node_eng then self.node_eng:close() end
  if self.mgr then self.mgr:close() end
  self.mgr, self.node_eng = nil, nil
end
Stack.__gc = Stack.close
Stack.__close = Stack.close

M.set_port = set_port

-- Rebuilds a handle from stack:record(), from any process that reaches the manager: the manager
-- says where the session is (the record's node is checked against the tasks), the node's label
-- says how to reach its engine. Errors: not_found (no services left), node_down (the node is
-- lost: the session went with it).
local RECONNECT_KEYS = E.described {
  { "docker_host", "string", type = "string", default = "the record's",
    refused = "not a string" },
  { "timeout", E.SECONDS, type = "seconds", default = "the record's",
    refused = "not above 0" },
  { "on_event", "function", type = "function", default = "none",
    refused = "not a function" },
}
function M.reconnect(record, opts)
  E.want(record, "table", "sandstack.swarm.reconnect", "argument 'record'", "a record from a swarm stack's :record()")
  if type(record) ~= "table" or type(record.project) ~= "string" or record.kind ~= "sandstack.swarm" then
    return E.fail("invalid", "not_a_record", "sandstack.swarm.reconnect: that is not a record from a swarm stack's :record()")
  end
  local err
  opts, err = E.options(opts, RECONNECT_KEYS, "sandstack.swarm.reconnect")
  if not opts then return nil, err end
  local conn = { docker_host = opts.docker_host or record.docker_host, timeout = opts.timeout or record.timeout }
  local mgr; mgr, err = cluster.manager(conn)
  if not mgr then return nil, err end
  local sessions = inventory.list_with(mgr, record.project)
  local s = sessions and sessions[1]
  if not s then
    mgr:close()
    return E.fail("engine", "not_found", "stack " .. record.project .. " no longer exists", { project = record.project })
  end
  local node; node, err = cluster.node(mgr, s.node_id or record.node_id)
  if not node then mgr:close(); return nil, err end
  if node.state ~= "ready" then mgr:close(); return nil, cluster.node_down(node, record.project) end
  -- a task that ended is not started again (restart condition none): the session is over
  -- (its node was drained, or a container exited); reap removes what is left
  for svc, state in pairs(s.services) do
    if state ~= "running" and not s.hibernated[svc] then -- a hibernated service: wake starts it
      mgr:close()
      return E.fail("engine", "session_ended", ("stack %s has ended: its service %s is %s on node %s"):format(
        record.project, svc, tostring(state), tostring(node.hostname)),
        { project = record.project, service = svc, state = state, node = node.hostname })
    end
  end
  local node_eng; node_eng, err = cluster.node_engine(node, { timeout = conn.timeout, project = record.project })
  if not node_eng then mgr:close(); return nil, err end
  local stack = M.new(mgr, node_eng, node, record, { hooks = { on_event = opts.on_event }, docker_host = conn.docker_host,
    timeout = conn.timeout })
  local port; port, err = stack:reconnect()
  if not port and err and err.status == 404 then
    stack:close()
    return E.fail("engine", "not_found", "stack " .. record.project .. " has no forwarder on " .. tostring(node.hostname),
      { project = record.project, node = node.hostname })
  end
  return stack
end

-- The session interface every backend's handle shares, made by the one session class
-- (sandstack.session): what a swarm session does not offer is typed unsupported there.
-- The files, logs and stats are docker's (the task containers on the session's node).
M.Stack = Stack
for part, names in pairs { files = { "read", "write", "list", "stat", "remove", "upload", "download" },
  observe = { "logs", "stats" } } do
  -- literal requires, which spec/module_graph_spec.lua reads
  local methods = (part == "files" and require "sandstack.docker.handle_files"
    or require "sandstack.docker.handle_observe").methods
  for _, name in ipairs(names) do Op[name] = methods[name] end
end
session.class({ backend = "swarm", ops = Op, why = WHY, path = "an absolute path in the container", reopen = "sandstack.swarm.reconnect",
  is_open = function(self) return self.mgr ~= nil end }, Stack)

return M
