-- The C unit tests (csrc/test, registered with ctest in every build but the fuzz one:
-- docs/architecture.md), each run as one `it` in this mode's build directory, the one
-- package.cpath names: build/, build-luajit/, or build-asan/, where they run under ASan and
-- UBSan with leak checks (CMakeLists.txt sets the options, so any report fails the test).
-- No engine is needed.
local h = require "helpers"

local dir = assert(package.cpath:match("^([^;]*)/%?%.so"), "no build directory in package.cpath")

-- The names ctest has registered in dir, and its listing.
local function registered()
  local out, ok = h.sh("ctest --test-dir " .. h.q(dir) .. " -N")
  local names = {}
  if ok then
    for name in out:gmatch("Test%s+#%d+: (%S+)") do names[#names + 1] = name end
  end
  return names, out
end

describe("C unit tests", function()
  local names, listing = registered()

  it("are registered in " .. dir .. ", one for each csrc/test/test_<concept>.c", function()
    assert(#names > 0, "no C unit test is registered in " .. dir .. " (configure and build it: cmake -S . -B "
      .. dir .. "):\n" .. listing)
    local files = {}
    for concept in h.must("ls csrc/test"):gmatch("test_([%w_]+)%.c") do files[#files + 1] = concept end
    local sorted = {}
    for i, name in ipairs(names) do sorted[i] = name end
    table.sort(files)
    table.sort(sorted)
    assert.same(files, sorted)
  end)

  for _, name in ipairs(names) do
    it(name, function()
      local out, ok = h.sh(("ctest --test-dir %s -R %s --output-on-failure"):format(h.q(dir), h.q("^" .. name .. "$")))
      assert(ok, "the C unit test " .. name .. " failed in " .. dir .. ":\n" .. out)
      assert(out:find("100%% tests passed, 0 tests failed out of 1"), "not exactly one test ran for " .. name .. ":\n" .. out)
    end)
  end
end)
