-- The gateway with its workers unprivileged (config user = "nobody:docker", docs/gateway.md,
-- "The workers' user"): no worker runs as root, yet a session starts, is proxied to, has its
-- egress read live and is destroyed. A worker that is not root cannot give an added proxy its
-- control directory, so the live call goes by an Engine exec, and no directory is made.
-- #nginx #docker. nginx runs LuaJIT only; the luajit and asan modes load nothing here.
if jit or os.getenv("SANDSTACK_TEST_MODE") == "asan" then return end
local h = require "helpers"
local gh = require "gateway_harness"

local TOKENS = gh.TOKENS

describe("gateway: workers as nobody:docker #nginx #docker", function()
  local P = gh.PREFIX .. "usr-"
  local node

  setup(function()
    local stack = gh.stack_options { egress_policy = { allow = {} } }
    node = gh.start(gh.config { project_prefix = P, stack = stack, user = "nobody:docker" })
    assert(node:wait_adopted(60), node:error_log())
  end)

  teardown(function()
    if node then node:stop() end
    gh.cleanup(P)
  end)

  it("runs no worker as root, and serves a session from start to destroy", function()
    local workers = h.sh("ps -o uid=,args= --ppid " .. node:pid())
    local n = 0
    for uid, args in workers:gmatch("%s*(%d+)%s+([^\n]*)") do
      if args:find("worker process", 1, true) then
        n = n + 1
        assert.equal("65534", uid, args)
      end
    end
    assert.is_true(n >= 1, "no worker process under the master: " .. workers)

    local st, doc, body = node:api("POST", "/sessions/u1", { token = TOKENS.alice, timeout = 180 })
    assert.equal(201, st, tostring(body) .. node:error_log())
    local secret = doc.secret
    local _
    st, _, body = node:api("GET", "/sessions/u1/echo/x", { secret = secret })
    assert.equal(200, st, body)
    assert.truthy(body:find("GET /echo/x", 1, true), body)
    -- a live call to the added proxy, by an Engine exec: the workers could not make the control
    -- directory, which only root can give to the proxy's uid
    local asks; st, asks, body = node:api("GET", "/sessions/u1/egress/asks", { token = TOKENS.alice, secret = secret })
    assert.equal(200, st, tostring(body) .. node:error_log())
    assert.same({}, asks)
    local dirs = h.sh("ls /run/sandstack 2>/dev/null")
    assert.is_nil(dirs:find(P, 1, true), dirs)
    assert.equal(200, (node:api("DELETE", "/sessions/u1", { token = TOKENS.alice, secret = secret })))
    assert.equal(0, gh.count(P))
  end)
end)
