-- What the session methods of a stack handle share (internal to sandstack.docker): the open
-- check and the container a `service` option names. The handle's part files
-- (handle_<part>.lua) use these; handle.lua itself is still loading when they are required, so
-- this file never requires it (a handle made from a project's containers: docker/view.lua).
local E = require "sandstack.error"

local M = {}

-- Using a handle after close is a programming error, raised at the caller of the public method.
function M.check_open(self)
  if not self.eng then require("sandstack.session").closed("sandstack.docker.reconnect or open") end
end

-- The container of `service` (default: the sandbox): its name, or nil, err (kind "invalid",
-- reason "unknown_service", naming the services there are).
function M.container(self, service)
  local plan = self.plan
  service = service or plan.sandbox
  E.want(service, "string", "session", "service")
  for _, c in ipairs(plan.containers) do
    if c.service == service then return c.name or (plan.project .. "-" .. service) end
  end
  local names = {}
  for i, c in ipairs(plan.containers) do names[i] = c.service end
  return E.fail("invalid", "unknown_service", ("stack %s has no service %q (it has: %s)"):format(
    plan.project, service, table.concat(names, ", ")), { service = service })
end

-- The engine and container of a call: (eng, container) or (nil, err). A swarm session's
-- handle (it has node_eng) names its task container on its node; a stack's, its own. Call it
-- from the public method itself (a closed handle raises at that method's caller).
function M.resolve(self, service)
  if self.node_eng ~= nil or self.mgr ~= nil then
    if not self.mgr then require("sandstack.session").closed("sandstack.swarm.reconnect") end
    local id, err = self:container(service)
    if not id then return nil, err end
    return self.node_eng, id
  end
  M.check_open(self)
  local c, err = M.container(self, service)
  if not c then return nil, err end
  return self.eng, c
end

-- Every service of the stack, in start order: the engine and { {service =, name =}, ... }
-- (name: the container's name or id), or nil, err. Call it from the public method itself.
function M.services(self)
  if self.node_eng ~= nil or self.mgr ~= nil then
    if not self.mgr then require("sandstack.session").closed("sandstack.swarm.reconnect") end
    local out = {}
    for i, c in ipairs(self.plan.containers) do
      local id, err = self:container(c.service)
      if not id then return nil, err end
      out[i] = { service = c.service, name = id }
    end
    return self.node_eng, out
  end
  M.check_open(self)
  local out = {}
  for i, c in ipairs(self.plan.containers) do
    out[i] = { service = c.service, name = c.name or (self.plan.project .. "-" .. c.service) }
  end
  return self.eng, out
end

return M
