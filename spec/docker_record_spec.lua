-- A stack's record keeps no secret, and its teardown goes in compose's order. Every service of
-- a stack (the sandbox and sidecars with and without egress) is given env values that are
-- secrets of the user's own (a database password); none may be in stack:record(), in the record
-- kept on the engine (the <project>-record volume's labels, read back from the engine) or in a
-- handle opened from it, while the containers hold them (the control). The handle rebuilt from
-- the record still hibernates, wakes and snapshots, and a restore gets the env values back from
-- the containers. The destroy is read from the engine's own events: every container goes before
-- any network, every network before any volume (the record's included). Projects
-- "sstest-rec-<random>"; all removed, and counted.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local h = require "helpers"

local PREFIX = "sstest-rec-" .. core.random_hex(3)
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"

-- one secret per service and form, all random, so a hit names where it came from
local SECRETS = {
  sandbox = "hunter2-" .. core.random_hex(8), sandbox_num = 7000000 + math.random(99999),
  db = "pgpass-" .. core.random_hex(8), tool = "tooltoken-" .. core.random_hex(8),
}

local function find_secret(text)
  for k, v in pairs(SECRETS) do
    if text:find(tostring(v), 1, true) then return k end
  end
  return nil
end

describe("a record made from env in either form", function()
  -- a record of an older version kept the values; the list form is what a hand-made one may hold
  it("keeps the names and no value, whatever form the env had", function()
    local handle = require "sandstack.docker.handle"
    local rec = { project = "p", session_key = "p", agent_port = 8080, sandbox = "sandbox", forwarder = "forwarder",
      containers = { { service = "sandbox", name = "p-sandbox" }, { service = "db", name = "p-db" } },
      networks = { "p-sbx" }, volumes = {},
      spec = { services = {
        { name = "sandbox", env = { PGPASSWORD = SECRETS.sandbox, PORT = SECRETS.sandbox_num } },
        { name = "db", env = { "POSTGRES_PASSWORD=" .. SECRETS.db, "EMPTY=" } } } } }
    local s = handle.new({}, rec)
    local out = s:record()
    local text = core.json_encode(out)
    assert.is_nil(find_secret(text), text)
    assert.same({ "PGPASSWORD", "PORT" }, out.spec.services[1].env_names)
    assert.same({ "EMPTY", "POSTGRES_PASSWORD" }, out.spec.services[2].env_names)
    assert.is_nil(out.spec.services[1].env)
    -- the control: the handle still holds what it was given, the record alone leaves it out
    assert.truthy(find_secret(core.json_encode(rec.spec)))
  end)
end)

describe("a snapshot of a handle whose record keeps env names", function()
  -- an engine answering each container's inspect with its Config.Env, in one batch
  local function engine_with(envs)
    return { perform = function(_, reqs)
      local out = {}
      for i, q in ipairs(reqs) do
        local name = assert(q.path:match("^/containers/([^/]+)/json$"), q.path)
        out[i] = { ok = true, status = 200, body = { Config = { Env = assert(envs[name], name) } } }
      end
      return out
    end }
  end

  it("reads the values back from the containers, never the key, the token, a secret or a placeholder", function()
    local token, key, placeholder = "tok-" .. core.random_hex(8), "sk-" .. core.random_hex(8), "PH" .. core.random_hex(8)
    local eng = engine_with {
      ["p-sandbox"] = { "PGPASSWORD=" .. SECRETS.sandbox, "HTTPS_PROXY=http://sandstack:" .. token .. "@proxy:3128",
        "ANTHROPIC_API_KEY=" .. token, "PATH=/bin", "ECHO_TOKEN=" .. placeholder, "EMPTY=" },
      ["p-db"] = { "POSTGRES_PASSWORD=" .. SECRETS.db, "KEY_COPY=" .. key, "CRED_COPY=x-credsecret" },
      ["p-proxy"] = { "ANTHROPIC_API_KEY=" .. key, "SANDSTACK_SESSION_TOKEN=" .. token,
        'SANDSTACK_CREDENTIALS=[{"name":"ECHO_TOKEN","secret":"credsecret"}]' },
    }
    local plan = { containers = { { service = "sandbox", name = "p-sandbox" }, { service = "db", name = "p-db" },
      { service = "proxy", name = "p-proxy" } }, credentials = { { name = "ECHO_TOKEN", placeholder = placeholder } } }
    local spec = { agent_port = 8080, services = {
      { name = "sandbox", env_names = { "ANTHROPIC_API_KEY", "ECHO_TOKEN", "EMPTY", "HTTPS_PROXY", "NOT_SET", "PGPASSWORD" } },
      { name = "db", env_names = { "CRED_COPY", "KEY_COPY", "POSTGRES_PASSWORD" } } } }
    local full = assert(require("sandstack.docker.record_env").fill(eng, plan, spec))
    assert.same({ EMPTY = "", PGPASSWORD = SECRETS.sandbox }, full.services[1].env)
    assert.same({ POSTGRES_PASSWORD = SECRETS.db }, full.services[2].env)
    assert.is_nil(full.services[1].env_names)
    assert.equal(8080, full.agent_port)
    -- nothing withheld: the spec as it is, no engine asked
    local plain = { services = { { name = "sandbox", env = { A = "1" } } } }
    assert.equal(plain, require("sandstack.docker.record_env").fill({}, plan, plain))
  end)
end)

describe("a stack's record and teardown #docker", function()
  local eng = assert(sandstack.engine {})
  local P = PREFIX .. "-main"
  local R = PREFIX .. "-restored"
  local stack, start_err

  local function opts(project)
    return { project_name = project, agent_port = 8080, forwarder_image = SOCAT, pull = "never", ttl = 1800,
      volumes = { { name = "ws" } },
      api_key = string.rep("k", 40), egress_policy = { allow = { "c.test:9443" } },
      credentials = { { name = "ECHO_TOKEN", host = "c.test", port = 9443, header = "X-Token",
        secret = "cred-" .. core.random_hex(10) } },
      services = {
        { name = "sandbox", image = AGENT, command = { "agent" }, depends_on = { "db" },
          env = { PGPASSWORD = SECRETS.sandbox, PGPORT = SECRETS.sandbox_num },
          volumes = { { name = "ws", target = "/workspace" } } },
        { name = "db", image = AGENT, command = { "agent" }, egress = "none", env = { POSTGRES_PASSWORD = SECRETS.db } },
        { name = "tool", image = AGENT, command = { "agent" }, egress = "allow", env = { TOOL_TOKEN = SECRETS.tool } },
      } }
  end

  local function env_of(name) return h.container_env(eng, name) end

  lazy_setup(function()
    stack, start_err = docker.start(P, opts(P))
  end)

  lazy_teardown(function()
    if stack then stack:destroy(); stack:close() end
    docker.reap { prefix = PREFIX }
    docker.reap { snapshots = true, prefix = PREFIX }
    assert.equal(0, h.count_labelled(eng, PREFIX))
    eng:close()
  end)

  local function ready()
    assert(stack, "the stack did not start: " .. tostring(start_err))
    return stack
  end

  it("keeps no env value of any service in the record, on the engine or in a handle opened from it", function()
    local s = ready()
    -- the control: each service holds its own value
    assert.equal(SECRETS.sandbox, env_of(P .. "-sandbox").PGPASSWORD)
    assert.equal(tostring(SECRETS.sandbox_num), env_of(P .. "-sandbox").PGPORT)
    assert.equal(SECRETS.db, env_of(P .. "-db").POSTGRES_PASSWORD)
    assert.equal(SECRETS.tool, env_of(P .. "-tool").TOOL_TOKEN)

    local rec = s:record()
    local text = core.json_encode(rec)
    assert.is_nil(find_secret(text), "stack:record() holds the " .. tostring(find_secret(text)) .. " secret")
    local names = {}
    for _, sv in ipairs(rec.spec.services) do names[sv.name] = sv.env_names; assert.is_nil(sv.env) end
    assert.same({ sandbox = { "PGPASSWORD", "PGPORT" }, db = { "POSTGRES_PASSWORD" }, tool = { "TOOL_TOKEN" } }, names)

    -- the record kept on the engine, read back whole: every volume of the project with its labels
    local f = { label = { "io.sandstack.project=" .. P } }
    local vols = assert(eng:call("GET", "/volumes", nil, { query = { filters = f } })).Volumes
    local kept
    for _, v in ipairs(vols) do
      local all = core.json_encode(v)
      assert.is_nil(find_secret(all), "volume " .. v.Name .. " holds the " .. tostring(find_secret(all)) .. " secret")
      if v.Labels["io.sandstack.role"] == "record" then kept = core.json_decode(v.Labels["io.sandstack.record"]) end
    end
    assert.truthy(kept, "no record volume")
    assert.equal(P, kept.project)
    assert.same({ "POSTGRES_PASSWORD" }, kept.spec.services[2].env_names)

    local opened = assert(docker.open(P))
    local otext = core.json_encode(opened:record())
    opened:close()
    assert.is_nil(find_secret(otext), otext)
  end)

  it("hibernates, wakes and snapshots from the record, and a restore gets the values back from the containers", function()
    local s = ready()
    local rec = s:record()
    local again = assert(docker.reconnect(rec))
    assert(again:hibernate { timeout = 1 })
    again:close()
    local woke = assert(docker.wake(rec))
    assert.equal(200, assert(require("sandstack.docker.http").request { url = woke.endpoint .. "/health" }).status)
    assert.equal(SECRETS.db, env_of(P .. "-db").POSTGRES_PASSWORD)
    local snap = assert(woke:snapshot { name = "from-record" })
    woke:close()
    local restored = assert(docker.start(R, { project_name = R, from_snapshot = snap, api_key = string.rep("k", 40),
      credentials = { { name = "ECHO_TOKEN", host = "c.test", port = 9443, header = "X-Token", secret = "cred2-" .. core.random_hex(8) } } }))
    local ok, err = pcall(function()
      assert.equal(SECRETS.sandbox, env_of(R .. "-sandbox").PGPASSWORD)
      assert.equal(tostring(SECRETS.sandbox_num), env_of(R .. "-sandbox").PGPORT)
      assert.equal(SECRETS.db, env_of(R .. "-db").POSTGRES_PASSWORD)
      assert.equal(SECRETS.tool, env_of(R .. "-tool").TOOL_TOKEN)
      -- what the parent's wiring put there is the restore's own again
      assert.not_equal(env_of(P .. "-sandbox").ANTHROPIC_API_KEY, env_of(R .. "-sandbox").ANTHROPIC_API_KEY)
      assert.is_nil(find_secret(core.json_encode(restored:record())))
    end)
    restored:destroy()
    restored:close()
    docker.remove_snapshot(snap)
    assert(ok, err)
  end)

  it("removes the containers, then the networks, then the volumes, the record's with them", function()
    local s = ready()
    local since = os.time() - 1
    assert(s:destroy())
    local evs = assert(eng:events { since = tostring(since), ["until"] = tostring(os.time() + 1),
      filters = { type = { "container", "network", "volume" } } })
    local order = {}
    while true do
      local ev, err = evs:read(10)
      if not ev then
        assert.equal("closed", err.reason)
        break
      end
      local a = ev.Actor or {}
      local name = (a.Attributes or {}).name or a.ID or ""
      if ev.Action == "destroy" and name:sub(1, #P) == P then order[#order + 1] = ev.Type .. " " .. name end
    end
    local rank, seen, last = { container = 1, network = 2, volume = 3 }, {}, 0
    for _, e in ipairs(order) do
      local kind = e:match("^(%a+)")
      seen[kind] = (seen[kind] or 0) + 1
      assert.is_true(rank[kind] >= last, "out of order:\n" .. table.concat(order, "\n"))
      last = rank[kind]
    end
    -- the init volume's holder and the init volume are the stack's too
    assert.same({ container = 6, network = 3, volume = 5 }, seen, table.concat(order, "\n"))
    assert.truthy(table.concat(order, "\n"):find("volume " .. P .. "-record", 1, true))
    stack:close()
    stack = nil
  end)
end)
