-- No Lua file of the project reads a global it never defines or writes one by accident: a
-- name that a merge or a rename left behind (a spec's `wait_for` after the shared h.wait_for
-- replaced it, `top` after the harness took it) is nil at run time, and fails only when its
-- test runs, after minutes of set-up. luac's listing names every global a chunk reads or
-- writes (GETTABUP/SETTABUP on _ENV); this compares them with what the runtime provides.
local h = require "helpers"

local STANDARD = {}
for name in ([[assert collectgarbage dofile error getmetatable ipairs load loadfile next pairs pcall print
  rawequal rawget rawlen rawset require select setmetatable tonumber tostring type xpcall _G _VERSION
  coroutine debug io math os package string table utf8 arg unpack]]):gmatch("%S+") do
  STANDARD[name] = true
end
-- busted's environment (spec files and their support modules)
local BUSTED = {}
for name in ([[describe it pending setup teardown lazy_setup lazy_teardown strict_setup strict_teardown
  before_each after_each finally insulate expose spy stub mock randomize context spec test]]):gmatch("%S+") do
  BUSTED[name] = true
end
-- OpenResty's and LuaJIT's, read only where they exist (guarded by the code that reads them)
local RUNTIME = { ngx = true, jit = true, bit = true }

-- { [file] = { {op, name, line}, ... } } for every global each Lua file under `dirs` reads or
-- writes: one shell for all of them (a luac per file through popen costs seconds on a loaded
-- machine)
local function globals(dirs)
  local listing = h.must("find " .. dirs .. " -name '*.lua' -type f | sort | "
    .. "while read -r f; do echo \"@@file $f\"; luac5.4 -p -l -l \"$f\" || echo \"@@bad $f\"; done")
  local by_file, current = {}, nil
  for line in listing:gmatch("[^\n]+") do
    local file = line:match("^@@file (.+)$")
    if file then
      current = {}
      by_file[file] = current
    else
      assert(not line:match("^@@bad "), "luac could not read " .. line)
      local n, op, name = line:match("%[(%d+)%]%s+([GS]ETTABUP)[^\n]-_ENV \"([%w_]+)\"")
      if n then current[#current + 1] = { op = op, name = name, line = tonumber(n) } end
    end
  end
  return by_file
end

describe("the project's Lua files", function()
  it("write no global and read only the runtime's", function()
    local bad, files = {}, {}
    local found = globals("lua bin bench examples spec")
    for f in pairs(found) do files[#files + 1] = f end
    table.sort(files)
    assert(#files > 100, "too few Lua files found: " .. #files)
    for _, f in ipairs(files) do
      local in_spec = f:find("^spec/") ~= nil
      for _, g in ipairs(found[f]) do
        local known = STANDARD[g.name] or RUNTIME[g.name] or (in_spec and BUSTED[g.name])
        if g.op == "SETTABUP" or not known then
          bad[#bad + 1] = ("%s:%d: %s the global %s"):format(f, g.line, g.op == "SETTABUP" and "writes" or "reads", g.name)
        end
      end
    end
    assert(#bad == 0, "globals no runtime defines (a local declaration missing?):\n" .. table.concat(bad, "\n"))
  end)

  it("(control) the check sees a global a chunk reads and one it writes", function()
    local dir = h.must("mktemp -d"):gsub("%s+$", "")
    h.write_file(dir .. "/probe.lua", "local x = wait_for(1)\n_, y = x, 2\n")
    local seen = {}
    for _, g in ipairs(globals(dir)[dir .. "/probe.lua"]) do seen[#seen + 1] = g.op .. " " .. g.name end
    h.sh("rm -rf " .. h.q(dir))
    table.sort(seen)
    assert.same({ "GETTABUP wait_for", "SETTABUP _", "SETTABUP y" }, seen)
  end)
end)
