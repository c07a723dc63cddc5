-- The start of a docker stack, for the handle's methods that start one (h:fork's child) and for
-- a restore's plan: sandstack.docker's functions (docker/stacks.lua) hand it over when they load.
-- The handle's parts reach it here rather than requiring the start pipeline, which makes the
-- handles they are parts of (spec/module_graph_spec.lua holds the graph free of cycles). Every
-- handle comes from those functions, so the start is set before any handle exists.
local E = require "sandstack.error"

local M = {}

local given -- { start = fn(session_key, opts), plan = fn(session_key, opts) }

-- set{start =, plan =}: the front's start (with ttl, idle_timeout, on_expiry, from_snapshot)
-- and its plan.
function M.set(fns) given = fns end

-- get() -> { start =, plan = }
function M.get()
  if not given then E.raise("sandstack.docker: a handle was used before require \"sandstack.docker\" loaded") end
  return given
end

return M
