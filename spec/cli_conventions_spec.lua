-- The sandstack command's conventions, for every command the runner finds (lua/sandstack/cli/*.lua:
-- a command another branch adds is covered with no edit here): --help and `help CMD`, --json,
-- one bad argument, exit codes 0/1/2, errors on one line as "sandstack: <kind>: <message>",
-- never a traceback. The engine is the engine double (empty lists, removals recorded), so no
-- command reaches the shared engine.
local h = require "helpers"
local core = require "sandstack.core"
local cli = require "sandstack.cli"

local function no_trace(text, what)
  assert.is_nil(text:lower():find("traceback", 1, true), what .. ": a traceback:\n" .. text)
  assert.is_nil(text:find("sandstack/[%w_/]+%.lua:%d+:"), what .. ": a position in sandstack's source:\n" .. text)
end

local function one_error_line(err, what)
  assert.matches("^sandstack: [%w_]+: [^\n]+\n$", err, nil, what .. ": not one error line: " .. err)
end

describe("the sandstack command's conventions", function()
  local fake, dir, host

  setup(function()
    fake = require("engine_double").start("lists")
    dir, host = fake.dir, fake.host
  end)

  teardown(function() if fake then fake.stop() end end)

  local function run_all(argvs) return fake.cli(argvs) end

  local by, names = cli.commands()

  it("finds its commands in lua/sandstack/cli/", function()
    for _, n in ipairs { "up", "down", "ls", "status", "reap", "pool", "images", "conform", "gateway" } do
      assert.is_table(by[n], n)
    end
  end)

  it("gives every command --help and `help CMD`, exit 0", function()
    local argvs = {}
    for _, n in ipairs(names) do
      argvs[#argvs + 1] = { n, "--help" }
      argvs[#argvs + 1] = { "help", n }
      argvs[#argvs + 1] = { n, "-h" }
    end
    for _, r in ipairs(run_all(argvs)) do
      local what = table.concat(r.argv, " ")
      assert.equal(0, r.code, what .. ": " .. r.err)
      assert.matches("^usage: sandstack " .. r.argv[r.argv[1] == "help" and 2 or 1], r.out, nil, what)
      assert.matches("Exit codes: 0 ok, 1 failure, 2 usage error", r.out, nil, what)
      no_trace(r.out .. r.err, what)
    end
  end)

  it("refuses one bad argument to every command with a usage error (exit 2), one line", function()
    local argvs = {}
    for _, n in ipairs(names) do argvs[#argvs + 1] = { n, "--no-such-option" } end
    argvs[#argvs + 1] = { "no-such-command" }
    for _, r in ipairs(run_all(argvs)) do
      local what = table.concat(r.argv, " ")
      assert.equal(2, r.code, what .. ": " .. r.err)
      one_error_line(r.err, what)
      assert.matches("^sandstack: usage: ", r.err, nil, what)
      assert.equal("", r.out, what)
      no_trace(r.err, what)
    end
  end)

  it("runs every command with --json: one JSON document, or one error line; never a traceback", function()
    local argvs = {}
    for _, n in ipairs(names) do argvs[#argvs + 1] = { n, "--json" } end
    for _, r in ipairs(run_all(argvs)) do
      local what = table.concat(r.argv, " ")
      assert.is_true(r.code == 0 or r.code == 1 or r.code == 2, what .. ": exit " .. tostring(r.code) .. " " .. r.err)
      no_trace(r.out .. r.err, what)
      if r.code == 0 then
        assert.matches("^[^\n]+\n$", r.out, nil, what .. ": one line")
        assert.is_table(core.json_decode(r.out), what .. ": " .. r.out)
      else
        one_error_line(r.err, what)
        assert.is_false(by[r.argv[1]].json == true and r.code == 2 and r.err:find("unknown option --json", 1, true) ~= nil,
          what .. " declares json but refuses --json")
      end
      if not by[r.argv[1]].json then assert.equal(2, r.code, what .. " takes no --json") end
    end
  end)

  it("prints --version, usage with no command (exit 2), and suggests a near command", function()
    local r = run_all { { "--version" }, {}, { "sttus" }, { "help", "nope" } }
    assert.equal(0, r[1].code)
    assert.equal("sandstack " .. require("sandstack").VERSION .. "\n", r[1].out)
    assert.equal(2, r[2].code)
    assert.matches("^usage: sandstack <command>", r[2].err)
    assert.equal(2, r[3].code)
    assert.matches("did you mean status%?", r[3].err)
    assert.equal(2, r[4].code)
    one_error_line(r[4].err, "help nope")
  end)

  it("turns a raise in a command into one line (an unknown option key in up; a stack file given to pool fill)", function()
    h.write_file(dir .. "/typo.lua", 'return { agent_port = 8080, image = "x", servics = {} }')
    h.write_file(dir .. "/stack.lua", 'return { agent_port = 8080, image = "x" }')
    h.write_file(dir .. "/broken.lua", 'return {')
    local r = run_all { { "up", dir .. "/typo.lua" }, { "pool", "fill", dir .. "/stack.lua" }, { "up", dir .. "/broken.lua" },
      { "up", dir .. "/missing.lua" }, { "up" } }
    for i = 1, 4 do
      local what = table.concat(r[i].argv, " ")
      assert.equal(1, r[i].code, what .. ": " .. r[i].err)
      one_error_line(r[i].err, what)
      no_trace(r[i].err, what)
    end
    assert.matches("servics", r[1].err)
    assert.matches("not a pool's", r[2].err)
    assert.equal(2, r[5].code)
  end)

  it("prints no failure line and no rollback that removed nothing, in up's progress", function()
    local kit = require "sandstack.cli_kit"
    local lines = {}
    local show = kit.progress({ write = function(_, ...) lines[#lines + 1] = table.concat { ... } end }, false)
    show { phase = "failed", elapsed = 0.1 } -- the error line after it says what failed
    show { phase = "rolled_back", elapsed = 0.1, containers = 0, networks = 0, volumes = 0 } -- nothing was made
    assert.same({}, lines)
    show { phase = "rolled_back", elapsed = 2, containers = 2, networks = 1, volumes = 0 }
    assert.equal(1, #lines)
    assert.matches("rolled back: removed 2 containers, 1 network\n$", lines[1])
  end)

  it("says what became of a start Ctrl-C stopped, after its rollback", function()
    local steps = require "sandstack.stack.steps"
    local rolled = false
    local ok, err = pcall(steps.run, { function() error("some.lua:3: interrupted!", 0) end },
      function() rolled = true end, "sandstack-k1")
    assert.is_false(ok)
    assert.is_true(rolled)
    assert.same({ "interrupted", "sigint" }, { err.kind, err.reason })
    assert.equal("interrupted: the start of sandstack-k1 was interrupted and rolled back: nothing of it is left", tostring(err))
    -- what a rollback could not remove is named, with what to do
    ok, err = pcall(steps.run, { function() error("interrupted!", 0) end },
      function() return core.error("engine", nil, "network sandstack-k1-sbx") end, "sandstack-k1")
    assert.matches("but network sandstack%-k1%-sbx is left: remove it with `sandstack down sandstack%-k1`", err.message)
  end)

  it("ends a Ctrl-C of the gateway's nginx as a stop, not a failure; a failing nginx names its log", function()
    h.write_file(dir .. "/gw.lua", 'return { tenants = { { name = "t", token_sha256 = ("a"):rep(64) } }, '
      .. 'stack = { agent_port = 8080, image = "x" } }')
    local bin = dir .. "/bin"
    h.must("mkdir -p " .. h.q(bin))
    local function gateway(script)
      h.write_file(bin .. "/nginx", "#!/bin/sh\n" .. script .. "\n")
      h.must("chmod 755 " .. h.q(bin .. "/nginx"))
      return h.sh("PATH=" .. h.q(bin) .. ":$PATH lua5.4 bin/sandstack gateway --config " .. h.q(dir .. "/gw.lua")
        .. " --prefix " .. h.q(dir .. "/gw"))
    end
    local out, _, code = gateway("exit 0") -- nginx's own end on SIGINT, SIGTERM or SIGQUIT: a clean shutdown
    assert.equal(0, code, out)
    assert.matches("stopped: nginx shut down", out, 1, true)
    out, _, code = gateway("kill -INT $$") -- ended by the Ctrl-C itself
    assert.equal(130, code, out)
    assert.matches("stopped: nginx ended by SIGINT (Ctrl-C)", out, 1, true)
    assert.is_nil(out:find("failed", 1, true), out)
    out, _, code = gateway("exit 1")
    assert.equal(1, code, out)
    assert.matches("sandstack: failed: nginx exited with 1: see " .. dir .. "/gw/logs/error.log", out, 1, true)
  end)

  it("never prints a traceback from the real command either", function()
    local out, _, code = h.sh("DOCKER_HOST=" .. h.q(host) .. " lua5.4 bin/sandstack up " .. h.q(dir .. "/typo.lua"))
    assert.equal(1, code, out)
    one_error_line(out, "bin/sandstack up")
    no_trace(out, "bin/sandstack up")
  end)
end)
