-- One options check per public entry point. stop, start, restart and destroy on a stack,
-- sandstack.docker.reconnect and sandstack.docker.down raise on an unknown key, as API.md has
-- every public function do ("an unknown option key is an error, never silently ignored"): a
-- programming error, raised with error() at the caller's line. Each table is checked once, where
-- the caller handed it in, by the one checker (sandstack.error.check_keys, the C core's).
-- The stack here is a handle over a plan that was never started, on an engine stand-in that
-- fails the test if it is used at all: an unknown key must be refused before anything is sent,
-- and a known one (the control) must get past the check to the engine.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local E = require "sandstack.error"
local handle = require "sandstack.docker.handle"

local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
local THIS = "docker_options_spec.lua:"
local NOWHERE = "unix:///nonexistent/sandstack-options-spec.sock" -- an engine that does not answer

local ENGINE_USED = "the engine was used"
local function stand_in_engine()
  return setmetatable({}, { __index = function() error(ENGINE_USED, 0) end })
end

local function plan()
  return assert(docker.plan("opts", { project_name = "sstest-opts", agent_port = 8080, forwarder_image = SOCAT,
    pull = "never", services = { { name = "sandbox", image = AGENT } } }))
end

local function stack() return handle.new(stand_in_engine(), plan()) end

-- The message of what fn raised (nil when it did not raise).
local function raised(fn)
  local ok, err = pcall(fn)
  if ok then return nil end
  return tostring(err)
end

-- An unknown key: raised, naming the function and the key, at the caller's line (this file).
local function refuses(what, fn)
  local msg = raised(fn)
  assert.is_not_nil(msg, what .. " accepted an unknown option")
  assert.matches(what .. ": unknown option 'bogus'", msg, nil, true)
  assert.matches(THIS, msg, nil, true)
end

describe("one options check per public entry point", function()
  it("stack:stop, start, restart and destroy raise on an unknown key before using the engine", function()
    refuses("stop", function() stack():stop { bogus = 1 } end)
    refuses("start", function() stack():start { bogus = 1 } end)
    refuses("restart", function() stack():restart { bogus = 1 } end)
    refuses("destroy", function() stack():destroy { bogus = 1 } end)
    -- controls: the known keys get past the check, to the engine
    assert.equal(ENGINE_USED, raised(function() stack():stop { timeout = 0 } end))
    assert.equal(ENGINE_USED, raised(function() stack():start() end))
    assert.equal(ENGINE_USED, raised(function() stack():restart { timeout = 1 } end))
    assert.equal(ENGINE_USED, raised(function() stack():destroy {} end))
    -- a value of the wrong type is a programming error too
    assert.matches("stop: option 'timeout' must be a number", raised(function() stack():stop { timeout = "5" } end), nil, true)
    assert.matches("options must be a table", raised(function() stack():stop(5) end), nil, true)
  end)

  it("sandstack.docker.reconnect of a table that is no record returns invalid/not_a_record, before the engine", function()
    -- a list() entry: it names a stack, but holds no containers to drive
    local entry = { project = "sstest-opts", session_key = "opts", services = { sandbox = "running" }, networks = 2 }
    for _, t in ipairs { entry, { project = "p" } } do
      local none, err = docker.reconnect(t, { docker_host = NOWHERE, timeout = 1 })
      assert.is_nil(none)
      assert.truthy(core.is_error(err), tostring(err))
      assert.equal("invalid", err.kind)
      assert.equal("not_a_record", err.reason)
    end
    local s, err = docker.reconnect(stack():record(), { docker_host = NOWHERE, timeout = 1 }) -- a record gets past it
    assert.is_nil(s)
    assert.equal("transport", err.kind)
  end)

  it("sandstack.docker.reconnect and sandstack.docker.down raise on an unknown key", function()
    local record = handle.new(stand_in_engine(), plan()):record()
    refuses("sandstack.docker.reconnect", function() docker.reconnect(record, { bogus = 1 }) end)
    refuses("sandstack.docker.down", function() docker.down("sstest-opts", { bogus = 1 }) end)
    -- controls: known keys reach the (absent) engine and come back as a returned transport error
    local s, err = docker.reconnect(record, { docker_host = NOWHERE, timeout = 1, on_event = print })
    assert.is_nil(s)
    assert.equal("transport", err.kind)
    local ok
    ok, err = docker.down("sstest-opts", { docker_host = NOWHERE, timeout = 1 })
    assert.is_nil(ok)
    assert.equal("transport", err.kind)
  end)

  it("has one checker: the C core's, with the wording of the binding's and the stack model's checks", function()
    assert.equal(core.check_keys, E.check_keys)
    local function public(o) -- as a public function calls it: not as a tail call, which drops the frame
      local checked = E.check_keys(o, { known = true }, "public")
      return checked
    end
    assert.same({}, public(nil))
    local t = { known = 1 }
    assert.equal(t, public(t))
    refuses("public", function() public { bogus = 1 } end)
    assert.matches(THIS .. "%d+: public: options must be a table", raised(function() public(true) end))
    assert.matches(THIS .. "%d+: public: option keys must be strings", raised(function() public { 1 } end))
    -- the same refusal from a C binding and from the stack model
    assert.matches("http_probe: unknown option 'bogus'", raised(function()
      core.http_probe("http://127.0.0.1:9/", { bogus = 1 }) end), nil, true)
    assert.matches("sandstack.docker.start: unknown option 'bogus'", raised(function()
      docker.plan("opts", { agent_port = 8080, image = AGENT, bogus = 1 }) end), nil, true)
  end)
end)

-- Counts the checks of each table while fn runs.
local function checks_during(fn)
  local real, seen = E.check_keys, {}
  E.check_keys = function(o, allowed, what)
    if o ~= nil then seen[o] = (seen[o] or 0) + 1 end
    return real(o, allowed, what)
  end
  local ok, err = pcall(fn)
  E.check_keys = real
  if not ok then error(err, 0) end
  return seen
end

describe("each table is checked once", function()
  it("restart hands its checked table to the stop it makes", function()
    local opts = { timeout = 0 }
    local seen = checks_during(function() pcall(function() stack():restart(opts) end) end)
    assert.equal(1, seen[opts])
  end)

  it("down hands its checked table on unchecked", function()
    local opts = { docker_host = NOWHERE, timeout = 1 }
    local seen = checks_during(function() docker.down("sstest-opts", opts) end)
    assert.equal(1, seen[opts])
  end)
end)

describe("each table is checked once #docker", function()
  it("exec checks the caller's options, and none of the requests it makes itself", function()
    -- exec is one call into C: the C side checks the caller's table where it reads
    -- it, and builds its three Engine requests itself. So no table goes through the Lua-level
    -- check at all, and the caller's table is still checked: an unknown key raises at the
    -- caller's line with exec's own text.
    local eng = assert(sandstack.engine {})
    local name = "sstest-opts-" .. core.random_hex(3)
    local c = assert(eng:call("POST", "/containers/create", { Image = "sandstack-test/base:local", Cmd = { "sleep", "300" },
      Labels = { ["io.sandstack.project"] = name } }, { query = { name = name } }))
    finally(function()
      eng:call("DELETE", "/containers/" .. c.Id, nil, { query = { force = "1" }, ok = { [404] = true } })
      eng:close()
    end)
    assert(eng:call("POST", "/containers/" .. c.Id .. "/start"))
    local opts = { timeout = 10 }
    local res
    local seen = checks_during(function() res = assert(eng:exec(name, { "true" }, opts)) end)
    assert.equal(0, res.exit_code)
    assert.same({}, seen, "exec checked an option table in Lua as well as in C")
    local ok, err = pcall(function() local r = eng:exec(name, { "true" }, { timeout = 10, bogus = 1 }); return r end)
    assert.is_false(ok)
    assert.matches("exec: unknown option 'bogus'", tostring(err), nil, true)
    assert.matches("docker_options_spec.lua:%d+:", tostring(err))
  end)
end)
