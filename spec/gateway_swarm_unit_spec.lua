-- The gateway's swarm backend without a cluster (every mode): the configuration it accepts and
-- refuses, the nginx.conf it renders (docs/gateway.md "On a swarm"), and worker 0's expiry timer
-- against a scripted swarm (spec/support/scripted_engine.lua). The backend on a real
-- swarm, through real gateways and the front: spec/swarm_cluster_spec.lua.
local core = require "sandstack.core"
local config = require "sandstack.gateway.config"
local nginx_conf = require "sandstack.gateway.nginx_conf"

local function base(extra)
  local t = { tenants = { { name = "a", token_sha256 = core.sha256_hex("t") } },
    stack = { docker_host = "unix:///run/manager.sock", services = {} } }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local PATHS = { config = "/x/gateway.json", lua_path = "/l/?.lua;;", lua_cpath = "/c/?.so;;" }

describe("gateway backend swarm: config", function()
  it("defaults to docker, and takes swarm with this node's name and a cache time", function()
    assert.equal("docker", assert(config.check(base())).backend)
    local c = assert(config.check(base { backend = "swarm", swarm = { node = "node-1" } }))
    assert.equal("swarm", c.backend)
    assert.equal("node-1", c.swarm.node)
    assert.equal(5, c.swarm.cache_ttl)
  end)

  it("refuses what it cannot do, naming the option", function()
    local cases = {
      { { backend = "kubernetes" }, "backend" },
      { { backend = "swarm" }, "swarm" },
      { { backend = "swarm", swarm = { node = "" } }, "swarm" },
      { { backend = "swarm", swarm = { node = "n", hash = true } }, "swarm" },
      { { backend = "swarm", swarm = { node = "n", cache_ttl = 0 } }, "swarm" },
      { { backend = "swarm", swarm = { node = "n" }, pool = { size = 1 } }, "pool" },
      { { swarm = { node = "n" } }, "swarm" },
    }
    for _, case in ipairs(cases) do
      local c, err = config.check(base(case[1]))
      assert.is_nil(c, core.json_encode(case[1]))
      assert.equal("invalid_option", err.reason)
      assert.equal(case[2], err.option, err.message)
    end
    local t = base { backend = "swarm", swarm = { node = "n" } }
    t.stack.docker_host = nil
    local c, err = config.check(t)
    assert.is_nil(c)
    assert.equal("stack", err.option)
  end)
end)

describe("gateway backend swarm: nginx.conf", function()
  local docker = nginx_conf.render(assert(config.check(base())), PATHS)
  local swarm = nginx_conf.render(assert(config.check(base { backend = "swarm", swarm = { node = "n" } })), PATHS)

  it("sends the secret on only to the next gateway, never to the agent's loopback port alone", function()
    -- docker: always stripped; swarm: the variable the route sets ("" for the node's own forwarder)
    assert.truthy(docker:find('proxy_set_header X-Sandstack-Session-Secret "";', 1, true))
    assert.is_nil(docker:find("sandstack_fwd_secret", 1, true))
    assert.is_nil(swarm:find('X-Sandstack-Session-Secret "";', 1, true))
    local n = select(2, swarm:gsub("proxy_set_header X%-Sandstack%-Session%-Secret %$sandstack_fwd_secret;", ""))
    assert.equal(2, n) -- both proxied locations
    assert.equal(2, select(2, swarm:gsub("proxy_set_header X%-Sandstack%-Forwarded %$sandstack_forwarded;", "")))
  end)

  it("routes to the upstream the Lua route chose, with a named location for a forwarded DELETE", function()
    assert.truthy(swarm:find("proxy_pass http://$sandstack_upstream$sandstack_uri;", 1, true))
    assert.truthy(swarm:find("location @sandstack_forward", 1, true))
    assert.truthy(swarm:find("error_page 502 504 = @sandstack_reconnect;", 1, true))
    assert.is_nil(swarm:find("127.0.0.1:$sandstack_port", 1, true))
    -- the docker backend's routes are as they were
    assert.truthy(docker:find("proxy_pass http://127.0.0.1:$sandstack_port$sandstack_uri;", 1, true))
    assert.is_nil(docker:find("@sandstack_forward", 1, true))
  end)
end)

describe("gateway backend swarm: the expiry timer (a scripted swarm)", function()
  local scripted = require "spec.support.scripted_engine"
  local X = require "sandstack.expiry"
  local dict = require "spec.support.shared_dict"

  it("runs sandstack.swarm.reap{expired = true} over its prefix every expiry_interval, and forgets what it destroyed", function()
    local timers = {}
    local saved = _G.ngx
    _G.ngx = { ERR = 1, NOTICE = 2, log = function() end, now = os.time, update_time = function() end,
      timer = { every = function(t, fn) timers[#timers + 1] = { every = t, fn = fn }; return true end } }
    local sw = scripted.swarm()
    local undo = scripted.install(sw)
    local ok, err = pcall(function()
      local c = assert(config.check(base { backend = "swarm", swarm = { node = "n1" }, expiry_interval = 3 }))
      local due = X.labels({ expires = os.time() - 5, on_expiry = "destroy" }, os.time() - 10)
      for _, p in ipairs { c.project_prefix .. "k1-0a1b2c3d", "someone-else" } do
        local l = { ["io.sandstack.project"] = p, ["io.sandstack.service"] = "sandbox" }
        for k, v in pairs(due) do l[k] = v end
        sw.services["svc-" .. p] = { Name = p .. "-sandbox", Labels = l }
      end
      local G = { conf = c, dict = dict(), metrics = dict(), backend = require "sandstack.gateway.swarm",
        run_in = function(module, fn, ...) return require(module)[fn](...) end }
      -- what this gateway cached of the session: its entry by the secret's digest, and its port
      G.dict:set("c:d1", core.json_encode { project = c.project_prefix .. "k1-0a1b2c3d", key = "k1", port = 41234 })
      G.dict:set("p:41234", "d1")
      G.dict:set("c:d2", core.json_encode { project = c.project_prefix .. "k2-0a1b2c3d", key = "k2" })
      G.backend.start_worker(G)
      assert.equal(1, #timers)
      assert.equal(3, timers[1].every)
      timers[1].fn(false)
      local left = {}
      for _, spec in pairs(sw.services) do left[#left + 1] = spec.Labels["io.sandstack.project"] end
      assert.same({ "someone-else" }, left) -- its own prefix only
      assert.is_nil(G.dict:get("c:d1"))
      assert.is_nil(G.dict:get("p:41234"))
      assert.is_string(G.dict:get("c:d2"))
      assert.equal(1, G.metrics:get('sandstack_gateway_destroyed_total{reason="ttl"}'))
      assert.is_nil(G.dict:get("lock:expiry")) -- the pass's lock is let go
    end)
    undo()
    _G.ngx = saved
    assert(ok, err)
  end)
end)
