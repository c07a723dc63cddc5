-- TLS inspection at stack level: a policy rule naming methods or paths makes the proxy sandstack
-- adds inspect TLS for that host, and the stack wires it (csrc/stack/inspect.c, plan.c): the CA
-- volume read-write in the proxy and read-only in the sandbox, the five bundle variables, the
-- sandbox started after the proxy's ready test. Real curl and Python urllib in a real sandbox
-- (sandstack-test/client:local) trust only what the stack mounted. The outside is a network
-- namespace of this test on a /28 of 203.0.113.192/26: spec/support/proxy_standin.py (TLS with a
-- test CA for api.test and tunnel.test) and two spec/support/bad_origin.py whose certificates the
-- proxy must refuse (a CA nobody trusts; a name that is not the host's). The proxy trusts the
-- test CA through `proxy_upstream_ca`, which also puts it in the sandbox's bundle (so the
-- tunnelled host verifies in the sandbox). Every refusal is preceded by a control that succeeds.
-- Objects: project "sstest-h11-<random>", netns "sstest-h11-<random>"; all removed at the end.
local sandstack = require "sandstack"
local h = require "helpers"
local core = sandstack.core
local docker = sandstack.docker

local dh = require "docker_proxy_harness"

local S = dh.stack("h11", "sh11", function(r) return 192 + 16 * (r % 4) end) -- a /28 in 203.0.113.192/26
local PROXY_IMAGE, FORWARDER_IMAGE, CLIENT = S.PROXY_IMAGE, S.FORWARDER_IMAGE, S.CLIENT
local PROJECT, TOKEN, KEY = S.PROJECT, S.TOKEN, S.KEY
local addr, missing, sandbox, in_sandbox, audit = S.addr, S.missing, S.sandbox, S.in_sandbox, S.audit
local BUNDLE = "/etc/sandstack/ca/bundle.pem"
local VARS = { "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO" }

local POLICY = {
  { host = "api.test", methods = { "GET" }, paths = { "/v1/*" } }, -- inspected (every port, so 443)
  "tunnel.test:443",                                                -- a plain tunnel
  { host = "untrusted.test", port = 8444, methods = { "GET" } },    -- inspected: a CA nobody trusts
  { host = "wrongname.test", port = 8445, methods = { "GET" } },    -- inspected: a certificate for another name
}

-- curl in the sandbox through HTTPS_PROXY with the stack's variables only: status, body, verbose
local function curl(url, extra)
  in_sandbox("rm -f /tmp/body /tmp/err; curl -sS -m 15 -v -o /tmp/body -w '%{http_code}' " .. (extra or "") .. " "
    .. h.q(url) .. " >/tmp/code 2>/tmp/err")
  return tonumber((in_sandbox("cat /tmp/code"))), (in_sandbox("cat /tmp/body 2>/dev/null")), (in_sandbox("cat /tmp/err"))
end

-- Python in the sandbox (proxy_client.py), trusting what SSL_CERT_FILE names: urllib through
-- HTTPS_PROXY, {status, body} or {error}
local function urllib(method, url) return (S.client("urllib", "15", method, url)) end

-- the issuer of the certificate seen through a CONNECT to host:443, and the answer to a GET of path
local function issuer(host, path)
  local r = S.client("peek", "proxy", "3128", host .. ":443", host, "default", TOKEN, path, "http/1.1")
  return { issuer = r.issuer and r.issuer.commonName, body = (r.reply or ""):match("\r\n\r\n(.*)$"), error = r.error }
end

local function json_refusal(status, body, want)
  assert.equal(want, status, body)
  local j = assert(core.json_decode(body), "not JSON: " .. tostring(body))
  assert.equal("error", j.type)
  return j
end

describe("TLS inspection wired by the Docker stack, with real clients in a real sandbox #docker", function()
  local skip_why = missing()
  local work, stack, start_err, test_ca

  lazy_setup(function()
    if skip_why then return end
    work = S.workdir()
    dh.make_certs(work, "sstest-h11-ca", "api.test", { "api.test", "tunnel.test" },
      " && openssl req -newkey rsa:2048 -nodes -keyout other.key -out other.csr -subj /CN=other.test 2>&1"
      .. " && printf 'subjectAltName=DNS:other.test\\n' > ext2"
      .. " && openssl x509 -req -in other.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out other.pem -days 2 -extfile ext2 2>&1"
      .. " && openssl req -x509 -newkey rsa:2048 -nodes -keyout rogue.key -out rogue.pem -days 2 -subj /CN=untrusted.test"
      .. " -addext subjectAltName=DNS:untrusted.test 2>&1")
    S.outside_up { 2 }
    S.start_standin(work)
    for name, port in pairs { rogue = 8444, other = 8445 } do -- certificates the proxy must refuse
      S.start_peer("bad_origin.py", { work .. "/" .. name .. ".pem", work .. "/" .. name .. ".key", port,
        work .. "/" .. name .. ".ready" }, "/dev/null")
    end
    S.wait_ready(work, { "standin.ready", "rogue.ready", "other.ready" })
    S.build_images()
    test_ca = h.read_file(work .. "/ca.pem")
    local names = {}
    for _, n in ipairs { "api.test", "tunnel.test", "untrusted.test", "wrongname.test" } do names[n] = addr(2) end
    stack, start_err = docker.start(PROJECT, S.options {
      -- what the sandbox saw at its very start: the bundle must already be there
      services = { { name = "sandbox", image = CLIENT, env = { SSL_CERT_FILE = "/nowhere.pem" },
        command = "if test -s " .. BUNDLE .. "; then echo present; else echo missing; fi > /tmp/at-start; exec agent" } },
      egress_policy = { allow = POLICY },
      proxy_hosts = names,
      proxy_upstream_ca = test_ca,
    })
  end)

  lazy_teardown(function() if not skip_why then S.teardown(stack, work) end end)
  local function ready() return S.ready(skip_why, stack, start_err, pending) end

  it("mounts the CA read-only in the sandbox, before the agent starts, and points its clients at the bundle", function()
    if not ready() then return end
    assert.equal("present\n", in_sandbox("cat /tmp/at-start"))
    -- the proxy's ready test, which the sandbox waited for; and it is not always true
    local proxy = PROJECT .. "-proxy"
    assert.is_true(select(2, h.sh("docker exec " .. proxy .. " sandstack-proxy --ready")))
    local why, ok = h.sh("docker exec -e SANDSTACK_CA_DIR=/tmp " .. proxy .. " sandstack-proxy --ready")
    assert.is_false(ok)
    assert.matches("/tmp/bundle.pem is not published yet", why, 1, true)
    local env = assert(in_sandbox("cat " .. h.SERVICE_ENVIRON .. " | tr '\\0' '\\n'"))
    for _, k in ipairs(VARS) do assert.truthy(("\n" .. env):find("\n" .. k .. "=" .. BUNDLE .. "\n", 1, true), k) end
    assert.falsy(env:find("/nowhere.pem", 1, true), "the spec's own SSL_CERT_FILE survived")
    -- certificates only: the two files, no key, and the sandbox cannot write there
    assert.equal("bundle.pem\nca.pem\n", in_sandbox("ls -A /etc/sandstack/ca"))
    local ca = assert(in_sandbox("cat /etc/sandstack/ca/ca.pem"))
    local bundle = assert(in_sandbox("cat " .. BUNDLE))
    assert.matches("^%-%-%-%-%-BEGIN CERTIFICATE%-%-%-%-%-", ca)
    assert.equal(ca, bundle:sub(-#ca)) -- the CA last
    assert.truthy(bundle:find(test_ca, 1, true), "proxy_upstream_ca is not in the sandbox's bundle")
    assert.is_nil(bundle:find("PRIVATE KEY", 1, true))
    local out, ok = in_sandbox("echo x > /etc/sandstack/ca/bundle.pem")
    assert.is_false(ok, "the sandbox could write the bundle")
    assert.matches("Read%-only", out)
    -- the volume: labelled with the project, a tmpfs, mounted read-write in the proxy only
    local vol = core.json_decode(h.must("docker volume inspect " .. PROJECT .. "-ca"))[1]
    assert.equal(PROJECT, vol.Labels["io.sandstack.project"])
    assert.equal("tmpfs", vol.Options.type)
    local info = core.json_decode(h.must("docker inspect " .. PROJECT .. "-proxy " .. sandbox()))
    local rw = {}
    for _, c in ipairs(info) do
      for _, m in ipairs(c.Mounts) do if m.Name == PROJECT .. "-ca" then rw[c.Name] = m.RW end end
    end
    assert.same({ ["/" .. PROJECT .. "-proxy"] = true, ["/" .. sandbox()] = false }, rw)
  end)

  it("lets real curl and Python urllib GET an allowed path through inspection, trusting only the mounted bundle", function()
    if not ready() then return end
    local status, body, out = curl("https://api.test/v1/models")
    assert.equal(200, status, out)
    assert.equal("hello from api.test /v1/models\n", body)
    assert.matches("issuer: [^\n]*CN=sandstack stack inspection CA", out) -- the proxy's leaf, not the upstream's
    local r = urllib("GET", "https://api.test/v1/py")
    assert.equal(200, r.status, core.json_encode(r))
    assert.equal("hello from api.test /v1/py\n", r.body)
    -- the client really checks the chain: trusting the upstream's CA alone, the inspected host
    -- fails (its leaf is the stack CA's) while the tunnelled one passes
    h.must(("docker exec -i %s sh -c 'cat > /tmp/test-ca.pem' < %s"):format(sandbox(), h.q(work .. "/ca.pem")))
    local s2, _, err2 = curl("https://api.test/v1/models", "--cacert /tmp/test-ca.pem")
    assert.equal(0, s2, err2)
    assert.matches("SSL certificate problem", err2)
    assert.equal(200, (curl("https://tunnel.test/own-ca", "--cacert /tmp/test-ca.pem")))
  end)

  it("refuses POST, a path outside /v1/*, %2e%2e and .. tricks and a /v10 lookalike with a JSON 403", function()
    if not ready() then return end
    assert.equal(200, (curl("https://api.test/v1/control"))) -- control
    for _, case in ipairs {
      { "https://api.test/v1/models", "-X POST -d x", "method" },
      { "https://api.test/v2/models", "", "path" },
      { "https://api.test/v1/%2e%2e/admin", "--path-as-is", "bad_path" },
      { "https://api.test/v1/%2E%2E/v2", "--path-as-is", "bad_path" },
      { "https://api.test/v1/../admin", "--path-as-is", "bad_path" },
      { "https://api.test/v10", "", "path" },
    } do
      local status, body, out = curl(case[1], case[2])
      local j = json_refusal(status, body, 403)
      assert.equal("deny", j.policy.decision, out)
      assert.equal(case[3], j.policy.reason, case[1])
      assert.is_nil(body:find("hello from", 1, true))
    end
    local r = urllib("POST", "https://api.test/v1/models")
    assert.equal(403, r.status, core.json_encode(r))
    assert.equal("method", core.json_decode(r.body).policy.reason)
    r = urllib("GET", "https://api.test/v10")
    assert.equal(403, r.status, core.json_encode(r))
  end)

  it("tunnels a host without method or path rules: the client sees the upstream's own certificate", function()
    if not ready() then return end
    local status, body, out = curl("https://tunnel.test/plain")
    assert.equal(200, status, out)
    assert.equal("hello from tunnel.test /plain\n", body)
    assert.matches("issuer: CN=sstest%-h11%-ca\n", out)
    local r = issuer("tunnel.test", "/py")
    assert.equal("sstest-h11-ca", r.issuer, core.json_encode(r))
    assert.equal("hello from tunnel.test /py\n", r.body)
    -- control: the same server through an inspected name shows the stack CA
    r = issuer("api.test", "/v1/py")
    assert.matches("^sandstack stack inspection CA", r.issuer)
    local kinds = {}
    for _, l in ipairs(audit()) do
      kinds[l.host] = kinds[l.host] or {}
      kinds[l.host][l.kind] = true
    end
    assert.same({ connect = true }, kinds["tunnel.test"])
    assert.same({ inspect = true }, kinds["api.test"])
  end)

  it("refuses an upstream certificate from an untrusted CA, then one for another name, with a JSON 502", function()
    if not ready() then return end
    assert.equal(200, (curl("https://api.test/v1/control"))) -- control: the test CA is trusted upstream
    for _, case in ipairs { { "https://untrusted.test:8444/", "untrusted" }, { "https://wrongname.test:8445/", "name_mismatch" } } do
      local status, body = curl(case[1])
      local j = json_refusal(status, body, 502)
      assert.equal(case[2], j.upstream.reason, body)
      assert.is_nil(body:find("bad!", 1, true))
    end
    local r = urllib("GET", "https://untrusted.test:8444/")
    assert.equal(502, r.status, core.json_encode(r))
  end)

  it("keeps the CA key out of the record, the volume and the proxy's filesystem; destroy removes the volume", function()
    if not ready() then return end
    local text = core.json_encode(stack:record())
    for _, secret in ipairs { "PRIVATE KEY", KEY, TOKEN } do assert.is_nil(text:find(secret, 1, true), secret) end
    assert.is_nil(in_sandbox("cat /etc/sandstack/ca/*"):find("PRIVATE", 1, true))
    -- the proxy wrote nothing into its own filesystem: the only changes are the mount points'
    -- directories (the CA's, and the control directory's /run/sandstack-control)
    local diff = {}
    for line in h.must("docker diff " .. PROJECT .. "-proxy"):gmatch("[^\n]+") do diff[#diff + 1] = line end
    table.sort(diff)
    for _, line in ipairs(diff) do assert.matches("^[AC] /run[/%w%-]*$", line) end
    assert.is_true(#diff <= 4, table.concat(diff, ", "))
    assert.equal(PROJECT .. "-ca\n", h.must("docker volume ls -q --filter name=" .. PROJECT .. "-ca"))
    assert(stack:destroy())
    stack:close()
    stack = nil
    assert.equal("", h.must("docker volume ls -q --filter label=io.sandstack.project=" .. PROJECT))
  end)

  it("refuses inspect = false with a method rule on an HTTPS host at start, before creating anything", function()
    if skip_why then pending(skip_why) return end
    local p2 = PROJECT .. "-off"
    local s, err = docker.start(p2, { project_name = p2, agent_port = 8080, pull = "never", image = CLIENT,
      forwarder_image = FORWARDER_IMAGE, proxy_image = PROXY_IMAGE, api_key = KEY,
      egress_policy = { inspect = false, allow = POLICY } })
    if s then s:destroy(); s:close() end
    assert.is_nil(s)
    assert.equal("compose", err.kind, tostring(err))
    assert.equal("invalid_option", err.reason)
    assert.equal(1, err.rule)
    assert.equal("", h.must("docker ps -aq --filter label=io.sandstack.project=" .. p2))
    assert.equal("", h.must("docker volume ls -q --filter label=io.sandstack.project=" .. p2))
  end)
end)
