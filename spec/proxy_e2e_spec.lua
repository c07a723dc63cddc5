-- The egress proxy contract end to end (SECURITY.md "A conforming proxy"), against the example
-- proxy image: a sandbox on an internal network, the proxy on it and on an egress network, and
-- a fake provider API (the test agent, whose /v1/* echoes the request head it received) on the
-- egress network only. Built with the docker CLI, so it does not depend on the stack provider.
-- Every object carries io.sandstack.project=sstest-proxy-<random>; only those are removed.
local sandstack = require "sandstack"

local h = require "helpers"
local q, sh, must = h.q, h.sh, h.must

-- Splits a raw HTTP/1.1 response: status, headers (lowercased names), body (de-chunked).
local function parse_response(raw)
  local head, body = raw:match("^(.-)\r\n\r\n(.*)$")
  if not head then return nil, raw end
  local status = tonumber(head:match("^HTTP/1%.%d (%d%d%d)"))
  local headers = {}
  for name, value in head:gmatch("\r\n([^:\r\n]+):%s*([^\r\n]*)") do headers[name:lower()] = value end
  if (headers["transfer-encoding"] or ""):lower() == "chunked" then
    local out, pos = {}, 1
    while true do
      local size, after = body:match("^(%x+)[^\r\n]*\r\n()", pos)
      if not size then return status, headers, table.concat(out), false end
      size = tonumber(size, 16)
      if size == 0 then return status, headers, table.concat(out), true end
      out[#out + 1] = body:sub(after, after + size - 1)
      pos = after + size + 2
    end
  end
  return status, headers, body, true
end

-- In the sandbox: sends RAW to the proxy named by $ANTHROPIC_BASE_URL, after replacing
-- @KEY@ with the sandbox's own $ANTHROPIC_API_KEY (the session token), and prints the answer.
local client = [[
u=${ANTHROPIC_BASE_URL#http://}; host=${u%%:*}; port=${u##*:}
exec 3<>"/dev/tcp/$host/$port" || exit 9
r=$1; printf '%s' "${r//@KEY@/$ANTHROPIC_API_KEY}" >&3
timeout 60 cat <&3
]]

local function request_in(sandbox, raw)
  local out = must(("docker exec %s bash -c %s _ %s"):format(sandbox, q(client), q(raw)))
  return parse_response(out)
end

local function req(method, target, headers, body)
  local lines = { ("%s %s HTTP/1.1"):format(method, target), "Host: proxy:8080", "Connection: close" }
  for _, h in ipairs(headers or {}) do lines[#lines + 1] = h end
  if body then lines[#lines + 1] = "Content-Length: " .. #body end
  return table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or "")
end

local token = "sst_" .. sandstack.core.random_hex(16)
local real_key = "sk-ant-real-" .. sandstack.core.random_hex(12)

describe("egress proxy #docker", function()
  local project, names, policy

  local function request(raw) return request_in(names.sandbox, raw) end

  local function json(body)
    local t = sandstack.core.json_decode(body)
    assert.is_table(t, body)
    return t
  end

  setup(function()
    project = "sstest-proxy-" .. h.random_suffix(4)
    names = {
      internal = project .. "-int", egress = project .. "-egress", sandbox = project .. "-sandbox",
      proxy = project .. "-proxy", upstream = project .. "-upstream",
    }
    must("bash examples/egress-proxy/build-image.sh")
    policy = assert(sandstack.policy.compile { allow = {
      { host = "upstream", port = 8080, methods = { "POST" }, paths = { "/v1/messages" } }, -- 1
      { host = "upstream", port = 8080, methods = { "GET" }, paths = { "/stream" } },       -- 2
      { host = "other", port = 8080, methods = { "GET" }, paths = { "/v1/*" } },            -- 3
    } })
    local label = "--label io.sandstack.project=" .. project
    must(("docker network create %s --internal -o com.docker.network.bridge.inhibit_ipv4=true %s"):format(label, names.internal))
    must(("docker network create %s %s"):format(label, names.egress))
    must(("docker run -d %s --name %s --network %s --network-alias upstream sandstack-test/agent:local /bin/agent 8080")
      :format(label, names.upstream, names.egress))
    must(("docker run -d %s --name %s-other --network %s --network-alias other sandstack-test/agent:local /bin/agent 8080")
      :format(label, project, names.egress))
    must(("docker create %s --name %s --network %s --network-alias proxy -e SANDSTACK_SESSION_TOKEN=%s "
      .. "-e ANTHROPIC_API_KEY=%s -e SANDSTACK_UPSTREAM=http://upstream:8080 -e SANDSTACK_EGRESS_POLICY=%s "
      .. "--read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges sandstack-example/egress-proxy:local")
      :format(label, names.proxy, names.internal, q(token), q(real_key), q(policy:render())))
    must(("docker network connect %s %s"):format(names.egress, names.proxy)) -- before start: API 1.41
    must("docker start " .. names.proxy)
    must(("docker run -d %s --name %s --network %s -e ANTHROPIC_BASE_URL=http://proxy:8080 -e ANTHROPIC_API_KEY=%s "
      .. "sandstack-test/base:local sleep 3600"):format(label, names.sandbox, names.internal, q(token)))
    -- the proxy answers once nginx is up: poll with a request that lacks the token (401)
    for _ = 1, 50 do
      local out = sh(("docker exec %s bash -c %s _ %s"):format(names.sandbox, q(client), q(req("GET", "/ready"))))
      if out:match("^HTTP/1%.1 401") then break end
      must("sleep 0.2")
    end
  end)

  teardown(function()
    if not project then return end
    sh(("docker ps -aq --filter label=io.sandstack.project=%s | xargs -r docker rm -f"):format(project))
    sh(("docker network ls -q --filter label=io.sandstack.project=%s | xargs -r docker network rm"):format(project))
  end)

  it("swaps the session token for the real key: the upstream never sees the token", function()
    local status, _, body = request(req("POST", "/v1/messages", { "x-api-key: @KEY@", "X-Note: again @KEY@" }, "{}"))
    assert.equal(200, status, body)
    assert.matches("^POST /v1/messages HTTP/1%.1\r\n", body)
    assert.matches("\r\nx%-api%-key: " .. real_key:gsub("%-", "%%-") .. "\r\n", body)
    assert.is_nil(body:find(token, 1, true), "the token reached the upstream")
    assert.matches("\r\n\r\n{}$", body) -- the request body passes unchanged

    status, _, body = request(req("POST", "/v1/messages?beta=true", { "Authorization: Bearer @KEY@" }, "{}"))
    assert.equal(200, status, body)
    assert.truthy(body:lower():find("\r\nauthorization: bearer " .. real_key:lower() .. "\r\n", 1, true), body)
    assert.is_nil(body:find(token, 1, true))
  end)

  it("keeps the real key out of the sandbox and out of the proxy's logs", function()
    local env = must(("docker exec %s env"):format(names.sandbox))
    assert.is_nil(env:find(real_key, 1, true))
    assert.truthy(env:find(token, 1, true))
    local logs = must("docker logs " .. names.proxy)
    assert.truthy(logs:find("/v1/messages", 1, true), logs) -- it does log requests
    assert.is_nil(logs:find(real_key, 1, true))
    assert.is_nil(logs:find(token, 1, true))
  end)

  it("refuses a wrong or missing token with 401 and a JSON body", function()
    for _, headers in ipairs {
      {},
      { "x-api-key: wrong-" .. token },
      { "x-api-key: " .. real_key },          -- the real key is not a credential here
      { "Authorization: Bearer " .. token:sub(1, -2) },
      { "Authorization: @KEY@" },             -- the token without "Bearer"
      { "X-Other: @KEY@" },                   -- the token in a header that is not a credential
    } do
      local status, h, body = request(req("POST", "/v1/messages", headers, "{}"))
      assert.equal(401, status, body)
      assert.matches("application/json", h["content-type"])
      assert.equal("authentication_error", json(body).error.type)
    end
    local status = request(req("POST", "/v1/messages?key=@KEY@", {}, "{}"))
    assert.equal(401, status)
  end)

  it("answers what the policy does not admit with 403 naming the rule", function()
    local cases = {
      -- method, target, reason, rule
      { "GET", "/v1/messages", "method", 1 },
      { "DELETE", "/v1/messages", "method", 1 },
      { "POST", "/v1/models", "path", 1 },
      { "POST", "/v1/messages/", "path", 1 },
      { "POST", "/v1/messages/../../admin", "bad_path", nil },
      { "POST", "/v1/%2e%2e/admin", "bad_path", nil },
      { "GET", "http://elsewhere.test/v1/messages", "host", nil },   -- forward-proxy form, other host
      { "POST", "http://upstream:9999/v1/messages", "host", nil },   -- the right host, another port
      { "POST", "http://UPSTREAM.:8080/v1/messages", "bad_host", nil }, -- no trailing-dot games
    }
    for _, c in ipairs(cases) do
      local status, h, body = request(req(c[1], c[2], { "x-api-key: @KEY@" }, c[1] == "POST" and "{}" or nil))
      assert.equal(403, status, c[2] .. "\n" .. tostring(body))
      assert.matches("application/json", h["content-type"])
      local t = json(body)
      assert.equal("permission_error", t.error.type)
      assert.equal("deny", t.policy.decision)
      assert.equal(c[3], t.policy.reason, c[2])
      assert.equal(c[4], t.policy.rule, c[2])
      assert.equal(c[1], t.policy.method)
    end
  end)

  it("admits the forward-proxy form for the upstream, with the key swapped", function()
    local status, _, body = request(req("POST", "http://upstream:8080/v1/messages",
      { "Proxy-Authorization: Bearer @KEY@" }, "{}"))
    assert.equal(200, status, body)
    assert.truthy(body:find("x-api-key: " .. real_key, 1, true), body)
    assert.is_nil(body:find(token, 1, true))
    assert.is_nil(body:lower():find("proxy-authorization", 1, true))
  end)

  it("forwards to another admitted host without the key or the token", function()
    local status, _, body = request(req("GET", "http://other:8080/v1/models",
      { "x-api-key: @KEY@", "Authorization: Bearer own-credential-for-other" }))
    assert.equal(200, status, body)
    assert.matches("^GET /v1/models HTTP/1%.1\r\n", body)
    assert.is_nil(body:find(real_key, 1, true), "the real key went to a host that is not the upstream")
    assert.is_nil(body:find(token, 1, true))
    assert.is_nil(body:lower():find("x-api-key", 1, true))
    assert.truthy(body:find("Bearer own-credential-for-other", 1, true), body) -- not ours to remove
    -- the same host outside its rule is refused, naming rule 3
    local st, _, b = request(req("POST", "http://other:8080/v1/models", { "x-api-key: @KEY@" }, "{}"))
    assert.equal(403, st)
    assert.same({ "method", 3 }, { json(b).policy.reason, json(b).policy.rule })
  end)

  it("answers CONNECT and malformed requests with JSON, not a reset", function()
    local status, h, body = request("CONNECT upstream:443 HTTP/1.1\r\nHost: upstream:443\r\nx-api-key: @KEY@\r\n\r\n")
    assert.equal(400, status, body)
    assert.matches("application/json", h["content-type"])
    assert.equal("invalid_request_error", json(body).error.type)
  end)

  it("leaves the sandbox no way to the upstream but the proxy", function()
    local ip = must(("docker inspect -f '{{ (index .NetworkSettings.Networks %q).IPAddress }}' %s")
      :format(names.egress, names.upstream)):match("[%d%.]+")
    assert.truthy(ip)
    local _, ok = sh(("docker exec %s agent connect %s 8080 1500"):format(names.sandbox, ip))
    assert.is_false(ok, "the sandbox reached the upstream directly")
    -- the same connect from the proxy works, so the failure above is the network, not the probe
    local _, via = sh(("docker run --rm --network %s --label io.sandstack.project=%s sandstack-test/agent:local agent connect %s 8080 1500")
      :format(names.egress, project, ip))
    assert.is_true(via)
  end)

  it("refuses to start without a token, a key or a readable policy", function()
    local base = ("docker run --rm --label io.sandstack.project=%s --network none "):format(project)
    for _, c in ipairs {
      { "-e ANTHROPIC_API_KEY=" .. real_key, "SANDSTACK_SESSION_TOKEN" },
      { "-e SANDSTACK_SESSION_TOKEN=short -e ANTHROPIC_API_KEY=" .. real_key, "SANDSTACK_SESSION_TOKEN" },
      { "-e SANDSTACK_SESSION_TOKEN=" .. token, "ANTHROPIC_API_KEY" },
      { ("-e SANDSTACK_SESSION_TOKEN=%s -e ANTHROPIC_API_KEY=%s"):format(token, token), "must not be the real key" },
      { ("-e SANDSTACK_SESSION_TOKEN=%s -e ANTHROPIC_API_KEY=%s -e SANDSTACK_EGRESS_POLICY=%s")
        :format(token, real_key, q('{"allow":["*"]}')), "policy is refused" },
      { ("-e SANDSTACK_SESSION_TOKEN=%s -e ANTHROPIC_API_KEY=%s -e SANDSTACK_UPSTREAM=ftp://x")
        :format(token, real_key), "SANDSTACK_UPSTREAM" },
    } do
      local out, ok = sh(("timeout 60 %s %s sandstack-example/egress-proxy:local"):format(base, c[1]))
      assert.is_false(ok, out)
      assert.truthy(out:find(c[2], 1, true), out)
      assert.is_nil(out:find(real_key, 1, true), "the key was logged")
    end
  end)

  it("streams a long response whole while other requests pass", function()
    local stream = req("GET", "/stream?n=6", { "x-api-key: @KEY@" })
    -- background: the stream goes to a file in the sandbox
    must(("docker exec -d %s bash -c %s"):format(names.sandbox,
      q(("bash -c %s _ %s >/tmp/stream.out 2>&1; touch /tmp/stream.done"):format(q(client), q(stream)))))
    -- meanwhile: 12 concurrent requests, all answered
    local many = ([[
for i in $(seq 1 12); do bash -c "$1" _ "$2" >/tmp/many.$i & done; wait
head -qn1 /tmp/many.* | grep -c '^HTTP/1.1 200'
[ -e /tmp/stream.done ] && echo stream-finished || echo stream-open
]])
    local out = must(("docker exec %s bash -c %s _ %s %s"):format(names.sandbox, q(many), q(client),
      q(req("POST", "/v1/messages", { "x-api-key: @KEY@" }, "{}"))))
    assert.matches("^12\n", out)
    assert.matches("stream%-open", out) -- the others finished while the stream was still open
    for _ = 1, 100 do
      local _, done = sh(("docker exec %s test -e /tmp/stream.done"):format(names.sandbox))
      if done then break end
      must("sleep 0.2")
    end
    local status, _, body, complete = parse_response(must(("docker exec %s cat /tmp/stream.out"):format(names.sandbox)))
    assert.equal(200, status)
    assert.is_true(complete, "the chunked stream ended early")
    assert.equal("tick 0\ntick 1\ntick 2\ntick 3\ntick 4\ntick 5\n", body)
  end)
end)

-- The same contract through the stack provider: sandstack.docker.start wires the token, the real
-- key and the rendered policy itself (spec 000 "Egress proxy"). The fake upstream is not part of
-- the stack: it joins the stack's egress network after start, so only the proxy can reach it.
describe("egress proxy through sandstack.docker.start #docker", function()
  local project, stack, upstream
  local api_key = "sk-ant-stack-" .. sandstack.core.random_hex(12)

  setup(function()
    project = "sstest-proxy-" .. h.random_suffix(4)
    upstream = project .. "-fake-api"
    must("bash examples/egress-proxy/build-image.sh")
    local err
    stack, err = sandstack.docker.start("e2e", {
      project_name = project, agent_port = 8080, pull = "never", ready_timeout = 60, timeout = 120,
      forwarder_image = "sandstack-test/socat:local",
      api_key = api_key,
      proxy_service = "proxy",
      egress_policy = { allow = { { host = "upstream", port = 8080, methods = { "POST" }, paths = { "/v1/*" } } } },
      services = {
        { name = "sandbox", image = "sandstack-test/base:local", command = { "/bin/agent" } },
        { name = "proxy", image = "sandstack-example/egress-proxy:local", egress = "allow", port = 8080,
          env = { SANDSTACK_UPSTREAM = "http://upstream:8080" } },
      },
      cap_drop = { "ALL" }, security_opt = { "no-new-privileges" }, readonly_rootfs = true, tmpfs = { "/tmp" },
    })
    assert(stack, tostring(err))
    must(("docker create --label io.sandstack.project=%s --name %s sandstack-test/agent:local /bin/agent 8080")
      :format(project, upstream))
    must(("docker network connect --alias upstream %s-egress %s"):format(project, upstream))
    must("docker start " .. upstream)
  end)

  teardown(function()
    if stack then stack:destroy() end
    if project then
      sh(("docker ps -aq --filter label=io.sandstack.project=%s | xargs -r docker rm -f"):format(project))
      sh(("docker network ls -q --filter label=io.sandstack.project=%s | xargs -r docker network rm"):format(project))
    end
  end)

  it("gives the sandbox only the token, and the upstream only the real key", function()
    local sandbox = project .. "-sandbox"
    local env = must(("docker exec %s env"):format(sandbox))
    assert.matches("ANTHROPIC_BASE_URL=http://proxy:8080", env)
    local token = env:match("ANTHROPIC_API_KEY=(%S+)")
    assert.truthy(token)
    assert.is_nil(env:find(api_key, 1, true), "the real key is in the sandbox")
    assert.is_nil(sandstack.core.json_encode(stack:record()):find(api_key, 1, true))
    local status, _, body = request_in(sandbox, req("POST", "/v1/messages", { "x-api-key: @KEY@" }, "{}"))
    assert.equal(200, status, body)
    assert.truthy(body:find("x-api-key: " .. api_key, 1, true), body)
    assert.is_nil(body:find(token, 1, true))
    status, _, body = request_in(sandbox, req("POST", "/v2/messages", { "x-api-key: @KEY@" }, "{}"))
    assert.equal(403, status)
    local t = sandstack.core.json_decode(body)
    assert.same({ "path", 1 }, { t.policy.reason, t.policy.rule })
    status = request_in(sandbox, req("POST", "/v1/messages", { "x-api-key: not-the-token" }, "{}"))
    assert.equal(401, status)
  end)
end)
