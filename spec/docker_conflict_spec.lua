-- A start never reaches for what it did not make. A second start of a key whose stack exists
-- (a crashed session's, a second process's) is refused as conflict/stack_exists before any
-- create, and sends the engine nothing that changes the live stack: with the live stack's
-- containers stopped (so Docker's in-use check protects nothing), a file in its workspace
-- survives, and the engine double's recording pass-through sees only reads.
-- A rollback removes only what carries its own run label. Projects start "sstest-safety-".
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local h = require "helpers"

local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
local ENGINE_SOCK = (os.getenv("DOCKER_HOST") or "unix:///var/run/docker.sock"):match("^unix://(.+)$")
  or "/var/run/docker.sock"

local function opts()
  return {
    agent_port = 8080, forwarder_image = SOCAT, pull = "never", subnet_pool = "10.217.0.0/16",
    services = { { name = "sandbox", image = AGENT, command = { "agent" },
      volumes = { { name = "workspace", target = "/workspace" } } } },
    volumes = { { name = "workspace" } },
  }
end

describe("a start of a key whose stack exists #docker", function()
  local eng = assert(sandstack.engine {})
  local key = "sstest-safety-" .. core.random_hex(3)
  local stack, dir

  setup(function()
    stack = assert(docker.start(key, opts()))
    dir = h.must("mktemp -d /tmp/sstest-safety.XXXXXX"):match("%S+")
  end)

  teardown(function()
    if stack then stack:destroy() end
    docker.down("sandstack-" .. key)
    if dir then h.sh("rm -rf " .. h.q(dir)) end
  end)

  it("is refused as conflict/stack_exists, the live stack's stopped workspace untouched, only reads sent", function()
    local project = stack.project
    -- a file in the live stack's workspace volume, written where the engine keeps it
    local vol = assert(eng:call("GET", "/volumes/" .. project .. "-workspace"))
    h.write_file(vol.Mountpoint .. "/keep.txt", "the session's work\n")
    -- every container stopped: nothing is "in use" any more (the init volume's holder never runs: 304)
    local cs = assert(eng:call("GET", "/containers/json", nil,
      { query = { all = "1", filters = { label = { "io.sandstack.project=" .. project } } } }))
    for _, c in ipairs(cs) do
      assert(eng:call("POST", "/containers/" .. c.Id .. "/stop", nil, { query = { t = "0" }, ok = { [304] = true } }))
    end

    -- another process starts the same key, through a recording pass-through
    local rec = require("engine_double").start("record", { engine = ENGINE_SOCK })
    finally(function() rec.stop() end)
    local o = opts()
    o.docker_host = rec.host
    local src = ("local docker = require('sandstack').docker\nlocal o = require('sandstack.core').json_decode(%q)\n"
      .. "local s, err = docker.start(%q, o)\n"
      .. "io.write(require('sandstack.core').json_encode { started = s ~= nil, kind = err and err.kind,"
      .. " reason = err and err.reason, message = err and err.message, state = err and err.state,"
      .. " project = err and err.project })\n"):format(core.json_encode(o), key)
    local out = h.must(h.child_command(dir .. "/second.lua", src))
    local res = assert(core.json_decode(out:match("{.*}")), out)

    assert.is_false(res.started, out)
    assert.equal("conflict", res.kind, out)
    assert.equal("stack_exists", res.reason, out)
    assert.equal(project, res.project)
    assert.equal("stopped", res.state)
    assert.matches(project, res.message, 1, true)
    assert.matches("stopped", res.message, 1, true)
    assert.matches("sandstack.docker.reconnect(record)", res.message, 1, true)
    assert.matches("sandstack down " .. key, res.message, 1, true)

    local methods = {}
    for _, r in ipairs(rec.requests()) do
      methods[#methods + 1] = r.method .. " " .. r.target
      assert.equal("GET", r.method, "the second start changed something: " .. r.method .. " " .. r.target)
    end
    assert.is_true(#methods > 0, "the recorder saw the second start")
    assert.equal("the session's work\n", h.read_file(vol.Mountpoint .. "/keep.txt"))
    -- the live stack is still whole: its containers and its volume
    assert.equal(#cs, #assert(eng:call("GET", "/containers/json", nil,
      { query = { all = "1", filters = { label = { "io.sandstack.project=" .. project } } } })))
  end)
end)
