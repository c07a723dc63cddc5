-- What a sandboxed agent tries against sandstack-proxy's CONNECT tunnels and address checks, each
-- attempted through the real binary (the mode's build) and each beside a control that the same
-- proxy lets through. The test bed is spec/support/proxy_harness.lua's: "ssh9p*" holds the proxy,
-- the clients and two loopback servers (127.0.0.1:9080 and :9999); "ssh9o*" is the outside,
-- 198.51.100.10 (allowed.test, denied.test and git.test are all this one address, as names on one
-- front end are), with spec/support/proxy_standin.py and spec/support/proxy_hostile.py's peers,
-- and IPv6 addresses that embed public IPv4 addresses (the reachable controls for the
-- embedded-IPv4 test). Needs root and ip(8).
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("ssh9")
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local in_p, in_o, audit = H.in_p, H.in_o, H.audit
local work

local SKIP = H.missing()

local HOSTS = [[
198.51.100.10 allowed.test
198.51.100.10 denied.test
198.51.100.10 git.test
127.0.0.1 loop.test
64:ff9b:1::c633:640a ok-nat64local.embed.test
::ffff:0:c633:640a ok-siit.embed.test
2001:0:c633:640a::39cc:9bf5 ok-teredo.embed.test
64:ff9b:1::7f00:1 nat64local.embed.test
64:ff9b:1:a9fe:a9:fe00:: nat64local48.embed.test
::ffff:0:a00:1 siit.embed.test
2001:0:c633:640a::80ff:fffe teredo.embed.test
2001:0:a9fe:a9fe::39cc:9bf5 teredo-server.embed.test
::ffff:10.0.0.1 mapped.embed.test
64:ff9b::a9fe:a9fe nat64.embed.test
::a00:1 compat.embed.test
2002:a00:1::1 sixtofour.embed.test
]]

-- The main proxy's policy is one that the code before the hostile-client defences also reads, so
-- this spec can be run against it: none of its rules is raw.
local function main_policy()
  return assert(core.policy_compile { allow = {
    "allowed.test",     -- 1: every port, held to TLS naming it
    "127.0.0.1:9999",   -- 2: the literal address, on one port
    "loop.test",        -- 3: a name resolving to 127.0.0.1, every port
    "*.embed.test",     -- 4: names resolving to IPv6 addresses that carry IPv4 ones
  } }):render()
end

local function setup()
  work = H.net_up("/tmp/ssh9-proxy.XXXXXX", HOSTS, { "198.51.100.10" })
  -- the controls' IPv6 addresses: on-link prefixes on both ends of the veth pair
  for _, a in ipairs { "64:ff9b:1::1/64", "::ffff:0:c633:6401/96", "2001:0:c633:640a::1/64" } do
    h.must(in_p("ip -6 addr add " .. a .. " dev " .. H.VETH_P .. " nodad"))
  end
  for _, a in ipairs { "64:ff9b:1::c633:640a/64", "::ffff:0:c633:640a/96", "2001:0:c633:640a::39cc:9bf5/64" } do
    h.must(in_o("ip -6 addr add " .. a .. " dev " .. H.VETH_O .. " nodad"))
  end
  H.make_certs("ssh9-test-ca", "allowed.test", { "allowed.test", "denied.test", "git.test" })
  H.start_standin()
  H.start_peer("proxy_hostile.py", { "peer", work .. "/srv.pem", work .. "/srv.key", work .. "/peer.ready" },
    { log = work .. "/peer.log" })
  H.start_peer("proxy_hostile.py", { "local", work .. "/local.ready" }, { inside = true, log = work .. "/local.log",
    ready = work .. "/local.ready" })
  H.wait_standin()
  h.wait_for("the peers", function() return h.read_file(work .. "/peer.ready") end, 30)
  H.start_proxy("main", 3128, H.base_env("ssh9-session", { SANDSTACK_EGRESS_POLICY = main_policy() }))
end

local client = H.client

local function connect_text(target) return "CONNECT " .. target .. " HTTP/1.1\\r\\nProxy-Authorization: Bearer " .. TOKEN .. "\\r\\n\\r\\n" end
local function get_text(url) return "GET " .. url .. " HTTP/1.1\\r\\nProxy-Authorization: Bearer " .. TOKEN .. "\\r\\n\\r\\n" end

-- the last audit line of the main proxy (or of proxy `name`) matching fields
local function audited(fields, name)
  local found
  for _, l in ipairs(audit(name or "main")) do
    local all = true
    for k, v in pairs(fields) do all = all and l[k] == v end
    if all then found = l end
  end
  return found
end

describe("the raw rule in the policy language", function()
  local function compile(rule) return core.policy_compile { allow = { rule } } end

  it("is a table rule with raw = true and its port, rendered and listed as such", function()
    local p = assert(core.policy_compile { allow = { "github.com", { host = "github.com", port = 22, raw = true },
      { host = "*.db.example:5432", raw = true } } })
    assert.equal('{"version":1,"allow":[{"host":"github.com"},{"host":"github.com","port":22,"raw":true},'
      .. '{"host":"*.db.example","port":5432,"raw":true}]}', p:render())
    assert.is_true(p:rules()[2].raw)
    assert.is_nil(p:rules()[1].raw)
    assert.equal(p:render(), core.policy_load(p:render()):render())
    -- a connection to github.com:22 is admitted by rule 1, and rule 2 says its bytes need not be TLS
    assert.same({ admitted = true, rule = 1, raw = 2 }, p:explain("github.com", nil, nil, 22))
    assert.same({ admitted = true, rule = 1 }, p:explain("github.com", nil, nil, 443))
    assert.same({ admitted = true, rule = 1 }, p:explain("github.com", "GET", "/", 22)) -- a request is not raw
    assert.same({ admitted = true, rule = 3, raw = 3 }, p:explain("a.db.example", nil, nil, 5432))
    assert.same({ admitted = false, reason = "host" }, p:explain("a.db.example", nil, nil, 5433))
  end)

  it("refuses a raw rule without its port, with methods or paths, and a raw that is not a boolean", function()
    assert.truthy(compile { host = "github.com", port = 22, raw = false }) -- control
    for _, bad in ipairs {
      { { host = "github.com", raw = true }, "must name its port" },
      { { host = "*.github.com", raw = true }, "must name its port" },
      { { host = "github.com:22", raw = true, methods = { "GET" } }, "cannot have methods or paths" },
      { { host = "github.com", port = 22, raw = "yes" }, "must be true or false" },
    } do
      local p, err = compile(bad[1])
      assert.is_nil(p)
      assert.equal("invalid", err.kind)
      assert.equal(1, err.rule)
      assert.matches(bad[2], err.message, 1, true)
    end
  end)
end)

describe("sandstack-proxy against hostile clients", function()
  if not H.bring_up(SKIP, setup) then return end

  it("refuses a tunnel to an admitted host's plain-HTTP port that carries HTTP for another Host", function()
    local ctl = client("raw", PROXY_IP, "3128", get_text("http://allowed.test/fwd"))
    assert.equal(200, ctl.status) -- control: the forward route, with Host from the URL
    assert.same({ "allowed.test" }, core.json_decode(ctl.body).headers.host)
    local tls = client("tunnel_tls", PROXY_IP, "3128", "allowed.test:443", "allowed.test", work .. "/ca.pem", TOKEN)
    assert.equal("ok", tls.tls, tls.error) -- control: a TLS tunnel naming the host
    for _, data in ipairs {
      "GET / HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n",
      "GET /a HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\nGET /b HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n",
    } do
      local r = client("tunnel_plain", PROXY_IP, "3128", "allowed.test:80", TOKEN, data)
      assert.equal(200, r.connect_status)
      assert.equal(403, r.reply.status, r.reply.body) -- not the origin's answer
      local p = core.json_decode(r.reply.body).policy
      assert.equal("not_tls", p.decision)
      assert.equal(1, p.rule)
      assert.matches('{ host = "allowed.test", port = 80, raw = true }', core.json_decode(r.reply.body).error.message, 1, true)
    end
    assert.truthy(audited { host = "allowed.test", port = 80, decision = "not_tls" })
  end)

  it("does not let a server that speaks first (SSH) through a rule that is not raw", function()
    local r = client("banner", PROXY_IP, "3128", "allowed.test:2222", TOKEN, "-")
    assert.equal(200, r.connect_status)
    assert.equal("", r.first) -- the destination is not read before the hello is checked
    assert.matches("^HTTP/1.1 403", r["then"])
    assert.is_nil(r["then"]:find("SSH-2.0", 1, true))
  end)

  it("relays raw TCP both ways when a raw rule names that host and port, and only there", function()
    H.start_proxy("raw", 3130, H.base_env("ssh9-raw", { SANDSTACK_EGRESS_POLICY = assert(core.policy_compile {
      allow = { "allowed.test", { host = "git.test", port = 2222, raw = true } } }):render() }))
    local r = client("banner", PROXY_IP, "3130", "git.test:2222", TOKEN, "-")
    assert.equal(200, r.connect_status)
    assert.equal("SSH-2.0-sandstack-test\r\n", r.first) -- it spoke first, and was heard
    assert.equal("ping\n", r["then"])
    r = client("banner", PROXY_IP, "3130", "git.test:2222", TOKEN, "early\n") -- bytes behind the CONNECT
    assert.equal("SSH-2.0-sandstack-test\r\nearly\n", r.first)
    -- the same server under a name without a raw rule, and the raw name on another port
    r = client("banner", PROXY_IP, "3130", "allowed.test:2222", TOKEN, "-")
    assert.equal("", r.first)
    assert.matches("^HTTP/1.1 403", r["then"])
    assert.equal(403, client("raw", PROXY_IP, "3130", connect_text("git.test:2223")).status)
    local line = audited({ host = "git.test", port = 2222, decision = "allow" }, "raw")
    assert.truthy(line)
    assert.equal("raw", line.reason)
    assert.equal(2, line.rule)
    H.stop("raw")
  end)

  it("refuses a ClientHello offering Encrypted Client Hello or ESNI, naming them in the audit", function()
    local ctl = client("hello", PROXY_IP, "3128", "allowed.test:443", "allowed.test", TOKEN, "none")
    assert.equal(200, ctl.connect_status)
    assert.matches("^160303", ctl.answer) -- control: the origin's ServerHello came back
    for _, kind in ipairs { "ech", "esni" } do
      local r = client("hello", PROXY_IP, "3128", "allowed.test:443", "allowed.test", TOKEN, kind)
      assert.equal(200, r.connect_status)
      assert.equal("15030300020228", r.answer, kind) -- the proxy's fatal handshake_failure, nothing else
      local line = audited { host = "allowed.test", decision = kind }
      assert.truthy(line, kind)
      assert.equal("allowed.test", line.sni)
    end
  end)

  it("refuses a TLS record of another type before the ClientHello, off port 443", function()
    local ca = work .. "/ca.pem"
    local ctl = client("alert_tls", PROXY_IP, "3128", "allowed.test:8444", "allowed.test", ca, TOKEN, "")
    assert.equal("ok", ctl.tls, ctl.error) -- control: the lenient server, through the proxy
    assert.matches("hello from allowed.test", ctl.reply, 1, true)
    for _, record in ipairs { "15030300020170", "140303000101" } do -- a warning alert; a change_cipher_spec
      local r = client("alert_tls", PROXY_IP, "3128", "allowed.test:8444", "denied.test", ca, TOKEN, record)
      assert.equal(200, r.connect_status)
      assert.equal("error", r.tls, r.reply) -- not "hello from denied.test"
    end
    assert.truthy(audited { host = "allowed.test", port = 8444, decision = "malformed_hello" })
  end)

  it("lets a name through to a literal address only on the port the literal's rule names", function()
    local r = client("raw", PROXY_IP, "3128", get_text("http://loop.test:9999/"))
    assert.equal(200, r.status) -- control: rule 2 names 127.0.0.1:9999
    assert.equal("local 9999\n", r.body)
    assert.equal(200, client("raw", PROXY_IP, "3128", connect_text("loop.test:9999"), "1").status)
    r = client("raw", PROXY_IP, "3128", get_text("http://loop.test:9080/"))
    assert.equal(403, r.status, r.body)
    local p = core.json_decode(r.body).policy
    assert.same({ "address_refused", "loopback", "127.0.0.1" }, { p.decision, p.reason, p.address })
    r = client("raw", PROXY_IP, "3128", connect_text("loop.test:9080"))
    assert.equal(403, r.status)
    assert.equal("address_refused", core.json_decode(r.body).policy.decision)
    assert.equal(403, client("raw", PROXY_IP, "3128", get_text("http://127.0.0.1:9080/")).status) -- the literal itself
  end)

  it("judges an IPv6 address that carries an IPv4 address as that IPv4 address", function()
    -- controls: the same forms carrying a public address are reached
    local controls = { ["ok-nat64local"] = "64:ff9b:1::c633:640a", ["ok-siit"] = "::ffff:0:c633:640a",
      ["ok-teredo"] = "2001:0:c633:640a::39cc:9bf5" }
    local attacks = {
      nat64local = "loopback",          -- 64:ff9b:1::/48 (local-use NAT64), /96 layout: 127.0.0.1
      nat64local48 = "link_local",      -- the same prefix, /48 layout: 169.254.169.254
      siit = "private",                 -- ::ffff:0:10.0.0.1
      teredo = "loopback",              -- Teredo client field: 127.0.0.1 inverted
      ["teredo-server"] = "link_local", -- Teredo server field: 169.254.169.254
      mapped = "private", nat64 = "link_local", compat = "private", sixtofour = "private",
    }
    local function url(name) return "http://" .. name .. ".embed.test:8081/" end
    local urls = {}
    for name in pairs(controls) do urls[#urls + 1] = url(name) end
    for name in pairs(attacks) do urls[#urls + 1] = url(name) end
    local got = client("gets", PROXY_IP, "3128", TOKEN, (table.unpack or unpack)(urls))
    for name, addr in pairs(controls) do
      local r = got[url(name)]
      assert.equal(200, r.status, name .. ": " .. r.body)
      assert.equal("v6 " .. addr .. "\n", r.body, name)
    end
    for name, range in pairs(attacks) do
      local r = got[url(name)]
      assert.equal(403, r.status, name .. ": " .. r.body)
      local p = core.json_decode(r.body).policy
      assert.equal("address_refused", p.decision, name)
      assert.equal(range, p.reason, name)
    end
  end)

  it("exits cleanly on SIGTERM (and, under ASan, without a sanitizer report)", function()
    H.stop_clean("main")
    for _, name in ipairs { "main", "raw" } do
      local err = h.read_file(H.work .. "/" .. name .. "/err") or ""
      assert.is_nil(err:find("Sanitizer", 1, true), err)
      assert.is_nil(err:find("runtime error", 1, true), err)
    end
  end)
end)
