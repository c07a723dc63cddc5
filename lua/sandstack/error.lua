-- Error objects made on the Lua side: the same shape and metatable as those the C core returns.
local core = require "sandstack.core"

local M = {}

-- M.new(kind, reason, message, fields) -> error object
function M.new(kind, reason, message, fields)
  return core.error(kind, reason, message or "", fields)
end

-- M.fail(...) -> nil, error object: for `return E.fail(...)`.
function M.fail(kind, reason, message, fields)
  return nil, core.error(kind, reason, message or "", fields)
end

M.is = core.is_error

return M
