-- The gateway's console (docs/gateway.md, "The console") in a real nginx with real stacks, and
-- in a real browser: headless Debian chromium driven by playwright-core
-- (spec/support/console_browser.js) signs in, creates a session, types into its terminal and
-- resizes it, sees an egress refusal in the audit log, denies an ask, pauses and resumes, runs axe-core,
-- destroys, and signs in as another tenant; on a gateway of pooled sessions without a proxy, it
-- snapshots and forks and sees neither an egress panel nor a project name. Screenshots of each step go to
-- .ci/artifacts/console/ (CI keeps them). Beside it, the console's API from curl: tickets, the
-- tenant rule, the headers. Needs nginx, the engine, node and chromium: #nginx #docker.
-- nginx runs LuaJIT only; the luajit and asan modes exclude #nginx and load nothing here (the
-- browser test is the same in every mode, so it runs once, in lua54).
if jit or os.getenv("SANDSTACK_TEST_MODE") == "asan" then return end
local h = require "helpers"
local gh = require "gateway_harness"
local core = require "sandstack.core"

local TOKENS = gh.TOKENS
local SHOTS = gh.root .. "/.ci/artifacts/console"

-- alice's call of the console's API .../sessions<path>: its status and document. Nothing
-- banned(body) finds is in the answer, and the status is want when given.
local function api(node, banned, method, path, want)
  local st, doc, body = node:api(method, "/console/api/sessions" .. path, { token = TOKENS.alice, timeout = 180 })
  assert.falsy(banned(body), body)
  if want then assert.equal(want, st, body .. node:error_log()) end
  return st, doc
end

-- A new session, a snapshot of it (named "con") and a fork: its key, the fork's, and the fork's
-- answer. call: as api's, bound to a node.
local function snapshot_and_fork(call)
  local _, doc = call("POST", "", 201)
  local key = doc.key
  _, doc = call("POST", "/" .. key .. "/snapshot?name=con", 200)
  assert.equal("con", doc.snapshot.name)
  _, doc = call("POST", "/" .. key .. "/fork", 201)
  return key, doc.key, doc
end

-- The node stopped, and every object and snapshot of its projects (prefix P) removed.
local function stop(node, P)
  if node then node:stop() end
  gh.cleanup(P)
  local docker, mine = require("sandstack").docker, {}
  for _, x in ipairs(docker.snapshots() or {}) do
    if (x.source or ""):sub(1, #P) == P then mine[#mine + 1] = x.id end
  end
  if #mine > 0 then docker.remove_snapshot(mine) end
end

describe("the console #nginx #docker", function()
  local P = gh.PREFIX .. "con-"
  local node

  setup(function()
    -- this tree's proxy (the ask hook) under names of this spec's own
    local build = package.cpath:match("^%.?/?([^;]-)/%?%.so") or "build"
    local tag = build:gsub("[^%w.-]", "-")
    assert(require("sandstack").docker.build_images { proxy_binary = gh.root .. "/" .. build .. "/sandstack-proxy",
      proxy_image = "sandstack-test/proxy-console:" .. tag, forwarder_image = "sandstack-test/socat-console:" .. tag })
    -- one host that no one serves, for GET /ok/* only: another path of it is refused at once,
    -- and a request to any other host is held as an ask until the console answers it
    node = gh.start(gh.config { project_prefix = P, max_sessions = 6,
      stack = gh.stack_options { proxy_image = "sandstack-test/proxy-console:" .. tag,
        egress_policy = { allow = { { host = "allowed.test", port = 80, methods = { "GET" }, paths = { "/ok/*" } } }, ask = true,
          ask_timeout = 120 } } })
  end)

  teardown(function() stop(node, P) end)

  it("serves the page with a CSP and no inline script", function()
    local st, _, body, hdrs = node:api("GET", "/console/")
    assert.equal(200, st)
    assert.truthy(body:find("<title>sandstack console</title>", 1, true))
    assert.falsy(body:find("<script>", 1, true)) -- every script has a src
    assert.falsy(body:find(" on%a+="))          -- no inline handler
    local csp = hdrs["content-security-policy"]
    assert.truthy(csp and csp:find("script-src 'self';", 1, true), csp)
    assert.equal("nosniff", hdrs["x-content-type-options"])
    assert.equal("DENY", hdrs["x-frame-options"])
    local jst, _, _, jh = node:api("GET", "/console/vendor/xterm.js")
    assert.equal(200, jst)
    assert.truthy(jh["content-type"]:find("javascript", 1, true))
  end)

  it("takes the tenant token, mints single-use tickets and keeps tenants apart", function()
    assert.equal(401, (node:api("GET", "/console/api/sessions")))
    local st, doc, body = node:api("POST", "/console/api/sessions", { token = TOKENS.alice, timeout = 180 })
    assert.equal(201, st, body .. node:error_log())
    assert.is_nil(doc.secret) -- the console's create answers without the session's secret
    local key = doc.key
    st, doc, body = node:api("GET", "/console/api/sessions", { token = TOKENS.alice })
    assert.equal(200, st)
    assert.equal(key, doc.sessions[1].key)
    assert.falsy(body:find('"record"', 1, true) or body:find('"digest"', 1, true) or body:find('"secret"', 1, true), body)
    -- bob: none of alice's sessions, and none of her keys answer
    st, doc = node:api("GET", "/console/api/sessions", { token = TOKENS.bob })
    assert.equal(200, st)
    assert.equal(0, #doc.sessions)
    assert.equal(404, (node:api("POST", "/console/api/sessions/" .. key .. "/ticket", { token = TOKENS.bob })))
    assert.equal(404, (node:api("DELETE", "/console/api/sessions/" .. key, { token = TOKENS.bob })))
    assert.equal(404, (node:api("GET", "/console/api/sessions/" .. key .. "/stats", { token = TOKENS.bob })))
    -- a ticket opens the WebSocket once; a second use and a made-up one are refused
    st, doc = node:api("POST", "/console/api/sessions/" .. key .. "/ticket", { token = TOKENS.alice })
    assert.equal(201, st)
    local ws = { Upgrade = "websocket", Connection = "Upgrade", ["Sec-WebSocket-Version"] = "13",
      ["Sec-WebSocket-Key"] = "dGhlIHNhbXBsZSBub25jZQ==" }
    local path = "/console/api/sessions/" .. key .. "/terminal?ticket=" .. doc.ticket
    local first = node.srv:spawn("GET", path, { headers = ws, timeout = 4 })
    local fst, _, fh = first:wait(10)
    assert.equal(101, fst)
    assert.equal("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", fh["sec-websocket-accept"])
    assert.equal(403, (node:api("GET", path, { headers = ws })))
    assert.equal(403, (node:api("GET", "/console/api/sessions/" .. key .. "/terminal?ticket=" .. core.random_hex(16),
      { headers = ws })))
    -- another origin cannot use a ticket either
    st, doc = node:api("POST", "/console/api/sessions/" .. key .. "/ticket", { token = TOKENS.alice })
    local evil = {}
    for k, v in pairs(ws) do evil[k] = v end
    evil.Origin = "http://evil.example"
    assert.equal(403, (node:api("GET", "/console/api/sessions/" .. key .. "/terminal?ticket=" .. doc.ticket,
      { headers = evil })))
    -- the ticket never reaches the access log (it logs the path without the query)
    assert.falsy(node:access_log():find(doc.ticket, 1, true))
    assert.equal(200, (node:api("DELETE", "/console/api/sessions/" .. key, { token = TOKENS.alice })))
  end)

  it("snapshots, forks, hibernates and wakes by the tenant token alone, and sends no secret", function()
    local function call(method, path, want)
      return api(node, function(b) return b:find('"secret"', 1, true) or b:find('"record"', 1, true) end, method, path, want)
    end
    local key, child, doc = snapshot_and_fork(call)
    assert.is_nil(doc.secret)
    assert.matches("^snap%-%x+$", doc.snapshot.id)
    assert.equal(200, (call("DELETE", "/" .. child)))
    local _ -- the status: call asserts it
    _, doc = call("POST", "/" .. key .. "/hibernate?timeout=1", 200)
    assert.equal("hibernated", doc.state)
    assert.equal(409, (call("POST", "/" .. key .. "/ticket"))) -- no terminal into a stopped stack
    _, doc = call("GET", "", 200)
    assert.equal("hibernated", doc.sessions[1].state)
    _, doc = call("POST", "/" .. key .. "/wake", 200)
    assert.equal("ready", doc.state)
    -- h:stats samples every container of the stack; a loaded engine may not answer one in time
    local st
    for _ = 1, 3 do
      st, doc = call("GET", "/" .. key .. "/stats")
      if st == 200 or doc.error.kind ~= "transport" then break end
    end
    assert.equal(200, st)
    assert.is_number(doc.mem)
    assert.truthy(doc.egress:find("allowed.test", 1, true))
    assert.equal(200, (call("DELETE", "/" .. key)))
    assert.equal(404, (call("GET", "/" .. key .. "/stats")))
  end)

  it("works in a real browser (chromium, playwright-core, axe-core)", function()
    assert.truthy(h.read_file(gh.root .. "/web/node_modules/playwright-core/package.json"),
      "web/node_modules is missing: run scripts/vendor-console.sh")
    h.sh("rm -rf " .. h.q(SHOTS))
    local cmd = ("cd %s && CONSOLE_URL=%s TOKEN_A=%s TOKEN_B=%s SHOTS=%s timeout 600 node spec/support/console_browser.js 2>&1")
      :format(h.q(gh.root), h.q(node.srv:url("")), h.q(TOKENS.alice), h.q(TOKENS.bob), h.q(SHOTS))
    local out, ok = h.sh(cmd)
    print("# console screenshots: " .. SHOTS)
    for line in out:gmatch("[^\n]+") do print("# " .. line) end
    assert.truthy(ok and out:find("console browser test: ok", 1, true), out .. node:error_log())
    -- tenant a's second session is still there for a, and bob never saw it
    local keyA = out:match("KEY_A=(%S+)")
    local _, doc = node:api("GET", "/console/api/sessions", { token = TOKENS.alice })
    assert.equal(keyA, doc.sessions[1] and doc.sessions[1].key)
    assert.equal(200, (node:api("DELETE", "/console/api/sessions/" .. keyA, { token = TOKENS.alice })))
  end)
end)

-- The example configuration's shape: sessions from a warm pool, a stack without the proxy
-- sandstack adds. Snapshot and fork work on a pooled session (not a 502), the page offers no
-- egress panel for a stack without a proxy, and no answer names a project of the gateway.
describe("the console of a pooled gateway #nginx #docker", function()
  local P = gh.PREFIX .. "cpl-"
  local node

  setup(function()
    node = gh.start(gh.config { project_prefix = P, max_sessions = 6, pool = { size = 1, max = 3, interval = 1 } })
  end)

  teardown(function() stop(node, P) end)

  it("snapshots and forks a pooled session, and tells its failures by its key", function()
    local function call(method, path, want) -- no project of the gateway, a pool's or a session's
      return api(node, function(b) return b:find(P, 1, true) end, method, path, want)
    end
    local key, child = snapshot_and_fork(call)
    local _, doc = call("GET", "", 200)
    for _, s in ipairs(doc.sessions) do
      assert.is_false(s.egress, s.key) -- no proxy: the page offers no egress panel
    end
    _, doc = call("GET", "/" .. key .. "/egress/asks", 409) -- the stack has no proxy to hold asks
    assert.truthy(doc.error.message:find(key, 1, true), doc.error.message)
    assert.equal(200, (call("DELETE", "/" .. child)))
    assert.equal(200, (call("DELETE", "/" .. key)))
  end)

  it("offers a pooled session what it can do, in a real browser", function()
    assert.truthy(h.read_file(gh.root .. "/web/node_modules/playwright-core/package.json"),
      "web/node_modules is missing: run scripts/vendor-console.sh")
    local shots = SHOTS .. "-pooled"
    h.sh("rm -rf " .. h.q(shots))
    local cmd = ("cd %s && CONSOLE_URL=%s TOKEN_A=%s POOLED_PREFIX=%s SHOTS=%s timeout 600 node spec/support/console_browser.js 2>&1")
      :format(h.q(gh.root), h.q(node.srv:url("")), h.q(TOKENS.alice), h.q(P), h.q(shots))
    local out, ok = h.sh(cmd)
    print("# console screenshots: " .. shots)
    for line in out:gmatch("[^\n]+") do print("# " .. line) end
    assert.truthy(ok and out:find("console browser test: ok", 1, true), out .. node:error_log())
  end)
end)
