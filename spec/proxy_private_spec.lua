-- allow_private (docs/policy.md, "Refused addresses"; csrc/policy/private.c): the operator's opt-in,
-- address by address, to destinations the proxy refuses by default. In the network-namespace test
-- bed (spec/support/proxy_harness.lua) the outside holds a lab network, 10.77.0.7 (the "internal
-- registry", named) and 10.77.0.8 (its neighbour, not named), and the metadata address
-- 169.254.169.254, all served by spec/support/proxy_standin.py; the proxy's own namespace has a
-- server on 127.0.0.1. Real clients (curl, the raw client) go through the built sandstack-proxy:
-- the named address is reached by the names the rules admit, on the ports it is named for; an
-- unnamed private address, loopback and the metadata address stay refused; a name with a named
-- and an unnamed address is refused; the entry admits nothing by itself; and a live change that
-- stops naming the address closes the tunnel to it. Every refusal follows a control that is
-- admitted. Runs in every mode (the proxy comes from the mode's build directory). Needs root and ip(8).
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("sspv")
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local in_p, proxy_url = H.in_p, H.proxy_url
local work, sock

local SKIP = H.missing()

local HOSTS = [[
198.51.100.10 public.test
10.77.0.7 registry.test
10.77.0.8 other.test
169.254.169.254 meta.test
127.0.0.1 loop.test
10.77.0.7 mixed.test
10.77.0.8 mixed.test
]]

local RULES = {
  "public.test", "registry.test", "other.test", "meta.test", "loop.test", "mixed.test",
  { host = "registry.test", port = 9002, raw = true },
}
local OPEN = assert(core.policy_compile { allow = RULES,
  allow_private = { "10.77.0.7", "169.254.169.254:80" } }):render()
local CLOSED = assert(core.policy_compile { allow = RULES }):render()

local function curl(proxy, args)
  return h.sh(in_p("curl -sS --max-time 10 --cacert " .. h.q(work .. "/ca.pem") .. " --proxy " .. h.q(proxy_url(proxy))
    .. " " .. args))
end

-- a CONNECT through the named proxy: the status and the decoded policy object of a refusal
local function connect(proxy, target)
  local r = H.client("raw", PROXY_IP, tostring(H.proxies[proxy].port),
    "CONNECT " .. target .. " HTTP/1.1\\r\\nProxy-Authorization: Bearer " .. TOKEN .. "\\r\\n\\r\\n", "1")
  local body = r.status ~= 200 and core.json_decode(r.body or "") or nil
  return r.status, body and body.policy or {}, body
end

-- sandstack-proxy --control VERB [payload] against the "open" proxy -> decoded answer
local function control(verb, payload) return (H.control(sock, verb, payload)) end

describe("allow_private: a private address the operator names", function()
  if not H.bring_up(SKIP, function()
    work = H.net_up("/tmp/sspv-proxy.XXXXXX", HOSTS, { "198.51.100.10" })
    -- the lab and the metadata address outside; a route to each from the proxy's side of the link
    for _, a in ipairs { "10.77.0.7/24", "10.77.0.8/24", "169.254.169.254/16" } do
      h.must(H.in_o("ip addr add " .. a .. " dev " .. H.VETH_O))
    end
    h.must(in_p("ip addr add 10.77.0.1/24 dev " .. H.VETH_P) .. " && " .. in_p("ip addr add 169.254.0.1/16 dev " .. H.VETH_P))
    H.make_certs("sspv-test-ca", "registry.test", { "registry.test", "other.test", "public.test", "meta.test", "mixed.test" })
    H.start_standin()
    h.must(in_p("setsid python3 -m http.server 9080 --bind 127.0.0.1 --directory " .. h.q(work)) .. " </dev/null >/dev/null 2>&1 &")
    H.wait_standin()
    sock = work .. "/ctl/control.sock"
    H.start_proxy("open", 3128, H.base_env("sspv-open", { SANDSTACK_EGRESS_POLICY = OPEN,
      SANDSTACK_UPSTREAM_CA = work .. "/ca.pem" }), { control = sock })
    H.start_proxy("closed", 3129, H.base_env("sspv-closed", { SANDSTACK_EGRESS_POLICY = CLOSED,
      SANDSTACK_UPSTREAM_CA = work .. "/ca.pem" }))
  end) then return end

  it("reaches the named address by a name a rule admits, over CONNECT with TLS and over plain HTTP", function()
    local out, ok = curl("open", "https://public.test/a")
    assert.is_true(ok, out)                                       -- control: an ordinary address
    assert.matches("hello from public.test /a", out, 1, true)
    out, ok = curl("open", "https://registry.test/v2/")
    assert.is_true(ok, out)
    assert.matches("hello from registry.test /v2/", out, 1, true)
    out, ok = curl("open", "http://registry.test/v2/catalog")
    assert.is_true(ok, out)
    assert.equal("/v2/catalog", assert(core.json_decode(out), out).path)
  end)

  it("without allow_private the same name is refused: address_refused, with the entry to add", function()
    assert.equal(200, (connect("closed", "public.test:443")))      -- control
    local status, p, body = connect("closed", "registry.test:443")
    assert.equal(403, status)
    assert.equal("address_refused", p.decision)
    assert.equal("private", p.reason)
    assert.matches('allow_private = { "10.77.0.7:443" }', body.error.message, 1, true)
    assert.matches('allow_private = { "10.77.0.7:443" }', body.deny.allow_hint, 1, true)
  end)

  it("keeps refusing what it does not name: the neighbour, a name with one unnamed address, loopback, other ports", function()
    assert.equal(200, (connect("open", "registry.test:443")))      -- control
    local cases = {
      { "other.test:443", "private" },       -- 10.77.0.8, the named address's neighbour: no range opens
      { "mixed.test:443", "private" },       -- 10.77.0.7 and 10.77.0.8: every address must be acceptable
      { "loop.test:9080", "loopback" },      -- 127.0.0.1 is refused unless named
      { "meta.test:443", "link_local" },     -- 169.254.169.254 is named on port 80 only
    }
    for _, c in ipairs(cases) do
      local status, p = connect("open", c[1])
      assert.equal(403, status, c[1])
      assert.equal("address_refused", p.decision, c[1])
      assert.equal(c[2], p.reason, c[1])
    end
    local out, ok = curl("open", "http://meta.test/latest/meta-data/")  -- named on port 80: reached
    assert.is_true(ok, out)
    assert.equal("/latest/meta-data/", assert(core.json_decode(out), out).path)
  end)

  it("admits nothing by itself: the literal address is refused unless a rule names it", function()
    local status, p = connect("open", "10.77.0.7:443")
    assert.equal(403, status)
    assert.equal("deny", p.decision)
    assert.equal("host", p.reason)
  end)

  it("a live change that stops naming the address closes the tunnel to it, and refuses the next", function()
    assert.equal(OPEN, control("egress").rendered)
    local out_file = work .. "/raw-hold"
    h.must(H.client_command("hold", { "registry.test", "30", "9002", "raw" }, { HTTPS_PROXY = proxy_url("open") })
      .. " > " .. h.q(out_file) .. " 2>&1 &")
    h.wait_for("the tunnel to registry.test", function() return (h.read_file(out_file) or ""):find("open") end, 20)
    local r = control("set-egress", CLOSED)
    assert.is_true(r.ok, core.json_encode(r))
    assert.equal(1, r.closed)
    h.wait_for("the tunnel to 10.77.0.7 closed by the change", function()
      for _, l in ipairs(H.audit("open")) do
        if l.port == 9002 and l["end"] == "policy_changed" then return l end
      end
    end, 10)
    local status, p = connect("open", "registry.test:443")
    assert.equal(403, status)
    assert.equal("address_refused", p.decision)
    assert(control("set-egress", OPEN).ok)
    assert.equal(200, (connect("open", "registry.test:443")))      -- named again: reached again
  end)

  it("exits cleanly on SIGTERM (and, under ASan, without a sanitizer report)", function()
    H.stop_clean("open")
    H.stop_clean("closed")
  end)
end)
