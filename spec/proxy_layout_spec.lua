-- sandstack-proxy's sources are laid out by layer (design/proxy.md "Files"): parse/ holds the pure
-- parsers the fuzz targets link, so nothing there may reach the connection, the routes, the
-- control socket or TLS; no layer below the core reaches back into it through a route's file.
local function lines(cmd)
  local out, p = {}, assert(io.popen(cmd))
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

local function includes(path)
  local out = {}
  for l in io.lines(path) do
    local inc = l:match('^#include "([^"]+)"')
    if inc then out[#out + 1] = inc end
  end
  return out
end

-- "<file> includes <header>" for each include of the files that refused(header) is true of
local function crossings(files, refused)
  local bad = {}
  for _, f in ipairs(files) do
    for _, inc in ipairs(includes(f)) do
      if refused(inc) then bad[#bad + 1] = f .. " includes " .. inc end
    end
  end
  return bad
end

local function route_or_control(inc) return inc:match("^proxy/route/") or inc:match("^proxy/control/") end

describe("sandstack-proxy's layout", function()
  it("has the four layers, each with sources", function()
    for _, dir in ipairs { "parse", "route", "control", "tls" } do
      assert.is_true(#lines("ls csrc/proxy/" .. dir .. "/*.c 2>/dev/null") > 0, dir)
    end
  end)

  it("keeps parse/ pure: its files include only parse/, util/ and the policy header", function()
    local bad = crossings(lines("ls csrc/proxy/parse/*.[ch]"), function(inc)
      return not (inc:match("^proxy/parse/") or inc:match("^util/") or inc == "policy/policy.h")
    end)
    assert.are.same({}, bad)
  end)

  it("keeps tls/ off the routes and the control socket", function()
    local bad = crossings(lines("ls csrc/proxy/tls/*.[ch]"), route_or_control)
    assert.are.same({}, bad)
  end)

  it("keeps the connection core off the routes: conn.c and conn.h include no route and no control file", function()
    local bad = crossings({ "csrc/proxy/conn.c", "csrc/proxy/conn.h" }, route_or_control)
    assert.are.same({}, bad)
  end)

  it("has no call cycle between its files (spec/support/call_cycle.py over the built objects)", function()
    local dir = os.getenv("SANDSTACK_TEST_MODE") == "asan" and "build-asan" or "build"
    local out = lines("python3 spec/support/call_cycle.py " .. dir .. " --max 0 2>&1; echo rc=$?")
    assert.equal("rc=0", out[#out], table.concat(out, "\n"))
    assert.is_nil(table.concat(out, "\n"):find("conn.c", 1, true))
  end)
end)
