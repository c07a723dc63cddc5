-- A pooled session is a whole session (#docker): a stack a warm pool hands out answers every
-- method of the handle and every `sandstack` command as a started stack does. Its handle keeps
-- the options of its start (the pool's and the session's, without a secret) for snapshot and
-- fork, its claim keeps its record on the engine for sandstack.docker.open and the CLI, and
-- `sandstack ls` shows its age. Two pools of this spec's own ("sstest-pooled-<random>"), on
-- their own address pool, with a proxy and a forwarder image built from this tree's binaries;
-- everything labelled with them is removed at the end.
local sandstack = require "sandstack"
local docker = sandstack.docker
local core = sandstack.core
local h = require "helpers"
local ph = require "pool_helpers"

local SUBNETS = "10.218.0.0/16"
local CLIENT = "sandstack-test/client:local" -- the agent, with curl
local SECRET = "gh-" .. core.random_hex(10)  -- a credential slot's secret: 23 characters
local MODEL_KEY = "sk-operator-" .. core.random_hex(12)

local name = "sstest-pooled-" .. h.random_suffix(3)
local FULL, PLAIN = name .. "-f", name .. "-p"

-- The stack options of both pools: a volume at /work (captured, snapshotted, copied to forks),
-- and the proxy sandstack adds; the full pool's also hold a model key and a credential slot.
local function stack_opts(images, full)
  local o = {
    agent_port = 8080, pull = "never", subnet_pool = SUBNETS, forwarder_image = images.forwarder,
    proxy_image = images.proxy, capture_path = "/work", volumes = { { name = "work" } },
    services = { { name = "sandbox", image = CLIENT, command = { "agent" }, env = { MARK = "pooled" },
      volumes = { { name = "work", target = "/work" } } } },
    egress_policy = { allow = {} },
  }
  if full then
    o.api_key = MODEL_KEY
    o.credentials = { { name = "GH_TOKEN", host = "api.github.test", port = 443, header = "Authorization",
      length = #SECRET } }
  end
  return o
end

-- The session's own policy: the slot's host, and every other request held as an ask.
local SESSION_POLICY = { allow = { "api.github.test:443" }, ask = true, ask_timeout = 60 }

-- The expiry marks of a project on the engine: their labels.
local function expiry_marks(project)
  local eng = assert(sandstack.engine {})
  local vs = assert(eng:call("GET", "/volumes", nil, { query = { filters = { label = {
    "io.sandstack.project=" .. project, "io.sandstack.role=expiry" } } } }))
  eng:close()
  local out = {}
  for _, v in ipairs(vs.Volumes or {}) do out[#out + 1] = v.Labels end
  return out
end

-- Runs each { name, fn } of steps in order; the first that fails fails the test, named. Returns
-- the set of the names walked.
local function walk(steps, what)
  local walked = {}
  for _, s in ipairs(steps) do
    local ok, err = pcall(s[2])
    assert(ok, what .. s[1] .. " on a claimed stack: " .. tostring(err))
    walked[s[1]] = true
  end
  return walked
end

local function snapshots_of(project)
  local ids = {}
  for _, s in ipairs(assert(docker.snapshots { source = project })) do ids[#ids + 1] = s.id end
  return ids
end

describe("a claimed pooled stack is a whole session #docker", function()
  local full, plain, setup_err
  local images = {}
  local made = {} -- projects and snapshots a test made outside the pools

  lazy_setup(function()
    local build = package.cpath:match("^%.?/?([^;]-)/%?%.so") or "build"
    local tag = build:gsub("[^%w.-]", "-")
    images.proxy, images.forwarder = "sandstack-test/proxy-pooled:" .. tag, "sandstack-test/socat-pooled:" .. tag
    local root = h.must("pwd"):match("[^\n]+")
    assert(docker.build_images { proxy_binary = root .. "/" .. build .. "/sandstack-proxy",
      proxy_image = images.proxy, forwarder_image = images.forwarder })
    full, setup_err = docker.pool { name = FULL, size = 2, max = 4, stack = stack_opts(images, true) }
    if full then
      local n; n, setup_err = full:fill()
      if n ~= 2 then full = nil end
    end
    plain = assert(docker.pool { name = PLAIN, size = 2, max = 4, stack = stack_opts(images, false) })
    assert.equal(2, assert(plain:fill()))
  end)

  lazy_teardown(function()
    for _, p in ipairs { FULL, PLAIN } do
      for _, s in ipairs(docker.snapshots() or {}) do
        if (s.source or ""):sub(1, #p) == p then docker.remove_snapshot(s) end
      end
    end
    for _, p in ipairs(made) do docker.down(p) end
    for _, s in ipairs(docker.snapshots() or {}) do
      if (s.source or ""):sub(1, #name) == name then docker.remove_snapshot(s) end
    end
    ph.clean(FULL)
    ph.clean(PLAIN)
  end)

  local function acquire(pool, key, overrides)
    assert(pool, tostring(setup_err))
    local st = assert(pool:acquire(key, overrides))
    made[#made + 1] = st.project
    return st
  end

  it("snapshots and forks a claimed stack: its record carries the options it was started with", function()
    local key = "pk-snap-" .. h.random_suffix(2)
    local st = acquire(plain, key)
    finally(function() st:close() end)
    assert(st:write("/work/kept.txt", "from the pooled parent"))
    local snap, err = st:snapshot { name = "pooled" }
    assert.truthy(snap, tostring(err))
    local rec = st:record()
    assert.equal("table", type(rec.spec), "the record of a claimed stack has no start options")
    assert.equal(PLAIN, rec.pool)
    assert.equal(st.project, snap.source)
    local child, cerr = st:fork(key .. "-child", { project_name = key .. "-child" })
    assert.truthy(child, tostring(cerr))
    made[#made + 1] = child.project
    assert.equal("from the pooled parent", assert(child:read("/work/kept.txt")))
    assert(child:destroy())
    child:close()
    -- a handle rebuilt from the record snapshots too (the gateway's path: its mark keeps the record)
    local again = assert(docker.reconnect(rec))
    local snap2 = assert(again:snapshot())
    again:close()
    assert(docker.remove_snapshot(snapshots_of(st.project)))
    assert.truthy(snap2.id)
  end)

  it("sandstack.docker.open takes a claimed stack's project or session key, and a started stack's key", function()
    local key = "pk-open-" .. h.random_suffix(2)
    local st = acquire(plain, key)
    finally(function() st:close() end)
    for _, n in ipairs { st.project, key } do
      local o, err = docker.open(n)
      assert.truthy(o, tostring(err))
      assert.equal(st.project, o.project)
      assert.equal(key, o.session_key)
      assert.equal(st.port, o.port)
      assert.equal(PLAIN, o.pool)
      o:close()
    end
    -- a stack started by sandstack.docker.start, by its key
    local skey = "pk-started-" .. h.random_suffix(2)
    local o = stack_opts(images, false)
    o.subnet_pool = SUBNETS
    local started = assert(docker.start(skey, o))
    made[#made + 1] = started.project
    local by_key = assert(docker.open(skey))
    assert.equal(started.project, by_key.project)
    by_key:close()
    -- a key two stacks hold names neither
    o.project_name = skey .. "-twin"
    local twin = assert(docker.start(skey, o))
    made[#made + 1] = twin.project
    local none, err = docker.open(skey)
    assert.is_nil(none)
    assert.equal("invalid", err.kind)
    assert.equal("ambiguous", err.reason)
    assert.truthy(err.message:find(twin.project, 1, true), err.message)
    local gone; gone, err = docker.open("pk-nobody-" .. h.random_suffix(2))
    assert.is_nil(gone)
    assert.equal("not_found", err.reason)
    for _, s in ipairs { started, twin } do assert(s:destroy()); s:close() end
  end)

  it("lists a pooled stack with its age, idle or claimed", function()
    local key = "pk-age-" .. h.random_suffix(2)
    local st = acquire(plain, key)
    finally(function() st:close() end)
    local seen = 0
    for _, s in ipairs(assert(docker.list { pool = PLAIN })) do
      assert.equal("number", type(s.created), s.project .. " (" .. tostring(s.state) .. ") has no creation time")
      assert.truthy(os.time() - s.created < 3600)
      seen = seen + 1
    end
    assert.truthy(seen >= 2)
    local code, out = h.cli("ls")
    assert.equal(0, code)
    local line = out:match("\n(" .. st.project:gsub("%-", "%%-") .. "[^\n]*)")
    assert.truthy(line, out)
    local age = line:match("^%S+%s+%S+%s+(%S+)")
    assert.matches("^%d+[smhd]$", age, nil, false, line)
    local _, js = h.cli("ls", "--json")
    for _, s in ipairs(core.json_decode(js).stacks) do
      if s.project == st.project then assert.equal("number", type(s.age_seconds)) end
    end
  end)

  it("reconnect of a list() entry is a typed error", function()
    local entry = assert(docker.list { pool = PLAIN })[1]
    local none, err = docker.reconnect(entry)
    assert.is_nil(none)
    assert.truthy(core.is_error(err), tostring(err))
    assert.equal("invalid", err.kind)
    assert.equal("not_a_record", err.reason)
    assert.truthy(err.message:find("sandstack.docker.open", 1, true), err.message)
  end)

  -- Every method of the handle, each step asserting what it did, in an order a session could take.
  -- The docker handle's method table and the session interface's list must both be covered.
  it("answers every method of the handle on a claimed stack", function()
    local key = "pk-walk-" .. h.random_suffix(2)
    local st = acquire(full, key, { egress_policy = SESSION_POLICY,
      credentials = { { name = "GH_TOKEN", secret = SECRET } } })
    local done = {}
    local dir = h.must("mktemp -d /tmp/sstest-pooled.XXXXXX"):gsub("%s+$", "")
    finally(function() h.sh("rm -rf " .. h.q(dir)); st:close() end)
    local snap
    local steps = {
      { "record", function()
        local rec = st:record()
        assert.equal(key, rec.session_key)
        assert.equal(FULL, rec.pool)
        assert.equal("table", type(rec.spec))
        local text = core.json_encode(rec)
        assert.falsy(text:find(SECRET, 1, true) or text:find(MODEL_KEY, 1, true), "a secret in the record")
      end },
      { "credentials", function() assert.equal("string", type(st:credentials().GH_TOKEN)) end },
      { "status", function() assert.equal("running", assert(st:status()).services.sandbox.state) end },
      { "reconnect", function() assert.equal(st.port, assert(st:reconnect())) end },
      { "exec", function()
        local r = assert(st:exec({ "sh", "-c", "echo walked > /work/a.txt && cat /work/a.txt" }))
        assert.equal("walked\n", r.stdout)
      end },
      { "spawn", function()
        local p = assert(st:spawn { "cat" })
        assert(p:write("through a process"))
        assert(p:close_stdin())
        local got = {}
        while true do
          local data = p:read(10)
          if not data then break end
          got[#got + 1] = data
        end
        assert.equal(0, p:wait(10))
        p:close()
        assert.equal("through a process", table.concat(got))
      end },
      { "ports", function()
        local ports = assert(st:ports())
        assert.same({ service = "sandbox", port = ports[1].port, host_port = st.port, address = "127.0.0.1:" .. st.port },
          ports[1])
      end },
      { "processes", function()
        local p = assert(st:spawn { "cat" })
        local listed
        for _, e in ipairs(assert(st:processes())) do if e.id == p.id then listed = e end end
        assert.same({ "cat" }, listed and listed.argv)
        assert(p:kill("KILL"))
        p:wait(10)
        p:close()
      end },
      { "attach", function()
        local id = assert(st:spawn { "sh", "-c", "echo attached; cat" }).id
        local p = assert(st:attach(id))
        assert.equal("attached\n", (p:read(5)))
        assert(p:kill("KILL"))
        p:wait(10)
        p:close()
      end },
      { "write", function() assert(st:write("/work/b.txt", "bee")) end },
      { "read", function() assert.equal("bee", assert(st:read("/work/b.txt"))) end },
      { "stat", function() assert.equal(3, assert(st:stat("/work/b.txt")).size) end },
      { "list", function()
        local names = {}
        for _, e in ipairs(assert(st:list("/work"))) do names[e.name] = true end
        assert.truthy(names["a.txt"] and names["b.txt"])
      end },
      { "upload", function()
        h.write_file(dir .. "/up.txt", "uploaded")
        assert(st:upload(dir .. "/up.txt", "/work/up.txt"))
        assert.equal("uploaded", assert(st:read("/work/up.txt")))
      end },
      { "download", function()
        assert(st:download("/work/up.txt", dir .. "/down.txt"))
        assert.equal("uploaded", h.read_file(dir .. "/down.txt"))
      end },
      { "remove", function()
        assert(st:remove("/work/up.txt"))
        assert.is_nil((st:stat("/work/up.txt")))
      end },
      { "logs", function() assert.equal("string", type(assert(st:logs { tail = 5 }).stdout)) end },
      { "stats", function() assert.equal("number", type(assert(st:stats()).sandbox.memUsed)) end },
      { "egress", function() assert.truthy(assert(st:egress()):render():find("api.github.test", 1, true)) end },
      { "set_egress", function()
        assert(st:set_egress { allow = { "api.github.test:443", "pypi.test:443" }, ask = true, ask_timeout = 60 })
        assert.truthy(assert(st:egress()):render():find("pypi.test", 1, true))
      end },
      { "set_credentials", function()
        assert(st:set_credentials { { name = "GH_TOKEN", host = "api.github.test", port = 443, header = "Authorization",
          secret = "gh-" .. core.random_hex(10) } })
      end },
      { "set_model_key", function() assert(st:set_model_key("sk-session-" .. core.random_hex(12))) end },
      { "egress_asks", function()
        local p = assert(st:spawn { "curl", "-sS", "--max-time", "30", "http://ask.test/held" })
        local ask = h.wait_for("the ask", function()
          for _, a in ipairs(assert(st:egress_asks())) do if a.host == "ask.test" then return a end end
        end, 20)
        done.ask_process, done.ask = p, ask
      end },
      { "answer", function()
        assert(st:answer(done.ask.id, "deny", { reason = "walked" }))
        done.ask_process:wait(30)
        done.ask_process:close()
      end },
      { "serve", function() assert.equal(0, assert(st:serve(0.3, { on_ask = function() return "deny" end })).answered) end },
      { "changes", function()
        local c = assert(st:changes())
        assert.equal("table", type(c.sandbox))
      end },
      { "snapshot", function()
        local err
        snap, err = st:snapshot { name = "walk" }
        assert.truthy(snap, tostring(err))
        local c = assert(st:changes { since = snap })
        assert.same({}, c.workspace.work)
      end },
      { "fork", function()
        local child, cerr = st:fork(key .. "-child", { project_name = key .. "-child", api_key = MODEL_KEY,
          credentials = { { name = "GH_TOKEN", host = "api.github.test", port = 443, header = "Authorization",
            secret = SECRET } } })
        assert.truthy(child, tostring(cerr))
        made[#made + 1] = child.project
        assert.equal("walked\n", assert(child:read("/work/a.txt")))
        assert(child:destroy())
        child:close()
      end },
      { "set_timeout", function()
        assert(st:set_timeout(3600))
        local marks = expiry_marks(st.project)
        assert.equal(1, #marks)
        assert.equal(FULL, marks[1]["io.sandstack.pool"]) -- the pool's serve acts on it
      end },
      { "expires", function()
        local e = assert(st:expires())
        assert.truthy(e.remaining > 3500 and e.remaining <= 3600)
      end },
      { "pause", function() assert(st:pause()) end },
      { "resume", function()
        assert(st:resume())
        assert.truthy(ph.answers(st))
      end },
      { "hibernate", function()
        assert(st:hibernate { timeout = 1 })
        assert.is_nil(st.port)
      end },
      { "wake", function()
        assert(st:wake())
        assert.truthy(ph.answers(st))
      end },
      { "stop", function() assert(st:stop { timeout = 1 }) end },
      { "start", function()
        assert(st:start())
        assert.truthy(ph.answers(st))
      end },
      { "restart", function()
        assert(st:restart { timeout = 1 })
        assert.truthy(ph.answers(st))
      end },
      { "capture", function()
        assert(st:capture(dir .. "/cap"))
        assert.equal("walked\n", h.read_file(dir .. "/cap/work/a.txt"))
      end },
      { "destroy", function()
        assert(st:destroy())
        assert.same({}, assert(docker.list { project = st.project }))
      end },
      { "close", function()
        st:close()
        assert.has_error(function() st:status() end)
      end },
    }
    local walked = walk(steps, "h:")
    -- every method the handle has, and every one of the session interface, was walked
    local Stack = require("sandstack.docker.handle").Stack
    for k, v in pairs(Stack) do
      if type(v) == "function" and not k:match("^__") then assert.truthy(walked[k], "no step walks h:" .. k) end
    end
    for _, m in ipairs(require("sandstack.session").METHODS) do assert.truthy(walked[m], "no step walks h:" .. m) end
    assert(docker.remove_snapshot(snapshots_of(st.project)))
  end)

  -- Every `sandstack` command: those that take a stack run on the claimed one (named by its key
  -- or its project); the others are named with why they take none.
  it("answers every sandstack command on a claimed stack", function()
    local key = "pk-cli-" .. h.random_suffix(2)
    local st = acquire(plain, key)
    local project = st.project
    st:close()
    local dir = h.must("mktemp -d /tmp/sstest-pooled.XXXXXX"):gsub("%s+$", "")
    finally(function() h.sh("rm -rf " .. h.q(dir)) end)
    local function cli(...)
      local code, out, err = h.cli(...)
      assert.equal(0, code, table.concat({ ... }, " ") .. ": " .. err)
      return out
    end
    local snap_id
    local ON_A_STACK = {
      { "ls", function() assert.truthy(cli("ls"):find(project, 1, true)) end },
      { "status", function()
        local doc = core.json_decode(cli("status", key, "--json"))
        assert.equal(project, doc.project)
        assert.equal(PLAIN, doc.pool)
        for _, r in ipairs(doc.services) do assert.equal("running", r.state, r.service) end
      end },
      { "exec", function() assert.equal("pooled\n", cli("exec", key, "--", "sh", "-c", "echo $MARK")) end },
      { "cp", function()
        h.write_file(dir .. "/in.txt", "copied in")
        cli("cp", dir .. "/in.txt", key .. ":/work/in.txt")
        cli("cp", project .. ":/work/in.txt", dir .. "/out.txt")
        assert.equal("copied in", h.read_file(dir .. "/out.txt"))
      end },
      { "logs", function() cli("logs", key, "--tail", "5") end },
      { "stats", function() assert.equal("number", type(core.json_decode(cli("stats", key, "--json")).sandbox.memUsed)) end },
      { "shell", function()
        local out, ok = h.sh("printf 'cat /work/in.txt\\n' | bin/sandstack shell " .. h.q(key) .. " -- sh")
        assert.truthy(ok, out)
        assert.equal("copied in", out)
      end },
      { "pause", function() assert.equal("paused " .. project .. "\n", cli("pause", key)) end },
      { "resume", function() assert.equal("resumed " .. project .. "\n", cli("resume", project)) end },
      { "hibernate", function() cli("hibernate", key, "--timeout", "1") end },
      { "wake", function() assert.matches("^endpoint http://127%.0%.0%.1:%d+\n$", cli("wake", key)) end },
      { "snapshot", function()
        snap_id = core.json_decode(cli("snapshot", key, "--json")).id
        assert.matches("^snap%-%x+$", snap_id)
      end },
      { "snapshots", function()
        local list = core.json_decode(cli("snapshots", "--source", project, "--json"))
        assert.equal(snap_id, list[1] and list[1].id)
        cli("snapshots", "rm", snap_id)
      end },
      { "fork", function()
        local doc = core.json_decode(cli("fork", key, key .. "-forked", "--json"))
        made[#made + 1] = doc.project
        local child = assert(docker.open(doc.project))
        assert.equal("copied in", assert(child:read("/work/in.txt")))
        child:close()
        assert.equal("removed " .. doc.project .. "\n", cli("down", doc.project))
        cli("snapshots", "rm", doc.snapshot)
      end },
      { "pool", function()
        local doc = core.json_decode(cli("pool", "status", PLAIN, "--json"))
        assert.truthy(doc.in_use >= 1)
      end },
      { "reap", function()
        local doc = core.json_decode(cli("reap", "--project", key, "--dry-run", "--json"))
        assert.same({ project }, doc.would_remove)
      end },
      { "down", function()
        assert.equal("removed " .. project .. "\n", cli("down", key))
        assert.same({}, assert(docker.list { project = project }))
      end },
    }
    local NOT_ON_A_STACK = {
      up = "starts a new stack from a file", images = "builds the default images", conform = "probes the engine",
      gateway = "runs the gateway", check = "reads the host's limits",
    }
    local walked = walk(ON_A_STACK, "sandstack ")
    local _, names = require("sandstack.cli").commands()
    for _, n in ipairs(names) do
      assert.truthy(walked[n] or NOT_ON_A_STACK[n], "sandstack " .. n .. " is neither walked nor named as taking no stack")
    end
  end)
end)
