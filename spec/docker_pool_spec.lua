-- Warm pools against the live engine (#docker). Every pool is named under
-- "sstest-pool-" and uses its own address pool, so other specs' reaps never touch it; each test
-- removes its pool with reap{pool =} and proves nothing labelled with it is left. One finally per
-- test: busted keeps only the last one a test registers.
local sandstack = require "sandstack"
local docker = sandstack.docker
local conformance = require "sandstack.conformance"
local h = require "helpers"

local SUBNETS = "10.214.0.0/16"

local ph = require "pool_helpers"
local function stack_opts() return ph.stack_opts(SUBNETS) end

local function new_name() return "sstest-pool-" .. h.random_suffix(3) end

-- Everything on the engine labelled with the pool: containers, networks, volumes.
local pool_objects, answers = ph.pool_objects, ph.answers

local function clean(name)
  ph.clean(name)
  assert.equal(0, (pool_objects(name)))
end

describe("sandstack.docker.pool #docker", function()
  it("hands out a filled stack whose agent answers, bound to the session", function()
    local name = new_name()
    local events = {}
    local pool = assert(docker.pool { name = name, size = 2, max = 3, stack = stack_opts(),
      on_event = function(ev) if ev.phase:match("^pool_") then events[#events + 1] = ev end end })
    finally(function() clean(name) end)
    assert.equal(2, assert(pool:fill()))
    assert.same({ ready = 2, starting = 0, in_use = 0, failed = 0 }, pool:status())
    assert.equal(0, assert(pool:fill())) -- already full
    local stack = assert(pool:acquire("sess-a"))
    assert.truthy(answers(stack))
    assert.equal("sess-a", stack.session_key)
    assert.equal(name, stack.project:sub(1, #name))
    local rec = stack:record()
    assert.equal("sess-a", rec.session_key)
    local again = assert(docker.reconnect(rec))
    assert.equal("sess-a", again.session_key)
    assert.equal(stack.port, again.port)
    again:close()
    local listed = assert(docker.list { pool = name })
    assert.equal(2, #listed)
    for _, s in ipairs(listed) do
      assert.equal(name, s.pool)
      if s.project == stack.project then
        assert.equal("in_use", s.state); assert.equal("sess-a", s.session_key)
      else
        assert.equal("ready", s.state); assert.is_nil(s.session_key)
      end
    end
    assert.same({ ready = 1, starting = 0, in_use = 1, failed = 0 }, pool:status())
    -- refusing per-session create-body overrides
    local s2, err = pool:acquire("sess-b", { env = { X = "1" } })
    assert.is_nil(s2)
    assert.equal("compose", err.kind); assert.equal("invalid_option", err.reason)
    -- destroy removes the claim with the stack
    assert(stack:destroy())
    stack:close()
    assert.same({}, assert(docker.list { project = stack.project }))
    assert.equal("pool_acquired", events[#events].phase)
    -- close leaves nothing, and again
    assert(pool:close())
    assert(pool:close())
    assert.equal(0, (pool_objects(name)))
  end)

  it("refuses a pool name that cannot prefix a project, and project_name in the stack options", function()
    local p, err = docker.pool { name = "Bad Name!", size = 1, stack = stack_opts() }
    assert.is_nil(p); assert.equal("invalid_name", err.reason)
    local o = stack_opts(); o.project_name = "x"
    p, err = docker.pool { name = new_name(), size = 1, stack = o }
    assert.is_nil(p); assert.equal("invalid_option", err.reason)
    assert.has_error(function() docker.pool { name = "x", size = 1, stack = stack_opts(), colour = 1 } end)
  end)

  it("passes the isolation probes on a pooled stack", function()
    local name = new_name()
    local lines = {}
    local out = { write = function(_, ...) for _, s in ipairs { ... } do lines[#lines + 1] = s end end }
    local acquired
    finally(function() clean(name) end)
    local ok = conformance.run { out = out, project_prefix = "sstest-pool-conf-", subnet_pool = SUBNETS,
      start = function(project, opts)
        opts.project_name = nil
        local pool = assert(docker.pool { name = name, size = 1, stack = opts })
        assert.equal(1, assert(pool:fill()))
        local s, err = pool:acquire(project)
        acquired = s and s.project
        return s, err
      end }
    local text = table.concat(lines)
    assert.is_true(ok, text)
    assert.truthy(acquired and acquired:sub(1, #name) == name, text)
    assert.matches("ok %d+ %- sandbox: a container on another network", text)
    assert.falsy(text:find("not ok", 1, true))
    if conformance.is_root() then
      assert.matches("ok %d+ %- sandbox: the internet stand%-in is unreachable\n", text)
    end
    assert.equal(0, (pool_objects(name)))
  end)

  it("fills in parallel, bounded by concurrency: starts overlap, never more than the bound at once", function()
    local name = new_name()
    local m = ph.overlap_meter()
    local pool = assert(docker.pool { name = name, size = 3, max = 3, stack = ph.slow_ready_opts(SUBNETS),
      on_event = m.on_event })
    finally(function() clean(name) end)
    for _, c in ipairs { 0, 2.5 } do -- values: refused
      local n, err = pool:fill { concurrency = c }
      assert.is_nil(n)
      assert.same({ "invalid", "invalid_option", "concurrency" }, { err.kind, err.reason, err.option })
    end
    assert.has_error(function() pool:fill { concurrency = "2" } end) -- a wrong type: raised
    assert.has_error(function() pool:fill { width = 2 } end)
    assert.equal(3, assert(pool:fill { concurrency = 2 }))
    assert.is_true(m.overlapped, "two starts were under way at once")
    assert.equal(2, m.most)
    assert.same({ ready = 3, starting = 0, in_use = 0, failed = 0 }, pool:status())
    -- control: concurrency 1 is sequential (never two at once)
    clean(name)
    m.reset()
    assert.equal(3, assert(pool:fill { concurrency = 1 }))
    assert.is_false(m.overlapped)
    assert.equal(1, m.most)
  end)

  it("never hands one stack to two sessions across processes (the claim is atomic)", function()
    local name = new_name()
    local pool = assert(docker.pool { name = name, size = 3, max = 3, stack = stack_opts() })
    local dir = h.must("mktemp -d /tmp/sstest-pool.XXXXXX"):gsub("%s+$", "")
    finally(function() h.sh("rm -rf " .. h.q(dir)); clean(name) end)
    assert.equal(3, assert(pool:fill()))
    local N = 6
    local filled = {}
    for _, s in ipairs(assert(docker.list { pool = name })) do filled[s.project] = true end
    local src = ([[
      local sandstack = require "sandstack"
      local c = require "sandstack.conformance"
      local o = c.stack_opts { subnet_pool = %q }
      o.project_name = nil
      local pool = assert(sandstack.docker.pool { name = %q, size = 0, max = 10, stack = o })
      local go = %q
      while not io.open(go) do os.execute("sleep 0.01") end -- a barrier: all acquire at once
      local s, err = pool:acquire("sess-" .. arg[1])
      print(s and ("PROJECT " .. s.project .. " " .. s.session_key) or ("ERR " .. tostring(err)))
    ]]):format(SUBNETS, name, dir .. "/go")
    local cmd = h.child_command(dir .. "/child.lua", src)
    local parts = {}
    for i = 1, N do parts[#parts + 1] = ("(%s %d > %s/out%d 2>&1 &)"):format(cmd, i, dir, i) end
    h.must(table.concat(parts, "; "))
    h.must("sleep 0.5; touch " .. h.q(dir .. "/go"))
    local seen, pooled = {}, 0
    for i = 1, N do
      local text
      for _ = 1, 600 do
        text = h.read_file(dir .. "/out" .. i) or ""
        if text:find("\n", 1, true) then break end
        h.sh("sleep 0.1")
      end
      local project, key = text:match("PROJECT (%S+) (%S+)")
      assert.truthy(project, text)
      assert.equal("sess-" .. i, key)
      assert.is_nil(seen[project], "two sessions got " .. tostring(project))
      seen[project] = true
    end
    for _, s in ipairs(assert(docker.list { pool = name })) do
      assert.equal("in_use", s.state)
      assert.truthy(seen[s.project])
      if filled[s.project] then pooled = pooled + 1 end
    end
    assert.equal(3, pooled) -- every filled stack went to exactly one session; the rest started cold
    clean(name)
  end)

  it("lets exactly one of many concurrent claims of one stack win", function()
    -- the engine's name registry is the arbiter: 8 processes create the same claim at once
    local name = new_name()
    local project = name .. "-" .. h.random_suffix(4)
    local dir = h.must("mktemp -d /tmp/sstest-pool.XXXXXX"):gsub("%s+$", "")
    finally(function()
      h.sh("rm -rf " .. h.q(dir))
      h.sh("docker rm -f " .. h.q(project .. "-claim") .. " >/dev/null 2>&1")
    end)
    local src = ([[
      local sandstack = require "sandstack"
      local eng = assert(sandstack.engine {})
      while not io.open(%q) do os.execute("sleep 0.01") end
      local ok, err = require("sandstack.docker.inventory").mark(eng, "claim", %q, %q, "sess-" .. arg[1], "sandstack-test/socat:local")
      print(ok and "WON" or ("LOST " .. tostring(err and err.status)))
    ]]):format(dir .. "/go", project, name)
    local cmd = h.child_command(dir .. "/child.lua", src)
    local parts = {}
    for i = 1, 8 do parts[#parts + 1] = ("(%s %d > %s/out%d 2>&1 &)"):format(cmd, i, dir, i) end
    h.must(table.concat(parts, "; "))
    h.must("sleep 0.5; touch " .. h.q(dir .. "/go"))
    local won, lost = 0, 0
    for i = 1, 8 do
      local text
      for _ = 1, 300 do
        text = h.read_file(dir .. "/out" .. i) or ""
        if text:find("\n", 1, true) then break end
        h.sh("sleep 0.1")
      end
      if text:match("^WON") then won = won + 1 elseif text:match("^LOST 409") then lost = lost + 1 end
    end
    assert.equal(1, won)
    assert.equal(7, lost)
  end)

  it("skips a stack killed while idle, with an event, and starts cold when the pool is empty", function()
    local name = new_name()
    local events = {}
    local pool = assert(docker.pool { name = name, size = 2, max = 4, stack = stack_opts(),
      on_event = function(ev) if ev.phase:match("^pool_") then events[#events + 1] = ev end end })
    finally(function() clean(name) end)
    assert.equal(2, assert(pool:fill()))
    local victim = assert(docker.list { pool = name })[1].project
    h.must("docker kill " .. h.q(victim .. "-sandbox"))
    local a = assert(pool:acquire("sess-a"))
    local b = assert(pool:acquire("sess-b"))
    assert.are_not.equal(a.project, b.project)
    assert.are_not.equal(victim, a.project)
    assert.are_not.equal(victim, b.project)
    assert.truthy(answers(a)); assert.truthy(answers(b))
    local dead, empty = 0, 0
    for _, ev in ipairs(events) do
      if ev.phase == "pool_dead" then dead = dead + 1; assert.equal(victim, ev.project) end
      if ev.phase == "pool_empty" then empty = empty + 1 end
    end
    assert.equal(1, dead)
    assert.equal(1, empty) -- one of the two found only the dead stack, then started cold
    assert.same({}, assert(docker.list { project = victim }))
    -- the cold one is the pool's too, and claimed
    assert.same({ ready = 0, starting = 0, in_use = 2, failed = 0 }, pool:status())
    a:destroy(); b:destroy(); a:close(); b:close()
  end)

  it("leaves objects after a crash mid-fill that reap{pool =} finds and removes", function()
    local name = new_name()
    local dir = h.must("mktemp -d /tmp/sstest-pool.XXXXXX"):gsub("%s+$", "")
    finally(function() h.sh("rm -rf " .. h.q(dir)); clean(name) end)
    local src = ([[
      local sandstack = require "sandstack"
      local c = require "sandstack.conformance"
      local o = c.stack_opts { subnet_pool = %q }
      o.project_name = nil
      local pool = assert(sandstack.docker.pool { name = %q, size = 1, stack = o })
      print(pool:fill())
    ]]):format(SUBNETS, name)
    local cmd = h.child_command(dir .. "/child.lua", src)
    local pid = h.start(("%s > %s/out 2>&1"):format(cmd, h.q(dir)))
    local n = 0
    for _ = 1, 300 do -- until the filler has created its first containers
      n = select(2, pool_objects(name))
      n = #n
      if n >= 2 then break end
      h.sh("sleep 0.02")
    end
    assert(h.signal(pid, "KILL"), "the filler ended before it was killed")
    assert.truthy(n >= 2, "the filler created no containers")
    h.sh("sleep 0.3")
    assert.truthy(pool_objects(name) > 0)
    local st = assert(docker.list { pool = name })
    assert.equal(1, #st)
    assert.equal("starting", st[1].state) -- no ready mark: never handed out
    local removed = assert(docker.reap { pool = name })
    assert.same({ st[1].project }, removed)
    assert.equal(0, (pool_objects(name)))
  end)

  it("is filled, listed by pool and drained from the CLI", function()
    local cli = require "sandstack.cli"
    local name = new_name()
    local dir = h.must("mktemp -d /tmp/sstest-pool.XXXXXX"):gsub("%s+$", "")
    finally(function() h.sh("rm -rf " .. h.q(dir)); clean(name) end)
    h.write_file(dir .. "/pool.lua", ([[
      local o = require("sandstack.conformance").stack_opts { subnet_pool = %q }
      o.project_name = nil
      return { name = %q, size = 0, stack = o }
    ]]):format(SUBNETS, name))
    local function run(argv)
      local buf = {}
      local sink = { write = function(_, ...) for _, s in ipairs { ... } do buf[#buf + 1] = s end end, flush = function() end }
      local code = cli.main(argv, sink, sink)
      return code, table.concat(buf)
    end
    local code, text = run { "pool", "fill", dir .. "/pool.lua", "--size", "1" }
    assert.equal(0, code, text)
    assert.matches("started 1\nready 1 starting 0 in_use 0 failed 0", text)
    code, text = run { "ls" }
    assert.equal(0, code, text)
    assert.matches("\npool " .. name:gsub("%-", "%%-") .. "\n", text)
    assert.matches(name:gsub("%-", "%%-") .. "%-%x+ +%(ready%)", text)
    code, text = run { "pool", "drain", name }
    assert.equal(0, code, text)
    assert.matches("removed " .. name:gsub("%-", "%%-"), text)
    assert.equal(0, (pool_objects(name)))
  end)

  it("reap{pool =} leaves other pools and plain stacks alone", function()
    local a, b = new_name(), new_name()
    finally(function() clean(a); clean(b) end)
    local pa = assert(docker.pool { name = a, size = 1, stack = stack_opts() })
    local pb = assert(docker.pool { name = b, size = 1, stack = stack_opts() })
    assert(pa:fill()); assert(pb:fill())
    local removed = assert(docker.reap { pool = a })
    assert.equal(1, #removed)
    assert.equal(0, (pool_objects(a)))
    assert.same({ ready = 1, starting = 0, in_use = 0, failed = 0 }, pb:status())
  end)
end)

describe("sandstack.docker list and reap options", function()
  it("raise on an unknown option key", function()
    assert.has_error(function() docker.reap { pol = "x" } end)
    assert.has_error(function() docker.list { colour = "x" } end)
  end)

  -- An engine stub answering the three list requests: the shapes list must survive or refuse.
  local function with_engine(answers_, fn)
    local scripted = require "spec.support.scripted_engine"
    local undo = scripted.install(function()
      return scripted.with { request = function(_, _, path) return 200, answers_[path:match("^/(%a+)")] end, close = function() end }
    end)
    local ok, a, b = pcall(fn)
    undo()
    assert(ok, a)
    return a, b
  end

  it("list survives an object without the project label", function()
    local stacks = with_engine({
      containers = {
        { Labels = { ["io.sandstack.project"] = "p1", ["io.sandstack.service"] = "sandbox" }, State = "running" },
        { Labels = { other = "x" }, State = "running" },
        { State = "running" },
      },
      networks = { { Name = "n" } },
      volumes = { Volumes = { { Name = "v", Labels = {} } } },
    }, function() return docker.list() end)
    assert.equal(1, #stacks)
    assert.equal("p1", stacks[1].project)
  end)

  it("list calls a malformed engine answer an error, not 'no stacks'", function()
    local stacks, err = with_engine({ containers = "nonsense", networks = {}, volumes = {} },
      function() return docker.list() end)
    assert.is_nil(stacks)
    assert.equal("engine", err.kind)
  end)
end)
