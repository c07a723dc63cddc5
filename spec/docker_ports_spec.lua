-- More than one port published on 127.0.0.1 (the start's `ports`), each through a forwarder of
-- its own, with a host port the caller may choose (#docker): h:ports() lists them, each reaches
-- its service, none answers on another address of the host; a chosen port already held is
-- conflict/port_taken before anything is created, and one taken after that check makes the start
-- remove what it created and nothing else. Projects start "sandstack-sstest-ports-"; one stack
-- serves the tests that need a running one, and nothing of any stack is left.
local sandstack = require "sandstack"
local core = sandstack.core
local h = require "helpers"

local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
local eng = assert(sandstack.engine {})

local function opts(ports, extra)
  local o = { agent_port = 8080, forwarder_image = SOCAT, pull = "never", subnet_pool = "10.215.0.0/16", ports = ports,
    services = {
      { name = "sandbox", image = AGENT, command = { "agent" } },
      { name = "web", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "9000" }, egress = "none" },
    } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function key() return "sstest-ports-" .. h.random_suffix(3) end

-- A port nothing listens on now (the kernel's pick, let go at once).
local function free_port()
  local l = assert(core.tcp_listen("127.0.0.1", 0))
  local p = l:port()
  l:close()
  return p
end

local function get(port, path)
  local out, ok = h.sh(("curl -s -m 5 http://127.0.0.1:%d%s"):format(port, path or "/health"))
  return ok and out:gsub("%s+$", "") or nil
end

-- The host's first address that is not loopback (where a port bound to 0.0.0.0 would answer).
local function host_address()
  local out = h.must("ip -4 -o addr show scope global")
  return assert(out:match("inet (%d+%.%d+%.%d+%.%d+)"), "no global IPv4 address: " .. out)
end

describe("ports published on 127.0.0.1 #docker", function()
  -- one stack for the tests that need a running one: the agent's host port chosen, 3000 on an
  -- ephemeral one, web's 9000 on a chosen one
  local stack, chosen_agent, chosen_web

  setup(function()
    chosen_agent, chosen_web = free_port(), free_port()
    stack = assert(sandstack.docker.start(key(), opts { 3000, { port = 9000, service = "web", host_port = chosen_web },
      { port = 8080, host_port = chosen_agent } }))
  end)

  teardown(function()
    local project = stack.project
    assert(stack:destroy())
    assert.equal(0, h.count_labelled(eng, project))
  end)

  it("publishes each port with its own forwarder, a chosen host port kept; h:ports lists them", function()
    -- the agent's own host port may be chosen too
    assert.equal(chosen_agent, stack.port)
    assert.equal("http://127.0.0.1:" .. chosen_agent, stack.endpoint)
    local ports = assert(stack:ports())
    assert.equal(3, #ports)
    assert.same({ service = "sandbox", port = 8080, host_port = chosen_agent, address = "127.0.0.1:" .. chosen_agent }, ports[1])
    assert.equal("sandbox", ports[2].service)
    assert.equal(3000, ports[2].port)
    assert.same({ service = "web", port = 9000, host_port = chosen_web, address = "127.0.0.1:" .. chosen_web }, ports[3])
    assert.equal("ok", get(chosen_web)) -- web's agent, through its forwarder
    assert.equal("ok", get(stack.port))
    -- every forwarder binds 127.0.0.1 alone: the host's own address does not answer
    local addr = host_address()
    for _, p in ipairs(ports) do
      local info = assert(eng:call("GET", "/containers/" .. stack.project .. "-forwarder" ..
        (p.port == 8080 and "" or p.service == "web" and "-web-9000" or "-3000") .. "/json"))
      local b = info.HostConfig.PortBindings[p.port .. "/tcp"][1]
      assert.equal("127.0.0.1", b.HostIp)
      if p.host_port then
        local reached = core.tcp_connect(addr, p.host_port, 1)
        assert.is_nil(reached, ("%s:%d answered"):format(addr, p.host_port))
      end
    end
    -- a restart: the chosen host ports again, the ephemeral one read anew
    assert(stack:restart { timeout = 0 })
    local again = assert(stack:ports())
    assert.equal(chosen_agent, again[1].host_port)
    assert.equal(chosen_agent, stack.port)
    assert.equal(chosen_web, again[3].host_port)
    assert.equal("ok", get(chosen_web))
    -- a handle from the record lists the same
    local other = assert(sandstack.docker.reconnect(stack:record()))
    assert.same(again, assert(other:ports()))
    other:close()
  end)

  it("a chosen port a process holds is conflict/port_taken before anything is created", function()
    local holder = assert(core.tcp_listen("127.0.0.1", 0))
    local events = {}
    local k = key()
    local stack, err = sandstack.docker.start(k, opts({ { port = 9000, service = "web", host_port = holder:port() } },
      { on_event = function(e) events[#events + 1] = e.phase end }))
    assert.is_nil(stack)
    assert.equal("conflict", err.kind)
    assert.equal("port_taken", err.reason)
    assert.equal(holder:port(), err.host_port)
    assert.matches("nothing was created", err.message, 1, true)
    for _, phase in ipairs(events) do assert.is_nil(phase:match("created$"), phase) end
    assert.equal(0, h.count_labelled(eng, "sandstack-" .. k))
    assert.is_nil(core.tcp_listen("127.0.0.1", holder:port()), "the holder lost its port")
    holder:close()
  end)

  it("a chosen port another stack publishes is refused by name, and that stack is untouched", function()
    local k = key()
    local refused, err = sandstack.docker.start(k, opts { 3000, { port = 8080, host_port = chosen_web } })
    assert.is_nil(refused)
    assert.equal("port_taken", err.reason)
    assert.matches(stack.project .. "-forwarder-web-9000", err.holder, 1, true)
    assert.equal(0, h.count_labelled(eng, "sandstack-" .. k))
    assert.equal("ok", get(chosen_web))
  end)

  it("a port taken after the check: the start removes what it created, and the holder keeps its port", function()
    local chosen, holder = free_port(), nil
    local k = key()
    local stack, err = sandstack.docker.start(k, opts({ 3000, { port = 9000, service = "web", host_port = chosen } },
      { on_event = function(e) -- between the check and the forwarder's start, another process takes it
        if e.phase == "container_created" and not holder then holder = assert(core.tcp_listen("127.0.0.1", chosen)) end
      end }))
    assert.is_nil(stack)
    assert(holder, "the hook ran: " .. tostring(err))
    assert.equal("conflict", err.kind)
    assert.equal("port_taken", err.reason)
    assert.matches("what this start created is removed", err.message, 1, true)
    assert.equal(0, h.count_labelled(eng, "sandstack-" .. k))
    assert.is_nil(core.tcp_listen("127.0.0.1", chosen), "the holder lost its port")
    holder:close()
  end)

  it("refuses malformed entries before any Engine call, and on a swarm", function()
    local cases = {
      { { 0 }, "ports[1] must be a port 1-65535 or a table" },
      { { { port = 70000 } }, "ports[1].port must be a number 1-65535" },
      { { { port = 1, host_port = 5 }, { port = 2, host_port = 5 } }, "ports[2].host_port is chosen twice" },
      { { 3000, 3000 }, "ports[2]: that service's port is listed twice" },
      { { { port = 1, service = "nope" } }, "ports[1].service names no service" },
    }
    for _, c in ipairs(cases) do
      local p, err = sandstack.docker.plan("k", opts(c[1]))
      assert.is_nil(p)
      assert.equal("invalid_option", err.reason)
      assert.matches(c[2], err.message, 1, true)
    end
    assert.has_error(function() sandstack.docker.plan("k", opts { { port = 1, hostport = 2 } }) end)
    -- a wrong type raises at the caller (docs/api/README.md, "Conventions")
    for _, c in ipairs {
      { { "x" }, "option 'ports[1]' must be a port number or a table, got string \"x\"" },
      { { { port = "80" } }, "option 'ports[1].port' must be a port number, got string \"80\"" },
      { { { port = 1, service = 2 } }, "option 'ports[1].service' must be a service name, got number 2" },
    } do
      local ok, msg = pcall(sandstack.docker.plan, "k", opts(c[1]))
      assert.is_false(ok)
      assert.matches(c[2], msg, 1, true)
    end
    local _, err = sandstack.swarm.plan("k", { agent_port = 8080, image = AGENT, ports = { 3000 } })
    assert.equal("invalid_option", err.reason)
    assert.equal("ports", err.option)
  end)
end)
