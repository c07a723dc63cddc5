-- The egress asks of a Docker pool's sessions in use (internal to sandstack.docker.pool, whose
-- Pool:_answer_asks this is; pool:serve's server, lua/sandstack/pool_class.lua, calls it on each
-- pass with on_ask): each session's asks through its proxy's control socket (pool_kit.answer_asks).
-- It requires no module that requires sandstack.docker.pool.
local kit = require "sandstack.pool_kit"

local M = {}

-- view: the pass's list (pool_survey.lua); returns the number answered.
function M.answer_asks(self, eng, view, on_ask)
  return kit.answer_asks(view.in_use or {}, function(project)
    if not self._proxy then
      local plan = require("sandstack.docker.start").plan("pool-ask", self:_plan_opts(project), { token = "x" })
      self._proxy = plan and type(plan.proxy) == "table" and plan.proxy.added and { added = true,
        service = plan.proxy.service } or false
    end
    if not self._proxy then return false end -- the pool's stacks have no proxy sandstack added
    return { eng = eng, project = project, plan = { project = project, proxy = self._proxy, containers = {} } }
  end, on_ask)
end

return M
