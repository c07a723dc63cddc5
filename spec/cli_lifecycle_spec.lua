-- `sandstack pause|resume|hibernate|wake|snapshot|fork|snapshots` on the live engine (#docker),
-- run in-process through cli.main: each finds its stack by project name (the record kept on the
-- engine), prints one line, and fails with one line and exit 1 (2 for usage). One stack.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local cli = require "sandstack.cli"

local P = "sstest-lccli-" .. core.random_hex(3)

local function buffer()
  local b = { text = "" }
  function b:write(...) for _, s in ipairs { ... } do self.text = self.text .. tostring(s) end return self end
  function b:flush() end
  return b
end

local function run(...)
  local o, e = buffer(), buffer()
  local code = cli.main({ ... }, o, e)
  return code, o.text, e.text
end

describe("the lifecycle commands #docker", function()
  local stack
  lazy_setup(function()
    stack = assert(docker.start(P, { project_name = P, agent_port = 8080, pull = "never",
      forwarder_image = "sandstack-test/socat:local", volumes = { { name = "workspace" } },
      services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" },
        volumes = { { name = "workspace", target = "/workspace" } } } } }))
  end)
  lazy_teardown(function()
    if stack then stack:destroy(); stack:close() end
    docker.reap { prefix = P }
    local mine = {}
    for _, s in ipairs(docker.snapshots { source = P } or {}) do mine[#mine + 1] = s.id end
    if #mine > 0 then docker.remove_snapshot(mine) end
  end)

  it("has --help for each, exit 0, and a usage error exit 2", function()
    for _, c in ipairs { "pause", "resume", "hibernate", "wake", "snapshot", "fork", "snapshots" } do
      local code, out = run(c, "--help")
      assert.equal(0, code, c)
      assert.matches("usage: sandstack " .. c, out, 1, true)
    end
    local code, _, err = run("fork", P)
    assert.equal(2, code)
    assert.matches("needs a NAME and a NEW_KEY", err)
    code, _, err = run("hibernate", P, "--timeout", "soon")
    assert.equal(2, code)
    assert.matches("--timeout", err, 1, true)
  end)

  it("pauses, resumes, hibernates and wakes by project name", function()
    local code, out = run("pause", P)
    assert.equal(0, code)
    assert.equal("paused " .. P .. "\n", out)
    local info = assert(sandstack.engine {}):call("GET", "/containers/" .. P .. "-sandbox/json")
    assert.is_true(info.State.Paused)
    assert.equal(0, (run("resume", P)))
    assert.equal(0, (run("hibernate", P, "--timeout", "1")))
    code, out = run("wake", P)
    assert.equal(0, code)
    local port = tonumber(out:match("^endpoint http://127%.0%.0%.1:(%d+)\n$"))
    assert.truthy(port, out)
    local r = assert(require("sandstack.docker.http").request { url = ("http://127.0.0.1:%d/health"):format(port) })
    assert.equal(200, r.status)
  end)

  it("snapshots, lists as JSON and removes by id", function()
    local code, out = run("snapshot", P, "--name", "cli")
    assert.equal(0, code)
    local id = out:match("^(snap%-%x+)\n$")
    assert.truthy(id, out)
    code, out = run("snapshots", "--source", P, "--json")
    assert.equal(0, code)
    local list = core.json_decode(out)
    assert.equal(1, #list)
    assert.equal(id, list[1].id)
    assert.equal("cli", list[1].name)
    code, out = run("snapshots", "rm", id)
    assert.equal(0, code)
    assert.equal("removed " .. id .. "\n", out)
    assert.same({}, assert(docker.snapshots { source = P }))
  end)

  it("fails with one line and exit 1 for a stack it does not know, or one without a record", function()
    local code, out, err = run("pause", P .. "-nosuch")
    assert.equal(1, code)
    assert.equal("", out)
    assert.matches("^sandstack: not_found: no stack has the project name or session key", err)
    assert.equal(1, select(2, err:gsub("\n", "")))
    -- a stack sandstack lists but that has no record on the engine (started by another path)
    local eng = assert(sandstack.engine {})
    assert(eng:call("DELETE", "/volumes/" .. P .. "-record", nil, { ok = { [404] = true } }))
    code, out, err = run("pause", P)
    assert.equal(1, code)
    assert.matches("^sandstack: engine: no record of stack " .. P:gsub("%-", "%%-"), err)
    assert.equal(1, select(2, err:gsub("\n", "")))
  end)
end)
