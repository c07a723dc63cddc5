-- A stack over time on the live engine (#docker): pause and resume, hibernate and wake,
-- snapshot and restore, fork, changes, and expiry by ttl, by an extended ttl and by idleness.
-- One stack (sandbox with a workspace volume, the proxy sandstack adds with a credential, so an
-- inspection CA) is reused by every cycle; each cycle runs twice and a file written between
-- the two is checked after the second (the failures peers report: files lost on a second resume,
-- writes lost at a timeout's pause). Objects: projects "sstest-lc-<random>...", snapshots by
-- their ids; all removed at the end, and counted.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local policy = sandstack.policy
local h = require "helpers"

local PREFIX = "sstest-lc-" .. core.random_hex(3)
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
local KEY = string.rep("k", 40)
local eng = assert(sandstack.engine {})

local START = { allow = { "b.test:443", "c.test:9443" } }
local WIDER = { allow = { "a.test:443", "b.test:443", "c.test:9443" } }
local function cred(secret)
  return { name = "ECHO_TOKEN", host = "c.test", port = 9443, header = "X-Token", secret = secret }
end
local SECRET = "s1-" .. core.random_hex(14)

local function opts(project, extra)
  local o = { project_name = project, agent_port = 8080, forwarder_image = SOCAT, pull = "never",
    volumes = { { name = "workspace" } },
    services = { { name = "sandbox", image = AGENT, command = { "agent" },
      volumes = { { name = "workspace", target = "/workspace" } } } } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function full(project, extra)
  local o = opts(project, { api_key = KEY, egress_policy = START, credentials = { cred(SECRET) },
    proxy_hosts = { ["c.test"] = "203.0.113.9" } })
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function get(stack, timeout)
  return require("sandstack.docker.http").request { url = stack.endpoint .. "/health", timeout = timeout or 5 }
end

local function sh_in(container, cmd)
  return h.sh(("docker exec %s sh -c %s"):format(h.q(container), h.q(cmd)))
end

local function inspect(name) return assert(eng:call("GET", "/containers/" .. name .. "/json")) end

local function env_of(name)
  local m = {}
  for _, e in ipairs(inspect(name).Config.Env or {}) do
    local k, v = e:match("^([^=]+)=(.*)$")
    m[k] = v
  end
  return m
end

local function count_left()
  local n = 0
  local f = { label = { "io.sandstack.project" } }
  for _, c in ipairs(assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } }))) do
    if c.Labels["io.sandstack.project"]:sub(1, #PREFIX) == PREFIX then n = n + 1 end
  end
  for _, v in ipairs(assert(eng:call("GET", "/volumes", nil, { query = { filters = f } })).Volumes or {}) do
    if v.Labels["io.sandstack.project"]:sub(1, #PREFIX) == PREFIX then n = n + 1 end
  end
  for _, x in ipairs(assert(eng:call("GET", "/networks", nil, { query = { filters = f } }))) do
    if x.Labels["io.sandstack.project"]:sub(1, #PREFIX) == PREFIX then n = n + 1 end
  end
  return n
end

describe("a stack over time #docker", function()
  local P = PREFIX .. "-main"
  local stack, start_err
  local snaps = {}

  lazy_setup(function()
    stack, start_err = docker.start(P, full(P))
  end)

  lazy_teardown(function()
    if stack then stack:destroy(); stack:close() end
    docker.reap { prefix = PREFIX }
    local mine = {}
    for _, s in ipairs(docker.snapshots() or {}) do
      if (s.source or ""):sub(1, #PREFIX) == PREFIX then mine[#mine + 1] = s.id end
    end
    if #mine > 0 then docker.remove_snapshot(mine) end
  end)

  local function ready()
    assert(stack, "the stack did not start: " .. tostring(start_err))
    return stack
  end

  it("pauses and resumes twice: frozen in between, files kept", function()
    local s = ready()
    local sbx = P .. "-sandbox"
    for cycle = 1, 2 do
      assert(sh_in(sbx, "echo c" .. cycle .. " > /workspace/pause-" .. cycle .. "; echo r" .. cycle .. " > /root-pause-" .. cycle))
      assert.is_true(assert(s:pause()))
      assert.is_true(inspect(sbx).State.Paused)
      -- the forwarder and the added proxy keep running: they hold nothing of the session's work
      assert.is_false(inspect(P .. "-forwarder").State.Paused)
      assert.is_false(inspect(P .. "-proxy").State.Paused)
      assert.truthy(s:egress()) -- the host's control calls answer while the stack is paused
      local r = get(s, 0.5)
      assert.is_nil(r, "a paused agent answered") -- the request waits in the frozen sandbox's socket
      assert.is_true(assert(s:pause())) -- a paused stack is left as it is
      assert.is_true(assert(s:resume()))
      assert.is_false(inspect(sbx).State.Paused)
      assert.equal(200, assert(get(s)).status)
    end
    for cycle = 1, 2 do
      assert.equal("c" .. cycle .. "\n", (sh_in(sbx, "cat /workspace/pause-" .. cycle)))
      assert.equal("r" .. cycle .. "\n", (sh_in(sbx, "cat /root-pause-" .. cycle)))
    end
  end)

  it("refuses to pause a stack with a stopped service", function()
    local s = ready()
    local sbx = P .. "-sandbox"
    assert(eng:call("POST", "/containers/" .. sbx .. "/stop", nil, { query = { t = "0" }, ok = { [304] = true } }))
    local ok, err = s:pause()
    assert.is_nil(ok)
    assert.equal("invalid", err.kind)
    assert.equal("not_running", err.reason)
    assert.equal(sbx, err.container)
    assert.is_false(inspect(P .. "-proxy").State.Paused)
    assert.is_false(inspect(P .. "-forwarder").State.Paused)
    assert(s:start())
    assert.equal(200, assert(get(s)).status)
  end)

  it("hibernates and wakes twice from its record: new port, same placeholders, live policy and files kept", function()
    local s = ready()
    local sbx = P .. "-sandbox"
    local placeholders = s:credentials()
    assert.truthy(placeholders.ECHO_TOKEN)
    local token = env_of(sbx).ANTHROPIC_API_KEY
    assert(s:set_egress(WIDER)) -- in force live only: the proxy's env still holds START
    local proxy_started = inspect(P .. "-proxy").State.StartedAt
    local handle = s
    for cycle = 1, 2 do
      assert(sh_in(sbx, "echo h" .. cycle .. " > /workspace/hib-" .. cycle .. "; echo f" .. cycle .. " > /root-hib-" .. cycle))
      local old_port = handle.port
      assert.is_true(assert(handle:hibernate { timeout = 1 }))
      assert.equal("exited", inspect(sbx).State.Status)
      assert.equal("exited", inspect(P .. "-forwarder").State.Status)
      assert.equal("running", inspect(P .. "-proxy").State.Status)
      assert.is_nil(handle.endpoint)
      local rec = handle:record()
      assert.is_nil(core.json_encode(rec):find(KEY, 1, true), "the record holds the api key")
      assert.is_nil(core.json_encode(rec):find(SECRET, 1, true), "the record holds a secret")
      local woke = assert(docker.wake(rec))
      assert.equal(200, assert(get(woke)).status)
      assert.is_number(woke.port)
      assert.is_number(old_port)
      assert.same(placeholders, woke:credentials())
      assert.equal(token, env_of(sbx).ANTHROPIC_API_KEY)
      assert.equal(assert(policy.compile(WIDER)):render(), assert(woke:egress()):render())
      if handle ~= s then handle:close() end
      handle = woke
    end
    -- the proxy holding the live policy and secrets was never restarted
    assert.equal(proxy_started, inspect(P .. "-proxy").State.StartedAt)
    for cycle = 1, 2 do
      assert.equal("h" .. cycle .. "\n", (sh_in(sbx, "cat /workspace/hib-" .. cycle)))
      assert.equal("f" .. cycle .. "\n", (sh_in(sbx, "cat /root-hib-" .. cycle)))
    end
    if handle ~= s then handle:close() end
    assert(s:reconnect())
  end)

  it("refuses hibernate{memory = true} on an engine that cannot checkpoint, changing nothing", function()
    local s = ready()
    local info = assert(eng:call("GET", "/info"))
    if info.ExperimentalBuild then return pending("this engine is experimental: the refusal is for the others") end
    local ok, err = s:hibernate { memory = true }
    assert.is_nil(ok)
    assert.equal("engine", err.kind)
    assert.equal("checkpoint_unsupported", err.reason)
    assert.matches("experimental", err.message)
    assert.equal("running", inspect(P .. "-sandbox").State.Status)
    assert.equal(200, assert(get(s)).status)
  end)

  it("snapshots twice and restores the second as a new session with both cycles' files", function()
    local s = ready()
    local sbx = P .. "-sandbox"
    assert(sh_in(sbx, "echo one > /workspace/snap-1; echo fs1 > /snapfs-1"))
    local s1 = assert(s:snapshot { name = "first" })
    snaps[#snaps + 1] = s1
    assert(sh_in(sbx, "echo two > /workspace/snap-2; echo fs2 > /snapfs-2; echo changed > /workspace/snap-1"))
    local s2 = assert(s:snapshot { name = "second" })
    snaps[#snaps + 1] = s2
    assert.equal(200, assert(get(s)).status) -- running again after the snapshot's freeze
    -- never a secret, the live policy kept
    local text = core.json_encode(s2)
    assert.is_nil(text:find(KEY, 1, true))
    assert.is_nil(text:find(SECRET, 1, true))
    assert.equal(assert(policy.compile(WIDER)):render(), assert(policy.load(core.json_encode(s2.egress_policy))):render())
    -- listed by label
    local ids = {}
    for _, e in ipairs(assert(docker.snapshots { source = P })) do ids[e.id] = e end
    assert.truthy(ids[s1.id])
    assert.equal("second", ids[s2.id].name)
    -- changes: the sandbox's own, and the workspace's since the first snapshot
    local ch = assert(s:changes { since = s1 })
    local seen = {}
    for _, c in ipairs(ch.sandbox) do seen[c.path] = c.kind end
    assert.equal("added", seen["/snapfs-2"])
    local ws = {}
    for _, c in ipairs(ch.workspace.workspace) do ws[c.path] = c.kind end
    assert.equal("added", ws["snap-2"])
    assert.equal("changed", ws["snap-1"])
    assert.is_nil(ws["pause-1"])
    -- restored: a new session with both cycles' files (workspace and the sandbox's own)
    local RP = P .. "-r"
    local r = assert(docker.start(RP, { from_snapshot = s2, project_name = RP, api_key = KEY, ttl = 600,
      credentials = { cred("s2-" .. core.random_hex(14)) } }))
    assert.is_number(assert(r:expires()).at) -- a restore takes the start's expiry options too
    local rs = RP .. "-sandbox"
    assert.equal(200, assert(get(r)).status)
    assert.equal("changed\n", (sh_in(rs, "cat /workspace/snap-1")))
    assert.equal("two\n", (sh_in(rs, "cat /workspace/snap-2")))
    assert.equal("fs1\n", (sh_in(rs, "cat /snapfs-1")))
    assert.equal("fs2\n", (sh_in(rs, "cat /snapfs-2")))
    assert.equal(assert(policy.compile(WIDER)):render(), assert(r:egress()):render())
    assert(r:destroy())
    r:close()
    -- a snapshot's objects go by id; a second removal finds nothing
    assert.same({ s1.id }, assert(docker.remove_snapshot(s1)))
    assert.same({}, assert(docker.remove_snapshot(s1)))
  end)

  it("forks twice: each child diverges and is a new session", function()
    local s = ready()
    local sbx = P .. "-sandbox"
    local parent_env = env_of(sbx)
    local parent_net = inspect(sbx).NetworkSettings.Networks
    for cycle = 1, 2 do
      assert(sh_in(sbx, "echo before" .. cycle .. " > /workspace/fork-" .. cycle))
      local CP = P .. "-f" .. cycle
      local child, snap = s:fork(CP, { project_name = CP, api_key = KEY, credentials = { cred("s3-" .. core.random_hex(14)) } })
      assert(child, snap)
      snaps[#snaps + 1] = snap
      local cs = CP .. "-sandbox"
      assert.equal(200, assert(get(child)).status)
      for k = 1, cycle do assert.equal("before" .. k .. "\n", (sh_in(cs, "cat /workspace/fork-" .. k))) end
      -- diverging: a write in one is not seen in the other
      assert(sh_in(sbx, "echo parent > /workspace/only-parent-" .. cycle))
      assert(sh_in(cs, "echo child > /workspace/only-child-" .. cycle))
      assert.is_false(select(2, sh_in(cs, "test -e /workspace/only-parent-" .. cycle)))
      assert.is_false(select(2, sh_in(sbx, "test -e /workspace/only-child-" .. cycle)))
      -- a new session: token, placeholders, inspection CA and subnet its own
      local cenv = env_of(cs)
      assert.not_equal(parent_env.ANTHROPIC_API_KEY, cenv.ANTHROPIC_API_KEY)
      assert.not_equal(s:credentials().ECHO_TOKEN, child:credentials().ECHO_TOKEN)
      local pca = sh_in(sbx, "cat /etc/sandstack/ca/bundle.pem")
      local cca = sh_in(cs, "cat /etc/sandstack/ca/bundle.pem")
      assert.matches("BEGIN CERTIFICATE", cca)
      assert.not_equal(pca, cca)
      local pnet, cnet = {}, {}
      for _, n in pairs(parent_net) do pnet[n.IPAddress] = true end
      for _, n in pairs(inspect(cs).NetworkSettings.Networks) do
        assert.is_nil(pnet[n.IPAddress], "the child shares an address with the parent")
        cnet[#cnet + 1] = n
      end
      assert.truthy(cnet[1])
      assert(child:destroy())
      child:close()
      assert.same({ snap.id }, assert(docker.remove_snapshot(snap)))
    end
    assert.equal("before1\n", (sh_in(sbx, "cat /workspace/fork-1")))
  end)

  it("reaps its snapshots by their source's prefix", function()
    ready()
    local left = assert(docker.snapshots { source = P })
    assert.is_true(#left >= 1) -- the second snapshot of the restore test
    local removed = assert(docker.reap { snapshots = true, prefix = P })
    assert.equal(#left, #removed)
    assert.same({}, assert(docker.snapshots { source = P }))
  end)

  it("keeps the files of every cycle on the one stack to the end", function()
    ready()
    local sbx = P .. "-sandbox"
    for _, f in ipairs { "/workspace/pause-1", "/workspace/pause-2", "/workspace/hib-1", "/workspace/hib-2",
      "/workspace/snap-2", "/workspace/fork-2", "/root-hib-2" } do
      assert.is_true(select(2, sh_in(sbx, "test -s " .. f)), f)
    end
  end)
end)

describe("expiry on the live engine #docker", function()
  after_each(function() docker.reap { prefix = PREFIX .. "-x" } end)

  local function expired_by(list, project)
    for _, d in ipairs(list) do if d.project == project then return d end end
  end

  it("destroys at a ttl, and an extended ttl holds, twice, without the starting handle", function()
    local A, B = PREFIX .. "-xa", PREFIX .. "-xb"
    local a = assert(docker.start(A, opts(A, { ttl = 1 })))
    -- B's ttl long enough that set_timeout moves it before its sandbox's init ends it
    local b = assert(docker.start(B, opts(B, { ttl = 12, on_expiry = "hibernate" })))
    assert(sh_in(B .. "-sandbox", "echo kept > /workspace/ttl-1"))
    local e = assert(a:expires())
    assert.is_number(e.at)
    assert.equal("destroy", e.on_expiry)
    assert.is_true(assert(b:set_timeout(120))) -- extended before it was due
    assert.is_true(b:expires().at >= os.time() + 100)
    a:close() -- the expiry is enforced without the starting handle
    assert.is_true(h.wait_for("the expiry", function() return os.time() > e.at end, 5, 0.1))
    local done = assert(docker.reap { expired = true, prefix = PREFIX .. "-x" })
    assert.same({ project = A, reason = "ttl", action = "destroy" }, expired_by(done, A))
    assert.is_nil(expired_by(done, B))
    assert.same({}, assert(docker.list { project = A }))
    assert.equal("running", inspect(B .. "-sandbox").State.Status)
    -- twice: B due now hibernates (on_expiry), wakes, and its files are there after each
    for cycle = 1, 2 do
      assert(sh_in(B .. "-sandbox", "echo c" .. cycle .. " > /workspace/ttl-c" .. cycle))
      assert(b:set_timeout(1))
      local at = b:expires().at
      assert.is_true(h.wait_for("the expiry", function() return os.time() > at end, 5, 0.1))
      done = assert(docker.reap { expired = true, prefix = PREFIX .. "-x" })
      assert.same({ project = B, reason = "ttl", action = "hibernate" }, expired_by(done, B))
      assert.equal("exited", inspect(B .. "-sandbox").State.Status)
      assert.is_nil(expired_by(assert(docker.reap { expired = true, prefix = PREFIX .. "-x" }), B)) -- acted once
      assert(b:wake())
      assert.equal(200, assert(get(b)).status)
    end
    for _, f in ipairs { "ttl-1", "ttl-c1", "ttl-c2" } do
      assert.is_true(select(2, sh_in(B .. "-sandbox", "test -s /workspace/" .. f)), f)
    end
    b:destroy()
    b:close()
  end)

  it("destroys after idle_timeout without traffic, and traffic keeps it", function()
    local C = PREFIX .. "-xc"
    local c = assert(docker.start(C, opts(C, { idle_timeout = 1 })))
    assert.equal(1, assert(c:expires()).idle_timeout)
    assert.same({}, assert(docker.reap { expired = true, project = C })) -- the first pass reads the counters
    local seen = c:expires().idle_since
    assert.is_true(h.wait_for("an idle second", function() return os.time() > seen + 1 end, 5, 0.1))
    assert.equal(200, assert(get(c)).status) -- traffic through the forwarder
    assert.same({}, assert(docker.reap { expired = true, project = C }))
    seen = c:expires().idle_since
    assert.is_true(h.wait_for("an idle second", function() return os.time() > seen + 1 end, 5, 0.1))
    local done = assert(docker.reap { expired = true, project = C })
    assert.same({ { project = C, reason = "idle", action = "destroy" } }, done)
    c:close()
  end)

  it("refuses a bad ttl, idle_timeout or on_expiry before any object is made", function()
    local D = PREFIX .. "-xd"
    for _, o in ipairs { { ttl = -1 }, { on_expiry = "pause" } } do -- values: refused
      local s, err = docker.start(D, opts(D, o))
      assert.is_nil(s)
      assert.same({ "compose", "invalid_option" }, { err.kind, err.reason })
    end
    assert.has_error(function() docker.start(D, opts(D, { idle_timeout = "1" })) end) -- a wrong type: raised
    assert.same({}, assert(docker.list { project = D }))
  end)

  it("leaves nothing of this spec behind", function()
    docker.reap { prefix = PREFIX }
    assert.equal(0, count_left())
    for _, s in ipairs(assert(docker.snapshots())) do
      assert.is_not.equal(PREFIX, (s.source or ""):sub(1, #PREFIX))
    end
  end)
end)
