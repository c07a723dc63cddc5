-- What `sandstack up` says when the stack does not come up (#docker): a Ctrl-C during the start
-- (the real signal, to the real command) and a session key another stack holds. Every project is
-- "sstest-cliup-<hex>" and nothing of it is left.
local h = require "helpers"
local sandstack = require "sandstack"
local core = sandstack.core

local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"

local eng = assert(sandstack.engine {})

local function objects(project)
  local n = 0
  for _, kind in ipairs { "containers/json?all=1&", "networks?", "volumes?" } do
    local body = assert(eng:call("GET", "/" .. kind .. "filters=" .. core.urlencode(core.json_encode {
      label = { "io.sandstack.project=" .. project } })))
    n = n + #(body.Volumes or body)
  end
  return n
end

describe("sandstack up, when the stack does not come up #docker", function()
  local dir

  setup(function() dir = h.must("mktemp -d /tmp/sstest-cliup.XXXXXX"):match("%S+") end)
  teardown(function() h.sh("rm -rf " .. h.q(dir)) end)

  -- a stack whose agent never answers its ready_path: the start waits for it
  local function options_file(name, ready_path)
    local file = dir .. "/" .. name .. ".lua"
    h.write_file(file, ("return { agent_port = 8080, pull = \"never\", forwarder_image = %q, ready_path = %q, "
      .. "ready_timeout = 60, services = { { name = \"sandbox\", image = %q, command = { \"agent\" } } } }")
      :format(SOCAT, ready_path, AGENT))
    return file
  end

  it("says a Ctrl-C rolled the start back and left nothing, and exits 130", function()
    local key = "sstest-cliup-" .. core.random_hex(4)
    local file = options_file("slow", "/never-ready")
    local out, err, rc, pidf = dir .. "/out", dir .. "/err", dir .. "/rc", dir .. "/pid"
    -- in the background, its pid kept: the signal goes to the command itself, as a terminal's would
    h.must(("(lua5.4 bin/sandstack up %s --session %s >%s 2>%s & echo $! >%s; wait $!; echo $? >%s) >/dev/null 2>&1 &")
      :format(h.q(file), key, h.q(out), h.q(err), h.q(pidf), h.q(rc)))
    h.wait_for("the start to wait for readiness", function()
      return (h.read_file(out) or ""):find("waiting ready", 1, true)
    end, 60)
    assert.is_true(objects("sandstack-" .. key) > 0) -- the control: the start had made its objects
    h.must("kill -INT " .. h.read_file(pidf):match("%d+"))
    h.wait_for("the command to end", function() return (h.read_file(rc) or ""):match("%d+") end, 60)
    local said = h.read_file(err)
    assert.equal("130", h.read_file(rc):match("%d+"), said)
    assert.equal(("sandstack: interrupted: the start of sandstack-%s was interrupted and rolled back: "
      .. "nothing of it is left\n"):format(key), said)
    assert.equal(0, objects("sandstack-" .. key))
  end)

  it("does not call a key another stack holds a failure it rolled back: nothing was touched", function()
    local key = "sstest-cliup-" .. core.random_hex(4)
    local stack = assert(sandstack.docker.start(key, { agent_port = 8080, pull = "never", forwarder_image = SOCAT,
      services = { { name = "sandbox", image = AGENT, command = { "agent" } } } }))
    local before = objects(stack.project)
    local out, _, code = h.sh("lua5.4 bin/sandstack up " .. h.q(options_file("again", "/health")) .. " --session " .. key)
    local ok, derr = stack:destroy()
    assert.equal(1, code, out)
    assert.is_nil(out:find("rolled back", 1, true), out)
    assert.is_nil(out:find("failed", 1, true), out)
    assert.matches("sandstack: conflict: session " .. key .. " already has a stack", out, 1, true)
    assert.matches("nothing was changed", out, 1, true)
    assert.is_true(before > 0)
    assert(ok, derr)
  end)
end)
