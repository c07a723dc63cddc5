-- The one session interface: every backend's handle has every method of sandstack.session,
-- and what a backend lacks answers kind = "unsupported", naming the backend and the method.
local session = require "sandstack.session"
local docker_handle = require "sandstack.docker.handle"
local swarm_handle = require "sandstack.swarm.handle"
local box = require "sandstack.sbx.box"

local backends = {
  { name = "docker", methods = docker_handle.Stack },
  { name = "swarm", methods = swarm_handle.Stack },
  { name = "sbx", methods = getmetatable(box.new {}).__index },
}

describe("the session interface", function()
  it("lists the methods every handle has", function()
    for _, m in ipairs { "exec", "spawn", "read", "write", "list", "stat", "remove", "upload", "download",
      "logs", "stats", "pause", "resume", "hibernate", "snapshot", "fork", "changes", "set_timeout", "expires" } do
      assert.is_true(session.KNOWN[m], m)
    end
  end)

  for _, b in ipairs(backends) do
    it("gives the " .. b.name .. " handle every method, stubs typed as unsupported", function()
      local real = {}
      for _, m in ipairs(session.implemented(b.methods)) do real[m] = true end
      for _, m in ipairs(session.METHODS) do
        assert.is_function(b.methods[m], b.name .. " lacks " .. m)
        if not real[m] then
          local r, err = b.methods[m]({}, "x")
          assert.is_nil(r)
          assert.equal("unsupported", err.kind)
          assert.equal(b.name, err.backend)
          assert.equal(m, err.method)
          assert.matches(m .. " is not supported on the " .. b.name .. " backend", tostring(err), 1, true)
        end
      end
    end)
  end

  it("never replaces a method a backend defines", function()
    local cls = { exec = function() return "mine" end }
    session.install(cls, "test")
    assert.equal("mine", cls.exec())
    assert.same({ "exec" }, session.implemented(cls))
    local _, err = cls.stats()
    assert.equal("test", err.backend)
  end)

  it("refuses a docker handle part that defines a method twice", function()
    assert.has_error(function() docker_handle.mixin { record = function() end } end,
      "sandstack.docker handle: method record is defined twice")
  end)
end)
