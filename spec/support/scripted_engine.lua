-- Test support: the specs' Lua-level stand-in for the engine client (sandstack.engine{}), no
-- socket underneath. Test-only: the library knows only the real client.
--
--   local scripted = require "spec.support.scripted_engine"
--   local e = scripted.with { request = function(self, method, path, body, opts) return status, body end }
--       e:perform(reqs[, deadline[, wave, ...]]) and e:call(method, path, body, opts) as the client
--       has them, answered by e:request one request at a time, in order, and settled as the C
--       core settles them (a status in the request's `ok`, or 2xx, is success; any other carries
--       the client's engine error; request's nil, err is that err); a wave is sent when every
--       request before it was ok
--   local e = scripted.new(function(method, path, body, opts, n) ... end)
--       the same, with e.log ("METHOD path" of each request, in order) and e.seen (path -> how
--       many times asked); n counts this path's requests, this one included
--   local sw = scripted.swarm { fail = "<service>", exec = function(name, argv, o) end }
--       a scripted Swarm: a manager and one ready node (below)
--   local undo = scripted.install(sw or function(opts) return client end)
--       sandstack.engine{} returns sw.client(host) (or the function's client) until undo()
local core = require "sandstack.core"
local engine_error = require("sandstack.engine").engine_error

local M = {}

-- A request in either form the client reads: positional {method, path, body, opts}, or the
-- plan's keyed {method =, path =, body_json =, query =, ...}.
local function fields(q)
  if q[1] ~= nil then return q[1], q[2], q[3], q[4] end
  return q.method, q.path, q.body_json, { query = q.query, timeout = q.timeout, max_bytes = q.max_bytes }
end

-- The ok table as a set ({[404] = true}) or a list ({404}).
local function accepts(ok, status)
  if ok == nil then return false end
  if ok[status] == true then return true end
  for _, s in ipairs(ok) do if s == status then return true end end
  return false
end

-- One request through eng:request, settled: {ok =, status =, body =, err =}.
local function settle(eng, method, path, body, opts, ok)
  local status, answer = eng:request(method, path, body, opts)
  if not status then return { ok = false, err = answer } end
  local good = status < 300 or accepts(ok, status)
  return { ok = good, status = status, body = answer,
    err = not good and engine_error(status, method:upper(), path, answer) or nil }
end

local function perform(eng, reqs, _, ...)
  local lists, outs = { reqs, ... }, {}
  for w = 1, select("#", ...) + 1 do
    local out, all = {}, true
    for i, q in ipairs(lists[w] or {}) do
      local method, path, body, opts = fields(q)
      out[i] = settle(eng, method, path, body, opts, q.ok)
      all = all and out[i].ok
    end
    out.at = core.engine_clock()
    outs[w] = out
    if not all or lists[w + 1] == nil then break end
  end
  return (table.unpack or unpack)(outs) -- LuaJIT outside busted has only unpack
end

local function call(eng, method, path, body, opts)
  local r = settle(eng, method, path, body, opts, opts and opts.ok)
  if r.ok then return r.body end
  return nil, r.err
end

-- e (a table with request) with perform added, and call unless it has its own; returns e.
function M.with(e)
  e.perform = perform
  e.call = e.call or call
  return e
end

-- A client whose request logs and counts each request and answers answer(method, path, body,
-- opts, n); fields of e (optional) are kept.
function M.new(answer, e)
  e = e or {}
  e.log, e.seen = e.log or {}, e.seen or {}
  function e.request(self, method, path, body, opts)
    self.log[#self.log + 1] = method .. " " .. path
    self.seen[path] = (self.seen[path] or 0) + 1
    return answer(method, path, body, opts, self.seen[path])
  end
  return M.with(e)
end

-- Makes sandstack.engine{} answer with target's clients: a scripted swarm's (by the host asked
-- for, "manager" when none) or those of a function of the options; returns the function to undo it.
function M.install(target)
  local sandstack = require "sandstack"
  local real = sandstack.engine
  local client_of = type(target) == "function" and target or function(o) return target.client(o.host or "manager") end
  sandstack.engine = client_of
  return function() sandstack.engine = real end
end

-- The scripted Swarm, for a sandstack.swarm start with no cluster (spec/swarm_spec.lua,
-- bench/crossings_bench.lua): a manager and one ready node. Every request and exec is logged in
-- sw.log, in order, as {host, method, path, body_json | exec, argv}. Each task runs at once, on
-- node1, and the agent answers 200: the start's own path, without waits; with opts.fail =
-- "<service>", that service's task fails (exit code 3) instead (set sw.fail the same way to end
-- it later, during the start). The manager lists its services by label and its one node,
-- updates services at their version and removes them; opts.exec(name, argv, o) may answer an
-- exec on a node (a proxy's control command) before the scripted answers do.
local NODE = "node1"
local ROUTE = "Iface\tDestination\tGateway\tFlags\nnet0\t0000000A\t00000000\t0001\n" -- no default route

function M.swarm(opts)
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
      for sid, spec in pairs(self.services) do
        if sid == ref or spec.Name == ref then
          return 200, core.json_decode(core.json_encode { ID = sid, Spec = spec, Version = { Index = self.versions[sid] or 1 } })
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
        for s, spec in pairs(self.services) do if spec.Name == ref then sid = s end end
        if not sid then return 404, { message = "service " .. ref .. " not found" } end
        out[#out + 1] = task(sid)
      end
      return 200, out
    end
    local node = { ID = NODE, Description = { Hostname = "n1" }, Status = { State = "ready", Addr = "10.0.0.2" },
      Spec = { Role = "worker", Availability = "active", Labels = { ["io.sandstack.engine"] = "tcp://n1.scripted:2376" } } }
    if path == "/nodes/" .. NODE then return 200, node end
    if method == "GET" and path == "/nodes" then return 200, { node } end -- the swarm's nodes: this one
    if method == "POST" and path == "/networks/create" then return 201, { Id = id("net") } end
    if method == "POST" and path == "/containers/create" then return 201, { Id = id("ctr") } end
    if method == "POST" or method == "DELETE" then return 204, "" end
    if method == "GET" and path:match("^/containers/.+/json$") then
      return 200, { State = { Status = "running" },
        NetworkSettings = { Ports = { ["8080/tcp"] = { { HostIp = "127.0.0.1", HostPort = "41234" } } } } }
    end
    return 404, { message = "the scripted swarm has no answer for " .. method .. " " .. path }
  end
  function self.client(host)
    local c = M.with { host = host, api_version = "1.41" }
    function c.request(_, method, path, body_json, o)
      if type(body_json) == "table" then body_json = core.json_encode(body_json) end -- as the client sends it
      self.log[#self.log + 1] = { host = host, method = method, path = path, body_json = body_json }
      return answer(method, path, body_json, o and o.query or {})
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
  return self
end

return M
