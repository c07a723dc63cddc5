-- The ask hook's validation and plumbing without a stack: the policy keys ask and ask_timeout
-- (typed errors, the nearest known key for a misspelling, the canonical render), answer()'s
-- arguments refused before anything is sent, the callback pass of h:serve and pool:serve, and
-- the sbx backend's typed refusal.
local sandstack = require "sandstack"
local policy = sandstack.policy
local live = require "sandstack.docker.egress_live"
local serve = require "sandstack.ask_serve"

describe("egress asks: policy keys", function()
  it("renders ask and ask_timeout, 30 s when not given", function()
    local p = assert(policy.compile { allow = { "a.test" }, ask = true })
    assert.same({ true, 30 }, { p:ask() })
    assert.matches('"ask":true,"ask_timeout":30', p:render(), 1, true)
    p = assert(policy.compile { allow = { "a.test" }, ask = true, ask_timeout = 5 })
    assert.same({ true, 5 }, { p:ask() })
    assert.same({ true, 5 }, { assert(policy.load(p:render())):ask() })
    p = assert(policy.compile { allow = { "a.test" } })
    assert.same({ false, 0 }, { p:ask() })
    assert.not_matches("ask", p:render(), 1, true)
  end)

  local function refused(t)
    local p, err = policy.compile(t)
    assert.is_nil(p)
    assert.equal("invalid", err.kind)
    return err.message
  end

  it("refuses bad values with typed errors", function()
    assert.matches("'ask' must be true or false", refused { allow = {}, ask = "yes" }, 1, true)
    assert.matches("'ask_timeout' must be a whole number of seconds from 1 to 3600",
      refused { allow = {}, ask = true, ask_timeout = 0 }, 1, true)
    assert.matches("from 1 to 3600", refused { allow = {}, ask = true, ask_timeout = 3601 }, 1, true)
    assert.matches("from 1 to 3600", refused { allow = {}, ask = true, ask_timeout = 1.5 }, 1, true)
    assert.matches("from 1 to 3600", refused { allow = {}, ask = true, ask_timeout = "30" }, 1, true)
    assert.matches("'ask_timeout' needs ask = true", refused { allow = {}, ask_timeout = 10 }, 1, true)
    assert.matches("unknown key 'ask_timout' (did you mean 'ask_timeout'?)",
      refused { allow = {}, ask = true, ask_timout = 10 }, 1, true)
    assert.matches("'ask' must be true or false", select(2, policy.load('{"allow":[],"ask":1}')).message, 1, true)
  end)
end)

describe("egress asks: answer's arguments", function()
  -- a stack whose proxy would be reached only after the checks: reaching it fails the test
  local stack = { project = "p", plan = { project = "p", proxy = { added = true, service = "proxy" }, containers = {} },
    eng = setmetatable({}, { __index = function() error("the proxy was reached") end }) }

  local function bad(reason, ...)
    local r, err = live.answer(stack, ...)
    assert.is_nil(r)
    assert.equal("invalid", err.kind)
    assert.equal(reason, err.reason)
  end

  it("refuses a bad id, decision, remember, reason or by before sending anything", function()
    bad("ask_id", 0, "allow")
    bad("ask_id", 1.5, "allow")
    bad("decision", 1, "maybe")
    bad("remember", 1, "allow", { remember = "forever" })
    bad("reason", 1, "deny", { reason = "line\nbreak" })
    bad("reason", 1, "deny", { reason = string.rep("x", 201) })
    bad("by", 1, "deny", { by = string.rep("x", 65) })
    assert.has_error(function() live.answer(stack, 1, "allow", { remmber = "once" }) end)
    -- a wrong type is a programming error: it raises
    assert.has_error(function() live.answer(stack, "1", "allow") end)
    assert.has_error(function() live.answer(stack, 1, "allow", { remember = 1 }) end)
  end)
end)

describe("egress asks: the callback pass", function()
  it("answers allow and deny, leaves a raised or unknown verdict pending, skips an ask gone meanwhile", function()
    local asks = { { id = 1, host = "a" }, { id = 2, host = "b" }, { id = 3, host = "c" }, { id = 4, host = "d" },
      { id = 5, host = "e" } }
    local sent = {}
    local function answer(id, d, o)
      if id == 5 then return nil, sandstack.core.error("not_found", "no_such_ask", "gone") end
      sent[#sent + 1] = { id, d, o.by, o.remember, o.reason }
      return { id = id }
    end
    local stderr = io.stderr
    io.stderr = { write = function() end } -- the raised callback's line
    local n = serve.pass(function() return asks end, answer, function(a)
      if a.host == "a" then return "allow", { remember = "session" } end
      if a.host == "b" then return "deny", { reason = "no", by = "me" } end
      if a.host == "c" then error("boom") end
      if a.host == "d" then return "perhaps" end
      return "deny"
    end)
    io.stderr = stderr
    assert.equal(2, n)
    assert.same({ { 1, "allow", "on_ask", "session" }, { 2, "deny", "me", nil, "no" } }, sent)
  end)

  it("passes a listing error on", function()
    local n, err = serve.pass(function() return nil, sandstack.core.error("proxy", "no_control", "down") end,
      function() error("not reached") end, function() return "allow" end)
    assert.is_nil(n)
    assert.equal("no_control", err.reason)
  end)
end)

describe("egress asks: the sbx backend", function()
  it("has the methods, each refusing as unsupported", function()
    local cls = getmetatable(require("sandstack.sbx.box").new {}).__index
    for _, m in ipairs { "egress_asks", "answer", "serve" } do
      local f = cls[m]
      assert.is_function(f, m)
      local r, err = f({}, 1, "allow")
      assert.is_nil(r)
      assert.equal("unsupported", err.kind)
      assert.matches("approvals", err.message, 1, true)
    end
  end)
end)

describe("egress asks: pool:serve's on_ask", function()
  it("is checked, and a tick's pass answers each in-use session's asks with the session named", function()
    local pool = assert(sandstack.docker.pool { name = "ask-unit", stack = { agent_port = 8080, image = "x" } })
    pool._proxy = { added = true, service = "proxy" } -- what the pool's plan says of its proxy
    local live_mod = require "sandstack.docker.egress_live"
    local real_asks, real_answer = live_mod.asks, live_mod.answer
    local pending = { ["p-1"] = { { id = 1, host = "a.test" } }, ["p-2"] = { { id = 7, host = "b.test" } } }
    local answered = {}
    live_mod.asks = function(stack) return pending[stack.plan.project] end
    live_mod.answer = function(stack, id, d, o)
      answered[#answered + 1] = { stack.plan.project, id, d, o.by }
      return { id = id }
    end
    local seen = {}
    local ok, n = pcall(pool._answer_asks, pool, {}, { in_use = { "p-1", "p-2" } }, function(a)
      seen[#seen + 1] = a.project .. ":" .. a.host
      return a.host == "a.test" and "allow" or "deny"
    end)
    live_mod.asks, live_mod.answer = real_asks, real_answer
    assert.is_true(ok, tostring(n))
    assert.equal(2, n)
    assert.same({ "p-1:a.test", "p-2:b.test" }, seen)
    assert.same({ { "p-1", 1, "allow", "on_ask" }, { "p-2", 7, "deny", "on_ask" } }, answered)
    local ok2, msg = pcall(pool.serve, pool, { on_ask = "yes" })
    assert.is_false(ok2)
    assert.matches("pool:serve: option 'on_ask' must be a function, got string", msg, 1, true)
  end)
end)
