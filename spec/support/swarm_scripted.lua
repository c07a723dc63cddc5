-- Test support: a scripted swarm (a manager and one ready node) for a sandstack.swarm start with
-- no cluster, for spec/swarm_spec.lua and bench/crossings_bench.lua. install() makes
-- sandstack.engine{} return its clients (cluster.lua opens every client through it) until
-- uninstall(). Every request and exec is logged in order as {host, method, path, body_json|argv}.
-- Each task runs at once, on node1, and the agent answers 200: the start's own path, without
-- waits; with opts.fail = "<service>", that service's task fails (exit code 3) instead (set
-- sw.fail the same way to end it later, during the start). The manager lists its services by
-- label, updates them at their version and removes them; opts.exec(name, argv, o) may answer an
-- exec on a node (a proxy's control command) before the scripted answers do.
-- Test-only: the library knows only the real client.
local core = require "sandstack.core"
local engine_error = require("sandstack.engine").engine_error

local M = {}

local NODE = "node1"
local ROUTE = "Iface\tDestination\tGateway\tFlags\nnet0\t0000000A\t00000000\t0001\n" -- no default route

local function fields(q)
  if q[1] ~= nil then return q[1], q[2], q[3] end
  return q.method, q.path, q.body_json, q.query
end

local function accepts(ok, status)
  for _, s in ipairs(ok or {}) do if s == status then return true end end
  return type(ok) == "table" and ok[status] == true
end

function M.new(opts)
  opts = opts or {}
  local self = { log = {}, services = {}, versions = {}, n = 0 }
  local function id(prefix)
    self.n = self.n + 1
    return prefix .. self.n
  end
  local function task(sid)
    local spec = self.services[sid] or {}
    local fail = self.fail or opts.fail -- self.fail: a task that ends later, set while the start runs
    local failed = fail and spec.Name and spec.Name:sub(-#fail - 1) == "-" .. fail
    return { ID = "t" .. sid, ServiceID = sid, NodeID = NODE, DesiredState = "running", CreatedAt = "1",
      Status = { State = failed and "failed" or "running", Err = failed and "task: non-zero exit (3)" or nil,
        ContainerStatus = { ContainerID = "c" .. sid, ExitCode = failed and 3 or 0 } } }
  end
  -- The manager's and the node's answers: (status, body).
  local function answer(method, path, body_json, query)
    if path == "/info" then return 200, { Swarm = { LocalNodeState = "active", ControlAvailable = true } } end
    if method == "GET" and path == "/services" then -- by label ("k" or "k=v"), as the manager filters
      local f = query.filters and core.json_decode(query.filters) or {}
      local want = f.label or {}
      if want[1] == nil then local l = {}; for k in pairs(want) do l[#l + 1] = k end; want = l end
      local out = {}
      for sid, spec in pairs(self.services) do
        local labels, all = spec.Labels or {}, true
        for _, w in ipairs(want) do
          local k, v = w:match("^([^=]+)=(.*)$")
          if k then all = all and labels[k] == v else all = all and labels[w] ~= nil end
        end
        if all then out[#out + 1] = { ID = sid, Spec = spec, Version = { Index = self.versions[sid] or 1 } } end
      end
      table.sort(out, function(a, b) return a.ID < b.ID end)
      return 200, out
    end
    if method == "GET" and (path == "/networks" or path == "/containers/json") then return 200, {} end
    if method == "DELETE" and path:match("^/services/") then
      local ref = path:match("[^/]+$")
      for sid, spec in pairs(self.services) do
        if sid == ref or spec.Name == ref then self.services[sid] = nil; return 200, "" end
      end
      return 404, { message = "service " .. ref .. " not found" }
    end
    if method == "GET" and path == "/volumes" then return 200, { Volumes = {} } end
    if method == "POST" and path == "/services/create" then
      local sid = id("svc")
      self.services[sid] = core.json_decode(body_json)
      return 201, { ID = sid }
    end
    if method == "GET" and path:match("^/services/") then -- by id or name
      local ref = path:match("[^/]+$")
      for id, spec in pairs(self.services) do
        if id == ref or spec.Name == ref then
          return 200, core.json_decode(core.json_encode { ID = id, Spec = spec, Version = { Index = self.versions[id] or 1 } })
        end
      end
      return 404, { message = "service " .. ref .. " not found" }
    end
    local updated = method == "POST" and path:match("^/services/([^/]+)/update$")
    if updated and self.services[updated] then -- at the version read, as the manager takes it
      if tostring(self.versions[updated] or 1) ~= tostring(query.version) then
        return 500, { message = "rpc error: code = Unknown desc = update out of sequence" }
      end
      self.services[updated] = core.json_decode(body_json)
      self.versions[updated] = (self.versions[updated] or 1) + 1
      return 200, {}
    end
    if path == "/tasks" then -- by service id or name, as the manager resolves them
      local out = {}
      for _, ref in ipairs(core.json_decode(query.filters).service) do
        local sid = self.services[ref] and ref
        for id, spec in pairs(self.services) do if spec.Name == ref then sid = id end end
        if not sid then return 404, { message = "service " .. ref .. " not found" } end
        out[#out + 1] = task(sid)
      end
      return 200, out
    end
    if path == "/nodes/" .. NODE then
      return 200, { ID = NODE, Description = { Hostname = "n1" }, Status = { State = "ready", Addr = "10.0.0.2" },
        Spec = { Role = "worker", Availability = "active", Labels = { ["io.sandstack.engine"] = "tcp://n1.scripted:2376" } } }
    end
    if method == "POST" and path == "/networks/create" then return 201, { Id = id("net") } end
    if method == "POST" and path == "/containers/create" then return 201, { Id = id("ctr") } end
    if method == "POST" or method == "DELETE" then return 204, "" end
    if method == "GET" and path:match("^/containers/.+/json$") then
      return 200, { State = { Status = "running" },
        NetworkSettings = { Ports = { ["8080/tcp"] = { { HostIp = "127.0.0.1", HostPort = "41234" } } } } }
    end
    return 404, { message = "the scripted swarm has no answer for " .. method .. " " .. path }
  end
  local function client(host)
    local c = { host = host, api_version = "1.41" }
    local function one(q)
      local method, path, body_json, query = fields(q)
      self.log[#self.log + 1] = { host = host, method = method, path = path, body_json = body_json }
      local status, body = answer(method, path, body_json, query or {})
      local ok = status < 300 or accepts(q.ok, status)
      return { ok = ok, status = status, body = body, err = not ok and engine_error(status, method, path, body) or nil }
    end
    -- perform(reqs, deadline, wave...): a later wave only when every request before was ok
    function c.perform(_, ...)
      local waves, outs = { ... }, {}
      table.remove(waves, 2)
      for w, list in ipairs(waves) do
        local out, all = {}, true
        for i, q in ipairs(list) do out[i] = one(q); all = all and out[i].ok end
        out.at = core.engine_clock()
        outs[w] = out
        if not all then break end
      end
      return table.unpack(outs)
    end
    function c.call(_, method, path, body_json)
      local r = one { method = method, path = path, body_json = body_json }
      if r.ok then return r.body end
      return nil, r.err
    end
    function c.exec(_, name, argv, o)
      self.log[#self.log + 1] = { host = host, exec = name, argv = argv }
      local own = opts.exec and opts.exec(name, argv, o or {})
      if own then return own end
      local line = table.concat(argv, " ")
      if line:find("OPEN:/proc/net/route", 1, true) then return { exit_code = 0, stdout = ROUTE, stderr = "" } end
      if line:find("OPEN:/proc/self/status", 1, true) then return { exit_code = 0, stdout = "x\nNoNewPrivs:\t1\n", stderr = "" } end
      if line:find("^socat %-lpGET") then return { exit_code = 0, stdout = "HTTP/1.1 200 OK\r\n", stderr = "" } end
      return { exit_code = 0, stdout = "", stderr = "" }
    end
    function c.close() end
    return c
  end
  self.client = client
  return self
end

-- Makes sandstack.engine{} answer with this swarm's clients; returns the function to undo it.
function M.install(sw)
  local sandstack = require "sandstack"
  local real = sandstack.engine
  sandstack.engine = function(o) return sw.client(o.host or "manager") end
  return function() sandstack.engine = real end
end

return M
