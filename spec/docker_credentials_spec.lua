-- Credentials for any host: a stack with three credentials works from inside a real sandbox, each
-- toward its own stand-in host: the model key on the credential route (api_key, legacy), a
-- GitHub-style bearer token in a header, and a query-parameter key. Each placeholder is refused
-- toward the other hosts, and no secret appears in the sandbox, the record, the plan or the
-- proxy's logs. The outside is a network namespace of this test on a /28 of 203.0.113.0/26
-- (below the .53 the stack uses as its dead DNS server): one TLS stand-in (a test CA) for
-- gh.test, keys.test and model.test, which appends every request it gets to requests.jsonl (so
-- the test sees what really arrived) and answers with the same JSON (so a secret sent back
-- would reach the sandbox unless the proxy masks it). The proxy trusts the test CA through
-- proxy_upstream_ca. Every refusal comes after a control that succeeds.
-- Objects: project "sstest-h25-<random>", netns "sstest-h25-<random>"; all removed at the end.
local sandstack = require "sandstack"
local h = require "helpers"
local core = sandstack.core
local docker = sandstack.docker

local dh = require "docker_proxy_harness"

local S = dh.stack("h25", "sh25", function(r) return 16 * (r % 3) end) -- a /28 in 203.0.113.0 .. .47
local PROJECT, TOKEN, KEY, CLIENT = S.PROJECT, S.TOKEN, S.KEY, S.CLIENT
local addr, in_sandbox, audit = S.addr, S.in_sandbox, S.audit
local GH = "ghp_" .. core.random_hex(18)          -- the GitHub-style token (40 characters)
local QK = "qk_" .. core.random_hex(15)           -- the query-parameter key (33 characters)
local SECRETS = { KEY, GH, QK }


-- Why this spec cannot run here, or nil: the harness's needs, and a proxy binary that reads
-- SANDSTACK_CREDENTIALS (one that does refuses a malformed value with exit status 2, as it
-- refuses any configuration it cannot use; an older one ignores the variable and exits 0).
local function missing()
  local why = S.missing()
  if why then return why end
  local _, ok, code = h.sh(("env -i SANDSTACK_SESSION_TOKEN=tok-0123456789abcdef ANTHROPIC_API_KEY=sk-0123456789abcdef"
    .. " SANDSTACK_CREDENTIALS='[{\"name\":' %s --check >/dev/null 2>&1"):format(h.q(S.PROXY_BIN)))
  if ok or code ~= 2 then
    return S.PROXY_BIN .. " does not read SANDSTACK_CREDENTIALS yet (a malformed value did not refuse the"
      .. " configuration): the proxy side of credentials for any host"
      .. " (csrc/proxy/parse/cred_table.c) is not in this build"
  end
  return nil
end

describe("credentials for any host, in a real stack with real clients #docker", function()
  local skip_why = missing()
  local work, stack, start_err, opts

  -- every request the stand-in received, decoded
  local function arrived()
    local out = {}
    for line in (h.read_file(work .. "/requests.jsonl") or ""):gmatch("[^\n]+") do out[#out + 1] = assert(core.json_decode(line)) end
    return out
  end
  local function arrived_at(path)
    for _, r in ipairs(arrived()) do if r.path == path then return r end end
  end

  -- curl in the sandbox (its own environment: the proxy variables, the placeholders); returns the
  -- HTTP status and the body as the sandbox saw them
  local function curl(args)
    local out = in_sandbox("curl -sS -m 20 -o /tmp/body -w '%{http_code}' " .. args .. " 2>/dev/null; echo; cat /tmp/body")
    local code, body = (out or ""):match("^(%d+)\n(.*)$")
    return tonumber(code), body or out
  end

  lazy_setup(function()
    if skip_why then return end
    work = S.workdir()
    dh.make_certs(work, "sstest-h25-ca", "gh.test", { "gh.test", "keys.test", "model.test" })
    S.outside_up { 2 }
    S.start_peer("tls_echo.py", { work .. "/srv.pem", work .. "/srv.key", work }, work .. "/echo.log")
    S.wait_ready(work, { "echo.ready" })
    S.build_images()
    opts = S.options {
      services = { { name = "sandbox", image = CLIENT, command = "exec agent" } },
      egress_policy = { allow = { "gh.test", "keys.test", "model.test" } },
      proxy_hosts = { ["gh.test"] = addr(2), ["keys.test"] = addr(2), ["model.test"] = addr(2) },
      proxy_upstream = "https://model.test",
      proxy_upstream_ca = h.read_file(work .. "/ca.pem"),
      credentials = {
        { name = "GH_TOKEN", host = "gh.test", header = "Authorization", format = "Bearer %s", secret = GH },
        { name = "MAPS_KEY", host = "keys.test", query = "key", secret = QK },
      },
    }
    stack, start_err = docker.start(PROJECT, opts)
  end)

  lazy_teardown(function() if not skip_why then S.teardown(stack, work) end end)
  local function ready() return S.ready(skip_why, stack, start_err, pending) end

  -- the sandbox's placeholders, by name
  local function placeholders()
    local out = {}
    for _, name in ipairs { "GH_TOKEN", "MAPS_KEY", "ANTHROPIC_API_KEY" } do
      out[name] = (in_sandbox("printf %s \"$" .. name .. "\""))
    end
    return out
  end

  -- a refusal: not answered 2xx, never reached the stand-in, and audited as a security event
  local function refused(code, path, host)
    assert.is_true(code == nil or code < 200 or code >= 300, "answered " .. tostring(code))
    assert.is_nil(arrived_at(path), path .. " reached the stand-in")
    local seen
    pcall(h.wait_for, "the refusal's audit line", function()
      for _, a in ipairs(audit()) do
        if a.host == host and type(a.security_event) == "string" and (a.path or ""):find(path:match("^[^?]*"), 1, true) then seen = a end
      end
      return seen
    end, 3, 0.1)
    assert(seen, "no audit line with a security_event for " .. host .. " " .. path)
    assert.are_not.equal("allow", seen.decision)
  end

  it("gives the sandbox a placeholder per credential, each as long as its secret, never the secret", function()
    if not ready() then return end
    local ph = placeholders()
    assert.equal(#GH, #ph.GH_TOKEN)
    assert.equal(#QK, #ph.MAPS_KEY)
    assert.matches("^[A-Za-z0-9]+$", ph.GH_TOKEN)
    assert.equal(TOKEN, ph.ANTHROPIC_API_KEY) -- the credential route's placeholder is the session token
    assert.same({ GH_TOKEN = ph.GH_TOKEN, MAPS_KEY = ph.MAPS_KEY }, stack:credentials())
  end)

  it("puts the bearer token into the header toward gh.test, and masks it in the answer", function()
    if not ready() then return end
    local code, body = curl("-H 'Authorization: Bearer '\"$GH_TOKEN\" https://gh.test/user")
    assert.equal(200, code, body)
    local got = assert(arrived_at("/user"), "nothing reached gh.test")
    assert.equal("gh.test", got.sni)
    assert.same({ "Bearer " .. GH }, got.headers.authorization)
    -- the stand-in echoed the secret: the sandbox sees the placeholder in its place
    assert.is_nil(body:find(GH, 1, true), "the secret came back into the sandbox")
    assert.truthy(body:find(stack:credentials().GH_TOKEN, 1, true), body)
  end)

  it("puts the key into the query parameter toward keys.test", function()
    if not ready() then return end
    local code, body = curl("\"https://keys.test/v1/geo?key=$MAPS_KEY&q=1\"")
    assert.equal(200, code, body)
    local got = assert(arrived_at("/v1/geo?key=" .. QK .. "&q=1"), "the key did not reach keys.test in place")
    assert.equal("keys.test", got.sni)
    assert.is_nil(body:find(QK, 1, true), "the secret came back into the sandbox")
  end)

  it("sends the model key on the credential route toward model.test", function()
    if not ready() then return end
    local code, body = curl("-H \"x-api-key: $ANTHROPIC_API_KEY\" -H 'content-type: application/json' -d '{}'"
      .. " \"$ANTHROPIC_BASE_URL/v1/messages\"")
    assert.equal(200, code, body)
    local got = assert(arrived_at("/v1/messages"), "nothing reached model.test")
    assert.equal("model.test", got.sni)
    assert.same({ KEY }, got.headers["x-api-key"])
    assert.is_nil(body:find(KEY, 1, true), "the model key came back into the sandbox")
  end)

  it("refuses the bearer token's placeholder toward keys.test and toward the model", function()
    if not ready() then return end
    local code = curl("-H 'Authorization: Bearer '\"$GH_TOKEN\" https://keys.test/r-gh-to-keys")
    refused(code, "/r-gh-to-keys", "keys.test")
    assert.equal(200, (curl("https://keys.test/control-keys"))) -- the control: the host itself is reachable
    code = curl("-H \"x-api-key: $ANTHROPIC_API_KEY\" -H \"X-Extra: $GH_TOKEN\" -d '{}' \"$ANTHROPIC_BASE_URL/v1/messages?r=gh-to-model\"")
    assert.is_true(code == nil or code >= 400, "answered " .. tostring(code))
    assert.is_nil(arrived_at("/v1/messages?r=gh-to-model"), "the placeholder went to the model")
  end)

  it("refuses the query key's placeholder toward gh.test", function()
    if not ready() then return end
    local code = curl("\"https://gh.test/r-keys-to-gh?key=$MAPS_KEY\"")
    refused(code, "/r-keys-to-gh?key=" .. stack:credentials().MAPS_KEY, "gh.test")
  end)

  -- The credential route's placeholder is the session token, which is also the proxy's password:
  -- the proxy removes it from any header it forwards instead of refusing the request.
  -- What must hold either way: neither the model key nor the token reaches gh.test.
  it("never lets the model key, nor its placeholder (the session token), reach gh.test", function()
    if not ready() then return end
    local code = curl("-H \"x-api-key: $ANTHROPIC_API_KEY\" -H \"X-Also: $ANTHROPIC_API_KEY\" https://gh.test/r-model-to-gh")
    local got = arrived_at("/r-model-to-gh")
    if got then
      assert.equal(200, code)
      assert.is_nil(got.headers["x-api-key"], "the x-api-key header reached gh.test")
    else
      assert.is_true(code == nil or code >= 400, "answered " .. tostring(code) .. " without reaching gh.test")
    end
    assert(arrived_at("/user"), "the control: gh.test was reached before")
    for _, r in ipairs(arrived()) do
      if r.sni == "gh.test" then
        local text = core.json_encode(r)
        assert.is_nil(text:find(KEY, 1, true), "the model key reached gh.test")
        assert.is_nil(text:find(TOKEN, 1, true), "the session token reached gh.test")
      end
    end
  end)

  it("refuses a placeholder in the body of a request to another host", function()
    if not ready() then return end
    local code = curl("-d \"token=$GH_TOKEN\" https://keys.test/r-body")
    refused(code, "/r-body", "keys.test")
  end)

  -- the files of the sandbox that hold text, outside /proc, /sys and /dev (busybox grep has no --exclude-dir)
  local function search(text)
    return ("for d in /*; do case $d in /proc|/sys|/dev) ;; *) grep -rlsF -e %s \"$d\";; esac; done; true"):format(h.q(text))
  end

  it("keeps every secret out of the sandbox: its env, its service process's environ, its files, its container's config", function()
    if not ready() then return end
    local out = assert(in_sandbox("env; tr '\\0' '\\n' < " .. h.SERVICE_ENVIRON))
    local ph = placeholders()
    assert.truthy(out:find("GH_TOKEN=" .. ph.GH_TOKEN .. "\n", 1, true)) -- the control: the variables are there
    assert.truthy(out:find("MAPS_KEY=" .. ph.MAPS_KEY .. "\n", 1, true))
    local info = h.must("docker inspect " .. S.sandbox())
    for _, s in ipairs(SECRETS) do
      assert.is_nil(out:find(s, 1, true), "a secret is in the sandbox's environment")
      assert.is_nil(info:find(s, 1, true), "a secret is in the sandbox container's config")
    end
    -- every file the sandbox can read (a control first: grep finds a placeholder it wrote)
    in_sandbox("printf %s \"$GH_TOKEN\" > /tmp/control-file")
    local found = in_sandbox(search(ph.GH_TOKEN))
    assert.truthy((found or ""):find("/tmp/control-file", 1, true), "the file search finds nothing: " .. tostring(found))
    for _, s in ipairs(SECRETS) do
      found = in_sandbox(search(s))
      assert.equal("", (found or ""):gsub("%s+", ""), "a secret is in a file of the sandbox")
    end
  end)

  it("keeps every secret out of the record, the plan and a reconnected handle", function()
    if not ready() then return end
    local record = stack:record()
    local text = core.json_encode(record)
    for _, s in ipairs(SECRETS) do assert.is_nil(text:find(s, 1, true), "a secret is in the record") end
    assert.equal(2, #record.credentials)
    assert.same(stack:credentials(), { [record.credentials[1].name] = record.credentials[1].placeholder,
      [record.credentials[2].name] = record.credentials[2].placeholder })
    local again = assert(docker.reconnect(record))
    assert.same(stack:credentials(), again:credentials())
    again:close()
    local plan = assert(docker.plan(PROJECT, opts))
    text = core.json_encode(plan)
    assert.truthy(text:find("SANDSTACK_CREDENTIALS", 1, true)) -- the control: the shown plan has the variable
    for _, s in ipairs(SECRETS) do
      if s ~= KEY then assert.is_nil(text:find(s, 1, true), "a credential's secret is in the shown plan") end
    end
  end)

  it("keeps every secret out of a snapshot's image and a restored sandbox", function()
    if not ready() then return end
    local ph = placeholders() -- GH_TOKEN, MAPS_KEY and ANTHROPIC_API_KEY: the session token
    assert.equal(TOKEN, ph.ANTHROPIC_API_KEY)
    local snap = assert(stack:snapshot { name = "h25" })
    local RP = PROJECT .. "-r"
    local ok, err = pcall(function()
      local eng = assert(sandstack.engine {})
      local status, text = eng:request("GET", "/images/" .. snap.image .. "/json", nil, { raw = true })
      eng:close()
      assert.equal(200, status)
      assert.truthy(text:find(snap.id, 1, true)) -- the control: the snapshot's own image, with its labels
      local restore_opts = { from_snapshot = snap, project_name = RP, api_key = "sk-r-" .. core.random_hex(16),
        credentials = {
          { name = "GH_TOKEN", host = "gh.test", header = "Authorization", format = "Bearer %s", secret = "ghp_" .. core.random_hex(18) },
          { name = "MAPS_KEY", host = "keys.test", query = "key", secret = "qk_" .. core.random_hex(15) },
        } }
      local r = assert(docker.start(RP, restore_opts))
      local inside = h.must(("docker exec %s sh -c %s"):format(h.q(RP .. "-sandbox"), h.q("env; tr '\\0' '\\n' < " .. h.SERVICE_ENVIRON)))
      local info = h.must("docker inspect " .. h.q(RP .. "-sandbox"))
      assert(r:destroy()); r:close()
      assert.matches("GH_TOKEN=%w", inside) -- the control: the restore's own placeholder is there
      for where, t in pairs { ["the snapshot's image"] = text, ["the restored sandbox"] = inside,
        ["the restored sandbox's config"] = info } do
        for _, secret in ipairs(SECRETS) do assert.is_nil(t:find(secret, 1, true), "a secret is in " .. where) end
        for name, v in pairs(ph) do assert.is_nil(t:find(v, 1, true), name .. "'s value of the parent is in " .. where) end
      end
      assert.is_nil(text:find("io.sandstack.project", 1, true), "the parent's project label is in the snapshot's image")
    end)
    docker.down(RP)
    docker.remove_snapshot(snap)
    assert(ok, err)
  end)

  it("keeps every secret out of the proxy's logs, read through the engine", function()
    if not ready() then return end
    local eng = assert(sandstack.engine {})
    local status, logs = eng:request("GET", "/containers/" .. PROJECT .. "-proxy/logs",
      nil, { query = { stdout = "1", stderr = "1" }, raw = true })
    eng:close()
    assert.equal(200, status, tostring(logs))
    assert.is_string(logs)
    assert.truthy(logs:find("gh.test", 1, true), "the control: the logs hold the requests to gh.test")
    for _, s in ipairs(SECRETS) do assert.is_nil(logs:find(s, 1, true), "a secret is in the proxy's logs") end
  end)
end)
