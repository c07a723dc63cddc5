-- What the session methods of a stack handle share (internal to sandstack.docker): the open
-- check and the container a `service` option names. The handle's part files
-- (handle_<part>.lua) use these; handle.lua itself is still loading when they are required.
local E = require "sandstack.error"

local M = {}

-- Using a handle after close is a programming error; level as error()'s, seen from the caller
-- of the public method.
function M.check_open(self, level)
  if not self.eng then error("the stack handle is closed", (level or 2) + 1) end
end

-- The container of `service` (default: the sandbox): its name, or nil, err (kind "invalid",
-- reason "unknown_service", naming the services there are).
function M.container(self, service)
  local plan = self.plan
  service = service or plan.sandbox
  if type(service) ~= "string" then error("option 'service' must be a string", 3) end
  for _, c in ipairs(plan.containers) do
    if c.service == service then return c.name or (plan.project .. "-" .. service) end
  end
  local names = {}
  for i, c in ipairs(plan.containers) do names[i] = c.service end
  return E.fail("invalid", "unknown_service", ("stack %s has no service %q (it has: %s)"):format(
    plan.project, service, table.concat(names, ", ")), { service = service })
end

-- Every service of the stack, in start order: { {service =, name =}, ... }.
function M.services(self)
  local out = {}
  for i, c in ipairs(self.plan.containers) do
    out[i] = { service = c.service, name = c.name or (self.plan.project .. "-" .. c.service) }
  end
  return out
end

return M
