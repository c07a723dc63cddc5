-- A warm stack holds nothing worth stealing, shown in real sandboxes: a pooled stack waits
-- with the pool's baseline policy, which admits nothing, and throwaway secrets behind its
-- credential slots; acquire(key, { egress_policy =, credentials = }) hands the session its own
-- policy and secrets through the live proxy updates, without restarting the sandbox. The outside
-- is a network namespace of this test on the /28 203.0.113.48 (another when something else routes
-- that one: docker_proxy_harness) with a TLS stand-in (spec/support/proxy_standin.py) serving
-- a.test and b.test, and an origin recording the X-Token it gets (spec/support/live_token_standin.py)
-- as c.test:9443, and a model API recording the key each request brought
-- (spec/support/model_standin.py) as model.test:8080, the credential route's upstream. Objects:
-- pools "sstest-pe-<random>[-c|-m]" and the namespace, removed at the end.
local sandstack = require "sandstack"
local h = require "helpers"
local core = sandstack.core
local docker = sandstack.docker
local dh = require "docker_proxy_harness"
local ph = require "pool_helpers"

local S = dh.stack("pe", "sp26", function() return 48 end) -- the /28 no other spec uses
local POOL, addr = S.PROJECT, S.addr
local SECRET = "sess-" .. core.random_hex(14) -- 33 characters, the slot's length
local SESSION_KEY = "sk-session-" .. core.random_hex(16) -- the session's own model key

-- curl in a pooled sandbox, through its proxy (HTTPS_PROXY): its output, and the exit code
local function curl(project, url)
  local out, _, code = h.sh(("docker exec %s curl -sS --max-time 20 %s 2>&1"):format(h.q(project .. "-sandbox"), h.q(url)))
  return out, code
end

local function started_at(project)
  return (h.must("docker inspect -f '{{.State.StartedAt}}' " .. h.q(project .. "-sandbox")):gsub("%s+$", ""))
end

describe("a warm pool's stacks get their session's egress at claim #docker", function()
  local skip_why = S.missing()
  local work, pool, fill_err, cpool, mpool, mfill_err

  lazy_setup(function()
    if skip_why then return end
    work = S.workdir()
    dh.make_certs(work, "sstest-pe-ca", "a.test", { "a.test", "b.test", "c.test" })
    S.outside_up { 2, 3, 4 }
    S.start_standin(work)
    S.start_peer("live_token_standin.py", { work .. "/srv.pem", work .. "/srv.key", work, addr(3) },
      work .. "/tokens.out")
    S.start_peer("model_standin.py", { addr(4), "8080", work }, work .. "/model.log")
    S.wait_ready(work, { "standin.ready", "tokens.ready", "model.ready" })
    S.build_images()
    local ca = h.read_file(work .. "/ca.pem")
    -- every pool's stacks: a sandbox trusting the test CA, the operator's key, and the pool's
    -- baseline policy, which admits nothing (a pool names its projects and makes its tokens);
    -- extra adds to them
    local function stack_opts(extra)
      local o = S.options { project_name = false, session_token = false, services = S.trusting(ca),
        egress_policy = { allow = {} } }
      for k, v in pairs(extra) do o[k] = v end
      return o
    end
    -- a pool of such stacks, filled with size of them: the pool, or nil and why
    local function filled(name, size, extra)
      local p, err = docker.pool { name = name, size = size, max = 3, stack = stack_opts(extra) }
      if p then
        local n; n, err = p:fill()
        if n ~= size then p = nil end
      end
      return p, err
    end
    pool, fill_err = filled(POOL, 1, { proxy_hosts = { ["a.test"] = addr(2), ["b.test"] = addr(2) } })
    -- the pool with a credential slot: its stacks wait with a throwaway secret of the slot's length
    cpool, fill_err = filled(POOL .. "-c", 1, {
      proxy_hosts = { ["a.test"] = addr(2), ["c.test"] = addr(3) },
      credentials = { { name = "ECHO_TOKEN", host = "c.test", port = 9443, header = "X-Token", length = #SECRET } },
      proxy_upstream_ca = ca,
    })
    -- the pool whose stacks reach a model API (the credential route) and hold a credential slot:
    -- the operator's key (S.KEY) stays with the pool, its stacks wait with a throwaway one
    mpool, mfill_err = filled(POOL .. "-m", 2, {
      proxy_hosts = { ["a.test"] = addr(2), ["c.test"] = addr(3), ["model.test"] = addr(4) },
      proxy_upstream = "http://model.test:8080",
      credentials = { { name = "ECHO_TOKEN", host = "c.test", port = 9443, header = "X-Token", length = #SECRET } },
      proxy_upstream_ca = ca,
    })
  end)

  lazy_teardown(function()
    if skip_why then return end
    ph.clean(POOL)
    ph.clean(POOL .. "-c")
    ph.clean(POOL .. "-m")
    S.teardown(nil, work)
  end)

  it("before the claim neither host answers; after it exactly the session's does, in the same sandbox", function()
    if not S.ready(skip_why, pool, fill_err, pending) then return end
    local project = assert(docker.list { pool = POOL })[1].project
    local before = started_at(project)
    -- waiting in the pool: the proxy answers (a refusal is its own 403) and admits neither host
    for _, host in ipairs { "a.test", "b.test" } do
      local out, code = curl(project, "https://" .. host .. "/idle")
      assert.not_equal(0, code, out)
      assert.matches("403", out)
    end
    -- a policy the proxy would refuse is refused before any stack is claimed
    local none, err = pool:acquire("sess-bad", { egress_policy = { allow = { 42 } } })
    assert.is_nil(none)
    assert.equal("invalid_policy", err.reason)
    assert.same({ ready = 1, starting = 0, in_use = 0, failed = 0 }, pool:status())
    -- the claim hands the session its policy: a.test only
    local stack = assert(pool:acquire("sess-a", { egress_policy = { allow = { "a.test:443" } } }))
    assert.equal(project, stack.project) -- the warm stack, not a cold start
    assert.is_number(pool.last_acquire.egress)
    assert.matches("hello from a.test /claimed", (curl(project, "https://a.test/claimed")))
    local out, code = curl(project, "https://b.test/claimed")
    assert.not_equal(0, code, out)
    assert.matches("403", out)
    assert.equal(assert(sandstack.policy.compile { allow = { "a.test:443" } }):render(), (assert(stack:egress())):render())
    -- nothing in the sandbox changed: the same container, never restarted
    assert.equal(before, started_at(project))
    stack:destroy(); stack:close()
  end)

  -- the X-Token the origin got for one request from the sandbox (which sends its placeholder)
  local function token_sent(project, tag)
    local out, _, code = h.sh(("docker exec %s sh -c %s 2>&1"):format(h.q(project .. "-sandbox"), h.q(
      'curl -sS --max-time 20 -H "X-Token: $ECHO_TOKEN" https://c.test:9443/' .. tag)))
    local log = h.read_file(work .. "/tokens.log") or ""
    return out, code, log:match("([^\n]*)\n$")
  end

  it("a credential slot holds nothing until the claim hands the session its secret", function()
    if not S.ready(skip_why, cpool, fill_err, pending) then return end
    local project = assert(docker.list { pool = POOL .. "-c" })[1].project
    local before = started_at(project)
    local env_cmd = ("docker exec %s sh -c %s"):format(h.q(project .. "-sandbox"), h.q("env; cat " .. h.SERVICE_ENVIRON))
    local placeholder = h.must(("docker exec %s sh -c 'echo \"$ECHO_TOKEN\"'"):format(h.q(project .. "-sandbox"))):gsub("%s+$", "")
    assert.equal(#SECRET, #placeholder)
    -- waiting: the proxy answers (its 403) and admits neither c.test, where the slot would send
    -- a secret, nor a.test; the origin got nothing
    local out, code = token_sent(project, "idle")
    assert.not_equal(0, code, out)
    assert.matches("403", out)
    assert.is_nil(h.read_file(work .. "/tokens.log"))
    out, code = curl(project, "https://a.test/idle")
    assert.not_equal(0, code, out)
    -- refused before any stack is claimed: another length, a name that is no slot, a slot's field
    for _, bad in ipairs { { name = "ECHO_TOKEN", secret = SECRET .. "x" }, { name = "OTHER", secret = SECRET },
      { name = "ECHO_TOKEN", secret = SECRET, host = "a.test" } } do
      local none, err = cpool:acquire("sess-bad", { egress_policy = { allow = { "c.test:9443" } }, credentials = { bad } })
      assert.is_nil(none)
      assert.equal("invalid_option", err.reason)
    end
    assert.same({ ready = 1, starting = 0, in_use = 0, failed = 0 }, cpool:status())
    -- the claim: the session's policy (c.test only) and its secret
    local stack = assert(cpool:acquire("sess-c", { egress_policy = { allow = { "c.test:9443" } },
      credentials = { { name = "ECHO_TOKEN", secret = SECRET } } }))
    assert.equal(project, stack.project) -- the warm stack
    assert.equal(placeholder, stack:credentials().ECHO_TOKEN) -- the handle knows what the sandbox holds
    local seen; out, code, seen = token_sent(project, "claimed")
    assert.equal(0, code, out)
    assert.matches("seen", out)
    assert.equal(SECRET, seen) -- the origin got the session's secret for the sandbox's placeholder
    out, code = curl(project, "https://a.test/claimed")
    assert.not_equal(0, code, out) -- not the session's host
    -- the sandbox: never restarted, the same placeholder, and no secret anywhere in it
    assert.equal(before, started_at(project))
    local env = h.must(env_cmd)
    assert.truthy(env:find(placeholder, 1, true))
    assert.falsy(env:find(SECRET, 1, true))
    stack:destroy(); stack:close()
  end)

  -- the model API's record of one request on the credential route from the sandbox (which sends
  -- its session token, $ANTHROPIC_API_KEY, to $ANTHROPIC_BASE_URL, the proxy): the curl output,
  -- its exit code, and the x-api-key the stand-in got (nil when it got no request for tag)
  local function model_call(project, tag)
    local out, _, code = h.sh(("docker exec %s sh -c %s 2>&1"):format(h.q(project .. "-sandbox"), h.q(
      'curl -sS -f --max-time 20 -H "x-api-key: $ANTHROPIC_API_KEY" "$ANTHROPIC_BASE_URL/v1/messages/' .. tag .. '"')))
    local key
    for line in (h.read_file(work .. "/requests.jsonl") or ""):gmatch("[^\n]+") do
      local r = core.json_decode(line)
      if r.path == "/v1/messages/" .. tag then key = r.headers["x-api-key"][1] end
    end
    return out, code, key
  end

  -- everything the engine shows of a project (each container's inspect: env, labels), and its logs
  local function engine_view(project)
    local ids = h.must(("docker ps -aq --filter label=io.sandstack.project=%s"):format(h.q(project)))
    local all = {}
    for id in ids:gmatch("%S+") do
      all[#all + 1] = h.must("docker inspect " .. id)
      all[#all + 1] = h.sh("docker logs " .. id .. " 2>&1")
    end
    assert.is_true(#all >= 4, "no containers of " .. project)
    return table.concat(all, "\n")
  end

  it("the model key: a throwaway while the stack waits, the session's own after the claim, never in the sandbox", function()
    if not S.ready(skip_why, mpool, mfill_err, pending) then return end
    local projects = {}
    for _, s in ipairs(assert(docker.list { pool = POOL .. "-m" })) do projects[#projects + 1] = s.project end
    assert.equal(2, #projects)
    local tokens_before = h.read_file(work .. "/tokens.log") -- the slot test's requests, if it ran
    -- waiting: the model route and c.test are refused by the proxy; the stand-ins got nothing
    for _, project in ipairs(projects) do
      local out, code, key = model_call(project, "idle-" .. project)
      assert.not_equal(0, code, out)
      assert.matches("403", out)
      assert.is_nil(key)
      out, code = token_sent(project, "idle")
      assert.not_equal(0, code, out)
      assert.matches("403", out)
      -- the operator's key is nowhere in a waiting stack: its proxy holds a throwaway one
      assert.falsy(engine_view(project):find(S.KEY, 1, true), "the operator's key in a waiting stack")
    end
    assert.is_nil(h.read_file(work .. "/requests.jsonl"))
    assert.equal(tokens_before, h.read_file(work .. "/tokens.log"))
    -- refused before any stack is claimed: a key the proxy would not take
    for _, bad in ipairs { "sk-short", "sk-with space-" .. core.random_hex(8), 42 } do
      local none, err = mpool:acquire("sess-bad", { api_key = bad })
      assert.is_nil(none)
      assert.equal("invalid_option", err.reason)
      assert.equal("api_key", err.option)
    end
    assert.same({ ready = 2, starting = 0, in_use = 0, failed = 0 }, mpool:status())
    -- the claim: the session's policy (the model API and c.test), its secret and its model key
    local stack = assert(mpool:acquire("sess-m", { api_key = SESSION_KEY,
      egress_policy = { allow = { "model.test:8080", "c.test:9443" } },
      credentials = { { name = "ECHO_TOKEN", secret = SECRET } } }))
    local project = stack.project
    assert.truthy(project == projects[1] or project == projects[2], "a cold start, not a warm stack")
    local handed = mpool.last_acquire.egress
    local before = started_at(project)
    local token = h.must(("docker exec %s sh -c 'printf %%s \"$ANTHROPIC_API_KEY\"'"):format(h.q(project .. "-sandbox")))
    local out, code, key = model_call(project, "claimed")
    assert.equal(0, code, out)
    assert.matches('"ok": true', out)
    assert.equal(SESSION_KEY, key) -- the stand-in got exactly the session's key
    local seen; out, code, seen = token_sent(project, "claimed")
    assert.equal(0, code, out)
    assert.equal(SECRET, seen)
    out, code = curl(project, "https://a.test/claimed")
    assert.not_equal(0, code, out) -- not the session's host
    -- the sandbox never restarted, holds the same token, and neither the key nor the secret is in
    -- its environment, its first process's, the record, the engine's view or any log
    assert.equal(before, started_at(project))
    local env = h.must(("docker exec %s sh -c %s"):format(h.q(project .. "-sandbox"), h.q("env; cat " .. h.SERVICE_ENVIRON)))
    assert.truthy(env:find("ANTHROPIC_API_KEY=" .. token, 1, true))
    local record = core.json_encode(stack:record())
    local view = engine_view(project)
    for _, secret in ipairs { SESSION_KEY, SECRET, S.KEY } do
      for what, text in pairs { env = env, record = record, engine = view } do
        assert.falsy(text:find(secret, 1, true), what .. " holds a secret")
      end
    end
    -- the token went nowhere but the proxy
    assert.falsy((h.read_file(work .. "/requests.jsonl") or ""):find(token, 1, true))
    stack:destroy(); stack:close()
    -- a session that brings no key of its own gets the pool's (the operator's), live too
    local other = assert(mpool:acquire("sess-m2", { egress_policy = { allow = { "model.test:8080" } } }))
    assert.truthy(other.project ~= project and (other.project == projects[1] or other.project == projects[2]))
    print(("# hand-over at claim: %.1f ms with policy, secret and key (3 execs), %.1f ms with policy and "
      .. "key (2 execs); acquire %.1f ms"):format(handed * 1000, mpool.last_acquire.egress * 1000,
      mpool.last_acquire.total * 1000))
    out, code, key = model_call(other.project, "pool-key")
    assert.equal(0, code, out)
    assert.equal(S.KEY, key)
    assert.falsy(engine_view(other.project):find(S.KEY, 1, true), "the operator's key in the engine's view")
    other:destroy(); other:close()
  end)

  it("refuses api_key at acquire for a pool whose stacks have no added proxy", function()
    local p = assert(docker.pool { name = POOL .. "-y", size = 0, stack = ph.stack_opts("10.213.0.0/16") })
    local s, err = p:acquire("sess-y", { api_key = "sk-session-" .. core.random_hex(16) })
    assert.is_nil(s)
    assert.equal("invalid_option", err.reason)
    assert.equal("api_key", err.option)
  end)

  it("refuses egress_policy at acquire for a pool whose stacks have no added proxy", function()
    local p = assert(docker.pool { name = POOL .. "-x", size = 0, stack = ph.stack_opts("10.213.0.0/16") })
    local s, err = p:acquire("sess-x", { egress_policy = { allow = {} } })
    assert.is_nil(s)
    assert.equal("invalid_option", err.reason)
    assert.equal("egress_policy", err.option)
  end)
end)
