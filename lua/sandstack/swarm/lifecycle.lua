-- A swarm session over time (internal to sandstack.swarm; mixed into its handle): pause and
-- resume freeze and thaw the session's task containers on their node's engine (the manager
-- keeps the tasks running: a paused container is still a running task). Hibernate, snapshots
-- and expiry are not offered on a swarm: a stopped task is replaced by the manager, so the
-- session could not come back on its node with its files.
local core = require "sandstack.core"
local batch = require "sandstack.docker.batch"
local session = require "sandstack.session"

local M = {}

local function each(self, action)
  local ids = {}
  for _, c in ipairs(self.plan.containers) do
    local id, err = self:container(c.service)
    if not id then return nil, err end
    ids[#ids + 1] = id
  end
  local r = batch.run(self.node_eng, core.session_requests(action, ids), 60)
  for _, x in ipairs(r) do
    -- 409: already in that state (the engine says so), which is where the call wants it
    if not x.ok and x.status ~= 409 then return nil, x.err end
  end
  return true
end

function M.mix(Stack)
  function Stack:pause() return each(self, "pause") end
  function Stack:resume() return each(self, "unpause") end
  local why = "a swarm task that stops is replaced by the manager, so the session cannot keep its files over a "
    .. "stop; pause and resume are offered, and destroy"
  for _, m in ipairs { "hibernate", "wake", "snapshot", "fork", "changes", "set_timeout", "expires" } do
    Stack[m] = session.stub("swarm", m, why)
  end
end

return M
