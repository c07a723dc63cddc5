-- TLS inspection in the planner (csrc/stack/inspect.c, plan.c), without an engine: when the proxy
-- sandstack adds must inspect TLS (a rule names methods or paths, and the policy does not say
-- inspect = false), the stack gets the CA volume, its two mounts, the five bundle variables in
-- the sandbox and the proxy's ready test before the sandbox; proxy_upstream_ca is held to PEM;
-- inspect = false with such rules on HTTPS is refused, never weakened.
local dh = require "docker_proxy_harness"

local TOKEN = ("t"):rep(40)
local KEY = "sk-real-key-0123456789"
local BUNDLE = "/etc/sandstack/ca/bundle.pem"
local VARS = { "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO" }
local INSPECTED = { "pypi.org:443", { host = "api.github.com", methods = { "GET" }, paths = { "/v1/*" } } }

-- A certificate-shaped PEM block (the planner checks the shape; the proxy parses the DER).
local CERT = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2VydGlmaWNhdGUgc2hhcGVkIGJsb2NrMAoGCCqGSM49\n"
  .. "BAMCMBIxEDAOBgNVBAMMB3Rlc3QtY2EwHhcNMjUwMTAxMDAwMDAwWhcNMjUwMTAy\n-----END CERTIFICATE-----\n"

local function opts(extra) return dh.options(KEY, INSPECTED, extra) end
local plan = dh.planner(TOKEN)
local by_service, env_map = dh.by_service, dh.env_map

local function ca_volume(p)
  for _, v in ipairs(p.volumes) do if v.key == "ca" then return v end end
end

local function mount_at(c, target)
  for _, m in ipairs(c.body.HostConfig.Mounts) do if m.Target == target then return m end end
end

local function refused(o, option) return dh.refused(plan, o, option) end

describe("TLS inspection in the Docker stack's plan (no engine)", function()
  it("plans the CA volume, labelled like every object, on a tmpfs owned by the proxy's user", function()
    local p = assert(plan(opts()))
    local v = assert(ca_volume(p), "no CA volume")
    assert.equal("sandstack-unit-ca", v.name)
    assert.equal("POST", v.method)
    assert.equal("/volumes/create", v.path)
    assert.equal("sandstack-unit-ca", v.body.Name)
    assert.equal("local", v.body.Driver)
    assert.same({ type = "tmpfs", device = "tmpfs", o = "size=8m,mode=0755,uid=65534" }, v.body.DriverOpts)
    -- the labels destroy, down and reap find objects by
    for k, want in pairs(p.labels) do assert.equal(want, v.body.Labels[k], k) end
    assert.equal("ca", v.body.Labels["io.sandstack.volume"])
    assert.same({ volume = "sandstack-unit-ca", proxy_dir = "/run/sandstack/ca", bundle = BUNDLE }, p.inspection)
  end)

  it("mounts it read-write in the proxy (SANDSTACK_CA_DIR) and read-only in the sandbox, with no copy-up", function()
    local p = assert(plan(opts()))
    local px, sb = by_service(p, "proxy"), by_service(p, "sandbox")
    local pm = assert(mount_at(px, "/run/sandstack/ca"))
    assert.same({ Type = "volume", Source = "sandstack-unit-ca", Target = "/run/sandstack/ca", ReadOnly = false,
      VolumeOptions = { NoCopy = true } }, pm)
    local sm = assert(mount_at(sb, "/etc/sandstack/ca"))
    assert.same({ Type = "volume", Source = "sandstack-unit-ca", Target = "/etc/sandstack/ca", ReadOnly = true,
      VolumeOptions = { NoCopy = true } }, sm)
    assert.equal("/run/sandstack/ca", env_map(px).SANDSTACK_CA_DIR)
    assert.is_nil(env_map(sb).SANDSTACK_CA_DIR)
    -- the forwarder has nothing to do with it
    assert.is_nil(mount_at(by_service(p, "forwarder"), "/etc/sandstack/ca"))
  end)

  it("points the sandbox's five TLS variables at the bundle, replacing the spec's own", function()
    local o = opts { image = nil, services = { { name = "sandbox", image = "agent:1",
      env = { SSL_CERT_FILE = "/mine.pem", GIT_SSL_CAINFO = "/mine.pem", KEEP = "1" } } } }
    local p = assert(plan(o))
    local env, count = env_map(by_service(p, "sandbox"))
    for _, k in ipairs(VARS) do
      assert.equal(BUNDLE, env[k], k)
      assert.equal(1, count[k], k)
    end
    assert.equal("1", env.KEEP)
    local px = env_map(by_service(p, "proxy"))
    for _, k in ipairs(VARS) do assert.is_nil(px[k], k) end
  end)

  it("makes the sandbox wait for the proxy's ready test (its bundle published), run by exec without a shell", function()
    local p = assert(plan(opts()))
    local px = by_service(p, "proxy")
    assert.is_true(px.healthcheck)
    assert.same({ "CMD", "sandstack-proxy", "--ready" }, px.body.Healthcheck.Test)
    assert.same({ "sandstack-proxy", "--ready" }, px.check)
    assert.equal(5, px.check_timeout)
    assert.same({ "proxy" }, by_service(p, "sandbox").depends_on)
    assert.same({ "proxy", "sandbox", "forwarder" }, p.order)
    -- a user's ready.proxy replaces it
    p = assert(plan(opts { ready = { proxy = { test = { "CMD", "true" }, timeout = 2 } } }))
    px = by_service(p, "proxy")
    assert.same({ "CMD", "true" }, px.body.Healthcheck.Test)
    assert.equal(2, px.check_timeout)
  end)

  it("plans none of it when no rule needs inspection, or with a user proxy_service", function()
    local plain = assert(plan(opts { egress_policy = { allow = { "pypi.org:443", "*.github.com" } } }))
    assert.is_nil(ca_volume(plain))
    assert.is_nil(plain.inspection)
    local px = by_service(plain, "proxy")
    assert.is_false(px.healthcheck)
    assert.is_nil(px.body.Healthcheck)
    assert.is_nil(env_map(px).SANDSTACK_CA_DIR)
    for _, k in ipairs(VARS) do assert.is_nil(env_map(by_service(plain, "sandbox"))[k], k) end
    assert.same({}, px.body.HostConfig.Mounts)
    -- a user proxy configures itself (docs/docker.md): sandstack passes the policy, nothing more
    local own = assert(plan { agent_port = 8080, image = "agent:1", api_key = KEY, proxy_service = "gw",
      services = { { name = "gw", image = "gw:1", egress = "allow", port = 3128 } },
      egress_policy = { allow = INSPECTED } })
    assert.is_nil(ca_volume(own))
    assert.is_nil(own.inspection)
    for _, k in ipairs(VARS) do assert.is_nil(env_map(by_service(own, "sandbox"))[k], k) end
    assert.equal(1, #own.volumes) -- sandstack-init's (docs/lifecycle.md), no CA's
    assert.matches("%-sandstack_init$", own.volumes[1].name)
  end)

  it("uses the stack-wide numeric user for the tmpfs owner, and a sticky world-writable tmpfs for a name", function()
    local p = assert(plan(opts { user = "1000:1000" }))
    assert.equal("size=8m,mode=0755,uid=1000", ca_volume(p).body.DriverOpts.o)
    p = assert(plan(opts { user = "nobody" }))
    assert.equal("size=8m,mode=1777", ca_volume(p).body.DriverOpts.o)
  end)

  it("gives proxy_upstream_ca to the proxy as SANDSTACK_UPSTREAM_CA, never to the sandbox", function()
    local p = assert(plan(opts { proxy_upstream_ca = CERT .. CERT }))
    assert.equal(CERT .. CERT, env_map(by_service(p, "proxy")).SANDSTACK_UPSTREAM_CA)
    assert.is_nil(env_map(by_service(p, "sandbox")).SANDSTACK_UPSTREAM_CA)
    -- also without inspection (the credential route verifies its upstream with it)
    p = assert(plan(opts { proxy_upstream_ca = CERT, egress_policy = { allow = { "pypi.org:443" } } }))
    assert.equal(CERT, env_map(by_service(p, "proxy")).SANDSTACK_UPSTREAM_CA)
  end)

  it("holds proxy_upstream_ca to PEM certificates, size-capped, and never quotes it", function()
    local key = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n"
    dh.mistyped(plan, opts { proxy_upstream_ca = 42 }, "proxy_upstream_ca") -- a programming error: it raises
    local cases = {
      { "", "PEM text" },
      { "not a certificate at all", "no \"-----BEGIN CERTIFICATE-----\"" },
      { CERT .. key, "private key" },
      { key, "private key" },
      { CERT:gsub("%-%-%-%-%-END CERTIFICATE%-%-%-%-%-\n", ""), "without its END" },
      { CERT:gsub("MIIB", "MI!B"), "not base64" },
      { CERT .. "\1", "printable ASCII" },
      { "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n", "not a certificate" },
      { CERT .. ("# filler comment line\n"):rep(3200), "64 KiB" },
    }
    for _, c in ipairs(cases) do
      local err = refused(opts { proxy_upstream_ca = c[1] }, "proxy_upstream_ca")
      assert.matches(c[2], err.message, 1, true)
      if type(c[1]) == "string" and #c[1] > 20 then assert.is_nil(err.message:find(c[1], 1, true)) end
      assert.is_nil(err.message:find("MIGHAgEA", 1, true), "the refusal quotes the key")
    end
    -- text outside the blocks is allowed, as OpenSSL allows it; so are CRLF line ends
    assert(plan(opts { proxy_upstream_ca = "# Issuer: test\n" .. CERT:gsub("\n", "\r\n") }))
    -- it shapes the added proxy only: elsewhere it would be silently unused
    refused({ agent_port = 8080, image = "agent:1", proxy_upstream_ca = CERT }, "proxy_upstream_ca")
    refused({ agent_port = 8080, image = "agent:1", api_key = KEY, proxy_service = "gw", proxy_upstream_ca = CERT,
      services = { { name = "gw", image = "gw:1", egress = "allow", port = 3128 } } }, "proxy_upstream_ca")
  end)

  it("refuses inspect = false with method or path rules reached over HTTPS (no port, or 443), naming the rule", function()
    for _, rule in ipairs {
      { host = "api.github.com", methods = { "GET" } },
      { host = "api.github.com", port = 443, methods = { "GET" }, paths = { "/v1/*" } },
      { host = "*.github.com", methods = { "ANY" }, paths = { "/repos/*" } },
    } do
      local err = refused(opts { egress_policy = { inspect = false, allow = { "pypi.org:443", rule } } }, "egress_policy")
      assert.equal(2, err.rule)
      assert.equal(rule.host, err.host)
      assert.matches("inspect = false", err.message, 1, true)
    end
    -- whichever proxy serves the stack: the policy itself says no one reads HTTPS requests
    refused({ agent_port = 8080, image = "agent:1", api_key = KEY, proxy_service = "gw",
      services = { { name = "gw", image = "gw:1", egress = "allow", port = 3128 } },
      egress_policy = { inspect = false, allow = { { host = "api.github.com", methods = { "GET" } } } } }, "egress_policy")
    -- controls: a plain-HTTP port keeps its method rule (checked without TLS), plain hosts are fine,
    -- and with inspect = false no CA is planned
    local p = assert(plan(opts { egress_policy = { inspect = false, allow = { "pypi.org:443",
      { host = "model.test", port = 8080, methods = { "GET", "POST" }, paths = { "/v1/*" } } } } }))
    assert.is_nil(ca_volume(p))
    for _, k in ipairs(VARS) do assert.is_nil(env_map(by_service(p, "sandbox"))[k], k) end
    assert(plan(opts { egress_policy = { inspect = false, allow = { "pypi.org:443", "*.github.com" } } }))
  end)

  it("refuses what the CA wiring would collide with: a volume named 'ca', a sandbox mount on its directory", function()
    refused(opts { volumes = { { name = "ca" } } }, "volumes")
    local err = refused(opts { image = nil, volumes = { { name = "data" } }, services = { { name = "sandbox", image = "agent:1",
      volumes = { { name = "data", target = "/etc/sandstack/ca/" } } } } }, "services.sandbox.volumes")
    assert.matches("/etc/sandstack/ca", err.message, 1, true)
    -- controls: both are fine when nothing is inspected
    assert(plan(opts { volumes = { { name = "ca" } }, egress_policy = { allow = { "pypi.org:443" } } }))
    assert(plan(opts { image = nil, volumes = { { name = "data" } }, services = { { name = "sandbox", image = "agent:1",
      volumes = { { name = "data", target = "/etc/sandstack/ca" } } } }, egress_policy = { allow = { "pypi.org:443" } } }))
  end)
end)
