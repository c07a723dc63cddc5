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

-- The options-table check of every public function: nil is {}, a non-table raises, and so does
-- a key not in `allowed` (API.md: an unknown option key is a programming error). Level 3 points
-- at the caller of the public function that called this.
function M.check_keys(opts, allowed, what)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(what .. ": options must be a table", 3) end
  for k in pairs(opts) do
    if not allowed[k] then error(what .. ": unknown option '" .. tostring(k) .. "'", 3) end
  end
  return opts
end

return M
