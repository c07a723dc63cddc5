-- sandstack.docker against the live engine (#docker): lifecycle, credentials, rollback,
-- side-by-side stacks, ten at once, and the engine facts the design rests on. Every object
-- carries a project name starting "sstest-stack-<this run's hex>-"; each test proves none is
-- left. The run's own part keeps the reap and the count off the other files' "sstest-stack-"
-- stacks (dns, iso, plan, v6, conf), which the test command's lanes run at the same time.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local conf = require "sandstack.conformance"

local PREFIX = "sstest-stack-" .. core.random_hex(2) .. "-"
local POOL = "10.213.0.0/16"
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"

local eng = assert(sandstack.engine {})

local function project(tag) return PREFIX .. tag .. "-" .. core.random_hex(3) end

local function base(name, extra)
  local o = { project_name = name, agent_port = 8080, forwarder_image = SOCAT, subnet_pool = POOL, pull = "never",
    services = { { name = "sandbox", image = AGENT, command = { "agent" } } } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function count_labelled(prefix)
  local f = { label = { "io.sandstack.project" } }
  local n = 0
  local cs = assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } }))
  for _, c in ipairs(cs) do if c.Labels["io.sandstack.project"]:sub(1, #prefix) == prefix then n = n + 1 end end
  local ns = assert(eng:call("GET", "/networks", nil, { query = { filters = f } }))
  for _, x in ipairs(ns) do if x.Labels["io.sandstack.project"]:sub(1, #prefix) == prefix then n = n + 1 end end
  local vs = assert(eng:call("GET", "/volumes", nil, { query = { filters = f } }))
  for _, v in ipairs(vs.Volumes or {}) do if v.Labels["io.sandstack.project"]:sub(1, #prefix) == prefix then n = n + 1 end end
  return n
end

local function env_of(container)
  local info = assert(eng:call("GET", "/containers/" .. container .. "/json"))
  local m = {}
  for _, e in ipairs(info.Config.Env or {}) do
    local k, v = e:match("^([^=]+)=(.*)$")
    m[k] = v
  end
  return m, info
end

local function get(url)
  return require("sandstack.docker.http").request { method = "GET", url = url, timeout = 5 }
end

describe("sandstack.docker live #docker", function()
  after_each(function()
    docker.reap { prefix = PREFIX }
    assert.equal(0, count_labelled(PREFIX))
  end)

  it("proves on this engine why the sandbox network carries inhibit_ipv4", function()
    -- An internal network with and without the options, a container on each, a host listener:
    -- the attack is a TCP connect from the container to the network's gateway address.
    local srv, port = conf.host_listener()
    local api = require("sandstack_test.stack").api_number(eng.api_version)
    local p = project("facts")
    local function try(suffix, options)
      local name = p .. "-" .. suffix
      local labels = { ["io.sandstack.project"] = p }
      local subnet = assert(core.stack_pick_subnet(POOL, {}, tonumber(core.random_hex(2), 16)))
      local body = { Name = name, Internal = true, Options = options, Labels = labels, CheckDuplicate = true,
        IPAM = { Config = { { Subnet = subnet } } } }
      if next(options) == nil then body.Options = nil end
      assert(eng:call("POST", "/networks/create", body))
      assert(eng:call("POST", "/containers/create", { Image = AGENT, Cmd = { "agent" }, Labels = labels,
        HostConfig = { NetworkMode = name } }, { query = { name = name } }))
      assert(eng:call("POST", "/containers/" .. name .. "/start", nil, { ok = { [304] = true } }))
      local gw = conf.network_gateway(eng, name)
      return #assert(conf.reached(eng, name, { { gw, port } })) == 1
    end
    local plain = try("plain", {})
    local isolated = try("iso", { ["com.docker.network.bridge.gateway_mode_ipv4"] = "isolated" })
    local inhibit = try("inh", { ["com.docker.network.bridge.inhibit_ipv4"] = "true" })
    srv:close()
    assert.is_false(inhibit, "inhibit_ipv4 must cut the host off on every engine")
    if api < 148 then
      -- measured on 20.10 (API 1.41): Internal alone leaves the host reachable on the gateway,
      -- and the Engine 28 gateway mode is silently ignored
      assert.is_true(plain, "Internal alone was expected to leave the host reachable before Engine 28")
      assert.is_true(isolated, "gateway_mode_ipv4=isolated was expected to be ignored before API 1.48")
    else
      assert.is_false(isolated)
    end
    assert(docker.down(p))
  end)

  it("starts, wires credentials, survives stop/start/restart with new ports, reconnects and is destroyed", function()
    local name = project("life")
    local events = {}
    local stack, err = docker.start(name, base(name, {
      api_key = "sk-live-real-key",
      proxy_service = "proxy",
      egress_policy = { allow = { "api.example.com" } },
      services = {
        { name = "sandbox", image = AGENT, command = { "agent" }, depends_on = { "db" },
          env = { ANTHROPIC_API_KEY = "sk-live-real-key" },
          volumes = { { name = "work", target = "/work" } } },
        { name = "db", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "5432" }, egress = "none" },
        { name = "proxy", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "3128" }, egress = "allow", port = 3128 },
      },
      volumes = { { name = "work" } },
      ready = { db = { test = { "agent", "connect", "127.0.0.1", "5432", "500" }, interval = 0.5 } },
      capture_path = "/work",
      cap_drop = { "ALL" }, security_opt = { "no-new-privileges" }, pids_limit = 128, memory = "128m",
      on_event = function(ev) events[#events + 1] = ev end,
    }))
    assert.is_nil(err)
    assert.truthy(stack.port)
    assert.equal(200, get(stack.endpoint .. "/health").status)

    -- events for every step, with service names and elapsed time
    local phases = {}
    for _, ev in ipairs(events) do
      phases[ev.phase .. ":" .. (ev.service or "")] = true
      assert.is_number(ev.elapsed)
    end
    for _, k in ipairs { "network_created:", "volume_created:", "container_created:db", "container_started:sandbox",
      "waiting_health:db", "healthy:db", "ready:sandbox" } do assert.truthy(phases[k], k) end

    -- the sandbox never holds the real key: inspect and exec both
    local sb_env = env_of(name .. "-sandbox")
    assert.equal("http://proxy:3128", sb_env.ANTHROPIC_BASE_URL)
    assert.not_equal("sk-live-real-key", sb_env.ANTHROPIC_API_KEY)
    local res = assert(eng:exec(name .. "-sandbox", { "env" }))
    assert.falsy(res.stdout:find("sk-live-real-key", 1, true))
    local px_env = env_of(name .. "-proxy")
    assert.equal("sk-live-real-key", px_env.ANTHROPIC_API_KEY)
    assert.equal(sb_env.ANTHROPIC_API_KEY, px_env.SANDSTACK_SESSION_TOKEN)
    local policy = assert(core.json_decode(px_env.SANDSTACK_EGRESS_POLICY))
    assert.equal("api.example.com", policy.allow[1].host)
    assert.is_nil(sb_env.SANDSTACK_EGRESS_POLICY)

    -- hardening reached every container, the forwarder included
    for _, svc in ipairs { "sandbox", "db", "proxy", "forwarder" } do
      local _, info = env_of(name .. "-" .. svc)
      assert.same({ "ALL" }, info.HostConfig.CapDrop, svc)
      assert.equal(128, info.HostConfig.PidsLimit, svc)
      assert.equal(128 * 1024 * 1024, info.HostConfig.Memory, svc)
      assert.equal(name, info.Config.Labels["io.sandstack.project"])
      assert.equal(name, info.Config.Labels["io.sandstack.session"])
      assert.equal(svc, info.Config.Labels["io.sandstack.service"])
    end

    -- the record is JSON-safe and secret-free
    local rec = stack:record()
    local text = assert(core.json_encode(rec))
    assert.falsy(text:find("sk-live", 1, true))
    assert.falsy(text:find(sb_env.ANTHROPIC_API_KEY, 1, true))

    -- capture copies the sandbox path out
    assert(eng:exec(name .. "-sandbox", { "sh", "-c", "echo captured > /work/out.txt" }))
    local dir = os.tmpname()
    os.remove(dir)
    assert(stack:capture(dir))
    local f = assert(io.open(dir .. "/work/out.txt"))
    assert.equal("captured\n", f:read("*a"))
    f:close()
    os.execute("rm -rf " .. dir)

    -- sandstack's own probe found db ready already; the engine's healthcheck reports it after
    -- its first interval (0.5 s). Wait for the engine's word, and accept no other on the way.
    local st, seen = nil, {}
    local deadline = core.engine_clock() + 30
    repeat
      st = assert(stack:status())
      seen[#seen + 1] = st.services.db.health
      if st.services.db.health == "healthy" then break end
      assert.equal("starting", st.services.db.health, table.concat(seen, " "))
      core.sleep(0.1)
    until core.engine_clock() > deadline
    assert.equal("healthy", st.services.db.health, table.concat(seen, " "))
    assert.equal("running", st.services.forwarder.state)

    local p1 = stack.port
    assert(stack:stop { timeout = 1 })
    assert.is_nil(stack.port)
    local stopped = assert(stack:status())
    assert.equal("exited", stopped.services.sandbox.state)
    assert.is_nil(stopped.port)
    assert(stack:start())
    local p2 = stack.port
    assert.not_equal(p1, p2)
    assert.equal(200, get(stack.endpoint .. "/health").status)
    local again = assert(docker.reconnect(rec))
    assert.equal(p2, again.port)
    assert(stack:restart { timeout = 1 })
    assert.not_equal(p2, stack.port)
    assert(again:reconnect())
    assert.equal(stack.port, again.port)
    assert.equal(200, get(again.endpoint .. "/health").status)

    local listed = assert(docker.list { project = name })
    assert.equal(1, #listed)
    assert.equal(name, listed[1].session_key)
    assert(stack:destroy())
    assert(stack:destroy()) -- idempotent
    local gone, gerr = docker.reconnect(rec)
    assert.is_nil(gone)
    assert.equal("not_found", gerr.reason)
    stack:close(); again:close()
  end)

  it("rolls back a start whose image is missing, naming the image and the fix", function()
    local name = project("img")
    local s, err = docker.start(name, base(name, { forwarder_image = "alpine/socat:1.8.1.3", pull = "missing" }))
    assert.is_nil(s)
    assert.equal("image_missing", err.reason)
    assert.equal("alpine/socat:1.8.1.3", err.image)
    assert.truthy(err.message:find("docker build", 1, true))
    s, err = docker.start(name, base(name, { services = { { name = "sandbox", image = "sstest-none/nope:local" } } }))
    assert.is_nil(s)
    assert.equal("sstest-none/nope:local", err.image)
  end)

  it("rolls back when a sidecar exits, a healthcheck never passes, or readiness times out", function()
    local name = project("fail")
    local s, err = docker.start(name, base(name, {
      services = { { name = "sandbox", image = AGENT, command = { "agent" }, depends_on = { "db" } },
        { name = "db", image = AGENT, command = { "sh", "-c", "sleep 0.3; exit 3" }, egress = "none" } },
      ready = { db = { test = "false", interval = 1 } },
    }))
    assert.is_nil(s)
    assert.equal("exited", err.kind)
    assert.equal("db", err.service)
    assert.equal(3, err.exit_code)
    assert.equal(0, count_labelled(name))

    s, err = docker.start(name, base(name, {
      services = { { name = "sandbox", image = AGENT, command = { "agent" }, depends_on = { "db" } },
        { name = "db", image = AGENT, command = { "agent" }, egress = "none" } },
      ready = { db = { test = "false", interval = 0.2, retries = 1000 } }, health_timeout = 1.5,
    }))
    assert.is_nil(s)
    assert.equal("timeout", err.kind)
    assert.equal("health", err.phase)
    assert.equal(0, count_labelled(name))

    s, err = docker.start(name, base(name, { ready_path = "/no-such-path", ready_timeout = 1.5 }))
    assert.is_nil(s)
    assert.equal("timeout", err.kind)
    assert.equal("ready", err.phase)
    assert.equal(0, count_labelled(name))
  end)

  it("runs two stacks side by side that cannot see each other", function()
    local a_name, b_name = project("a"), project("b")
    local a = assert(docker.start(a_name, base(a_name)))
    local b = assert(docker.start(b_name, base(b_name)))
    local b_ip = conf.container_ip(eng, b_name .. "-sandbox", b_name .. "-sbx")
    local a_ip = conf.container_ip(eng, a_name .. "-sandbox", a_name .. "-sbx")
    local b_fw = conf.container_ip(eng, b_name .. "-forwarder", b_name .. "-pub")
    assert.truthy(b_ip and a_ip and b_fw)
    assert.same({}, conf.reached(eng, a_name .. "-sandbox", { { b_ip, 8080 }, { b_fw, 8080 } }))
    assert.same({}, conf.reached(eng, b_name .. "-sandbox", { { a_ip, 8080 } }))
    -- each resolves its own names only: "forwarder" is its own forwarder
    assert.same({ "forwarder:8080" }, conf.reached(eng, a_name .. "-sandbox", { { "forwarder", 8080 } }))
    assert.equal(200, get(a.endpoint .. "/health").status)
    assert.equal(200, get(b.endpoint .. "/health").status)
    assert(a:destroy()); assert(b:destroy())
  end)

  it("starts ten stacks concurrently; all come up and all go away", function()
    local n = 10
    local tag = project("ten")
    local flag = os.tmpname()
    os.remove(flag)
    local outs = {}
    local script = ([[
      local docker = require("sandstack").docker
      local name = arg[1]
      local s, err = docker.start(name, { project_name = name, agent_port = 8080, forwarder_image = %q,
        subnet_pool = %q, pull = "never", services = { { name = "sandbox", image = %q, command = { "agent" } } } })
      if not s then print("FAIL " .. tostring(err)) os.exit(1) end
      print("UP " .. s.port) io.stdout:flush()
      for _ = 1, 600 do if io.open(%q) then break end require("sandstack.core").sleep(0.1) end
      local ok, derr = s:destroy()
      print(ok and "DOWN" or ("FAIL " .. tostring(derr)))
    ]]):format(SOCAT, POOL, AGENT, flag)
    local sf = os.tmpname()
    local f = assert(io.open(sf, "w")); f:write(script); f:close()
    local lua = os.getenv("SANDSTACK_TEST_MODE") == "asan" and "./build-asan/sandstack-asan-lua" or "lua5.4"
    if os.getenv("SANDSTACK_TEST_MODE") == "asan" then lua = "ASAN_OPTIONS=detect_leaks=0 " .. lua end
    local cpath = package.cpath
    for i = 1, n do
      outs[i] = os.tmpname()
      os.execute(("LUA_CPATH=%q LUA_PATH=%q %s %s %s-%d > %s 2>&1 &"):format(cpath, package.path, lua, sf, tag, i, outs[i]))
    end
    local function read(i) local h = io.open(outs[i]); local s = h and h:read("*a") or ""; if h then h:close() end; return s end
    local up = 0
    for _ = 1, 1200 do
      up = 0
      local failed = false
      for i = 1, n do
        local s = read(i)
        if s:find("UP %d+") then up = up + 1 end
        if s:find("FAIL") then failed = s end
      end
      assert.is_false(failed)
      if up == n then break end
      require("sandstack.core").sleep(0.1)
    end
    assert.equal(n, up)
    local listed = assert(docker.list())
    local mine = 0
    for _, s in ipairs(listed) do if s.project:sub(1, #tag) == tag then mine = mine + 1 end end
    assert.equal(n, mine)
    for i = 1, n do
      local port = read(i):match("UP (%d+)")
      assert.equal(200, get("http://127.0.0.1:" .. port .. "/health").status)
    end
    assert(io.open(flag, "w")):close()
    local down = 0
    for _ = 1, 1200 do
      down = 0
      for i = 1, n do if read(i):find("DOWN") then down = down + 1 end end
      if down == n then break end
      require("sandstack.core").sleep(0.1)
    end
    assert.equal(n, down)
    assert.equal(0, count_labelled(tag))
    os.remove(flag); os.remove(sf)
    for i = 1, n do os.remove(outs[i]) end
  end)
end)
