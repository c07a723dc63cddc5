-- engine:perform, the batch call the stack executor makes once per step, against the
-- engine double's faults (spec/support/engine_double.py): every answer keeps its place in the
-- batch and its own shape, JSON is decoded in the C core, a hung request ends at its own
-- deadline without holding the others, and the batch is one call into the core.
local sandstack = require "sandstack"
local core = sandstack.core

describe("sandstack.engine perform (a batch in one call)", function()
  local fake, sock, eng

  setup(function()
    fake = require("engine_double").start("faults")
    sock = fake.sock
  end)

  teardown(function() fake.stop() end)

  before_each(function() eng = assert(sandstack.engine { host = "unix://" .. sock, timeout = 5 }) end)
  after_each(function() eng:close() end)

  it("answers every request in its place and shape", function()
    local rs = eng:perform({
      { "POST", "/echo", '{"Name":"a","List":[]}' },   -- JSON text is sent as it is
      { "GET", "/garbage" },                             -- JSON-typed, does not parse
      { "GET", "/jsonerr" },                             -- 409, not accepted
      { "GET", "/jsonerr", nil, nil, ok = { [409] = true } },
      { "GET", "/texterr" },                             -- 500 text/plain
      { "GET", "/_ping", nil, { raw = true } },
      { "POST", "/echo", { Image = "x" }, { query = { name = "n1" } } }, -- a table is encoded
    })
    assert.equal(7, #rs)
    assert.is_true(rs[1].ok)
    assert.equal("/v1.43/echo", rs[1].body.target)
    assert.equal('{"Name":"a","List":[]}', rs[1].body.body) -- byte for byte: the empty list stays a list
    assert.is_false(rs[2].ok)
    assert.equal("bad_json", rs[2].err.reason)
    assert.is_false(rs[3].ok)
    assert.equal(409, rs[3].status)
    assert.equal("engine", rs[3].err.kind)
    assert.equal("fake conflict", rs[3].err.message)
    assert.equal("/jsonerr", rs[3].err.path)
    assert.is_true(rs[4].ok)
    assert.equal(409, rs[4].status)
    assert.is_false(rs[5].ok)
    assert.equal(500, rs[5].status)
    assert.is_true(rs[6].ok)
    assert.equal("OK", rs[6].body)
    assert.equal("/v1.43/echo?name=n1", rs[7].body.target)
    assert.equal("x", core.json_decode(rs[7].body.body).Image)
  end)

  it("ends a hung request at its own deadline while the others answer", function()
    local t0 = core.engine_clock()
    local rs = eng:perform({
      { "GET", "/hang", nil, { timeout = 0.5 } },
      { "GET", "/echo" },
      { "GET", "/drop" },
    })
    local took = core.engine_clock() - t0
    assert.is_false(rs[1].ok)
    assert.equal("transport", rs[1].err.kind)
    assert.is_true(rs[2].ok)
    assert.is_false(rs[3].ok)
    assert.equal("transport", rs[3].err.kind)
    assert.is_true(took < 4, "the batch waited for the hung request's deadline only: " .. took)
  end)

  it("is one call into the core for the whole batch", function()
    local calls = 0
    local perform = getmetatable(eng._h).__index.perform
    debug.sethook(function()
      if debug.getinfo(2, "f").func == perform then calls = calls + 1 end
    end, "c")
    local rs = eng:perform({ { "GET", "/echo" }, { "GET", "/echo" }, { "GET", "/echo" }, { "GET", "/_ping", nil, { raw = true } } })
    debug.sethook()
    assert.equal(4, #rs)
    assert.equal(1, calls)
  end)

  -- Pipelining: a call returns as soon as a watched request has settled, handing back
  -- the ones still in flight as {pending = id}; a later call collects them (settled as if waited
  -- for) without sending them again, and a wave with a pending request sends no later wave. The
  -- stack start runs a dependency's healthcheck this way while the other starts are in flight.
  it("returns with the watched answer and hands back what is still in flight", function()
    local t0 = core.engine_clock()
    local rs, later = eng:perform({
      { "GET", "/hang", nil, { timeout = 1 } },
      { "GET", "/echo", watch = true },
    }, nil, { { "GET", "/echo" } })
    local took = core.engine_clock() - t0
    assert.is_true(took < 0.8, "the call waited for the watched request only: " .. took)
    assert.is_nil(later) -- a wave with a pending request sends no later wave
    assert.is_true(rs[2].ok)
    assert.equal("/v1.43/echo", rs[2].body.target)
    local id = rs[1].pending
    assert.is_number(id)
    assert.is_nil(rs[1].ok)
    -- collected by a later call, alongside a new request, and settled then: not sent again
    local got = eng:perform({ { "GET", "/hang", nil, { timeout = 1 }, pending = id }, { "GET", "/echo" } })
    assert.is_false(got[1].ok)
    assert.equal("transport", got[1].err.kind)
    assert.equal("/hang", got[1].err.path)
    assert.is_true(got[2].ok)
    assert.is_true(core.engine_clock() - t0 < 3)
  end)

  it("waits for everything when nothing is watched, and settles a collected answer with its ok", function()
    local rs = eng:perform({ { "GET", "/jsonerr", watch = true, ok = { [409] = true } }, { "GET", "/echo" } })
    assert.is_true(rs[1].ok)
    assert.equal(409, rs[1].status)
    if rs[2].pending then -- the echo may still be on its way: collected the same way
      rs[2] = eng:perform({ { "GET", "/echo", pending = rs[2].pending } })[1]
    end
    assert.is_true(rs[2].ok)
    local all = eng:perform({ { "GET", "/echo" }, { "GET", "/echo" } })
    assert.is_true(all[1].ok and all[2].ok)
  end)

  it("refuses a pending id that names no transfer", function()
    assert.has_error(function() eng:perform({ { "GET", "/echo", pending = 999 } }) end,
      "perform: 'pending' names no transfer in flight")
  end)

  it("raises on misuse and refuses after close", function()
    assert.has_error(function() eng:perform("x") end)
    assert.has_error(function() eng:perform({ { 42, "/echo" } }) end)
    assert.has_error(function() eng:perform({ { "GET", "/echo", nil, { bogus = 1 } } }) end)
    eng:close()
    assert.has_error(function() eng:perform({ { "GET", "/echo" } }) end, "the engine client is closed")
    eng = assert(sandstack.engine { host = "unix://" .. sock, timeout = 5 })
  end)
end)
