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
-- a key not in `allowed` (a set: { name = true }), at the caller of the public function that
-- called this (API.md: an unknown option key is a programming error). One checker for the whole
-- module: this is the C core's, whose walk and wording the binding's own checks share
-- (csrc/lua/helpers.c, csrc/util/keys.h). Call it directly from the public function (the level
-- counts on it) and once per table: internal paths pass checked tables on unchecked.
M.check_keys = core.check_keys

return M
