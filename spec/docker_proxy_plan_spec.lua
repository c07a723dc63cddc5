-- The added proxy in the planner (csrc/stack), without an engine: `egress_policy` without a
-- `proxy_service` adds the proxy sidecar; `hosts` and `proxy_hosts` become ExtraHosts; the
-- options of the added proxy are refused where they would be silently unused; the default
-- images are the ones `sandstack images` builds.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local images = require "sandstack.docker.images"
local policy = require "sandstack.policy"
local dh = require "docker_proxy_harness"

local TOKEN = ("t"):rep(40)
local KEY = "sk-real-key-0123456789"

local function opts(extra) return dh.options(KEY, { "pypi.org:443" }, extra) end
local plan = dh.planner(TOKEN)
local by_service, env_map = dh.by_service, dh.env_map
local function refused(o, option, reason) return dh.refused(plan, o, option, reason) end

describe("the proxy sandstack adds for egress_policy (plan, no engine)", function()
  it("adds a 'proxy' sidecar with egress, the default image, and the sandbox after it", function()
    local p = assert(plan(opts()))
    assert.same({ service = "proxy", port = 3128, image = images.PROXY_IMAGE, added = true }, p.proxy)
    assert.equal("sandstack/proxy:" .. sandstack.VERSION, images.PROXY_IMAGE)
    local px = assert(by_service(p, "proxy"))
    assert.equal(images.PROXY_IMAGE, px.image)
    assert.equal(images.PROXY_IMAGE, px.body.Image)
    assert.equal("sidecar", px.role)
    assert.is_true(px.egress)
    assert.equal(1, #px.connects) -- -sbx at create, then -egress (API 1.41)
    assert.equal("sandstack-unit-egress", px.connects[1].network)
    assert.is_nil(px.body.HostConfig.Dns) -- the engine's resolvers: it resolves for the sandbox
    assert.same({ "proxy" }, by_service(p, "sandbox").depends_on)
    assert.same({ "proxy", "sandbox", "forwarder" }, p.order)
    local found = false
    for _, img in ipairs(p.images) do found = found or img == images.PROXY_IMAGE end
    assert.is_true(found, "the proxy image is not among the images to ensure")
    -- the same hardening overlay as every other container
    for _, k in ipairs { "CapDrop", "SecurityOpt", "PidsLimit", "RestartPolicy" } do
      assert.same(p.hardening[k], px.body.HostConfig[k], k)
    end
  end)

  it("gives the proxy the canonical policy, the token and the real key; the sandbox the token only", function()
    local o = opts { egress_policy = { allow = { "PyPI.org:443", { host = "*.github.com", methods = { "get" } } } } }
    local p = assert(plan(o))
    local px = env_map(by_service(p, "proxy"))
    assert.equal(policy.compile(o.egress_policy):render(), px.SANDSTACK_EGRESS_POLICY)
    assert.equal(TOKEN, px.SANDSTACK_SESSION_TOKEN)
    assert.equal(KEY, px.ANTHROPIC_API_KEY)
    assert.equal("3128", px.SANDSTACK_PROXY_PORT)
    assert.equal("unit", px.SANDSTACK_SESSION)
    assert.is_nil(px.SANDSTACK_UPSTREAM) -- the proxy's own default, https://api.anthropic.com
    local sb, count = env_map(by_service(p, "sandbox"))
    local url = "http://sandstack:" .. TOKEN .. "@proxy:3128"
    for _, k in ipairs { "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy" } do
      assert.equal(url, sb[k], k)
      assert.equal(1, count[k], k)
    end
    assert.equal("http://proxy:3128", sb.ANTHROPIC_BASE_URL)
    assert.equal(TOKEN, sb.ANTHROPIC_API_KEY)
    assert.equal("localhost,127.0.0.1,::1,forwarder,sandbox,proxy", sb.NO_PROXY)
    assert.equal(sb.NO_PROXY, sb.no_proxy)
    assert.falsy(by_service(p, "sandbox").body_json:find(KEY, 1, true))
  end)

  it("lists every service of the stack in NO_PROXY and replaces the spec's own proxy variables", function()
    local p = assert(plan(opts { services = {
      { name = "sandbox", image = "a", env = { HTTPS_PROXY = "http://evil:1", NO_PROXY = "*" } },
      { name = "db", image = "d", egress = "none" }, { name = "cache", image = "c", egress = "none" } } }))
    local sb, count = env_map(by_service(p, "sandbox"))
    assert.equal("http://sandstack:" .. TOKEN .. "@proxy:3128", sb.HTTPS_PROXY)
    assert.equal(1, count.HTTPS_PROXY)
    assert.equal(1, count.NO_PROXY)
    local names = {}
    for n in sb.NO_PROXY:gmatch("[^,]+") do names[n] = true end
    for _, n in ipairs { "sandbox", "db", "cache", "proxy", "forwarder", "localhost" } do assert.is_true(names[n], n) end
  end)

  it("takes proxy_image, proxy_upstream and proxy_hosts for the added proxy", function()
    local p = assert(plan(opts { proxy_image = "mine/proxy:2", proxy_upstream = "http://model.test:8080",
      proxy_hosts = { ["model.test"] = "203.0.113.7", ["b.example"] = "2001:db8::1", ["a.example"] = "198.51.100.9" } }))
    local px = by_service(p, "proxy")
    assert.equal("mine/proxy:2", px.image)
    assert.equal("mine/proxy:2", p.proxy.image)
    assert.equal("http://model.test:8080", env_map(px).SANDSTACK_UPSTREAM)
    assert.same({ "a.example:198.51.100.9", "b.example:2001:db8::1", "model.test:203.0.113.7" }, px.body.HostConfig.ExtraHosts)
    assert.is_nil(by_service(p, "sandbox").body.HostConfig.ExtraHosts)
  end)

  it("puts a service's hosts into its ExtraHosts, sorted, and nowhere else", function()
    local p = assert(plan({ agent_port = 1, image = "a", services = {
      { name = "db", image = "d", egress = "none", hosts = { ["z.internal"] = "10.0.0.2", ["reg.internal"] = "10.0.0.1" } } } }))
    assert.same({ "reg.internal:10.0.0.1", "z.internal:10.0.0.2" }, by_service(p, "db").body.HostConfig.ExtraHosts)
    assert.is_nil(by_service(p, "sandbox").body.HostConfig.ExtraHosts)
    assert.is_nil(p.proxy) -- no egress_policy: no proxy
  end)

  it("refuses hosts and proxy_hosts that are not maps of host names to addresses, naming the option", function()
    -- not a map, or a map to something that is not an address string: a programming error (it raises)
    for _, v in ipairs { "10.0.0.1", { "10.0.0.1" }, { ok = 7 }, { ok = true } } do
      dh.mistyped(plan, { agent_port = 1, image = "a", services = { { name = "db", image = "d", egress = "none", hosts = v } } },
        "services.db.hosts")
      dh.mistyped(plan, opts { proxy_hosts = v }, "proxy_hosts")
    end
    local bad = {
      { ["a b"] = "10.0.0.1" }, { ["a\nb"] = "10.0.0.1" }, { ["-a"] = "10.0.0.1" },
      { ["a..b"] = "10.0.0.1" }, { [("a"):rep(64)] = "10.0.0.1" }, { ok = "10.0.0.256" }, { ok = "host.example" },
      { ok = "10.0.0.1\n1.2.3.4 evil" },
    }
    for i, v in ipairs(bad) do
      refused({ agent_port = 1, image = "a", services = { { name = "db", image = "d", egress = "none", hosts = v } } },
        "services.db.hosts")
      local err = refused(opts { proxy_hosts = v }, "proxy_hosts")
      assert.matches("proxy_hosts", err.message, nil, true)
      assert.is_string(err.message, i)
    end
    local big = {}
    for i = 1, 257 do big["h" .. i .. ".example"] = "10.0.0.1" end
    refused(opts { proxy_hosts = big }, "proxy_hosts")
    assert(plan(opts { proxy_hosts = {} })) -- an empty map is no names
  end)

  it("refuses the added proxy's options where no proxy is added (they would be silently unused)", function()
    local user_proxy = { agent_port = 1, image = "a", api_key = KEY, proxy_service = "px",
      services = { { name = "px", image = "p", egress = "allow", port = 3128 } } }
    for _, k in ipairs { "proxy_image", "proxy_upstream", "proxy_hosts" } do
      local v = k == "proxy_hosts" and { ["a.example"] = "10.0.0.1" } or (k == "proxy_upstream" and "http://a:1" or "x:1")
      local o = {}
      for kk, vv in pairs(user_proxy) do o[kk] = vv end
      o[k] = v
      assert.matches("proxy_service", refused(o, k).message, nil, true)
      refused({ agent_port = 1, image = "a", [k] = v }, k)
    end
  end)

  it("adds a proxy without the credential route for a plain allowlist with no api_key", function()
    local o = opts()
    o.api_key = nil
    local p = assert(plan(o))
    local px = env_map(by_service(p, "proxy"))
    assert.is_nil(px.ANTHROPIC_API_KEY)
    assert.equal(TOKEN, px.SANDSTACK_SESSION_TOKEN)
    local sb = env_map(by_service(p, "sandbox"))
    assert.equal("http://sandstack:" .. TOKEN .. "@proxy:3128", sb.HTTPS_PROXY) -- the allowlist, as with a key
    assert.is_nil(sb.ANTHROPIC_BASE_URL) -- no credential route to point at
    assert.is_nil(sb.ANTHROPIC_API_KEY)
  end)

  it("needs a well-formed upstream; a service already named proxy must be named as the proxy", function()
    refused(opts { proxy_upstream = "ftp://x" }, "proxy_upstream")
    dh.mistyped(plan, opts { proxy_upstream = 3 }, "proxy_upstream")
    refused(opts { proxy_image = "" }, "proxy_image")
    local err = refused(opts { services = { { name = "proxy", image = "p", egress = "none" } } }, nil, "duplicate_service")
    assert.equal("proxy", err.service)
    assert.matches("proxy_service", err.message, nil, true)
  end)

  it("keeps a user's proxy_service as before: no proxy variables, no added service", function()
    local p = assert(plan({ agent_port = 1, image = "a", api_key = KEY, proxy_service = "px",
      egress_policy = { allow = { "pypi.org" } }, services = { { name = "px", image = "p", egress = "allow", port = 9 } } }))
    assert.same({ service = "px", port = 9, image = "p", added = false }, p.proxy)
    assert.is_nil(by_service(p, "proxy"))
    local sb = env_map(by_service(p, "sandbox"))
    assert.is_nil(sb.HTTPS_PROXY)
    assert.is_nil(sb.NO_PROXY)
    assert.equal("http://px:9", sb.ANTHROPIC_BASE_URL)
    local px = env_map(by_service(p, "px"))
    assert.is_nil(px.SANDSTACK_PROXY_PORT)
    assert.truthy(px.SANDSTACK_EGRESS_POLICY)
  end)

  it("accepts a session_token with an egress_policy alone (the added proxy's token)", function()
    local mine = ("m"):rep(40)
    local p = assert(plan(opts { session_token = mine }, { now = 1, run = "r" }))
    assert.equal(mine, p.session_token)
    assert.equal(mine, env_map(by_service(p, "proxy")).SANDSTACK_SESSION_TOKEN)
  end)

  it("defaults the forwarder to the local socat image `sandstack images` builds", function()
    local p = assert(plan(opts()))
    assert.equal(images.FORWARDER_IMAGE, by_service(p, "forwarder").image)
    assert.equal(images.FORWARDER_IMAGE, p.isolation_check and core.json_decode(p.isolation_check.container.body_json).Image)
  end)
end)

describe("sandstack.docker.build_images (no engine)", function()
  it("raises on an unknown option or a wrong type, refuses a bad image name, and names a proxy binary it cannot use", function()
    assert.has_error(function() docker.build_images { nope = 1 } end)
    assert.has_error(function() docker.build_images { proxy_image = 7 } end)
    local bad, berr = docker.build_images { proxy_image = "no tag" } -- a value: refused, not raised
    assert.is_nil(bad)
    assert.same({ "invalid", "invalid_option", "proxy_image" }, { berr.kind, berr.reason, berr.option })
    local r, err = docker.build_images { proxy_binary = "/nonexistent/sandstack-proxy" }
    assert.is_nil(r)
    assert.equal("not_found", err.reason)
    assert.equal("/nonexistent/sandstack-proxy", err.path)
  end)

  it("finds the proxy binary CMake built beside the loaded module", function()
    local so = package.searchpath("sandstack.core", package.cpath)
    local want = so:gsub("/sandstack/core%.so$", "/sandstack-proxy")
    local f = io.open(want)
    if not f then return pending("no " .. want .. " in this build") end
    f:close()
    assert.equal(want, images.find_proxy_binary())
  end)
end)
