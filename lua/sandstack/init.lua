-- require "sandstack": the C core plus the Lua modules, loaded on first use so that a gateway
-- that only needs one backend never loads the other.
local core = require "sandstack.core"

local M = { VERSION = core.VERSION, core = core }

local lazy = {
  docker = "sandstack.docker",
  swarm = "sandstack.swarm",
  sbx = "sandstack.sbx",
  policy = "sandstack.policy",
  store = "sandstack.store",
  conformance = "sandstack.conformance",
}

-- sandstack.engine{...} is a constructor; the module behind it loads on the first call.
function M.engine(opts)
  return require("sandstack.engine").new(opts)
end

return setmetatable(M, {
  __index = function(t, k)
    local name = lazy[k]
    if not name then return nil end
    local mod = require(name)
    rawset(t, k, mod)
    return mod
  end,
})
