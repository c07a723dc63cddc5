-- The gateway's egress-ask routes with a real stack in a real nginx: GET
-- /sessions/<key>/egress/asks lists what the session's proxy holds, .../stream sends each new
-- ask as a server-sent event, POST .../asks/<id> answers it (recorded as by the tenant), and
-- another tenant can neither list nor answer them. The ask is a plain-HTTP request from inside
-- the sandbox to a host no rule admits (held before any resolve: nothing leaves the machine).
-- #nginx #docker. nginx runs LuaJIT only; the luajit and asan modes load nothing here.
if jit or os.getenv("SANDSTACK_TEST_MODE") == "asan" then return end
local core = require "sandstack.core"
local h = require "helpers"
local gh = require "gateway_harness"

local TOKENS = gh.TOKENS
-- this tree's proxy, under a name of its own (another tree's spec may rebuild the shared names)
local PROXY_IMAGE, FORWARDER_IMAGE = "sandstack-test/proxy-ask:gateway", "sandstack-test/forwarder-ask:gateway"

describe("gateway: egress asks #nginx #docker", function()
  local P = gh.PREFIX .. "ask-"
  local node, s, work

  local function asks(token, secret)
    return node:api("GET", "/sessions/q1/egress/asks", { token = token, secret = secret })
  end

  local function sandbox()
    local names = h.must("docker ps --format '{{.Names}}'")
    for n in names:gmatch("[^\n]+") do
      if n:sub(1, #P) == P and n:match("%-sandbox$") then return n end
    end
  end

  setup(function()
    local docker = require("sandstack").docker
    assert(docker.build_images { proxy_binary = "build/sandstack-proxy", proxy_image = PROXY_IMAGE,
      forwarder_image = FORWARDER_IMAGE })
    h.must("bash spec/support/client-image.sh")
    local stack = gh.stack_options {
      egress_policy = { allow = {}, ask = true, ask_timeout = 120 }, proxy_image = PROXY_IMAGE,
      services = { { name = "sandbox", image = "sandstack-test/client:local", command = { "agent" },
        env = { AGENT_PORT = "8080" } } },
    }
    node = gh.start(gh.config { project_prefix = P, stack = stack })
    assert(node:wait_adopted(60), node:error_log())
    local st, doc, body = node:api("POST", "/sessions/q1", { token = TOKENS.alice, timeout = 180 })
    assert.equal(201, st, tostring(body) .. node:error_log())
    s = doc
    work = h.must("mktemp -d /tmp/sstest-gwask.XXXXXX"):gsub("%s+$", "")
  end)

  teardown(function()
    if node then node:stop() end
    gh.cleanup(P)
    if work then h.sh("rm -rf " .. h.q(work)) end
  end)

  it("lists, streams and answers an ask; another tenant sees none of it", function()
    local out = work .. "/held.out"
    h.must(("docker exec %s curl -sS -i --max-time 60 http://held.test/data > %s 2>&1 &"):format(sandbox(), h.q(out)))
    local list
    assert.truthy(h.wait_for(function() return "the ask listed; " .. node:error_log() end, function()
      local st, doc = asks(TOKENS.alice, s.secret)
      if st == 200 and #doc == 1 then list = doc; return true end
    end, 30, 0.2))
    local a = list[1]
    assert.same({ host = "held.test", port = 80, method = "GET", path = "/data", service = "http" },
      { host = a.host, port = a.port, method = a.method, path = a.path, service = a.service })
    assert.is_number(a.id)
    assert.is_number(a.at)
    -- the stream: the pending ask as an event
    local st, _, body, headers = node:api("GET", "/sessions/q1/egress/asks/stream",
      { token = TOKENS.alice, secret = s.secret, timeout = 2 })
    assert.equal("text/event-stream", headers["content-type"], tostring(st))
    assert.matches("event: ask\nid: " .. a.id .. "\ndata: {", body, 1, true)
    assert.matches('"host":"held.test"', body, 1, true)
    -- tenant bob, even with alice's secret: no such session, for listing and for answering
    assert.equal(404, (asks(TOKENS.bob, s.secret)))
    assert.equal(404, (node:api("POST", "/sessions/q1/egress/asks/" .. a.id,
      { token = TOKENS.bob, secret = s.secret, body = '{"decision":"allow"}' })))
    assert.equal(404, (node:api("GET", "/sessions/q1/egress/asks/stream", { token = TOKENS.bob, secret = s.secret })))
    -- a bad answer is refused and leaves the ask pending
    st = node:api("POST", "/sessions/q1/egress/asks/" .. a.id, { token = TOKENS.alice, secret = s.secret,
      body = '{"decision":"maybe"}' })
    assert.equal(400, st)
    assert.equal(1, #select(2, asks(TOKENS.alice, s.secret)))
    -- alice denies it: the sandbox reads the reason, the answer is hers
    local doc
    st, doc = node:api("POST", "/sessions/q1/egress/asks/" .. a.id, { token = TOKENS.alice, secret = s.secret,
      body = core.json_encode { decision = "deny", reason = "not from the gateway" } })
    assert.equal(200, st)
    assert.same({ id = a.id, decision = "deny", remembered = false, by = "alice" }, doc)
    assert.truthy(h.wait_for("the 403", function() return (h.read_file(out) or ""):find("403", 1, true) end, 30, 0.2))
    local text = h.read_file(out)
    assert.matches("ask_denied", text, 1, true)
    assert.matches("denied by alice when asked: not from the gateway", text, 1, true)
    -- answered: gone from the list, and a second answer finds nothing
    st, doc = asks(TOKENS.alice, s.secret)
    assert.equal(200, st)
    assert.equal("[]", (select(3, asks(TOKENS.alice, s.secret)):gsub("%s", "")))
    assert.equal(404, (node:api("POST", "/sessions/q1/egress/asks/" .. a.id, { token = TOKENS.alice,
      secret = s.secret, body = '{"decision":"allow"}' })))
  end)
end)
