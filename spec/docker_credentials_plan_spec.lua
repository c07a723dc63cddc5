-- Credentials for any host in the planner (csrc/stack/credentials.c), without an engine: the
-- `credentials` option checked field by field, a placeholder per credential (as long as its
-- secret, [A-Za-z0-9], from the CSPRNG), NAME=<placeholder> in the sandbox, the secrets only in
-- the proxy's SANDSTACK_CREDENTIALS, inspection turned on, and no secret in a shown plan, an
-- error message or a record.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local handle = require "sandstack.docker.handle"
local dh = require "docker_proxy_harness"

local TOKEN = ("t"):rep(40)
local KEY = "sk-real-key-0123456789"
local GH = "ghp_" .. ("G"):rep(36)          -- a GitHub-style token
local QK = "qk-" .. ("Q7"):rep(10)          -- a query-parameter key
local BS = "basic-" .. ("b"):rep(20)
local PS = "path:" .. ("p"):rep(20)

local ALLOW = { "api.github.com", "keys.example:8443", "*.registry.example", "bot.example" }

local function creds()
  return {
    { name = "GH_TOKEN", host = "API.GitHub.com.", header = "Authorization", format = "Bearer %s", secret = GH },
    { name = "MAPS_KEY", host = "keys.example", port = 8443, query = "key", secret = QK },
    { name = "REG_PASS", host = "npm.registry.example", basic = "ci", secret = BS },
    { name = "BOT_TOKEN", host = "bot.example", path = "/bot%s/", secret = PS },
  }
end

local function opts(extra)
  local o = dh.options(KEY, ALLOW, { credentials = creds() })
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

-- the plan a start applies (model:plan without redact), bodies decoded
local function applied(o)
  local model, err = core.stack_model(o, "unit", { now = 1, token = TOKEN, run = "r1" })
  if not model then return nil, err end
  local p; p, err = model:plan {}
  model:close()
  if not p then return nil, err end
  for _, c in ipairs(p.containers) do c.body = assert(core.json_decode(c.body_json)) end
  return p
end
local shown = dh.planner(TOKEN) -- sandstack.docker.plan: the plan shown to a user
local by_service, env_map = dh.by_service, dh.env_map

local SECRETS = { GH, QK, BS, PS, KEY }
local CRED_SECRETS = { GH, QK, BS, PS }

local function holds_secret(text, list)
  for _, s in ipairs(list or CRED_SECRETS) do
    if text:find(s, 1, true) then return s end
  end
end

local function refused(o, option, reason)
  local err = dh.refused(applied, o, option, reason)
  assert.is_nil(holds_secret(err.message, SECRETS), "the message quotes a secret: " .. err.message)
  assert.is_nil(holds_secret(core.json_encode(err), SECRETS), "the error quotes a secret")
  return err
end

-- a value of the wrong type raises (a programming error), never quoting a secret
local function mistyped(o, option)
  local msg = dh.mistyped(applied, o, option)
  assert.is_nil(holds_secret(msg, SECRETS), "the message quotes a secret: " .. msg)
  return msg
end

-- opts whose first credential has the fields of patch (a field set to false is removed)
local function with_first(patch)
  local o = opts()
  for k, v in pairs(patch) do o.credentials[1][k] = v or nil end
  return o
end

describe("credentials in the plan (no engine)", function()
  it("gives the sandbox NAME=<placeholder> and the proxy the secrets, in the contract's JSON", function()
    local p = assert(applied(opts()))
    local sb, count = env_map(by_service(p, "sandbox"))
    local px = env_map(by_service(p, "proxy"))
    local list = assert(core.json_decode(px.SANDSTACK_CREDENTIALS))
    assert.equal(4, #list)
    local want = {
      { name = "GH_TOKEN", host = "api.github.com", port = 443, header = "Authorization", format = "Bearer %s", secret = GH },
      { name = "MAPS_KEY", host = "keys.example", port = 8443, query = "key", secret = QK },
      { name = "REG_PASS", host = "npm.registry.example", port = 443, basic = "ci", secret = BS },
      { name = "BOT_TOKEN", host = "bot.example", port = 443, path = "/bot%s/", secret = PS },
    }
    for i, w in ipairs(want) do
      local got = list[i]
      local ph = got.placeholder
      assert.is_string(ph)
      assert.equal(#w.secret, #ph, w.name .. ": the placeholder keeps the secret's length")
      assert.matches("^[A-Za-z0-9]+$", ph)
      assert.are_not.equal(w.secret, ph)
      w.placeholder = ph
      assert.same(w, got)
      assert.equal(ph, sb[w.name], w.name)
      assert.equal(1, count[w.name], w.name)
    end
    -- the placeholders differ from each other and from the session token
    local seen = { [TOKEN] = true }
    for _, c in ipairs(list) do
      assert.is_nil(seen[c.placeholder]); seen[c.placeholder] = true
    end
    -- no secret in the sandbox's body, nor in any container's but the proxy's
    for _, c in ipairs(p.containers) do
      if c.service ~= "proxy" then assert.is_nil(holds_secret(c.body_json), c.service) end
    end
    -- what the plan says of them (and so a record): everything but the secret
    for i, c in ipairs(p.credentials) do
      local w = want[i]
      w.secret = nil
      assert.same(w, c)
    end
  end)

  it("replaces the sandbox spec's own variable of a credential's name, once", function()
    local p = assert(applied(opts { services = { { name = "sandbox", image = "a",
      env = { GH_TOKEN = GH, OTHER = "kept" } } } }))
    local sb, count = env_map(by_service(p, "sandbox"))
    assert.equal(1, count.GH_TOKEN)
    assert.equal(p.credentials[1].placeholder, sb.GH_TOKEN)
    assert.equal("kept", sb.OTHER)
  end)

  it("turns on TLS inspection: a credential goes only into a request the proxy has read", function()
    local o = opts()
    o.egress_policy = { allow = { "api.github.com" } } -- no method or path rule: inspection was off
    o.credentials = { creds()[1] }
    local p = assert(applied(o))
    assert.is_table(p.inspection)
    assert.equal("/run/sandstack/ca", env_map(by_service(p, "proxy")).SANDSTACK_CA_DIR)
    assert.equal("/etc/sandstack/ca/bundle.pem", env_map(by_service(p, "sandbox")).SSL_CERT_FILE)
    local without = assert(applied(dh.options(KEY, { "api.github.com" })))
    assert.is_nil(without.inspection) -- the control: the same policy without credentials
    assert.is_nil(without.credentials)
    assert.is_nil(env_map(by_service(without, "proxy")).SANDSTACK_CREDENTIALS)
  end)

  it("keeps one model's placeholders across plans, and mints new ones for another model", function()
    local model = assert(core.stack_model(opts(), "unit", { token = TOKEN }))
    local a, b = assert(model:plan {}), assert(model:plan { api_version = "1.44" })
    model:close()
    local other = assert(applied(opts()))
    for i = 1, 4 do
      assert.equal(a.credentials[i].placeholder, b.credentials[i].placeholder)
      assert.are_not.equal(a.credentials[i].placeholder, other.credentials[i].placeholder)
    end
    -- two credentials with secrets of one length still get two placeholders
    local o = opts()
    o.credentials[2].secret = ("x"):rep(#GH)
    local p = assert(applied(o))
    assert.are_not.equal(p.credentials[1].placeholder, p.credentials[2].placeholder)
  end)

  it("never shows a secret in the plan sandstack.docker.plan returns", function()
    local p = assert(shown(opts()))
    assert.is_nil(holds_secret(core.json_encode(p)), "the shown plan holds a secret")
    local list = assert(core.json_decode(env_map(by_service(p, "proxy")).SANDSTACK_CREDENTIALS))
    for _, c in ipairs(list) do assert.equal("(secret not shown)", c.secret) end
    -- the control: the plan a start applies does hold them, in the proxy's environment only
    local a = assert(applied(opts()))
    assert.equal(GH, holds_secret(by_service(a, "proxy").body_json))
  end)

  it("keeps the credentials in a record without a secret, and answers stack:credentials() from it", function()
    local p = assert(applied(opts()))
    local fake_engine = {}
    local stack = handle.new(fake_engine, p, {})
    local record = stack:record()
    assert.is_nil(holds_secret(core.json_encode(record)), "the record holds a secret")
    assert.equal(4, #record.credentials)
    assert.same({ name = "MAPS_KEY", host = "keys.example", port = 8443, query = "key",
      placeholder = p.credentials[2].placeholder }, record.credentials[2])
    local want = {}
    for _, c in ipairs(p.credentials) do want[c.name] = c.placeholder end
    assert.same(want, stack:credentials())
    -- a handle rebuilt from the record (what reconnect does) keeps the mapping
    local again = handle.new(fake_engine, record, {})
    assert.same(want, again:credentials())
    -- a record keeps only the listed members, whatever a plan might carry
    local leaky = { credentials = { { name = "X", placeholder = "p", secret = GH, extra = GH } } }
    assert.same({ { name = "X", placeholder = "p" } }, require("sandstack.store").credentials(leaky.credentials))
    -- no credentials: an empty map
    assert.same({}, handle.new(fake_engine, assert(applied(dh.options(KEY, ALLOW))), {}):credentials())
  end)
end)

describe("the credentials option refused (no engine)", function()
  it("needs the proxy sandstack adds: an egress_policy without a proxy_service", function()
    local o = { agent_port = 1, image = "a", credentials = creds() }
    assert.matches("give an egress_policy", refused(o, "credentials").message, nil, true)
    o = { agent_port = 1, image = "a", api_key = KEY, proxy_service = "px", credentials = creds(),
      services = { { name = "px", image = "p", egress = "allow", port = 3128 } } }
    refused(o, "credentials")
  end)

  it("takes a list of tables", function()
    mistyped(opts { credentials = "GH_TOKEN" }, "credentials")
    mistyped(opts { credentials = { "GH_TOKEN" } }, "credentials")
    local many = {}
    for i = 1, 33 do many[i] = { name = "K" .. i, host = "api.github.com", header = "X-K", secret = GH } end
    refused(opts { credentials = many }, "credentials")
    -- the proxy's SANDSTACK_CREDENTIALS is one environment string (the kernel caps it at 128 KiB)
    local big = {}
    for i = 1, 12 do big[i] = { name = "K" .. i, host = "api.github.com", header = "X-K" .. i, secret = ("s"):rep(4096) } end
    assert.matches("too large", refused(opts { credentials = big }, "credentials").message, nil, true)
    for i = 10, 12 do big[i] = nil end -- nine of them fit
    local p = assert(applied(opts { credentials = big }))
    assert.is_true(#env_map(by_service(p, "proxy")).SANDSTACK_CREDENTIALS < 128 * 1024)
    assert(applied(opts { credentials = {} })) -- an empty list is no credential
  end)

  it("raises on an unknown key of a credential, naming it", function()
    assert.has_error(function() applied(with_first { headr = "Authorization" }) end,
      "credentials[1]: unknown option 'headr' (did you mean 'header'?)")
  end)

  it("refuses names that are not environment names, that sandstack sets, or twice", function()
    for _, bad in ipairs { false, "", "gh_token", "1TOKEN", "GH-TOKEN", "GH TOKEN", ("A"):rep(129) } do
      refused(with_first { name = bad }, "credentials[1].name")
    end
    mistyped(with_first { name = 7 }, "credentials[1].name")
    for _, own in ipairs { "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY",
      "AGENT_PORT", "SSL_CERT_FILE", "GIT_SSL_CAINFO", "SANDSTACK_TOKEN" } do
      assert.matches("sandstack sets", refused(with_first { name = own }, "credentials[1].name").message, nil, true)
    end
    local o = opts()
    o.credentials[3].name = "GH_TOKEN"
    assert.matches("names two credentials", refused(o, "credentials[3].name").message, nil, true)
    assert(applied(with_first { name = "_X9" }))
  end)

  it("refuses a host that is not one host, and a bad port", function()
    for _, bad in ipairs { false, "", "*.github.com", "api github.com", "https://api.github.com",
      "api.github.com:443", "api..github.com", ("a"):rep(64) .. ".example" } do
      refused(with_first { host = bad }, "credentials[1].host")
    end
    mistyped(with_first { host = 1 }, "credentials[1].host")
    for _, bad in ipairs { 0, 65536, 1.5, -1, 1e300, -1e300 } do refused(with_first { port = bad }, "credentials[1].port") end
    mistyped(with_first { port = "443" }, "credentials[1].port")
  end)

  it("refuses a host the egress_policy does not admit (the credential could never be used)", function()
    local err = refused(opts { egress_policy = { allow = { "pypi.org" } } }, "credentials[1].host")
    assert.matches("api.github.com:443", err.message, nil, true)
    -- a rule on another port does not admit it
    local o = opts { egress_policy = { allow = { "api.github.com:443", "keys.example:443", "*.registry.example", "bot.example" } } }
    assert.matches("keys.example:8443", refused(o, "credentials[2].host").message, nil, true)
    -- a wildcard rule admits a subdomain, never the apex
    o = opts()
    o.credentials[3].host = "registry.example"
    refused(o, "credentials[3].host")
    -- method and path rules still admit some request to the host
    assert(applied(opts { egress_policy = { allow = { { host = "api.github.com", methods = { "GET" } },
      "keys.example:8443", "*.registry.example", { host = "bot.example", methods = { "GET" }, paths = { "/bot/*" } } } } }))
  end)

  it("refuses credentials with a policy that says inspect = false", function()
    local err = refused(opts { egress_policy = { allow = ALLOW, inspect = false } }, "credentials")
    assert.matches("inspect = false", err.message, nil, true)
  end)

  it("needs exactly one placement, each well-formed", function()
    local err = refused(with_first { header = false, format = false }, "credentials[1]")
    assert.matches("header, query, basic or path", err.message, nil, true)
    refused(with_first { query = "key" }, "credentials[1]") -- header and query
    local cases = {
      { { header = "Bad Header" }, "header" }, { { header = "" }, "header" }, { { header = "Host" }, "header" },
      { { header = "content-length" }, "header" },
      { { header = false, format = false, query = "a b" }, "query" },
      { { header = false, format = false, query = "k=v" }, "query" },
      { { header = false, format = false, basic = "u:x" }, "basic" },
      { { header = false, format = false, basic = "a user" }, "basic" },
      { { header = false, format = false, path = "bot%s/" }, "path" },
      { { header = false, format = false, path = "/bot/" }, "path" },
      { { header = false, format = false, path = "/a%s/%s" }, "path" },
      { { header = false, format = false, path = "/a%s?x=1" }, "path" },
      { { header = false, format = false, query = "key", format = "Bearer %s" }, "format" },
      { { format = "Bearer" }, "format" }, { { format = "%d %s" }, "format" }, { { format = "%s %%" }, "format" },
      { { format = "Bearer %s\r\nX-Evil: 1" }, "format" }, { { format = "" }, "format" },
    }
    for _, case in ipairs(cases) do refused(with_first(case[1]), "credentials[1]." .. case[2]) end
    mistyped(with_first { header = 7 }, "credentials[1].header")
    mistyped(with_first { format = 1 }, "credentials[1].format")
    assert(applied(with_first { header = "X-Api-Key", format = false }))
    assert(applied(with_first { format = "token %s" }))
  end)

  it("refuses a secret that is not 16 to 4096 visible ASCII characters, never quoting it", function()
    mistyped(with_first { secret = 12345678901234567 }, "credentials[1].secret")
    for _, bad in ipairs { false, ("s"):rep(15), ("s"):rep(4097), "secret with spaces inside",
      "secret-with-newline\n-inside", "secret-\xc3\xa9-not-ascii-here", "secret-with-tab\t-inside-it" } do
      local err = refused(with_first { secret = bad }, "credentials[1].secret")
      if type(bad) == "string" then assert.is_nil(err.message:find(bad, 1, true)) end
    end
    assert(applied(with_first { secret = ("s"):rep(16) }))
    assert(applied(with_first { secret = ("~"):rep(4096) }))
  end)

  it("is planned by sandstack.swarm with no secret shown, and refused with a secret by a warm pool", function()
    local r, err = sandstack.swarm.plan("s1", opts())
    assert(r, err and err.message)
    assert.is_nil(holds_secret(core.json_encode(r)))
    -- a pool's credentials are slots (a waiting stack holds throwaway secrets, the session's
    -- come at acquire), so a secret in them is refused, never quoted
    local pool; pool, err = docker.pool { name = "credpool", stack = opts() }
    assert.is_nil(pool)
    assert.equal("invalid_option", err.reason)
    assert.equal("credentials[1].secret", err.option)
    assert.is_nil(holds_secret(err.message))
  end)
end)
