-- Waits that say what they wait for, and end when it cannot come: a sandbox whose agent exits
-- at once is reported as exited about half a second into the readiness wait (not after an
-- attempt's five seconds), and an agent that never listens ends in a timeout that names the
-- port, the path and the last answer, with what to check; `sandstack up` shows the wait.
-- Projects start "sstest-safety-wait-"; each start fails and rolls back, so nothing is left.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local h = require "helpers"

local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"

local function opts(command, extra)
  local o = { agent_port = 8080, forwarder_image = SOCAT, pull = "never", subnet_pool = "10.219.0.0/16",
    services = { { name = "sandbox", image = AGENT, command = command } } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function key() return "sstest-safety-wait-" .. core.random_hex(3) end

describe("the readiness wait #docker", function()
  local clock = require("sandstack.stack.run").now

  it("reports a sandbox that exits at once as exited, within a second of the wait's start", function()
    local at = {}
    local o = opts({ "false" }, { on_event = function(ev) at[ev.phase] = at[ev.phase] or clock() end })
    local k = key()
    finally(function() docker.down("sandstack-" .. k) end)
    local s, err = docker.start(k, o)
    assert.is_nil(s)
    assert.equal("exited", err.kind, tostring(err))
    assert.equal("sandbox", err.service)
    assert.equal(1, err.exit_code)
    assert.truthy(at.waiting_ready, "the wait began")
    local took = (at.failed or at.rolled_back) - at.waiting_ready
    print(("# exited reported %.2f s into the readiness wait"):format(took))
    assert.is_true(took < 1.5, ("exited reported %.2f s into the wait"):format(took))
  end)

  it("ends a wait for an agent that never listens with port, path, last answer and a hint; up shows the wait", function()
    local dir = h.must("mktemp -d /tmp/sstest-safety-wait.XXXXXX"):match("%S+")
    local k = key()
    finally(function() docker.down("sandstack-" .. k); h.sh("rm -rf " .. h.q(dir)) end)
    h.write_file(dir .. "/never.lua", "return " .. ([[{ agent_port = 8080, forwarder_image = %q, pull = "never",
      subnet_pool = "10.219.0.0/16", ready_timeout = 2, ready_path = "/ready",
      services = { { name = "sandbox", image = %q, command = { "sleep", "300" } } } }]]):format(SOCAT, AGENT))
    local out, _, code = h.sh("lua5.4 bin/sandstack up " .. h.q(dir .. "/never.lua") .. " --session " .. k)
    assert.equal(1, code, out)
    assert.matches("waiting ready [^\n]*for GET /ready 2xx from the agent's port 8080 %(up to 2s%)", out)
    local last = out:match("(sandstack: timeout: [^\n]*)")
    assert.truthy(last, out)
    assert.matches("^sandstack: timeout: the agent did not answer GET /ready with 2xx within 2s", last)
    assert.matches("last answer: ", last, 1, true)
    assert.matches("Is the agent listening on port 8080 in the sandbox? Does it answer GET /ready?", last, 1, true)
  end)
end)
