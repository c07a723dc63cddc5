-- Error objects made on the Lua side: the same shape and metatable as those the C core returns,
-- and the one convention of the public API (docs/api/README.md, "Conventions"):
--   - a programming error (a wrong Lua type for an argument or an option, an options table that
--     is not a table, an unknown option key, a closed handle) raises a one-line message that
--     starts with the file:line of the CALLER: M.raise, M.want, M.check_keys;
--   - anything else is a runtime error: nil and an error object (kind, reason, message), a
--     refused value of the right type included: M.refuse.
local core = require "sandstack.core"

local M = {}

-- The caller of a public function is the first Lua frame outside this directory (csrc/lua/where.c),
-- however deep inside the library a check runs: no level is counted anywhere.
local dir = debug.getinfo(1, "S").source:match("^(@.*[/\\])error%.lua$")
if dir then core.set_library_dir(dir) end

-- M.new(kind, reason, message, fields) -> error object
function M.new(kind, reason, message, fields)
  return core.error(kind, reason, message or "", fields)
end

-- M.fail(...) -> nil, error object: for `return E.fail(...)`.
function M.fail(kind, reason, message, fields)
  return nil, core.error(kind, reason, message or "", fields)
end

M.is = core.is_error

-- Whether e is an interruption: the standalone interpreter's answer to Ctrl-C (a raise of
-- "interrupted!" from wherever Lua code was running), or the error object a start raises after
-- it rolled back on one (kind "interrupted"). Such a raise is passed on, never swallowed.
function M.interrupted(e)
  if type(e) == "string" then return e:match("interrupted!$") ~= nil end
  return M.is(e) and e.kind == "interrupted"
end

-- "file:line: " of the caller outside the library.
M.where = core.where

-- M.raise(message): a programming error, raised at the caller's line.
function M.raise(message)
  error(core.where() .. message, 0)
end

local function type_ok(v, types)
  local t = type(v)
  for want in types:gmatch("[^|]+") do
    if want == t or (want == "integer" and t == "number") then return true end
  end
  return false
end

-- M.want(v, types, what, name[, wanted]) -> v: raises "what: option 'name' must be WANTED, got
-- <type>" unless v is nil or of one of `types` ("number", "string|table", ...). name may also
-- be an argument's ("argument 'session_key'"): then it is given whole, with a space.
local function label(name) return name:find(" ", 1, true) and name or ("option '" .. name .. "'") end

function M.want(v, types, what, name, wanted)
  if v == nil or type_ok(v, types) then return v end
  wanted = wanted or ("a " .. types:gsub("|", " or a "))
  M.raise(("%s: %s must be %s, got %s"):format(what, label(name), wanted, type(v)))
end

-- M.refuse(what, name, message[, kind]) -> nil, err: a value of the right type that is refused
-- (kind "invalid", or the caller's such as "compose"; reason "invalid_option"; `option` = name,
-- or an argument's name given whole as in M.want).
function M.refuse(what, name, message, kind)
  return nil, core.error(kind or "invalid", "invalid_option", what .. ": " .. label(name) .. " " .. message,
    { option = name:match("'(.-)'") or name })
end

-- M.options(opts, spec, what[, kind]) -> opts ({} for nil) | nil, err: an options table checked
-- whole against spec, name -> the option's type ("string", "boolean", "string|table", ...), or
-- a number's bounds { "number", above =, min =, max =, whole =, says = "what it must be" }. An
-- unknown key or a wrong type raises at the caller; a number out of its bounds is nil, err
-- (kind, default "invalid"; reason "invalid_option"). spec doubles as the set of allowed keys.
function M.options(opts, spec, what, kind)
  opts = M.check_keys(opts, spec, what)
  for name, s in pairs(spec) do
    local v = opts[name]
    local bounds = type(s) == "table" and s or nil
    local types = bounds and bounds[1] or s
    if v ~= nil and type(types) == "string" then
      M.want(v, types, what, name, bounds and bounds.wanted)
      if bounds and type(v) == "number" and (v ~= v or (bounds.above and v <= bounds.above)
        or (bounds.min and v < bounds.min) or (bounds.max and v > bounds.max)
        or (bounds.whole and v ~= math.floor(v))) then
        return M.refuse(what, name, "must be " .. bounds.says, kind)
      end
    end
  end
  return opts
end

-- The bounds every table of the reference uses.
M.SECONDS = { "number", above = 0, says = "a number of seconds above 0", wanted = "a number of seconds" }
M.SECONDS0 = { "number", min = 0, says = "a number of seconds >= 0", wanted = "a number of seconds" }
M.BYTES = { "number", min = 1, whole = true, says = "a positive whole number of bytes", wanted = "a number of bytes" }
M.COUNT0 = { "number", min = 0, whole = true, says = "a whole number >= 0", wanted = "a whole number" }
M.COUNT1 = { "number", min = 1, whole = true, says = "a whole number >= 1", wanted = "a whole number" }

-- M.described(rows) -> spec: an options spec (for M.options, or M.check_keys alone) that is also
-- the reference's table of those options: scripts/api_tables.lua writes the table into docs/
-- from the very spec the check reads, so neither can change alone. rows, in the table's order:
--   { name or { names documented together }, check, type = "...", default = "...", refused = "..." }
-- check is what M.options takes (a type string, or bounds such as M.SECONDS), or nil for a spec
-- only M.check_keys reads. Every name maps to its row: the check's fields, the three cells,
-- `names` and `order`.
function M.described(rows)
  local spec = {}
  for i, r in ipairs(rows) do
    local entry = {}
    if type(r[2]) == "table" then
      for k, v in pairs(r[2]) do entry[k] = v end
    else
      entry[1] = r[2]
    end
    entry.names = type(r[1]) == "table" and r[1] or { r[1] }
    entry.type, entry.default, entry.refused, entry.order = r.type, r.default, r.refused, i
    for _, name in ipairs(entry.names) do spec[name] = entry end
  end
  return spec
end

-- The options-table check of every public function: nil is {}, a non-table raises, and so does
-- a key not in `allowed` (a set: { name = true }), at the caller (API.md: an unknown option key
-- is a programming error). One checker for the whole module: this is the C core's, whose walk
-- and wording the binding's own checks share (csrc/lua/helpers.c, csrc/util/keys.h). Call it
-- once per table: internal paths pass checked tables on unchecked.
M.check_keys = core.check_keys

return M
