-- h:ports() on a stack handle (docker/ports.lua): every port published on 127.0.0.1, read from
-- the forwarders, so a restart's new ephemeral ports are seen.
local ports = require "sandstack.docker.ports"
local target = require "sandstack.docker.target"

local M = { methods = {} }

function M.methods.ports(self)
  local eng, services = target.services(self)
  if not eng then return nil, services end
  return ports.list(eng, services, self.plan.forwarder)
end

return M
