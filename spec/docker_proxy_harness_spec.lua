-- The live proxy specs' outside (spec/support/docker_proxy_harness.lua, S.outside_up): a /28
-- that another interface already routes is never shared. A run killed before its teardown
-- leaves its namespace, veth and stand-ins behind; a later run of the same spec on the same /28
-- then reached the old stand-ins, which answer with the old run's certificates ("unable to get
-- local issuer certificate" from the sandbox's curl and the proxy's upstream check alike). The
-- leftovers here are veths of this test (a namespace-less stand-in for one: the kernel's prefix
-- route of an address, as the harness used to make them), removed at the end.
local h = require "helpers"
local dh = require "docker_proxy_harness"
local core = require("sandstack").core

-- the device the host routes addr through
local function route_dev(addr)
  return (h.must("ip -o route get " .. addr):match(" dev (%S+)"))
end

-- the first address of the /28 holding addr, as the harness's base() gives it
local function first_of(addr)
  local last = tonumber(addr:match("%.(%d+)$"))
  return last - last % 16
end

describe("the proxy specs' outside namespace", function()
  local skip_why
  if h.must("id -u"):gsub("%s", "") ~= "0" then skip_why = "needs root (a network namespace)" end
  if not skip_why and not select(2, h.sh("command -v ip")) then skip_why = "needs ip" end
  local made = {}

  -- a stack harness whose spec prefers the /28 at first, its outside up with one address
  local function outside(first)
    local S = dh.stack("hx", "shx", function() return first end)
    made[#made + 1] = S
    S.outside_up { 2 }
    return S
  end

  after_each(function()
    for _, S in ipairs(made) do S.outside_down() end
    made = {}
  end)

  it("takes another /28 while a concurrent or left-behind run's outside routes the preferred one", function()
    if skip_why then return pending(skip_why) end
    local A = outside(48 + 16 * math.random(0, 11))
    local pref = first_of(A.addr(2))
    assert.equal(A.HOST_IF, route_dev(A.addr(2)))
    local B = outside(pref)
    assert.not_equal(pref, first_of(B.addr(2)), "B shares A's /28")
    assert.equal(B.HOST_IF, route_dev(B.addr(2)))
    assert.equal(A.HOST_IF, route_dev(A.addr(2))) -- A's stand-ins are still A's
  end)

  it("takes another /28 while a leftover holds the preferred one by its kernel prefix route", function()
    if skip_why then return pending(skip_why) end
    local A = outside(48 + 16 * math.random(0, 11))
    local pref = first_of(A.addr(2))
    A.outside_down() -- free it again, and leave a leftover of the old kind on it
    local left = "shxl" .. core.random_hex(3)
    h.must(("ip link add %s type veth peer name %sp && ip addr add 203.0.113.%d/28 dev %s && ip link set %s up")
      :format(left, left, pref + 1, left, left))
    made[#made + 1] = { outside_down = function() h.sh("ip link del " .. left) end }
    local B = outside(pref)
    assert.not_equal(pref, first_of(B.addr(2)), "B shares the leftover's /28")
    assert.equal(B.HOST_IF, route_dev(B.addr(2)))
  end)

  it("routes the preferred /28 to its own veth when it is free, and frees it at the end", function()
    if skip_why then return pending(skip_why) end
    local A = outside(48 + 16 * math.random(0, 11))
    local pref = first_of(A.addr(2))
    A.outside_down()
    local B = outside(pref)
    assert.equal(pref, first_of(B.addr(2)))
    assert.equal(B.HOST_IF, route_dev(B.addr(2)))
    B.outside_down()
    assert.falsy(h.must(("ip -o route show 203.0.113.%d/28"):format(pref)):find(B.HOST_IF, 1, true))
  end)
end)
