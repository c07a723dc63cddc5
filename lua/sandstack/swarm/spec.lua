-- The Swarm shape of a stack's plan (internal to sandstack.swarm), as pure data. The options are
-- validated and the bodies built by the C core (core.stack_model, the same plan as
-- sandstack.docker's); this file only re-expresses each planned container create body as a
-- Swarm service spec, the sandbox and egress networks as overlays, and leaves the forwarder and
-- its publish network as they are planned (they are made on the chosen node's own engine).
--
-- Nothing is translated by guess: every Config and HostConfig field the plan may hold has a rule
-- here, and a field without one, or a value Swarm cannot express (a security option other than
-- no-new-privileges, a tmpfs option other than size and mode, a bind mount, a runtime), is a
-- refusal (compose/invalid_option naming it): a stack on Swarm never silently runs weaker than
-- the same options would on one engine.
local core = require "sandstack.core"
local E = require "sandstack.error"

local M = {}

M.ENGINE_LABEL = "io.sandstack.engine" -- on a node: the address of its own Engine API

local function refuse(option, message, extra)
  local fields = { option = option }
  for k, v in pairs(extra or {}) do fields[k] = v end
  return nil, E.new("compose", "invalid_option", option .. ": " .. message, fields)
end

local function decode(body_json)
  local v = core.json_decode(body_json)
  if type(v) ~= "table" then error("sandstack.swarm: the plan holds a body that is not JSON") end
  return v
end

local function list(v)
  local out = {}
  for i, x in ipairs(type(v) == "table" and v or {}) do out[i] = x end
  return out
end

-- A list, or nil when it is empty: the JSON encoder writes an empty table as {}, which the
-- engine would refuse where it expects a list (and an empty list means the same as none here).
local function nz(v)
  local l = list(v)
  return #l > 0 and l or nil
end

-- "size=64m,mode=1777,rw" -> TmpfsOptions{SizeBytes, Mode}; anything else is refused: Swarm's
-- tmpfs mount takes a size and a mode only (API 1.41).
local SIZE_UNITS = { [""] = 1, b = 1, k = 1024, m = 1024 ^ 2, g = 1024 ^ 3 }
local function tmpfs_options(path, text)
  local t = {}
  for part in (text or ""):gmatch("[^,]+") do
    local k, v = part:match("^%s*([%w_-]+)=?(.-)%s*$")
    if k == "size" then
      local n, unit = v:lower():match("^(%d+)([bkmg]?)$")
      if not n then return refuse("tmpfs", ("%s: size %q is not a size"):format(path, v)) end
      t.SizeBytes = math.floor(tonumber(n) * SIZE_UNITS[unit])
    elseif k == "mode" then
      if not v:match("^[0-7]+$") then return refuse("tmpfs", ("%s: mode %q is not octal"):format(path, v)) end
      t.Mode = tonumber(v, 8)
    elseif k ~= "rw" then
      return refuse("tmpfs", ("%s: the option %q has no Swarm form (a service's tmpfs takes size and mode)")
        :format(path, tostring(k)))
    end
  end
  return t
end

local function mounts(hc, volumes)
  local out = {}
  for _, m in ipairs(list(hc.Mounts)) do
    if m.Type ~= "volume" then
      return refuse("services.volumes", ("a %s mount has no place on a cluster (only named volumes)"):format(tostring(m.Type)))
    end
    local v = volumes[m.Source]
    local mount = { Type = "volume", Source = m.Source, Target = m.Target, ReadOnly = m.ReadOnly or false }
    local vo = { NoCopy = m.VolumeOptions and m.VolumeOptions.NoCopy or nil }
    if v then
      vo.Labels = v.Labels
      if v.Driver or v.DriverOpts then vo.DriverConfig = { Name = v.Driver or "local", Options = v.DriverOpts } end
    end
    if next(vo) then mount.VolumeOptions = vo end
    out[#out + 1] = mount
  end
  local paths = {}
  for p in pairs(type(hc.Tmpfs) == "table" and hc.Tmpfs or {}) do paths[#paths + 1] = p end
  table.sort(paths)
  for _, p in ipairs(paths) do
    local o, err = tmpfs_options(p, hc.Tmpfs[p])
    if not o then return nil, err end
    out[#out + 1] = { Type = "tmpfs", Target = p, TmpfsOptions = next(o) and o or nil }
  end
  return out
end

-- ExtraHosts "name:address" -> Swarm's Hosts "address name" (the /etc/hosts order).
local function hosts(extra)
  local out = {}
  for i, line in ipairs(list(extra)) do
    local name, addr = line:match("^([^:]+):(.+)$")
    out[i] = addr .. " " .. name
  end
  return #out > 0 and out or nil
end

local CONFIG_RULES = { Image = true, Entrypoint = true, Cmd = true, Env = true, User = true, WorkingDir = true,
  Labels = true, Healthcheck = true, ExposedPorts = true }
local HOST_RULES = { NanoCpus = true, Memory = true, PidsLimit = true, CapDrop = true, CapAdd = true,
  SecurityOpt = true, RestartPolicy = true, Tmpfs = true, Mounts = true, ReadonlyRootfs = true, Dns = true,
  ExtraHosts = true, NetworkMode = true }

-- One planned container as a service spec. ctx: networks (plan name -> true for overlays),
-- volumes (name -> planned body), constraints (the operator's), stop_grace (ns).
local function service_body(c, ctx)
  local body = decode(c.body_json)
  for k in pairs(body) do
    if not CONFIG_RULES[k] and k ~= "HostConfig" and k ~= "NetworkingConfig" then
      return refuse("services." .. c.service, "the container field " .. k .. " has no Swarm form")
    end
  end
  local hc = body.HostConfig or {}
  for k in pairs(hc) do
    if not HOST_RULES[k] then
      if k == "Runtime" then return refuse("runtime", "a Swarm service cannot choose an engine runtime") end
      return refuse("services." .. c.service, "the host setting " .. k .. " has no Swarm form")
    end
  end
  local nnp = false
  for _, o in ipairs(list(hc.SecurityOpt)) do
    if o == "no-new-privileges" or o == "no-new-privileges:true" or o == "no-new-privileges=true" then
      nnp = true
    else
      return refuse("security_opt", ("%q has no Swarm form (a service takes no-new-privileges only)"):format(o))
    end
  end
  local ms, err = mounts(hc, ctx.volumes)
  if not ms then return nil, err end
  local spec = {
    Image = body.Image, Command = nz(body.Entrypoint), Args = nz(body.Cmd), Env = nz(body.Env), User = body.User,
    Dir = body.WorkingDir, Labels = body.Labels, HealthCheck = body.Healthcheck,
    CapabilityDrop = nz(hc.CapDrop), CapabilityAdd = nz(hc.CapAdd), ReadOnly = hc.ReadonlyRootfs,
    Mounts = #ms > 0 and ms or nil, Hosts = hosts(hc.ExtraHosts),
    DNSConfig = nz(hc.Dns) and { Nameservers = nz(hc.Dns) } or nil,
    -- the engine's field since API 1.44; 1.41 drops it, and then the node's daemon must give it
    -- (sandstack.swarm checks which on the node before the stack is handed out)
    Privileges = nnp and { NoNewPrivileges = true } or nil,
    StopGracePeriod = ctx.stop_grace,
  }
  -- the networks: the container's own (with its aliases) and every network it is connected to
  local nets, seen = {}, {}
  local function attach(name, endpoint)
    if not name or seen[name] then return end
    if not ctx.overlays[name] then
      return refuse("network", ("the service %s would join %s, which is not one of the stack's networks"):format(c.service, name))
    end
    seen[name] = true
    nets[#nets + 1] = { Target = name, Aliases = endpoint and nz(endpoint.Aliases) or nil }
  end
  local eps = body.NetworkingConfig and body.NetworkingConfig.EndpointsConfig or {}
  local _, e1 = attach(hc.NetworkMode, eps[hc.NetworkMode])
  if e1 then return nil, e1 end
  for name, ep in pairs(eps) do
    local _, e = attach(name, ep)
    if e then return nil, e end
  end
  for _, cn in ipairs(list(c.connects)) do
    local cb = decode(cn.body_json)
    local _, e = attach(cn.network, cb.EndpointConfig)
    if e then return nil, e end
  end
  local limits = {}
  if hc.NanoCpus and hc.NanoCpus > 0 then limits.NanoCPUs = hc.NanoCpus end
  if hc.Memory and hc.Memory > 0 then limits.MemoryBytes = hc.Memory end
  if hc.PidsLimit and hc.PidsLimit > 0 then limits.Pids = hc.PidsLimit end
  return {
    Name = c.name,
    Labels = body.Labels,
    TaskTemplate = {
      ContainerSpec = spec,
      Resources = next(limits) and { Limits = limits } or nil,
      -- a task that ends is not started again, as RestartPolicy "no" on one engine; nor moved
      -- to another node when its node is lost (its session went with the node)
      RestartPolicy = { Condition = "none", MaxAttempts = 0 },
      Placement = { Constraints = nz(ctx.constraints) },
      Networks = nets,
    },
    Mode = { Replicated = { Replicas = 1 } },
    -- no virtual IP: the kernel may have no IPVS, and nothing is published through the mesh
    EndpointSpec = { Mode = "dnsrr" },
  }, nil, { nnp = nnp, cpus = limits.NanoCPUs or 0, memory = limits.MemoryBytes or 0 }
end

-- The planned bridge network as an overlay: same name and labels; no bridge options (a Swarm
-- overlay has its own isolation: an internal one has no gateway at all). The sandbox network is
-- attachable, so that the forwarder, a standalone container on the chosen node, can join it.
local function overlay(n)
  local b = decode(n.body_json)
  return { Name = b.Name, Driver = "overlay", Internal = b.Internal or false, Attachable = n.key == "sbx",
    EnableIPv6 = false, Labels = b.Labels, CheckDuplicate = true }
end

-- M.translate(plan, opts) -> shape | nil, err
-- opts: constraints (list), stop_grace (seconds, default 0).
-- shape = {
--   overlays = { {name =, key =, body =} },           -- created on the manager
--   services = { {service =, name =, body =, depends_on =, check =, check_timeout =,
--                 healthcheck =, role =} },            -- in dependency order
--   local_networks = { {name =, body_json =} },       -- on the chosen node: the publish network
--   forwarder = <the planned forwarder container>,    -- on the chosen node, as planned
--   volumes = { names }, nnp = bool, reservation = { NanoCPUs =, MemoryBytes = } }
function M.translate(plan, opts)
  opts = opts or {}
  local shape = { overlays = {}, services = {}, local_networks = {}, volumes = {}, nnp = false }
  local overlays = {}
  for _, n in ipairs(plan.networks) do
    if n.key == "pub" then
      shape.local_networks[#shape.local_networks + 1] = { name = n.name, method = n.method, path = n.path,
        body_json = n.body_json, key = n.key }
    else
      overlays[n.name] = true
      shape.overlays[#shape.overlays + 1] = { name = n.name, key = n.key, body = overlay(n) }
    end
  end
  local volumes = {}
  for _, v in ipairs(plan.volumes) do
    volumes[v.name] = decode(v.body_json)
    shape.volumes[#shape.volumes + 1] = v.name
  end
  local ctx = { overlays = overlays, volumes = volumes, constraints = opts.constraints,
    stop_grace = math.floor((opts.stop_grace or 0) * 1e9) }
  local by_service = {}
  for _, c in ipairs(plan.containers) do by_service[c.service] = c end
  local cpus, memory = 0, 0
  for _, name in ipairs(plan.order) do
    local c = by_service[name]
    if c.role == "forwarder" then
      shape.forwarder = c
      local hc = decode(c.body_json).HostConfig or {}
      cpus, memory = cpus + (hc.NanoCpus or 0), memory + (hc.Memory or 0)
    else
      local body, err, res = service_body(c, ctx)
      if not body then return nil, err end
      shape.nnp = shape.nnp or res.nnp
      cpus, memory = cpus + res.cpus, memory + res.memory
      shape.services[#shape.services + 1] = { service = c.service, name = c.name, body = body, role = c.role,
        depends_on = list(c.depends_on), check = c.check, check_timeout = c.check_timeout,
        healthcheck = c.healthcheck }
    end
  end
  -- Swarm places by reservations. The whole session lives on one node, so the first service
  -- Swarm places (the first in dependency order) reserves what the session's containers, the
  -- forwarder included, may use together; the others, pinned to that node, reserve nothing
  -- more. The node's total is the same, and Swarm's choice counts the whole session.
  local reservation = {}
  if cpus > 0 then reservation.NanoCPUs = cpus end
  if memory > 0 then reservation.MemoryBytes = memory end
  shape.reservation = reservation
  local first = shape.services[1]
  if first and next(reservation) then
    local res = first.body.TaskTemplate.Resources or {}
    res.Reservations = reservation
    first.body.TaskTemplate.Resources = res
  end
  return shape
end

-- The constraint that pins a service to the node Swarm chose for the session's first one.
function M.pin(body, node_id)
  local p = body.TaskTemplate.Placement
  p.Constraints = p.Constraints or {}
  p.Constraints[#p.Constraints + 1] = "node.id==" .. node_id
  return body
end

return M
