-- The methods of a session over time that a backend cannot offer: each returns nil and a typed
-- error (kind "unsupported", reason the method's name) saying why and what to use instead, so
-- every backend's handle has the same methods.
local E = require "sandstack.error"

local M = {}

-- The methods of a session over time (docker/session_methods.lua has them all).
M.METHODS = { "pause", "resume", "hibernate", "wake", "snapshot", "fork", "changes", "set_timeout", "expires" }

-- Adds to methods every method of M.METHODS it lacks; why[name] (or why.default) says why.
function M.fill(methods, backend, why)
  for _, name in ipairs(M.METHODS) do
    if methods[name] == nil then
      local reason = why[name] or why.default
      methods[name] = function()
        return E.fail("unsupported", name, ("%s: %s on %s: %s"):format(name, "not offered", backend, reason),
          { backend = backend, method = name })
      end
    end
  end
end

return M
