-- Tenants of one gateway cannot learn each other's session keys: every tenant has its
-- own key space. Tenant b's POST /sessions/<key> of a key tenant a holds creates b's own
-- session (its own stack, project and labels), and no route (POST, GET, DELETE, the proxied
-- /sessions/<key>/... with a plain answer or a stream) answers b differently for a's key than
-- for a key no one holds: same status, same body (the key aside), same headers. Attacked
-- through the real gateway in nginx with real stacks. #nginx #docker
-- nginx runs LuaJIT only; the luajit and asan modes exclude #nginx and load nothing here.
if jit or os.getenv("SANDSTACK_TEST_MODE") == "asan" then return end
local core = require "sandstack.core"
local h = require "helpers"
local gh = require "gateway_harness"

local TOKENS = gh.TOKENS

describe("gateway: a tenant's own key space #nginx #docker", function()
  local P = gh.PREFIX .. "k-"
  local node
  local alice, bob_own -- alice's session "k1"; bob's session "own"

  setup(function()
    node = gh.start(gh.config { project_prefix = P, nginx = { metrics = gh.ENTRY_LOCATION } })
    assert(node:wait_adopted(60), node:error_log())
    local st, doc, body = node:api("POST", "/sessions/k1", { token = TOKENS.alice, timeout = 180 })
    assert.equal(201, st, tostring(body) .. node:error_log())
    alice = doc
    st, doc, body = node:api("POST", "/sessions/own", { token = TOKENS.bob, timeout = 180 })
    assert.equal(201, st, tostring(body) .. node:error_log())
    bob_own = doc
  end)

  teardown(function()
    if node then node:stop() end
    gh.cleanup(P)
  end)

  -- What a request for `key` answers, with the key itself replaced, so that the answers for two
  -- keys of one length can be compared whole: status, body and the headers a client could read.
  local HEADERS = { "content-type", "content-length", "www-authenticate", "retry-after", "allow", "location",
    "transfer-encoding" }
  local function answer(method, key, path, opts)
    local status, _, body, headers = node:api(method, "/sessions/" .. key .. path, opts)
    local seen = { status = status, body = (body or ""):gsub(key, "<key>") }
    for _, k in ipairs(HEADERS) do seen[k] = headers and headers[k] end
    return seen
  end

  it("answers every route for another tenant's key exactly as for a key no one holds", function()
    local held, free = "k1", "k2" -- one length: even Content-Length must not differ
    local random = core.random_hex(32)
    local cases = {
      { "GET", "", { token = TOKENS.bob } },
      { "GET", "", { token = TOKENS.bob, secret = random } },
      { "GET", "", { token = TOKENS.bob, secret = alice.secret } }, -- even a's own secret
      { "GET", "", { token = TOKENS.bob, secret = bob_own.secret } },
      { "DELETE", "", { token = TOKENS.bob } },
      { "DELETE", "", { token = TOKENS.bob, secret = random } },
      { "DELETE", "", { token = TOKENS.bob, secret = alice.secret } },
      { "PUT", "", { token = TOKENS.bob } },
      -- the proxied routes need no tenant token at all: anyone could ask them
      { "GET", "/echo/x", {} },
      { "GET", "/echo/x", { secret = random } },
      { "GET", "/echo/x", { secret = bob_own.secret } },
      { "GET", "/echo/x", { token = TOKENS.bob, secret = bob_own.secret } },
      { "POST", "/echo/x", { secret = random, body = "talk" } },
      { "GET", "/stream?n=1", { secret = random } },
      { "GET", "/stream?n=1", {} },
      { "GET", "/echo/x", { secret = "" } },
    }
    for i, c in ipairs(cases) do
      local a = answer(c[1], held, c[2], c[3])
      local b = answer(c[1], free, c[2], c[3])
      assert.same(b, a, ("case %d (%s %s): a held key answers otherwise than a free one"):format(i, c[1], c[2]))
      assert.is_true(a.status >= 400, ("case %d: %d %s"):format(i, a.status, a.body))
    end
    -- the control: alice's own requests for k1 do reach her session
    assert.equal(200, (node:api("GET", "/sessions/k1", { token = TOKENS.alice, secret = alice.secret })))
    assert.equal(200, (node:api("GET", "/sessions/k1/echo/x", { secret = alice.secret })))
    assert.equal(200, (node:api("GET", "/sessions/own/echo/x", { secret = bob_own.secret })))
  end)

  it("another tenant's POST of a held key creates that tenant's own session, as for a free key", function()
    local st, doc, body = node:api("POST", "/sessions/k1", { token = TOKENS.bob, timeout = 180 })
    assert.equal(201, st, tostring(body))
    local st2, doc2, body2 = node:api("POST", "/sessions/k3", { token = TOKENS.bob, timeout = 180 })
    assert.equal(201, st2, tostring(body2))
    -- the same answer as for the free key k3: the same fields, a fresh secret
    for _, d in ipairs { doc, doc2 } do
      assert.matches("^" .. ("%x"):rep(64) .. "$", d.secret)
      assert.equal("/sessions/" .. d.key .. "/", d.endpoint_path)
    end
    assert.same({ "endpoint_path", "key", "secret" }, (function()
      local ks = {}
      for k in pairs(doc) do ks[#ks + 1] = k end
      table.sort(ks)
      return ks
    end)())
    assert.equal("k1", doc.key)
    assert.not_equal(alice.secret, doc.secret)
    -- two sessions of one key: two entries, two stacks, two projects, each labelled with its own
    local ea, eb = node:entry("k1.alice"), node:entry("k1.bob")
    assert.equal("alice", ea.tenant)
    assert.equal("bob", eb.tenant)
    assert.not_equal(ea.record.project, eb.record.project)
    assert.not_equal(ea.record.port, eb.record.port)
    local gateway = require "sandstack.gateway"
    assert.equal(gateway.project_for(node.conf, "alice", "k1"), ea.record.project)
    assert.equal(gateway.project_for(node.conf, "bob", "k1"), eb.record.project)
    local label = require("helpers").sh("docker ps -q --filter label=io.sandstack.project=" .. eb.record.project
      .. " --filter label=io.sandstack.session=k1.bob")
    assert.truthy(label:match("%x+"), "bob's stack carries his own session label")
    -- each secret reaches its own stack: the access log names the port nginx connected to
    for who, secret in pairs { alice = alice.secret, bob = doc.secret } do
      local path = "/sessions/k1/echo/route-" .. who
      local rst, _, rbody = node:api("GET", path, { secret = secret })
      assert.equal(200, rst, rbody)
      -- nginx writes the line in its log phase, after the answer went out: wait for it
      local port = h.wait_for(function() return who .. "'s access log line; " .. node:access_log() end, function()
        return node:access_log():match('"GET ' .. path:gsub("%-", "%%-") .. '" 200 %d+ upstream=127%.0%.0%.1:(%d+)')
      end, 5, 0.2)
      local want = who == "alice" and ea.record.port or eb.record.port
      assert.equal(tostring(want), port, who .. ": " .. node:access_log())
    end
    local _, va = node:api("GET", "/sessions/k1", { token = TOKENS.alice, secret = alice.secret })
    local _, vb = node:api("GET", "/sessions/k1", { token = TOKENS.bob, secret = doc.secret })
    assert.equal("alice", va.tenant)
    assert.equal("bob", vb.tenant)
    -- each tenant's key is taken in its own space only
    assert.equal(409, (node:api("POST", "/sessions/k1", { token = TOKENS.bob })))
    assert.equal(409, (node:api("POST", "/sessions/k1", { token = TOKENS.alice })))
    -- bob's DELETE of his k1 leaves alice's
    assert.equal(200, (node:api("DELETE", "/sessions/k1", { token = TOKENS.bob, secret = doc.secret })))
    assert.equal(200, (node:api("GET", "/sessions/k1/echo/x", { secret = alice.secret })))
    assert.equal(0, gh.count(eb.record.project))
    for _, c in ipairs { { "k1", TOKENS.alice, alice.secret }, { "own", TOKENS.bob, bob_own.secret },
      { "k3", TOKENS.bob, doc2.secret } } do
      assert.equal(200, (node:api("DELETE", "/sessions/" .. c[1], { token = c[2], secret = c[3] })))
    end
    assert.equal(0, gh.count(P))
  end)
end)
