-- The options tables of the reference (docs/api/*.md and any docs/ page with a marker), read
-- the one way the specs that hold the code to them read them. A documented options table is
-- the markdown table right after a marker line
--   <!-- api: ID -->
-- whose first column holds the option names in backquotes (`name`, or `a`, `b` in one row).
--   local tables = require("api_tables").read()
--   tables[id] = { file =, line =, keys = { sorted names }, rows = { { names = {...}, type =, default =,
--     refused = } } }
local h = require "helpers"

local M = {}

local function cells(row)
  local out = {}
  for c in row:gmatch("|([^|]*)") do out[#out + 1] = c:match("^%s*(.-)%s*$") end
  return out
end

function M.read()
  local out = {}
  local p = assert(io.popen("find docs -name '*.md' | sort"))
  for file in p:lines() do
    local lines = {}
    for l in (assert(h.read_file(file)) .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
    for i, l in ipairs(lines) do
      local id = l:match("^<!%-%-%s*api:%s*(.-)%s*%-%->%s*$")
      if id then
        assert(not out[id], file .. ":" .. i .. ": marker " .. id .. " appears twice")
        local keys, rows, j = {}, {}, i + 1
        while lines[j] and lines[j]:match("^%s*$") do j = j + 1 end
        local n = 0
        while lines[j] and lines[j]:match("^|") do
          n = n + 1
          local c = cells(lines[j])
          if n > 2 and c[1] then -- after the header and its separator
            local row = { names = {}, type = c[2] or "", default = c[3] or "", refused = c[4] or "" }
            for name in c[1]:gmatch("`([^`]+)`") do
              keys[#keys + 1] = name
              row.names[#row.names + 1] = name
            end
            rows[#rows + 1] = row
          end
          j = j + 1
        end
        table.sort(keys)
        out[id] = { file = file, line = i, keys = keys, rows = rows }
      end
    end
  end
  p:close()
  return out
end

return M
