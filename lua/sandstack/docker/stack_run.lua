-- A running stack's services started again, and the port its handle reaches the agent on
-- (internal to sandstack.docker): the handle's start and restart (docker/handle.lua) and a
-- wake from checkpoints (docker/lifecycle.lua) share them, and neither of those files requires
-- the other.
local A = require "sandstack.docker.apply"
local target = require "sandstack.docker.target"

local M = {}

-- The run context of the apply steps for a handle (docker/apply.lua).
function M.run_of(self)
  target.check_open(self)
  return { eng = self.eng, plan = self.plan, t0 = A.now(), on_event = self.hooks.on_event,
    req_adapter = self.hooks.req_adapter, created = { networks = {}, volumes = {}, containers = {} } }
end

-- The forwarder's published port, or nil while the stack is stopped.
function M.set_port(self, port)
  self.port = port
  self.endpoint = port and ("http://127.0.0.1:%d"):format(port) or nil
end

-- containers: the plan's, or a copy whose start requests differ (a wake from checkpoints). The
-- sandbox's init gets its program and deadline again first (docker/expiry.lua's boot).
function M.start(self, containers)
  local run = M.run_of(self)
  local ok, err = require("sandstack.docker.expiry").boot(self.eng, self.project)
  if not ok then return nil, err end
  ok, err = A.start_services(run, containers or self.plan.containers)
  if not ok then return nil, err end
  local port; port, err = A.read_port(run)
  if not port then return nil, err end
  M.set_port(self, port)
  ok, err = A.wait_ready(run, port)
  if not ok then return nil, err end
  return true
end

return M
