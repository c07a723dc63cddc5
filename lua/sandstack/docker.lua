-- sandstack.docker: per-session stacks (spec 000). Validation and planning are the C core's
-- (core.stack_model: pure data); the start pipeline (docker/start.lua) runs its plan against an
-- engine, the handle (docker/handle.lua) drives a running stack, and the inventory
-- (docker/inventory.lua) reads and removes what sandstack owns on an engine by label.
local stacks = require "sandstack.docker.stacks"

local M = {}

-- start, wake, open, reconnect, plan, list, down, reap, snapshots...: docker/stacks.lua
for name, value in pairs(stacks) do M[name] = value end

-- sandstack.docker.pool{...}: a warm pool of ready stacks (lua/sandstack/docker/pool.lua).
function M.pool(opts)
  return require("sandstack.docker.pool").new(opts)
end

return M
