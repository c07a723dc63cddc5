-- Small files, one concept each: no Lua file under lua/sandstack is over MAX_LINES lines. A file
-- that grows past it is split along its concepts (docs/architecture.md names the parts).
local MAX_LINES = 400

-- Files over the limit allowed for now: none.
local KNOWN = {}

-- The lines of a file, as wc -l counts them (a last line without a newline counts too).
local function line_count(path)
  local n = 0
  for _ in io.lines(path) do n = n + 1 end
  return n
end

-- The Lua files below dir over max lines, but those in known: { "path (n lines)", ... }, sorted.
local function oversized(dir, max, known)
  local out = {}
  local p = assert(io.popen("find " .. dir .. " -name '*.lua' -type f | sort"))
  for path in p:lines() do
    local n = line_count(path)
    if n > max and not known[path] then out[#out + 1] = ("%s (%d lines)"):format(path, n) end
  end
  p:close()
  return out
end

describe("the size of sandstack's Lua modules", function()
  it("has no file under lua/sandstack over " .. MAX_LINES .. " lines", function()
    local over = oversized("lua/sandstack", MAX_LINES, KNOWN)
    assert.is_true(#over == 0, ("over %d lines (split along their concepts): %s"):format(MAX_LINES,
      table.concat(over, ", ")))
  end)

  it("names every file over the limit, and only those", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir .. "/sub"))
    local function write(name, lines)
      local f = assert(io.open(dir .. "/" .. name, "w"))
      f:write(string.rep("x = 1\n", lines))
      f:close()
    end
    write("at_limit.lua", MAX_LINES)
    write("sub/over.lua", MAX_LINES + 1)
    write("known.lua", MAX_LINES + 50)
    write("not_lua.txt", MAX_LINES + 1)
    local over = oversized(dir, MAX_LINES, { [dir .. "/known.lua"] = true })
    os.execute("rm -rf " .. dir)
    assert.same({ ("%s/sub/over.lua (%d lines)"):format(dir, MAX_LINES + 1) }, over)
  end)
end)
