-- The published ports of a stack (internal to sandstack.docker): the agent's forwarder and one
-- forwarder more per entry of the `ports` option (csrc/stack/ports.c), each on the host's
-- 127.0.0.1. A host port the caller chose is checked before anything is made; a bind the engine
-- still refuses at a forwarder's start is the same typed error; h:ports() reads every forwarder.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"

local M = {}

local function taken(entry, holder, outcome, cause)
  return E.new("conflict", "port_taken", ("host port %d (for %s's port %d) is already in use on 127.0.0.1 by %s; "
    .. "%s: choose another host_port, or leave it out for an ephemeral one (option ports)")
    :format(entry.host_port, entry.service, entry.port, holder, outcome or "nothing was created"),
    { host_port = entry.host_port, port = entry.port, service = entry.service, holder = holder, cause = cause })
end

local LOOPBACK = { ["127.0.0.1"] = true, ["0.0.0.0"] = true, ["::"] = true, [""] = true }

-- Is an engine at docker_host on this machine? Only then does a bind here say anything of it.
local function local_engine(plan)
  local a = core.engine_address(plan.docker_host)
  return a ~= nil and a.unix_path ~= nil
end

-- Before any create: each chosen host port is free, by the engine's running containers (r: the
-- answer to the plan's port_check) and, with an engine on this machine, by a bind of our own
-- (what holds a port outside the engine). true, or nil, conflict/port_taken.
function M.check(plan, r)
  if not plan.port_check then return true end
  if not r.ok then return nil, r.err end
  for _, p in ipairs(plan.ports or {}) do
    if p.host_port then
      for _, c in ipairs(type(r.body) == "table" and r.body or {}) do
        for _, b in ipairs(type(c) == "table" and type(c.Ports) == "table" and c.Ports or {}) do
          if b.PublicPort == p.host_port and b.Type == "tcp" and LOOPBACK[b.IP or ""] then
            local name = type(c.Names) == "table" and c.Names[1] or c.Id
            return nil, taken(p, "container " .. tostring(name):gsub("^/", ""))
          end
        end
      end
      if local_engine(plan) then
        local l = core.tcp_listen("127.0.0.1", p.host_port)
        if not l then return nil, taken(p, "a process on this machine") end
        l:close()
      end
    end
  end
  return true
end

-- A forwarder's start the engine refused because its host port is held (taken since the check,
-- or by something the check cannot see): the typed error; any other error as it is.
function M.start_error(plan, c, err)
  if not (c.port and type(err) == "table" and err.cause == "port_taken") then
    return err
  end
  for _, p in ipairs(plan.ports or {}) do
    if p.forwarder == c.service and p.host_port then
      return taken(p, "another process (taken since the check)", "what this start created is removed",
        tostring(err.message))
    end
  end
  return err
end

-- h:ports() -> { { service =, port =, host_port =, address = }, ... }: every published port,
-- the agent's first, read from the forwarders (a stopped one has no host_port); or nil, err.
function M.list(eng, containers, agent_forwarder)
  local reqs = {}
  for i, c in ipairs(containers) do
    reqs[i] = ops.request("inspect", c.name)
  end
  local res = eng:perform(reqs)
  local out = {}
  for i, c in ipairs(containers) do
    local r = res[i]
    if not r.ok then return nil, r.err end
    local info = r.status ~= 404 and type(r.body) == "table" and r.body or nil
    local labels = info and type(info.Config) == "table" and type(info.Config.Labels) == "table" and info.Config.Labels or {}
    local cmd = info and info.Config.Cmd
    local host, port = tostring(type(cmd) == "table" and cmd[2] or ""):match("^TCP:([^:]+):(%d+)$")
    if labels["io.sandstack.role"] == "forwarder" and host then
      port = tonumber(port)
      local bound = ((info.NetworkSettings or {}).Ports or {})[port .. "/tcp"]
      local hp = type(bound) == "table" and type(bound[1]) == "table" and tonumber(bound[1].HostPort) or nil
      out[#out + 1] = { service = host, port = port, host_port = hp, address = hp and ("127.0.0.1:" .. hp) or nil,
        agent = c.service == agent_forwarder or nil }
    end
  end
  table.sort(out, function(a, b)
    if (a.agent or false) ~= (b.agent or false) then return a.agent == true end
    if a.service ~= b.service then return a.service < b.service end
    return a.port < b.port
  end)
  for _, p in ipairs(out) do p.agent = nil end
  return out
end

return M
