-- A pooled stack answered before its claim completed (lua/sandstack/docker/pool_pending.lua), on
-- a stand-in handle class and on the docker handle's own: the claim is a named state of the
-- handle (`_claim`), the completion runs once, before the first method; a failed one is the
-- answer of every method but close, which still closes; the gateway's acquire passes that error
-- on. No engine.
local pending = require "sandstack.docker.pool_pending"
local E = require "sandstack.error"

local function stand_in()
  local calls = {}
  local Class = {}
  Class.__index = Class
  function Class:egress() calls[#calls + 1] = "egress"; return { allow = {} } end
  function Class:set_egress() calls[#calls + 1] = "set_egress"; return true end
  function Class:record() calls[#calls + 1] = "record"; return { project = self.project } end
  function Class:destroy() calls[#calls + 1] = "destroy"; return true end
  function Class:close() calls[#calls + 1] = "close"; self.closed = true end
  Class.__gc = Class.close
  pending.wrap(Class, function() return false end)
  return setmetatable({ project = "p-1" }, Class), Class, calls
end

describe("a pooled stack answered before its claim completed", function()
  it("completes once, before the first method runs, then is a plain handle", function()
    local s, Class, calls = stand_in()
    local runs = 0
    local done = pending.defer(s, function() runs = runs + 1; calls[#calls + 1] = "claim"; return true end)
    assert.equal(0, runs)
    assert.equal("pending", s._claim.state) -- a state of the handle, its class unchanged
    assert.equal(Class, getmetatable(s))
    assert.equal("p-1", s.project) -- fields read without completing
    assert.same({ allow = {} }, s:egress())
    assert.is_nil(rawget(s, "_claim")) -- completed: a plain handle
    assert.is_true(s:set_egress())
    assert.equal(1, runs)
    assert.same({ "claim", "egress", "set_egress" }, calls)
    assert.equal(Class, getmetatable(s))
    assert.is_true((done())) -- the pool's call after the session's: the same answer, not run again
    assert.equal(1, runs)
  end)

  it("answers every method but close with the claim's error, and still closes", function()
    local s, _, calls = stand_in()
    local runs = 0
    local lost = E.new("engine", "pool_claim_lost", "taken")
    local done = pending.defer(s, function() runs = runs + 1; return nil, lost end)
    local ok, err = done() -- the pool completes it first (its close)
    assert.is_false(ok); assert.equal(lost, err)
    assert.equal("failed", s._claim.state)
    ok, err = s:egress()
    assert.is_nil(ok); assert.equal("pool_claim_lost", err.reason)
    ok, err = s:set_egress()
    assert.is_nil(ok); assert.equal(lost, err)
    s:close()
    assert.is_true(s.closed)
    assert.equal(1, runs)
    assert.same({ "close" }, calls) -- no method of the stack ran but close
  end)
end)

describe("the docker handle with a claim in flight", function()
  it("settles it before each of its methods, interface or its own, and answers a failed one's error", function()
    local H = require "sandstack.docker.handle"
    local closed = 0
    local s = setmetatable({ project = "p-2", eng = { close = function() closed = closed + 1 end } }, H.Stack)
    local runs, inside = 0, nil
    local lost = E.new("engine", "pool_claim_lost", "taken")
    pending.defer(s, function()
      runs = runs + 1
      inside = s._claim.state -- what a method called by the completion itself sees
      return nil, lost
    end)
    for _, call in ipairs {
      function() return s:exec({ "true" }) end, function() return s:read("/x") end,
      function() return s:egress() end, function() return s:record() end,
      function() return s:status() end, function() return s:destroy() end,
    } do
      local ok, err = call()
      assert.is_nil(ok)
      assert.equal(lost, err)
    end
    assert.equal(1, runs)
    assert.equal("completing", inside)
    s:close() -- still closes: its engine client too
    assert.equal(1, closed)
    assert.is_nil(s.eng)
  end)
end)

describe("the gateway's acquire of a pooled stack", function()
  it("answers a claim lost after the early answer with the claim's error, and closes the handle", function()
    local sandstack = require "sandstack"
    local worker = require "sandstack.gateway.worker"
    local s, _, calls = stand_in()
    pending.defer(s, function() return nil, E.new("engine", "pool_claim_lost", "taken") end)
    local real = rawget(sandstack, "docker")
    local pool = { acquire = function() return s end }
    sandstack.docker = { pool = function() return pool end }
    local ok, res, err = pcall(worker.acquire, "sid-1", { name = "p" }, { key = "k", node = "n" })
    sandstack.docker = real
    assert.is_true(ok, tostring(res))
    assert.is_false(res)
    assert.equal("engine", err.kind)
    assert.equal("pool_claim_lost", err.reason) -- not a Lua error about a missing record
    assert.same({ "close" }, calls) -- the pool took the stack down already: only the handle closes
    assert.is_true(s.closed)
  end)
end)
