-- A session over time through the production gateway in a real nginx with a real stack: POST
-- /sessions/<key>/pause|resume|hibernate|wake|snapshot with the tenant's token and the
-- session's secret, PATCH /sessions/<key> {"ttl"} and the expiry timer acting on it. Without a
-- tenant token such a POST is the agent's own route; another tenant's token finds nothing.
-- Needs nginx and the engine: #nginx #docker (lua54 only, as the other nginx specs).
if jit or os.getenv("SANDSTACK_TEST_MODE") == "asan" then return end
local h = require "helpers"
local gh = require "gateway_harness"
local docker = require("sandstack").docker

local TOKENS = gh.TOKENS

describe("gateway: a session over time #nginx #docker", function()
  local P = gh.PREFIX .. "t-"
  local node, s

  setup(function()
    node = gh.start(gh.config { project_prefix = P })
    local st, doc, body = node:api("POST", "/sessions/lt", { token = TOKENS.alice, timeout = 180 })
    assert.equal(201, st, tostring(body) .. node:error_log())
    s = doc
  end)

  teardown(function()
    if node then node:stop() end
    gh.cleanup(P)
    local mine = {}
    for _, x in ipairs(docker.snapshots() or {}) do
      if (x.source or ""):sub(1, #P) == P then mine[#mine + 1] = x.id end
    end
    if #mine > 0 then docker.remove_snapshot(mine) end
  end)

  local function talk()
    local st, _, body = node:api("GET", "/sessions/lt/echo/hi", { secret = s.secret, timeout = 10 })
    return st, body
  end
  local function call(verb, token, query)
    return node:api("POST", "/sessions/lt/" .. verb .. (query or ""), { token = token or TOKENS.alice, secret = s.secret })
  end

  it("pauses and resumes with the tenant's token; without one the path is the agent's", function()
    local st, doc, body = call("pause")
    assert.equal(200, st, body)
    assert.equal("paused", doc.state)
    -- the session table says so (GET, as the console's list), and proxied routes wait for a resume
    st, doc = node:api("GET", "/sessions/lt", { token = TOKENS.alice, secret = s.secret })
    assert.equal("paused", doc.state)
    assert.equal(503, (talk()))
    st = call("wake")
    assert.equal(409, st) -- a paused session is not hibernated
    st, doc = call("resume")
    assert.equal(200, st)
    assert.equal("ready", doc.state)
    assert.equal(200, (talk()))
    -- the secret alone: proxied to the agent (which has no such route), nothing paused
    local _ -- the answer this test does not read
    st, _, body = node:api("POST", "/sessions/lt/pause", { secret = s.secret })
    assert.not_equal(200, st, body)
    assert.equal(200, (talk()))
    -- another tenant's token: its own key space holds no such session
    st = call("pause", TOKENS.bob)
    assert.equal(404, st)
    assert.equal(200, (talk()))
  end)

  it("hibernates (proxied routes answer 503) and wakes on a new port, twice", function()
    for _ = 1, 2 do
      local st, doc, body = call("hibernate", nil, "?timeout=1")
      assert.equal(200, st, body)
      assert.equal("hibernated", doc.state)
      assert.equal(503, (talk()))
      st, doc = node:api("GET", "/sessions/lt", { token = TOKENS.alice, secret = s.secret })
      assert.equal("hibernated", doc.state)
      st = call("hibernate")
      assert.equal(409, st) -- already
      st, doc, body = call("wake")
      assert.equal(200, st, body)
      assert.equal("ready", doc.state)
      assert.equal(200, (talk()))
    end
  end)

  it("forks into a new session of the same tenant with its own secret", function()
    local st, doc, body = call("fork", nil, "?key=lt-child")
    assert.equal(201, st, body)
    assert.equal("lt-child", doc.key)
    assert.not_equal(s.secret, doc.secret)
    assert.matches("^snap%-%x+$", doc.snapshot.id)
    local cst = node:api("GET", "/sessions/lt-child/echo/c", { secret = doc.secret, timeout = 10 })
    assert.equal(200, cst)
    assert.equal(404, (node:api("GET", "/sessions/lt-child/echo/c", { secret = s.secret })))
    st = node:api("DELETE", "/sessions/lt-child", { token = TOKENS.alice, secret = doc.secret, timeout = 180 })
    assert.equal(200, st)
    -- the fork's snapshot was the child's: it went with it (gateway_snapshots_spec.lua)
    h.wait_for("the fork's snapshot to go with the child", function()
      for _, x in ipairs(assert(docker.snapshots())) do if x.id == doc.snapshot.id then return false end end
      return true
    end, 180, 0.2)
  end)

  it("snapshots, and a PATCHed ttl makes the expiry timer destroy the session", function()
    local st, doc, body = call("snapshot", nil, "?name=gw")
    assert.equal(200, st, body)
    assert.matches("^snap%-%x+$", doc.snapshot.id)
    assert.equal("gw", doc.snapshot.name)
    assert.same({ doc.snapshot.id }, assert(docker.remove_snapshot(doc.snapshot.id)))
    st = node:api("PATCH", "/sessions/lt", { token = TOKENS.alice, secret = s.secret, body = '{"ttl": "soon"}' })
    assert.equal(400, st)
    st, doc, body = node:api("PATCH", "/sessions/lt", { token = TOKENS.alice, secret = s.secret, body = '{"ttl": 1}' })
    assert.equal(200, st, body .. node:error_log():sub(-3000))
    assert.is_number(doc.expires.at)
    assert.truthy(h.wait_for(function() return "the expiry; " .. node:error_log() end, function()
      return node:api("GET", "/sessions/lt", { token = TOKENS.alice, secret = s.secret }) == 404
    end, 30, 0.2))
    assert.equal(0, gh.count(P))
  end)
end)
