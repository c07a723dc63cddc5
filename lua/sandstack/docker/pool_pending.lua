-- A pooled stack handed to its session before the engine answered its claim (internal to
-- sandstack.docker.pool). The rename of the ready mark and the session's record are in flight; the
-- handle completes them before the first method the session calls runs (close included), or when
-- the pool closes. A claim that failed there (the rename lost to another host's claimant or a reap,
-- the record refused, no answer) has taken the stack down already; that method and every later one
-- but close return the error, so the session learns it on its next call, never silently.
local M = {}

-- Wraps `stack`: finish() -> true, or nil, err, run once. Returns the completion, callable by the
-- pool too (the same once-only result).
function M.defer(stack, finish)
  local mt = getmetatable(stack)
  local class = mt.__index
  local state = {}
  local function complete()
    if state.ok == nil then
      local ok, err = finish()
      state.ok, state.err = ok == true, err
      if state.ok then setmetatable(stack, mt) end
    end
    return state.ok, state.err
  end
  local pending = { __gc = mt.__gc } -- the collector only closes: no engine round in a finalizer
  pending.__close = function(s, e)
    complete()
    if mt.__close then return mt.__close(s, e) end
  end
  pending.__index = function(_, k)
    local f = class[k]
    if type(f) ~= "function" then return f end
    return function(...)
      local ok, err = complete()
      if ok or k == "close" then return f(...) end
      return nil, err
    end
  end
  setmetatable(stack, pending)
  return complete
end

return M
