-- Writes the options tables of the reference (docs/api/*.md, and any page of docs/ with a marker)
-- from the validators themselves.
-- Each table follows a marker line `<!-- api: ID -->`, a header and its separator; this writes
-- the rows under them from the table the section's validator checks with
-- (spec/support/api_sections.lua reaches it): a Lua check's `sandstack.error.described` spec,
-- the start options' rows in C (csrc/stack/options.h, through core.stack_options), eng:exec's
-- (csrc/lua/engine_exec_options.h, through core.exec_options). The prose
-- around a table, and its header, stay as written. A section whose validator holds only names
-- is left as it is (spec/docs_api_spec.lua still holds its names to the code).
--
--   lua5.4 scripts/api_tables.lua           rewrite the tables that differ, and name them
--   lua5.4 scripts/api_tables.lua --check   exit 1, naming them, when any differs
-- Run from the checkout's root after a build (./build holds sandstack.core).
local M = {}

local function cell(s) return s == "" and " |" or (" " .. s .. " |") end

-- The rows of a described spec, in its order, as markdown lines; nil, why for a spec that
-- holds only names (the first name without a description, for a spec that is partly described).
function M.render(spec)
  local entries, seen, bare = {}, {}, {}
  for name, e in pairs(spec) do
    if type(e) == "table" and e.refused ~= nil then
      if not seen[e] then
        seen[e] = true
        entries[#entries + 1] = e
      end
    else
      bare[#bare + 1] = name
    end
  end
  table.sort(bare)
  if #entries == 0 then return nil, "holds names only" end
  if #bare > 0 then return nil, "has no description for " .. table.concat(bare, ", ") end
  table.sort(entries, function(a, b) return a.order < b.order end)
  local out = {}
  for i, e in ipairs(entries) do
    local names = {}
    for j, n in ipairs(e.names) do names[j] = "`" .. n .. "`" end
    out[i] = "|" .. cell(table.concat(names, ", ")) .. cell(e.type or "") .. cell(e.default or "")
      .. cell(e.refused)
  end
  return out
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- { { file =, text = (as it is), want = (as the generator writes it), ids = { section ids it
-- rewrote } } } for every page of docs/ (or the files given); problems: { "file:line: id:
-- why" } for a section that is partly described, or a marker `sections` lacks.
function M.pages(sections, files)
  if not files then
    files = {}
    local p = assert(io.popen("find docs -name '*.md' | sort"))
    for file in p:lines() do files[#files + 1] = file end
    p:close()
  end
  local out, problems = {}, {}
  for _, file in ipairs(files) do
    local text = read(file)
    local lines = {}
    for l in text:gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
    local want, ids, i = {}, {}, 1
    while i <= #lines do
      local l = lines[i]
      want[#want + 1] = l
      i = i + 1
      local id = l:match("^<!%-%-%s*api:%s*(.-)%s*%-%->%s*$")
      local rows, why
      if id and sections[id] then
        rows, why = M.render(sections[id]())
      elseif id then
        why = "no line in spec/support/api_sections.lua"
      end
      if why and why ~= "holds names only" then problems[#problems + 1] = ("%s:%d: %s: %s"):format(file, i - 1, id, why) end
      if rows then
        while lines[i] and lines[i]:match("^%s*$") do want[#want + 1] = lines[i]; i = i + 1 end
        for _ = 1, 2 do -- the header and its separator
          if lines[i] and lines[i]:match("^|") then want[#want + 1] = lines[i]; i = i + 1 end
        end
        while lines[i] and lines[i]:match("^|") do i = i + 1 end
        for _, r in ipairs(rows) do want[#want + 1] = r end
        ids[#ids + 1] = id
      end
    end
    out[#out + 1] = { file = file, text = text, want = table.concat(want, "\n") .. "\n", ids = ids }
  end
  return out, problems
end

if arg and arg[0] and arg[0]:match("api_tables%.lua$") then
  package.path = "./lua/?.lua;./lua/?/init.lua;./spec/support/?.lua;" .. package.path
  package.cpath = "./build/?.so;" .. package.cpath
  local pages, problems = M.pages((require "api_sections")) -- (...): require's second value left out
  for _, p in ipairs(problems) do io.stderr:write(p, "\n") end
  local check, differ = arg[1] == "--check", 0
  for _, page in ipairs(pages) do
    if page.want ~= page.text then
      differ = differ + 1
      print((check and "differs: " or "wrote: ") .. page.file)
      if not check then
        local f = assert(io.open(page.file, "wb"))
        f:write(page.want)
        f:close()
      end
    end
  end
  os.exit((#problems > 0 or (check and differ > 0)) and 1 or 0)
end

return M
