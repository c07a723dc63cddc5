-- TLS inspection in sandstack-proxy (csrc/proxy/route/inspect.c, tls.c, ca.c; docs/proxy.md)
-- against real clients and real TLS. As in spec/proxy_core_spec.lua: two network namespaces
-- joined by a veth pair, "ssh7p*" holding the proxy and the clients (its /etc/hosts names the
-- test hosts), "ssh7o*" the outside in 198.51.100.0/24. The outside's TLS servers use a test
-- CA made here ("ssh7-test-ca") that the proxy trusts through SANDSTACK_UPSTREAM_CA (PEM
-- text); two more servers present a certificate from a CA nobody trusts and one for another
-- name. The clients trust only the bundle the proxy wrote into SANDSTACK_CA_DIR, as the
-- sandbox will. Every refusal is preceded by a control that succeeds. Needs root and ip(8).
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("ssh7")
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local in_p, proxy_url, audit, proxies = H.in_p, H.proxy_url, H.audit, H.proxies
local work

local SKIP = H.missing { { "test -r /etc/ssl/certs/ca-certificates.crt", "needs the system CA bundle" } }

local POLICY = {
  { host = "api.test", methods = { "GET" }, paths = { "/v1/*" } },                      -- 1: inspected
  "tunnel.test:443",                                                                    -- 2: a plain tunnel
  { host = "model.test", port = 8443, methods = { "GET" }, paths = { "/v1/*" } },      -- 3: inspected, echoes headers
  { host = "untrusted.test", port = 8444, methods = { "GET" } },                        -- 4: a CA nobody trusts
  { host = "wrongname.test", port = 8445, methods = { "GET" } },                        -- 5: a certificate for another name
}

local HOSTS = [[
198.51.100.10 api.test
198.51.100.10 tunnel.test
198.51.100.10 model.test
198.51.100.10 untrusted.test
198.51.100.10 wrongname.test
]]

-- curl in the proxy's namespace through HTTPS_PROXY, trusting only the proxy's bundle (the
-- sandbox's CURL_CA_BUNDLE): status, body
local function curl(name, url, extra)
  local out = h.sh(in_p("env HTTPS_PROXY=" .. h.q(proxy_url(name)) .. " CURL_CA_BUNDLE=" .. h.q(proxies[name].ca .. "/bundle.pem")
    .. " curl -sS --max-time 10 -o " .. h.q(work .. "/body") .. " -w '%{http_code} %{http_version}' " .. (extra or "")
    .. " " .. h.q(url) .. " 2>&1"))
  local status, version = out:match("(%d+) ([%d%.]+)%s*$")
  return tonumber(status), h.read_file(work .. "/body") or "", version, out
end

-- CONNECT through the proxy, TLS with the proxy's bundle and the given ALPN list, one GET: the
-- certificate the client saw, the negotiated ALPN and the answer
local function peek(target, sni, path, alpn)
  return H.client("peek", PROXY_IP, proxies.main.port, target, sni, proxies.main.ca .. "/bundle.pem", TOKEN, path,
    alpn or "http/1.1")
end

local function openssl_text(file) return h.must("openssl x509 -noout -text -in " .. h.q(file)) end

local function setup()
  work = H.net_up("/tmp/ssh7-inspect.XXXXXX", HOSTS, { "198.51.100.10" })
  -- the test CA and the good server certificate; a CA nobody trusts; a good-CA certificate for another name
  H.make_certs("ssh7-test-ca", "api.test", { "api.test", "tunnel.test", "model.test" },
    " && openssl req -x509 -newkey rsa:2048 -nodes -keyout rogue.key -out rogue.pem -days 2 -subj /CN=untrusted.test"
    .. " -addext subjectAltName=DNS:untrusted.test 2>&1"
    .. " && openssl req -newkey rsa:2048 -nodes -keyout other.key -out other.csr -subj /CN=someone-else.test 2>&1"
    .. " && printf 'subjectAltName=DNS:someone-else.test\\n' > ext2"
    .. " && openssl x509 -req -in other.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out other.pem -days 2 -extfile ext2 2>&1"
    .. " && cat /etc/ssl/certs/ca-certificates.crt ca.pem > roots.pem")
  H.start_standin()
  for name, port in pairs { rogue = 8444, other = 8445 } do -- the 502 cases
    H.start_peer("bad_origin.py", { work .. "/" .. name .. ".pem", work .. "/" .. name .. ".key", port },
      { ready = port, log = "/dev/null" })
  end
  H.wait_standin()
  local base = H.base_env("ssh7-session", {
    SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = POLICY }):render(),
    SANDSTACK_UPSTREAM_CA = h.read_file(work .. "/ca.pem"), SANDSTACK_CA_ROOTS = work .. "/roots.pem" })
  H.start_proxy("main", 3128, base, { ca_dir = true })
  H.start_proxy("off", 3129, ph.with(base, {
    SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = POLICY, inspect = false }):render() }), { ca_dir = true })
  H.start_proxy("noca", 3130, ph.with(base, { SANDSTACK_UPSTREAM_CA = false }), { ca_dir = true })
end

describe("sandstack-proxy TLS inspection", function()
  if not H.bring_up(SKIP, setup) then return end

  describe("the stack CA", function()
    it("is published as a certificate and a bundle, never with its key, name-constrained and short-lived", function()
      local dir = proxies.main.ca
      assert.same({ "bundle.pem", "ca.pem" }, (function()
        local t = {}
        for f in h.must("ls -A " .. h.q(dir)):gmatch("%S+") do t[#t + 1] = f end
        table.sort(t)
        return t
      end)())
      local ca, bundle = h.read_file(dir .. "/ca.pem"), h.read_file(dir .. "/bundle.pem")
      assert.is_nil(ca:find("PRIVATE KEY", 1, true))
      assert.is_nil(bundle:find("PRIVATE KEY", 1, true))
      assert.is_nil(h.read_file(proxies.main.dir .. "/out"):find("PRIVATE KEY", 1, true))
      -- the bundle is the roots the proxy was given, the SANDSTACK_UPSTREAM_CA roots (one), then the CA
      local _, roots = h.read_file(work .. "/roots.pem"):gsub("BEGIN CERTIFICATE", "")
      local _, inbundle = bundle:gsub("BEGIN CERTIFICATE", "")
      assert.equal(roots + 2, inbundle)
      local _, noca = h.read_file(proxies.noca.ca .. "/bundle.pem"):gsub("BEGIN CERTIFICATE", "")
      assert.equal(roots + 1, noca) -- without SANDSTACK_UPSTREAM_CA: the roots and the CA
      assert.equal(ca, bundle:sub(-#ca))
      local text = openssl_text(dir .. "/ca.pem")
      assert.matches("CA:TRUE, pathlen:0", text, 1, true)
      local nc = text:match("X509v3 Name Constraints: critical(.-)X509v3") or text:match("X509v3 Name Constraints: critical(.*)")
      assert.is_not_nil(nc, text)
      local permitted = {}
      for name in nc:gmatch("DNS:([%w%.%-]+)") do permitted[#permitted + 1] = name end
      table.sort(permitted)
      assert.same({ "api.test", "model.test", "untrusted.test", "wrongname.test" }, permitted) -- not tunnel.test
      assert.matches("Excluded:%s+IP:0%.0%.0%.0/0%.0%.0%.0", nc)
      -- a week (168 h) and an hour of clock skew, no more
      local span = h.must(("d1=$(date -d \"$(openssl x509 -noout -startdate -in %s | cut -d= -f2)\" +%%s); "
        .. "d2=$(date -d \"$(openssl x509 -noout -enddate -in %s | cut -d= -f2)\" +%%s); echo $((d2 - d1))"):format(
        h.q(dir .. "/ca.pem"), h.q(dir .. "/ca.pem")))
      assert.equal(169 * 3600, tonumber(span))
    end)

    it("with inspect = false, publishes the bundle without a CA and refuses such hosts over CONNECT, saying why", function()
      local dir = proxies.off.ca
      assert.is_nil(h.read_file(dir .. "/ca.pem"))
      assert.is_not_nil(h.read_file(dir .. "/bundle.pem"))
      local status, body = curl("off", "https://tunnel.test/plain")
      assert.equal(200, status) -- control: tunnels work
      assert.matches("hello from tunnel.test /plain", body, 1, true)
      local out = h.sh(in_p("curl -sS --max-time 10 -p -x " .. h.q(proxy_url("off")) .. " -o /dev/null -w '%{http_code}' "
        .. "--cacert " .. h.q(dir .. "/bundle.pem") .. " https://api.test/v1/models 2>&1"))
      assert.matches("403", out)
      local resp = H.client("raw", PROXY_IP, "3129", "CONNECT api.test:443 HTTP/1.1\\r\\nProxy-Authorization: Bearer "
        .. TOKEN .. "\\r\\n\\r\\n")
      assert.equal(403, resp.status)
      local b = core.json_decode(resp.body)
      assert.equal("needs_inspection", b.policy.reason)
      assert.equal(1, b.policy.rule)
      assert.matches("inspect = false", b.error.message, 1, true)
    end)
  end)

  describe("inspected hosts", function()
    it("curl: GET on an allowed path reaches the host; the certificate it trusted is the stack CA's leaf", function()
      local status, body, version, out = curl("main", "https://api.test/v1/models?limit=2")
      assert.equal(200, status, out)
      assert.equal("hello from api.test /v1/models?limit=2\n", body)
      assert.equal("1.1", version)
      local p = peek("api.test:443", "api.test", "/v1/peek")
      assert.matches("^sandstack stack inspection CA", p.issuer.commonName)
      assert.equal("api.test", p.subject.commonName)
      assert.matches("hello from api.test /v1/peek", p.reply, 1, true)
    end)

    it("curl: POST, a path outside /v1/*, %2e%2e and .. tricks and a /v10 lookalike get the JSON 403 inside TLS", function()
      local status, body = curl("main", "https://api.test/v1/ok")
      assert.equal(200, status) -- control
      assert.matches("hello from api.test /v1/ok", body, 1, true)
      local cases = {
        { "-X POST -d x=1", "https://api.test/v1/models", "method", "POST" },
        { "", "https://api.test/v2/models", "path", "GET" },
        { "--path-as-is", "https://api.test/v1/%2e%2e/admin", "bad_path", "GET" },
        { "--path-as-is", "https://api.test/v1/%2E%2E/%2e%2e/admin", "bad_path", "GET" },
        { "--path-as-is", "https://api.test/v1/../admin", "bad_path", "GET" },
        { "--path-as-is", "https://api.test/v1/%2fadmin", "bad_path", "GET" },
        { "", "https://api.test/v10", "path", "GET" },
        { "", "https://api.test/v10/models", "path", "GET" },
      }
      for _, case in ipairs(cases) do
        local st, b, _, out = curl("main", case[2], case[1])
        assert.equal(403, st, case[2] .. ": " .. out)
        local j = assert(core.json_decode(b), b)
        assert.equal("permission_error", j.error.type, case[2])
        assert.equal("deny", j.policy.decision, case[2])
        assert.equal(case[3], j.policy.reason, case[2])
        assert.equal(case[4], j.policy.method, case[2])
        assert.equal("api.test", j.policy.host, case[2])
        assert.is_nil(b:find("hello from", 1, true))
      end
      -- the proxy writes a request's audit line after its answer: the last may still be on its way
      local denied = 0
      pcall(h.wait_for, "an audit line for each case", function()
        denied = 0
        for _, l in ipairs(audit("main")) do
          if l.kind == "inspect" and l.decision == "deny" and l.host == "api.test" then denied = denied + 1 end
        end
        return denied >= #cases
      end, 5, 0.05)
      assert.equal(#cases, denied)
    end)

    it("python urllib with SSL_CERT_FILE: GET allowed, POST and /v10 refused with 403", function()
      local got, out = H.client_lines("urllib", { "10", "GET", "https://api.test/v1/py",
        "POST", "https://api.test/v1/py", "GET", "https://api.test/v10" },
        { env = { HTTPS_PROXY = proxy_url("main"), SSL_CERT_FILE = proxies.main.ca .. "/bundle.pem" } })
      assert.equal(3, #got, out)
      assert.equal(200, got[1].status)
      assert.equal("hello from api.test /v1/py\n", got[1].body)
      assert.equal(403, got[2].status)
      assert.equal("method", core.json_decode(got[2].body).policy.reason)
      assert.equal(403, got[3].status)
      assert.equal("path", core.json_decode(got[3].body).policy.reason)
    end)

    it("re-originates with Host from the CONNECT and without the token or proxy credentials", function()
      local out = h.sh(in_p("env HTTPS_PROXY=" .. h.q(proxy_url("main")) .. " CURL_CA_BUNDLE="
        .. h.q(proxies.main.ca .. "/bundle.pem") .. " curl -sS --max-time 10 -H 'X-Carry: " .. TOKEN .. "' -H 'X-"
        .. TOKEN .. ": 1' -H 'Host: MODEL.test.:8443' -H 'X-Keep: yes' 'https://model.test:8443/v1/echo?q=1'"))
      local seen = assert(core.json_decode(out), out)
      assert.equal("/v1/echo?q=1", seen.path)
      assert.same({ "model.test:8443" }, seen.headers.host)
      assert.same({ "yes" }, seen.headers["x-keep"]) -- control: other headers pass
      assert.is_nil(seen.headers.connection) -- kept alive, not "close" on every request
      assert.is_nil(seen.headers["proxy-authorization"])
      assert.is_nil(seen.headers["x-carry"])
      assert.is_nil(out:find(TOKEN, 1, true))
    end)

    it("a client that does not trust the stack CA refuses the leaf; the audit line says tls_error", function()
      local status = curl("main", "https://api.test/v1/trusting")
      assert.equal(200, status) -- control: with the bundle
      local out, ok = h.sh(in_p("env HTTPS_PROXY=" .. h.q(proxy_url("main")) .. " curl -sS --max-time 10 --cacert "
        .. h.q(work .. "/roots.pem") .. " https://api.test/v1/untrusting 2>&1"))
      assert.is_false(ok)
      assert.matches("certificate", out)
      local seen
      h.must("sleep 0.2")
      for _, l in ipairs(audit("main")) do
        if l.kind == "inspect" and l.decision == "tls_error" then seen = l end
      end
      assert.is_not_nil(seen)
      assert.equal("client_handshake_failed", seen.reason)
      assert.is_nil(seen.path) -- no request was read
    end)

    it("offers only http/1.1: a client asking for h2 gets HTTP/1.1", function()
      local p = peek("api.test:443", "api.test", "/v1/alpn", "h2,http/1.1")
      assert.equal("http/1.1", p.alpn)
      assert.matches("^HTTP/1%.1 200", p.reply)
      local _, _, version = curl("main", "https://api.test/v1/h2", "--http2")
      assert.equal("1.1", version)
    end)

    it("signs a leaf once per host and then serves it from the cache", function()
      local leaves = {}
      for _, l in ipairs(audit("main")) do
        if l.kind == "inspect" and l.host == "api.test" then leaves[#leaves + 1] = l.leaf end
      end
      assert.is_true(#leaves >= 3)
      assert.equal("fresh", leaves[1])
      for i = 2, #leaves do assert.equal("cached", leaves[i]) end
    end)
  end)

  describe("plain tunnels and upstream verification", function()
    it("tunnels a host without method or path rules: the client sees the upstream's own certificate", function()
      local p = peek("tunnel.test:443", "tunnel.test", "/t")
      assert.equal("ssh7-test-ca", p.issuer.commonName, p.error)
      assert.matches("hello from tunnel.test /t", p.reply, 1, true)
      local inspected = peek("api.test:443", "api.test", "/v1/t") -- control: the same server, inspected
      assert.matches("^sandstack stack inspection CA", inspected.issuer.commonName)
      local kinds = {}
      for _, l in ipairs(audit("main")) do
        if l.host == "tunnel.test" then kinds[#kinds + 1] = l.kind end
      end
      assert.same({ "connect" }, kinds)
    end)

    it("refuses an upstream certificate from an untrusted CA, or for another name, with a JSON 502 naming why", function()
      local status, body = curl("main", "https://api.test/v1/control")
      assert.equal(200, status) -- control: the test CA is trusted through SANDSTACK_UPSTREAM_CA
      for _, case in ipairs { { "https://untrusted.test:8444/", "untrusted" }, { "https://wrongname.test:8445/", "name_mismatch" } } do
        local st, b, _, out = curl("main", case[1])
        assert.equal(502, st, out)
        local j = assert(core.json_decode(b), b)
        assert.equal("api_error", j.error.type)
        assert.equal(case[2], j.upstream.reason)
        assert.matches(case[2], j.error.message, 1, true)
        assert.is_nil(b:find("bad!", 1, true))
      end
      -- without SANDSTACK_UPSTREAM_CA the test CA is just another unknown CA
      local st, b = curl("noca", "https://api.test/v1/control")
      assert.equal(502, st)
      assert.equal("untrusted", core.json_decode(b).upstream.reason)
    end)
  end)

  describe("shutdown", function()
    it("exits cleanly on SIGTERM (and, under ASan, without a sanitizer report)", function()
      for _, name in ipairs { "main", "off", "noca" } do H.stop_clean(name) end
      assert.is_nil(h.read_file(proxies.main.dir .. "/out"):find(TOKEN, 1, true))
    end)
  end)
end)
