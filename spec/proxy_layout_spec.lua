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

describe("sandstack-proxy's layout", function()
  it("has the four layers, each with sources", function()
    for _, dir in ipairs { "parse", "route", "control", "tls" } do
      assert.is_true(#lines("ls csrc/proxy/" .. dir .. "/*.c 2>/dev/null") > 0, dir)
    end
  end)

  it("keeps parse/ pure: its files include only parse/, util/ and the policy header", function()
    local bad = {}
    for _, f in ipairs(lines("ls csrc/proxy/parse/*.[ch]")) do
      for _, inc in ipairs(includes(f)) do
        if not (inc:match("^proxy/parse/") or inc:match("^util/") or inc == "policy/policy.h") then
          bad[#bad + 1] = f .. " includes " .. inc
        end
      end
    end
    assert.are.same({}, bad)
  end)

  it("keeps tls/ off the routes and the control socket", function()
    local bad = {}
    for _, f in ipairs(lines("ls csrc/proxy/tls/*.[ch]")) do
      for _, inc in ipairs(includes(f)) do
        if inc:match("^proxy/route/") or inc:match("^proxy/control/") then bad[#bad + 1] = f .. " includes " .. inc end
      end
    end
    assert.are.same({}, bad)
  end)
end)
