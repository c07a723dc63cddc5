-- The console's nginx locations and configuration keys (sandstack.gateway.console,
-- gateway/config.lua), without nginx: what nginx.conf gets, and what the checker refuses.
local config = require "sandstack.gateway.config"
local console = require "sandstack.gateway.console"
local core = require "sandstack.core"

local function conf(extra)
  local t = { tenants = { { name = "a", token_sha256 = core.sha256_hex("tok") } }, stack = { agent_port = 8080 } }
  for k, v in pairs(extra or {}) do t[k] = v end
  return config.check(t)
end

describe("console locations", function()
  it("serves web/console with the CSP and the other headers on the page and the API", function()
    local c = assert(conf())
    local root = console.root(c)
    assert.truthy(root and io.open(root .. "/index.html"), "web/console found beside the modules")
    local text = console.nginx(c)
    assert.truthy(text:find("alias " .. root .. "/;", 1, true), text)
    local _, csp = text:gsub("add_header Content%-Security%-Policy \"default%-src 'none'; script%-src 'self';", "")
    assert.equal(2, csp) -- the static files' location and the API's
    for _, hdr in ipairs { "X-Content-Type-Options \"nosniff\"", "X-Frame-Options \"DENY\"", "Referrer-Policy \"no-referrer\"" } do
      local _, n = text:gsub(hdr:gsub("%-", "%%-"), "")
      assert.equal(2, n, hdr)
    end
    assert.falsy(console.CSP:match("script%-src[^;]*unsafe"))
    assert.truthy(text:find('content_by_lua_block { require("sandstack.gateway").console() }', 1, true))
  end)

  it("is off with console = false, on a swarm, and takes console_root as given", function()
    assert.equal("", console.nginx(assert(conf { console = false })))
    local nginx_conf = require "sandstack.gateway.nginx_conf"
    local paths = { config = "/x/gateway.json", lua_path = ";;", lua_cpath = ";;" }
    local swarm = assert(conf { backend = "swarm", swarm = { node = "n" },
      stack = { agent_port = 8080, docker_host = "tcp://manager.test:2376" } })
    assert.is_nil(nginx_conf.render(swarm, paths):find("location /console/", 1, true)) -- the swarm backend serves none
    assert.truthy(nginx_conf.render(assert(conf()), paths):find("location /console/", 1, true))
    local c = assert(conf { console_root = "/opt/console" })
    assert.equal("/opt/console", console.root(c))
  end)

  it("refuses a console_root that is not an absolute plain path, and a console that is not boolean", function()
    for _, bad in ipairs { "relative/dir", "/a b", "/x;\nserver {", '/a"b', 7 } do
      local c, err = conf { console_root = bad }
      assert.is_nil(c)
      assert.equal("console_root", err.option)
    end
    assert.is_nil((conf { console = "yes" }))
  end)

  it("tells a failure by the session's key and an audit line by it too, never a project", function()
    local c = assert(conf { project_prefix = "gw1-" })
    local e = { key = "k-1%", record = { project = "gw1-pool-3b43da8c" } }
    assert.equal("stack k-1% has no proxy sandstack added; see a stack", console.scrub(c,
      "stack gw1-pool-3b43da8c has no proxy sandstack added; see gw1-other.abcd1234", e))
    assert.equal("took a stack: acquire again", console.scrub(c, "took gw1-pool-00ff00ff: acquire again"))
    local line = console.audit_line(core.json_encode { session = "pool.gw1-pool", decision = "deny", host = "x.test" }, "k1")
    local v = core.json_decode(line)
    assert.equal("k1", v.session)
    assert.equal("deny", v.decision)
    assert.equal("not json", console.audit_line("not json", "k1"))
  end)
end)
