-- Console and ask streams have a cap, and one session's streams share one poller, so that one
-- tenant's streams cannot starve the thread pool every tenant's requests need. Attacked with a
-- real nginx (2 threads, 4 thread-pool VMs) and real stacks whose added proxy holds asks: tenant
-- bob opens 30 console audit streams (which poll on through a full pool) on one session while
-- tenant alice's requests must all be answered; the streams beyond max_streams_per_session
-- (default 4) and max_streams_per_tenant (default 8, ask streams counted too) get 429 limit;
-- alice still opens hers; a place comes back once a stream ends.
-- #nginx #docker (lua54 only, as the other nginx specs).
if jit or os.getenv("SANDSTACK_TEST_MODE") == "asan" then return end
local core = require "sandstack.core"
local gh = require "gateway_harness"
local h = require "helpers"

local TOKENS = gh.TOKENS
-- this tree's proxy, under a name of its own (another tree's spec may rebuild the shared names)
local PROXY_IMAGE, FORWARDER_IMAGE = "sandstack-test/proxy-ask:streams", "sandstack-test/forwarder-ask:streams"

describe("gateway streams: a cap per tenant and per session #nginx #docker", function()
  local P = gh.PREFIX .. "st-"
  local node
  local s = {} -- key -> the POST answer {key, secret}

  setup(function()
    assert(require("sandstack").docker.build_images { proxy_binary = "build/sandstack-proxy",
      proxy_image = PROXY_IMAGE, forwarder_image = FORWARDER_IMAGE })
    local stack = gh.stack_options { egress_policy = { allow = {}, ask = true }, proxy_image = PROXY_IMAGE }
    -- a small pool, as an operator of a small machine sets it; the expiry pass (which takes a VM)
    -- an hour apart, so that only the streams and the requests below use the pool
    node = gh.start(gh.config { project_prefix = P, stack = stack, threads = 2, vms = 4, expiry_interval = 3600 })
    assert(node:wait_adopted(60), node:error_log())
    for _, k in ipairs { { "alice", "va" }, { "bob", "x1" }, { "bob", "x2" }, { "bob", "x3" } } do
      local st, doc, body = node:api("POST", "/sessions/" .. k[2], { token = TOKENS[k[1]], timeout = 180 })
      assert.equal(201, st, tostring(body) .. node:error_log():sub(-3000))
      s[k[2]] = doc
    end
  end)

  teardown(function()
    if node then node:stop() end
    gh.cleanup(P)
  end)

  local function stream(tenant, key, seconds)
    return node.srv:spawn("GET", "/sessions/" .. key .. "/egress/asks/stream", { timeout = seconds,
      headers = { Authorization = "Bearer " .. TOKENS[tenant], ["X-Sandstack-Session-Secret"] = s[key].secret } })
  end
  local function audit(tenant, key, seconds)
    return node.srv:spawn("GET", "/console/api/sessions/" .. key .. "/egress/log", { timeout = seconds,
      headers = { Authorization = "Bearer " .. TOKENS[tenant] } })
  end
  -- the status of a held stream (curl ends it at its --max-time: the status line came first)
  local function status(job, seconds) return (job:wait(seconds)) end

  it("keeps answering another tenant while one holds 30 streams; the streams beyond the caps get 429", function()
    local held = {}
    for i = 1, 30 do held[i] = audit("bob", "x1", 25) end
    os.execute("sleep 2")
    -- alice's requests go through the same thread pool: every one is answered
    local answers = {}
    for i = 1, 20 do
      local st, _, body = node:api("GET", "/sessions/va/egress/asks", { token = TOKENS.alice, secret = s.va.secret,
        timeout = 20 })
      answers[i] = tostring(st) .. (st == 200 and "" or (" " .. body))
      os.execute("sleep 0.1")
    end
    local all200 = {}
    for i = 1, 20 do all200[i] = "200" end
    assert.same(all200, answers)
    -- 4 of bob's 30 streams on x1 are open; the others were refused at once, saying why
    local refused, open, other = 0, 0, {}
    for _, job in ipairs(held) do
      if job:done() then
        local st, body, headers = job:wait(1)
        local doc = core.json_decode(body) or {}
        if st == 429 and doc.error and doc.error.kind == "limit" and doc.error.reason == "streams_session" then
          assert.truthy(doc.error.message:find("max_streams_per_session", 1, true), doc.error.message)
          assert.equal("10", headers["retry-after"])
          refused = refused + 1
        else
          other[#other + 1] = tostring(st) .. " " .. body
        end
      else
        open = open + 1
      end
    end
    assert.same({ 26, 4, {} }, { refused, open, other })
    -- the tenant's cap: 4 more on x2 (ask streams of the API among them) make 8; x3 is refused
    local x2 = { stream("bob", "x2", 25), stream("bob", "x2", 25), stream("bob", "x2", 25), audit("bob", "x2", 25) }
    os.execute("sleep 2")
    for _, job in ipairs(x2) do assert.is_false(job:done()) end
    local st, body = node.srv:request("GET", "/sessions/x3/egress/asks/stream", { timeout = 10,
      headers = { Authorization = "Bearer " .. TOKENS.bob, ["X-Sandstack-Session-Secret"] = s.x3.secret } })
    assert.equal(429, st, body)
    assert.equal("streams_tenant", core.json_decode(body).error.reason)
    -- alice is not bob: her stream opens
    assert.equal(200, status(stream("alice", "va", 3), 30))
    -- once bob's streams end, their places come back (an ended stream is noticed at its next write)
    for _, job in ipairs(held) do job:wait(60) end
    for _, job in ipairs(x2) do job:wait(60) end
    h.wait_for(function() return "a stream place given back: " .. node:error_log():sub(-3000) end,
      function() return status(stream("bob", "x3", 2), 30) == 200 end, 40, 0.2)
  end)
end)
