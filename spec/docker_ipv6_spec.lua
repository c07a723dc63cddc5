-- IPv6: inhibit_ipv4 and the isolation checks cover IPv4 only, so a daemon that turns
-- IPv6 on for new networks (daemon.json default-network-opts enable_ipv6, a v6 address pool)
-- must not give the stack a v6 path to its host. The stack's networks carry EnableIPv6 = false.
-- spec/engines.t runs this on a nested Docker 28 started with IPv6 on by default and sets
-- SANDSTACK_TEST_ENGINE_IPV6=1; elsewhere it is pending (the engine gives no v6 to compare).
local sandstack = require "sandstack"
local h = require "helpers"
local core = sandstack.core
local docker = sandstack.docker

local V6 = os.getenv("SANDSTACK_TEST_ENGINE_IPV6") == "1"
local PREFIX = "sstest-stack-v6-"
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"

-- The host's global IPv6 addresses (no link-local, no loopback).
local function host_v6()
  local out = {}
  for addr in h.must("ip -6 -o addr show scope global 2>/dev/null || true"):gmatch("inet6%s+([%x:]+)/") do
    out[#out + 1] = addr
  end
  return out
end

-- The container's global IPv6 addresses, from /proc/net/if_inet6 (scope 00 = global).
local function container_v6(eng, name)
  local r = assert(eng:exec(name, { "cat", "/proc/net/if_inet6" }))
  local out = {}
  for line in r.stdout:gmatch("[^\n]+") do
    local hex, scope = line:match("^(%x+)%s+%x+%s+%x+%s+(%x+)")
    if hex and scope == "00" then out[#out + 1] = hex end
  end
  return out
end

describe("IPv6 on a daemon that enables it by default #docker", function()
  local eng
  setup(function() eng = assert(sandstack.engine {}) end)
  teardown(function() docker.reap { prefix = PREFIX } end)

  it("gives the stack's networks no IPv6, and the sandbox reaches the host over none", function()
    if not V6 then pending("needs an engine with IPv6 on by default (spec/engines.t starts one)") return end
    local srv = assert(core.tcp_listen("::", 0))
    local port = srv:port()
    local addrs = host_v6()
    assert.is_true(#addrs > 0, "the engine host has no global IPv6 address")
    -- control: a network made without saying anything gets IPv6 from this daemon, and a
    -- container on it reaches the host listener over v6
    local ctl = PREFIX .. "ctl-" .. core.random_hex(3)
    local labels = { ["io.sandstack.project"] = ctl }
    assert(eng:call("POST", "/networks/create", { Name = ctl, Labels = labels }))
    local info = assert(eng:call("GET", "/networks/" .. ctl))
    assert(eng:call("POST", "/containers/create", { Image = AGENT, Cmd = { "agent" }, Labels = labels,
      HostConfig = { NetworkMode = ctl } }, { query = { name = ctl } }))
    assert(eng:call("POST", "/containers/" .. ctl .. "/start"))
    local reached_ctl = 0
    for _, a in ipairs(addrs) do
      local r = assert(eng:exec(ctl, { "agent", "connect", a, tostring(port), "1500" }))
      if r.exit_code == 0 then reached_ctl = reached_ctl + 1 end
    end
    local name = PREFIX .. core.random_hex(3)
    local stack, err = docker.start(name, { project_name = name, agent_port = 8080, forwarder_image = SOCAT,
      pull = "never", services = {
        { name = "sandbox", image = AGENT, command = { "agent" } },
        { name = "db", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "5432" }, egress = "none" },
      } })
    local nets, sb_v6, reached = {}, {}, {}
    if stack then
      for _, n in ipairs({ "-sbx", "-pub" }) do nets[n] = assert(eng:call("GET", "/networks/" .. name .. n)) end
      sb_v6 = container_v6(eng, name .. "-sandbox")
      for _, a in ipairs(addrs) do
        local r = assert(eng:exec(name .. "-sandbox", { "agent", "connect", a, tostring(port), "1500" }))
        if r.exit_code == 0 then reached[#reached + 1] = a end
      end
      stack:destroy()
    end
    srv:close()
    assert(docker.down(ctl))
    assert.is_true(info.EnableIPv6, "control: this daemon did not turn IPv6 on for a new network")
    assert.is_true(reached_ctl > 0, "control: a container with IPv6 did not reach the host over v6")
    assert.truthy(stack, tostring(err))
    assert.same({}, reached, "the sandbox reached the host over IPv6")
    assert.same({}, sb_v6)
    assert.is_false(nets["-sbx"].EnableIPv6)
    assert.is_false(nets["-pub"].EnableIPv6)
  end)
end)
