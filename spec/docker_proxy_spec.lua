-- The added proxy at stack level: `egress_policy` without a `proxy_service` makes sandstack add
-- the sandstack-proxy sidecar itself, and real clients inside a real sandbox go through it. The
-- outside is a network namespace of this test on a /28 of 203.0.113.0/24 (documentation
-- addresses, ordinary destinations for the proxy), reached by the proxy over its egress network
-- (NATed by the engine like any internet traffic). In it: a TLS server with a test CA for
-- allowed.test and denied.test (spec/support/proxy_standin.py) and a plain-HTTP "model API"
-- (spec/support/model_standin.py). The proxy finds those names through `proxy_hosts`; the
-- sandbox (sandstack-test/client:local: curl, python3) trusts the CA. Every refusal is preceded
-- by a control that succeeds. The proxy and forwarder images are built by
-- sandstack.docker.build_images from this mode's proxy binary, under test names.
-- Objects: project "sstest-h6-<random>", netns "sstest-h6-<random>"; all removed at the end.
local sandstack = require "sandstack"
local h = require "helpers"
local core = sandstack.core
local docker = sandstack.docker
local images = require "sandstack.docker.images"

local dh = require "docker_proxy_harness"

-- a /28 in 203.0.113.64 .. .191 (203.0.113.53 is never in it)
local S = dh.stack("h6", "sh6", function(r) return 16 * (4 + r % 8) end)
local PROXY_IMAGE, CLIENT = S.PROXY_IMAGE, S.CLIENT
local PROJECT, TOKEN, KEY = S.PROJECT, S.TOKEN, S.KEY
local addr, missing, in_sandbox, audit = S.addr, S.missing, S.in_sandbox, S.audit

-- proxy_client.py COMMAND ARGS... run by python3 inside the sandbox, against the added proxy.
local function client(cmd, ...) return (S.client(cmd, "proxy", "3128", ...)) end

-- A CONNECT (or anything) sent as raw bytes; \r\n written as the two characters \ r \ n. The
-- answer is read until the proxy closes or `wait` seconds pass (an open tunnel never closes).
local function raw(text, wait) return client("raw", text, wait or "5") end

local function basic(token) return "Basic " .. core.base64("sandstack:" .. token) end

local function connect_text(target, auth, extra)
  return ("CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n%s%s\\r\\n"):format(target, target,
    auth and ("Proxy-Authorization: " .. auth .. "\\r\\n") or "", extra or "")
end

local function json_refusal(r, status)
  assert.equal(status, r.status, core.json_encode(r))
  assert.matches("application/json", r.headers["content-type"] or "", nil, true)
  local body = assert(core.json_decode(r.body), "not JSON: " .. tostring(r.body))
  assert.equal("error", body.type)
  return body
end

describe("the proxy sandstack adds for egress_policy, with real clients in a real sandbox #docker", function()
  local skip_why = missing()
  local work, stack, gateway, start_err

  lazy_setup(function()
    if skip_why then return end
    work = S.workdir()
    dh.make_certs(work, "sstest-h6-ca", "allowed.test", { "allowed.test", "denied.test" })
    -- the outside: a namespace joined to the host by a veth, on its own /28
    S.outside_up { 2, 3, 4 }
    S.start_standin(work)
    S.start_peer("model_standin.py", { addr(4), "8080", work, "2" }, work .. "/model.log")
    S.wait_ready(work, { "standin.ready", "model.ready" })
    -- the host's address on the default bridge: a gateway every container can reach
    gateway = h.sh("ip -4 -o addr show docker0 | awk '{ split($4, a, \"/\"); print a[1] }'"):match("^(%d+%.%d+%.%d+%.%d+)")
      or "172.17.0.1"
    S.build_images()
    local ca = h.read_file(work .. "/ca.pem")
    stack, start_err = docker.start(PROJECT, S.options {
      services = S.trusting(ca),
      egress_policy = { allow = { "allowed.test:443", "gw.test:443", "loop.test:443",
        { host = "model.test", port = 8080, methods = { "GET", "POST" }, paths = { "/v1/*" } } } },
      proxy_hosts = { ["allowed.test"] = addr(2), ["denied.test"] = addr(3), ["model.test"] = addr(4),
        ["gw.test"] = gateway, ["loop.test"] = "127.0.0.1" },
      proxy_upstream = "http://model.test:8080",
      -- model.test's rule names methods and paths, so the proxy inspects TLS and the stack points
      -- the sandbox's SSL_CERT_FILE and CURL_CA_BUNDLE at its bundle: the test CA reaches that
      -- bundle (for the tunnelled allowed.test) through proxy_upstream_ca
      proxy_upstream_ca = ca,
    })
  end)

  lazy_teardown(function() if not skip_why then S.teardown(stack, work) end end)
  local function ready() return S.ready(skip_why, stack, start_err, pending) end

  it("adds the proxy like any service, with its image; the sandbox holds the token as proxy userinfo, never the key", function()
    if not ready() then return end
    local p = assert(docker.plan(PROJECT, { agent_port = 8080, image = CLIENT, api_key = KEY,
      egress_policy = { allow = { "allowed.test:443" } } }))
    assert.same({ service = "proxy", port = 3128, image = images.PROXY_IMAGE, added = true }, p.proxy)
    local info = core.json_decode(h.must("docker inspect " .. PROJECT .. "-proxy"))[1]
    assert.equal(PROXY_IMAGE, info.Config.Image)
    assert.equal("sidecar", info.Config.Labels["io.sandstack.role"])
    local env = {}
    for _, e in ipairs(info.Config.Env) do local k, v = e:match("^([^=]+)=(.*)$"); env[k] = v end
    assert.equal(KEY, env.ANTHROPIC_API_KEY)
    assert.equal(TOKEN, env.SANDSTACK_SESSION_TOKEN)
    assert.truthy(env.SANDSTACK_EGRESS_POLICY:find('"host":"allowed.test"', 1, true))
    local out = assert(in_sandbox("env; cat " .. h.SERVICE_ENVIRON .. " | tr '\\0' '\\n'"))
    assert.truthy(out:find("HTTPS_PROXY=http://sandstack:" .. TOKEN .. "@proxy:3128\n", 1, true))
    assert.truthy(out:find("https_proxy=http://sandstack:" .. TOKEN .. "@proxy:3128\n", 1, true))
    assert.truthy(out:find("HTTP_PROXY=http://sandstack:" .. TOKEN .. "@proxy:3128\n", 1, true))
    assert.truthy(out:find("ANTHROPIC_BASE_URL=http://proxy:3128\n", 1, true))
    assert.matches("NO_PROXY=localhost,127%.0%.0%.1,::1,forwarder,[%w,-]*sandbox", out)
    assert.falsy(out:find(KEY, 1, true), "the real key is in the sandbox")
  end)

  it("lets real curl fetch https://allowed.test through HTTPS_PROXY and refuses denied.test in JSON", function()
    if not ready() then return end
    local out, ok = in_sandbox("curl -sS -m 10 https://allowed.test/hello")
    assert.is_true(ok, out)
    assert.equal("hello from allowed.test /hello\n", out)
    out, ok = in_sandbox("curl -sS -m 10 -v https://denied.test/hello")
    assert.is_false(ok)
    assert.matches("< HTTP/1.1 403", out)
    assert.falsy(out:find("hello from", 1, true))
    local body = json_refusal(raw(connect_text("denied.test:443", basic(TOKEN))), 403)
    assert.equal("deny", body.policy.decision)
    assert.equal("host", body.policy.reason)
  end)

  it("lets Python's urllib fetch through HTTPS_PROXY and refuses denied.test", function()
    if not ready() then return end
    -- what urllib (proxy_client.py's urllib) printed: the body, or "refused: <the error>"
    local function urllib(host)
      local r = S.client("urllib", "10", "GET", "https://" .. host .. "/py")
      return (r.error and "refused: " .. r.error or r.body:match("^%s*(.-)%s*$")) .. "\n"
    end
    local out = urllib("allowed.test")
    assert.equal("hello from allowed.test /py\n", out)
    out = urllib("denied.test")
    assert.matches("^refused: .*403", out)
  end)

  it("refuses a CONNECT whose TLS SNI names another host", function()
    if not ready() then return end
    local ok = client("tunnel_tls", "allowed.test:443", "allowed.test", "/tmp/ca.pem", TOKEN)
    assert.equal(200, ok.connect_status)
    assert.equal("ok", ok.tls, core.json_encode(ok))
    assert.matches("hello from allowed.test", ok.reply.body)
    local bad = client("tunnel_tls", "allowed.test:443", "denied.test", "/tmp/ca.pem", TOKEN)
    assert.equal(200, bad.connect_status) -- the tunnel opens; the hello is what is refused
    assert.equal("error", bad.tls, core.json_encode(bad))
    local seen
    pcall(h.wait_for, "an sni_mismatch line", function()
      for _, a in ipairs(audit()) do if a.decision == "sni_mismatch" then seen = a end end
      return seen
    end, 2, 0.1)
    assert(seen, "no sni_mismatch line in the proxy's audit")
    assert.equal("denied.test", seen.sni)
    assert.equal("allowed.test", seen.host)
  end)

  it("refuses names that resolve to the host's gateway or to 127.0.0.1, even when the policy admits them", function()
    if not ready() then return end
    local ctl = raw(connect_text("allowed.test:443", basic(TOKEN)), "1")
    assert.equal(200, ctl.status)
    for _, name in ipairs { "gw.test", "loop.test" } do
      local body = json_refusal(raw(connect_text(name .. ":443", basic(TOKEN))), 403)
      assert.equal("address_refused", body.policy.decision, name)
      assert.equal(name == "gw.test" and gateway or "127.0.0.1", body.policy.address, name)
    end
  end)

  it("refuses a CONNECT without the token, or with another, with a JSON 407", function()
    if not ready() then return end
    assert.equal(200, raw(connect_text("allowed.test:443", basic(TOKEN)), "1").status)
    local body = json_refusal(raw(connect_text("allowed.test:443", nil)), 407)
    assert.matches("sandstack proxy", body.error.message)
    json_refusal(raw(connect_text("allowed.test:443", basic(TOKEN .. "x"))), 407)
  end)

  it("refuses an oversized header with a JSON 431", function()
    if not ready() then return end
    assert.equal(200, raw(connect_text("allowed.test:443", basic(TOKEN), "X-Fill: " .. ("a"):rep(1000) .. "\\r\\n"), "1").status)
    json_refusal(raw(connect_text("allowed.test:443", basic(TOKEN), "X-Fill: " .. ("a"):rep(40000) .. "\\r\\n")), 431)
  end)

  it("cuts a slowloris client at the handshake timeout with a JSON 408", function()
    if not ready() then return end
    local t0 = os.time()
    assert.equal(200, raw(connect_text("allowed.test:443", basic(TOKEN)), "1").status)
    assert.is_true(os.time() - t0 < 5, "the control took " .. (os.time() - t0) .. " s")
    local r = client("slowloris", "0.3")
    assert.truthy(r.closed_after, core.json_encode(r))
    assert.is_true(r.closed_after >= 9 and r.closed_after < 14, "closed after " .. tostring(r.closed_after))
    assert.is_true(r.sent < 100, "sent " .. r.sent)
    json_refusal(r.reply, 408)
  end)

  it("streams SSE from the model API on the credential route: the first event arrives before the last is sent", function()
    if not ready() then return end
    local r = client("sse", TOKEN, "/v1/stream")
    assert.equal(200, r.response.status, core.json_encode(r))
    assert.truthy(r.response.body:find('"n": 2', 1, true))
    local sent2 = tonumber((h.read_file(work .. "/stream.log") or ""):match("sent 2 ([%d.]+)"))
    assert(sent2, "the model API never sent its second event")
    assert.is_true(r.first_event_at < sent2, ("first event at %.3f, second sent at %.3f"):format(r.first_event_at, sent2))
    -- what reached the upstream: the real key, never the token (in any header)
    local reqs = {}
    for line in (h.read_file(work .. "/requests.jsonl") or ""):gmatch("[^\n]+") do reqs[#reqs + 1] = line end
    assert.is_true(#reqs >= 1)
    local last = core.json_decode(reqs[#reqs])
    assert.equal("/v1/stream", last.path)
    assert.same({ KEY }, last.headers["x-api-key"])
    for _, line in ipairs(reqs) do assert.falsy(line:find(TOKEN, 1, true), "the token reached the upstream") end
    assert.falsy(r.response.body:find(KEY, 1, true))
  end)
end)
