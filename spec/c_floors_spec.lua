-- The C floors keep one direction inside a floor: of two .c files in the same csrc/ directory,
-- at most one calls the other. Where both did, neither owned the concept between them; the fix is
-- to move the function to its owner (or a small file both call) or, for a callback, to hand the
-- owner a function pointer (docs/architecture.md).
--
-- How it is found: `nm` reads the objects of this mode's build (build/, build-luajit/ or
-- build-asan/, the directory package.cpath names). For each object, mapped back to its source
-- (CMakeFiles/<target>.dir/csrc/<dir>/<file>.c.o), the external functions it defines (T) and the
-- symbols it leaves undefined (U) give the calls exactly: file A calls file B when A leaves
-- undefined a function B defines. Two files of one directory each calling the other are a pair,
-- and the spec fails naming them and the functions that cross. A source built into several
-- targets (csrc/deadline/ is in the core and in sandstack-init) counts once: its symbols are the
-- same. No engine is needed.
local h = require "helpers"

local build = assert(package.cpath:match("^([^;]*)/%?%.so"), "no build directory in package.cpath")

-- { [source] = { defined = { [sym] = true }, undefined = { [sym] = true } } } for every object
-- of a csrc/ source under root (<target>.dir/csrc/...: not the test modules' spec/support/csrc/):
-- source is the path from csrc/ on, without ".o".
local function symbols(root)
  local out = h.must("find " .. h.q(root) .. " -path '*/csrc/*' -name '*.c.o' -print0 | xargs -0 -r nm -P -A")
  local files = {}
  for line in out:gmatch("[^\n]+") do
    -- nm -P -A: "<object>: <symbol> <type> [<value> <size>]"
    local object, sym, kind = line:match("^(%S+%.c%.o):? (%S+) (%a)")
    if object then
      local source = object:match("%.dir/(csrc/.*%.c)%.o$")
      if source then
        local f = files[source] or { defined = {}, undefined = {} }
        files[source] = f
        if kind == "T" then f.defined[sym] = true elseif kind == "U" then f.undefined[sym] = true end
      end
    end
  end
  return files
end

local function dir_of(source) return source:match("^(.*)/[^/]+$") end

-- The functions of b that a calls, sorted.
local function calls(a, b)
  local out = {}
  for sym in pairs(a.undefined) do
    if b.defined[sym] then out[#out + 1] = sym end
  end
  table.sort(out)
  return out
end

-- "a (f, g) <-> b (h)" for each pair of files of one directory calling each other, sorted.
local function pairs_calling_each_other(files)
  local names = h.sorted_keys(files)
  local found = {}
  for i, a in ipairs(names) do
    for j = i + 1, #names do
      local b = names[j]
      if dir_of(a) == dir_of(b) then
        local ab, ba = calls(files[a], files[b]), calls(files[b], files[a])
        if #ab > 0 and #ba > 0 then
          found[#found + 1] = ("%s (calls %s) <-> %s (calls %s)"):format(a, table.concat(ab, ", "), b,
            table.concat(ba, ", "))
        end
      end
    end
  end
  return found
end

describe("the C floors", function()
  it("find a pair: two files of one directory calling each other are named with what crosses", function()
    -- The finder itself, on two small objects built here, so the check cannot pass by finding nothing.
    local dir = h.must("mktemp -d /tmp/sstest-cfloors.XXXXXX"):gsub("%s+$", "")
    finally(function() h.sh("rm -rf " .. h.q(dir)) end)
    local pair = dir .. "/fixture.dir/csrc/pair" -- laid out as CMake lays out a target's objects
    h.must("mkdir -p " .. h.q(pair))
    h.write_file(pair .. "/a.c", "int b_one(void);\nint a_one(void) { return 1; }\nint a_two(void) { return b_one(); }\n")
    h.write_file(pair .. "/b.c", "int a_one(void);\nint b_one(void) { return a_one(); }\n")
    h.write_file(pair .. "/c.c", "int a_two(void);\nint c_one(void) { return a_two(); }\n")
    for _, f in ipairs { "a", "b", "c" } do
      h.must(("cc -c -o %s %s"):format(h.q(pair .. "/" .. f .. ".c.o"), h.q(pair .. "/" .. f .. ".c")))
    end
    assert.are.same({ "csrc/pair/a.c (calls b_one) <-> csrc/pair/b.c (calls a_one)" },
      pairs_calling_each_other(symbols(dir)))
  end)

  it("keep one direction: no two .c files of one csrc/ directory call each other (" .. build .. ")", function()
    local files = symbols(build .. "/CMakeFiles")
    local n = 0
    for _ in pairs(files) do n = n + 1 end
    assert(n > 100, "only " .. n .. " objects under " .. build .. "/CMakeFiles: build it first (cmake --build " .. build .. ")")
    local found = pairs_calling_each_other(files)
    assert(#found == 0, "pairs of C files calling each other (give the concept one owner, or hand the owner a"
      .. " function pointer):\n  " .. table.concat(found, "\n  "))
  end)
end)
