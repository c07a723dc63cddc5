-- sandstack.swarm without a cluster: the Swarm bodies are the docker plan re-expressed by the C
-- core (csrc/stack/swarm_plan.c), never a second plan, each create finished there. For the same options, run label, clock and token, every service carries
-- the docker container's own image, command, env, labels, limits and healthcheck; the forwarder
-- and its publish network are the docker plan's bodies byte for byte; whatever Swarm cannot
-- express is refused by name. The readiness probe's argv is checked against the bytes it sends.
local sandstack = require "sandstack"
local core = sandstack.core
local swarm = require "sandstack.swarm"
local ready = require "sandstack.swarm.ready"

local FIXED = { now = 1700000000, token = ("swarm-token-"):rep(3), run = "0123456789abcdef" }

local function opts(extra)
  local o = {
    agent_port = 8080, cpus = 0.5, memory = "256m", tmpfs = { ["/tmp"] = "size=16m,mode=1777" },
    services = {
      { name = "sandbox", image = "img/agent", command = { "agent" }, depends_on = { "db" },
        volumes = { { name = "work", target = "/w" } } },
      { name = "db", image = "img/db", egress = "none" },
      { name = "web", image = "img/web", egress = "allow", hosts = { ["a.test"] = "10.0.0.1" } },
    },
    volumes = { { name = "work" } },
    ready = { db = { test = "true", interval = 0.5 } },
    egress_policy = { allow = { "api.anthropic.com" } }, api_key = "k",
  }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

-- A finished create's body, as the manager receives it.
local function B(entry) return core.json_decode(entry.create.body_json) end

local function by_name(list, key)
  local out = {}
  for _, x in ipairs(list) do out[x[key]] = x end
  return out
end

describe("sandstack.swarm plan (no cluster)", function()
  local shape, dplan

  setup(function()
    shape = assert(swarm.plan("s1", opts(), FIXED))
    dplan = assert(sandstack.docker.plan("s1", opts(), FIXED))
  end)

  it("keeps the docker plan's dependency order, and the forwarder out of Swarm", function()
    local order = {}
    for _, s in ipairs(shape.services) do order[#order + 1] = s.service end
    local want = {}
    for _, n in ipairs(dplan.order) do if n ~= "forwarder" then want[#want + 1] = n end end
    assert.same(want, order)
    assert.equal("sandbox", order[#order])
    assert.equal("forwarder", shape.forwarder.service)
  end)

  it("re-expresses each container body as a service with the same content", function()
    local containers = by_name(dplan.containers, "service")
    for _, s in ipairs(shape.services) do
      local c = core.json_decode(containers[s.service].body_json)
      local cs = B(s).TaskTemplate.ContainerSpec
      assert.equal(c.Image, cs.Image)
      -- a docker sandbox runs under sandstack-init; a swarm task has none (its ttl is held by
      -- the passes), so its command is the one the init would have run
      local ep = c.Entrypoint
      if ep and ep[1] == "/.sandstack/init" and ep[2] == "--" then
        ep = { (table.unpack or unpack)(ep, 3) }
        if #ep == 0 then ep = nil end
      end
      assert.same(ep, cs.Command)
      assert.same(c.Cmd, cs.Args)
      assert.same(c.Env and #c.Env > 0 and c.Env or nil, cs.Env)
      assert.same(c.Labels, cs.Labels)
      assert.same(c.Labels, B(s).Labels)
      assert.same(c.Healthcheck, cs.HealthCheck)
      assert.same(c.HostConfig.CapDrop, cs.CapabilityDrop)
      assert.equal(c.Name, nil)
      assert.equal(containers[s.service].name, B(s).Name)
      local lim = B(s).TaskTemplate.Resources.Limits
      assert.equal(c.HostConfig.NanoCpus, lim.NanoCPUs)
      assert.equal(c.HostConfig.Memory, lim.MemoryBytes)
      assert.equal(c.HostConfig.PidsLimit, lim.Pids)
      assert.same({ NoNewPrivileges = true }, cs.Privileges)
      assert.equal("dnsrr", B(s).EndpointSpec.Mode)
      assert.same({ Condition = "none", MaxAttempts = 0 }, B(s).TaskTemplate.RestartPolicy)
      assert.same({ Replicated = { Replicas = 1 } }, B(s).Mode)
      assert.same(c.HostConfig.Dns and { Nameservers = c.HostConfig.Dns } or nil, cs.DNSConfig)
    end
    -- the session token reached the services exactly as the docker plan put it
    local sb = B(by_name(shape.services, "service").sandbox).TaskTemplate.ContainerSpec
    local found = false
    for _, e in ipairs(sb.Env) do if e == "ANTHROPIC_API_KEY=" .. FIXED.token then found = true end end
    assert.is_true(found)
  end)

  it("puts the whole session's reservation on the first service Swarm places, and none on the others", function()
    local n = #dplan.containers -- the forwarder counts: it runs on the node Swarm chose
    assert.same({ NanoCPUs = n * 0.5e9, MemoryBytes = n * 256 * 2 ^ 20 }, shape.reservation)
    assert.same(shape.reservation, B(shape.services[1]).TaskTemplate.Resources.Reservations)
    for i = 2, #shape.services do
      assert.is_nil(B(shape.services[i]).TaskTemplate.Resources.Reservations)
      assert.is_nil(B(shape.services[i]).TaskTemplate.Placement.Constraints)
    end
    -- once Swarm has placed the first, C plans the others again, pinned to its node
    local model = assert(core.stack_model(opts(), "s1", FIXED))
    local pinned = assert(model:swarm_plan { node_id = "nodeabc1", constraints = { "node.role==worker" } }).swarm
    assert.same({ "node.role==worker" }, B(pinned.services[1]).TaskTemplate.Placement.Constraints)
    for i = 2, #pinned.services do
      assert.same({ "node.role==worker", "node.id==nodeabc1" }, B(pinned.services[i]).TaskTemplate.Placement.Constraints)
      assert.equal(shape.services[i].name, pinned.services[i].name)
    end
    local bad, err = model:swarm_plan { node_id = "x\"y" }
    model:close()
    assert.is_nil(bad)
    assert.equal("bad_answer", err.reason)
  end)

  it("makes the sandbox network an internal attachable overlay and the egress network a plain one", function()
    local nets = by_name(shape.overlays, "key")
    assert.same({ "egress", "sbx" }, (function()
      local k = {}
      for key in pairs(nets) do k[#k + 1] = key end
      table.sort(k)
      return k
    end)())
    assert.equal("overlay", B(nets.sbx).Driver)
    assert.is_true(B(nets.sbx).Internal)
    assert.is_true(B(nets.sbx).Attachable)
    assert.is_false(B(nets.egress).Internal)
    assert.is_false(B(nets.egress).Attachable)
    assert.is_nil(B(nets.sbx).Options) -- no bridge option leaks into an overlay
  end)

  it("attaches the sandbox to its overlay only, and egress sidecars to both, under their names", function()
    local s = by_name(shape.services, "service")
    assert.same({ { Target = "sandstack-s1-sbx", Aliases = { "sandbox" } } }, B(s.sandbox).TaskTemplate.Networks)
    assert.same({ { Target = "sandstack-s1-sbx", Aliases = { "db" } } }, B(s.db).TaskTemplate.Networks)
    assert.same({ { Target = "sandstack-s1-sbx", Aliases = { "web" } }, { Target = "sandstack-s1-egress" } },
      B(s.web).TaskTemplate.Networks)
    assert.same({ "10.0.0.1 a.test" }, B(s.web).TaskTemplate.ContainerSpec.Hosts)
  end)

  it("keeps the forwarder and its publish network as the docker plan made them", function()
    local containers = by_name(dplan.containers, "service")
    assert.equal(containers.forwarder.body_json, shape.forwarder.body_json)
    local nets = by_name(dplan.networks, "key")
    assert.equal(1, #shape.local_networks)
    assert.equal(nets.pub.body_json, shape.local_networks[1].body_json)
  end)

  it("turns volumes and tmpfs into Swarm mounts, labelled like the stack's volumes", function()
    local s = by_name(shape.services, "service")
    local mounts = B(s.sandbox).TaskTemplate.ContainerSpec.Mounts
    assert.equal("volume", mounts[1].Type)
    assert.equal("sandstack-s1-work", mounts[1].Source)
    assert.equal("sandstack-s1", mounts[1].VolumeOptions.Labels["io.sandstack.project"])
    assert.same({ Type = "tmpfs", Target = "/tmp", TmpfsOptions = { SizeBytes = 16 * 2 ^ 20, Mode = tonumber("1777", 8) } },
      mounts[2])
  end)

  it("refuses what Swarm cannot express, by name, before any call", function()
    local cases = {
      { { runtime = "runsc" }, "runtime" },
      { { subnet_pool = "10.9.0.0/16" }, "subnet_pool" },
      { { pull = "always" }, "pull" },
      { { security_opt = { "seccomp=unconfined" } }, "security_opt" },
      { { tmpfs = { ["/tmp"] = "size=1m,noexec" } }, "tmpfs" },
      { { network = { driver = "macvlan" } }, "network" },
    }
    for _, case in ipairs(cases) do
      local r, err = swarm.plan("s1", opts(case[1]))
      assert.is_nil(r)
      assert.equal("compose", err.kind)
      assert.equal("invalid_option", err.reason)
      assert.equal(case[2], err.option)
    end
    -- loosening typed out is kept as typed: no no-new-privileges, no capability drop
    local loose = assert(swarm.plan("s1", opts { security_opt = {}, cap_drop = {} }))
    assert.is_false(loose.nnp)
    assert.is_nil(B(loose.services[1]).TaskTemplate.ContainerSpec.Privileges)
    assert.is_nil(B(loose.services[1]).TaskTemplate.ContainerSpec.CapabilityDrop)
  end)

  it("hands the proxy's service allow_private as the docker plan does, and refuses a range as it does", function()
    local pol = { allow = { "registry.test:5000" }, allow_private = { "10.0.0.7", "10.0.0.8:5000" } }
    local s = assert(swarm.plan("s1", opts { egress_policy = pol }, FIXED))
    local d = assert(sandstack.docker.plan("s1", opts { egress_policy = pol }, FIXED))
    local function policy_env(env)
      for _, e in ipairs(env or {}) do
        local v = e:match("^SANDSTACK_EGRESS_POLICY=(.*)$")
        if v then return v end
      end
    end
    local svc = by_name(s.services, "service").proxy
    local want = policy_env(core.json_decode(by_name(d.containers, "service").proxy.body_json).Env)
    assert.equal(want, policy_env(B(svc).TaskTemplate.ContainerSpec.Env))
    assert.truthy(want:find('"allow_private":["10.0.0.7","10.0.0.8:5000"]', 1, true), want)
    local bad = opts { egress_policy = { allow = { "registry.test" }, allow_private = { "10.0.0.0/8" } } }
    local _, serr = swarm.plan("s1", bad, FIXED)
    local _, derr = sandstack.docker.plan("s1", bad, FIXED)
    assert.truthy(serr)
    assert.equal(tostring(derr), tostring(serr))
    assert.matches("allow_private 1 ('10.0.0.0/8'): name one address", tostring(serr), 1, true)
  end)

  it("gives the credentials to the proxy's service alone, the CA volume shared on the node", function()
    local GH = "ghp_" .. ("g"):rep(36)
    local s = assert(swarm.plan("s1", opts { credentials = { { name = "GH_TOKEN", host = "gh.test",
      header = "Authorization", format = "Bearer %s", secret = GH } }, egress_policy = { allow = { "gh.test" } } }, FIXED))
    local by = by_name(s.services, "service")
    local function env(svc) return table.concat(B(by[svc]).TaskTemplate.ContainerSpec.Env or {}, "\n") end
    -- the shown plan marks the secret's place in the proxy's credentials (the start puts it
    -- there); no service's body shows the secret itself
    assert.truthy(env("proxy"):find("SANDSTACK_CREDENTIALS=", 1, true), "the proxy's service has the credentials")
    assert.truthy(env("proxy"):find("(secret not shown)", 1, true), "the proxy's service has the secret's place")
    for svc in pairs(by) do assert.is_nil(env(svc):find(GH, 1, true), svc .. " shows the secret") end
    for svc in pairs(by) do
      if svc ~= "proxy" then assert.is_nil(env(svc):find("SANDSTACK_CREDENTIALS", 1, true), svc) end
    end
    assert.matches("GH_TOKEN=%w+", env("sandbox"))
    local function ca(svc)
      for _, m in ipairs(B(by[svc]).TaskTemplate.ContainerSpec.Mounts or {}) do
        if m.Source == "sandstack-s1-ca" then return m end
      end
    end
    assert.same({ false, true }, { ca("proxy").ReadOnly, ca("sandbox").ReadOnly })
    assert.equal("tmpfs", ca("proxy").VolumeOptions.DriverConfig.Options.type)
  end)

  it("keeps the credentials' placeholders and the added proxy in the handle and its record, no secret", function()
    local handle = require "sandstack.swarm.handle"
    local plan = assert(sandstack.docker.plan("s1", opts { credentials = { { name = "GH_TOKEN", host = "gh.test",
      header = "Authorization", format = "Bearer %s", secret = "ghp_" .. ("g"):rep(36) } },
      egress_policy = { allow = { "gh.test" } } }, FIXED))
    local st = handle.new({ close = function() end }, { close = function() end }, { hostname = "n1", id = "x" }, plan)
    local ph = st:credentials().GH_TOKEN
    assert.equal(40, #ph)
    local rec = st:record()
    assert.is_nil(core.json_encode(rec):find(("g"):rep(36), 1, true))
    assert.same({ service = "proxy", added = true }, rec.proxy)
    local again = handle.new({ close = function() end }, { close = function() end }, { hostname = "n1", id = "x" }, rec)
    assert.same(st:credentials(), again:credentials())
    for _, m in ipairs { "set_egress", "egress", "set_credentials", "set_model_key" } do
      assert.is_function(handle.Stack[m], m)
    end
    st:close()
    assert.error_matches(function() st:set_egress { allow = {} } end, "^.-the stack handle is closed: make a new one with sandstack.swarm.reconnect$")
  end)

  it("checks its own options: a wrong type raises, a refused value is compose/invalid_option", function()
    assert.has_error(function() swarm.plan("s1", opts { constraints = "node.role==worker" }) end)
    for option, value in pairs { constraints = { "node.role worker" }, placement_timeout = -1 } do
      local plan, err = swarm.plan("s1", opts { [option] = value })
      assert.is_nil(plan)
      assert.same({ "compose", "invalid_option", option }, { err.kind, err.reason, err.option })
    end
    local s = assert(swarm.plan("s1", opts { constraints = { "node.labels.sandstack==yes" } }))
    assert.same({ "node.labels.sandstack==yes" }, B(s.services[1]).TaskTemplate.Placement.Constraints)
  end)
end)

describe("sandstack.swarm start (a scripted swarm)", function()
  local scripted = require "spec.support.scripted_engine"
  local function start(sw, extra)
    local undo = scripted.install(sw)
    local o = opts { docker_host = "tcp://manager.scripted:2376" }
    for k, v in pairs(extra or {}) do o[k] = v end
    local events = {}
    o.on_event = function(e) events[#events + 1] = e.phase end
    local ok, st, err = pcall(swarm.start, "s1", o)
    undo()
    assert(ok, st)
    return st, err, events
  end
  local function sent(sw, method, path)
    local out = {}
    for _, l in ipairs(sw.log) do
      if l.method == method and l.path:find(path, 1, true) == 1 then out[#out + 1] = l end
    end
    return out
  end

  it("sends the C plan's creates as they are: the first service free, the others pinned to its node", function()
    local sw = scripted.swarm()
    local st, err, events = start(sw)
    assert.is_nil(err)
    local last = #events -- after "ready", only the names Swarm gives once it has seen a task healthy
    while events[last] == "named" do last = last - 1 end
    assert.equal("ready", events[last])
    local shape = assert(swarm.plan("s1", opts()))
    local creates = sent(sw, "POST", "/services/create")
    assert.equal(#shape.services, #creates)
    local run = core.json_decode(creates[1].body_json).Labels["io.sandstack.run"]
    for i, c in ipairs(creates) do
      local body = core.json_decode(c.body_json)
      assert.equal(shape.services[i].name, body.Name)
      assert.equal(run, body.Labels["io.sandstack.run"]) -- one start's plan: the pinned ones planned again
      local cons = body.TaskTemplate.Placement.Constraints
      if i == 1 then
        assert.is_nil(cons)
        assert.truthy(body.TaskTemplate.Resources.Reservations)
      else
        assert.same({ "node.id==node1" }, cons)
      end
    end
    local on = { manager = 0, node = 0 }
    for _, l in ipairs(sent(sw, "POST", "/networks/create")) do
      local where = l.host == "tcp://n1.scripted:2376" and "node" or "manager"
      on[where] = on[where] + 1
    end
    assert.same({ manager = #shape.overlays, node = 1 }, on) -- the overlays; the forwarder's publish network
    for _, l in ipairs(sent(sw, "POST", "/containers/create")) do assert.equal("tcp://n1.scripted:2376", l.host) end
    st:close()
  end)

  it("removes what it made when a task fails, and says which service", function()
    local sw = scripted.swarm { fail = "db" }
    local st, err, events = start(sw)
    assert.is_nil(st)
    assert.equal("exited", err.kind)
    assert.equal("db", err.service)
    assert.equal(3, err.exit_code)
    assert.equal("rolled_back", events[#events])
    local made = #sent(sw, "POST", "/services/create")
    assert.truthy(made >= 1)
    assert.equal(made, #sent(sw, "DELETE", "/services/"))
    assert.equal(2, #sent(sw, "DELETE", "/networks/"))
  end)

  it("ends a req_adapter's readiness wait when a task ends meanwhile, by the swarm's task check", function()
    local sw = scripted.swarm()
    local adapter = function() sw.fail = "sandbox"; return { status = 503 } end -- the sandbox's task ends now
    local t0 = core.engine_clock()
    local st, err, events = start(sw, { ready_timeout = 20, req_adapter = adapter })
    assert.is_nil(st)
    assert.equal("exited", err.kind, tostring(err and err.message))
    assert.equal("sandbox", err.service)
    assert.equal("rolled_back", events[#events])
    assert.is_true(core.engine_clock() - t0 < 5) -- seen at the first exit check, not at ready_timeout
  end)
end)

describe("sandstack.swarm list and reap options", function()
  it("takes sandstack.docker's list and reap options, less the warm pool's, and refuses the same others", function()
    for _, case in ipairs { { "list", { api_version = "1.41" } }, { "reap", { api_version = "1.41" } },
      { "list", { pool = "p" } }, { "reap", { idle_only = true } } } do
      local fn, o = swarm[case[1]], case[2]
      assert.has_error(function() fn(o) end, nil, case[1] .. " " .. next(o))
      if not o.pool and not o.idle_only then
        assert.has_error(function() sandstack.docker[case[1]](o) end) -- docker refuses it too
      end
    end
  end)

  it("refuses a reap with no filter before it reaches any engine, as docker's reap does", function()
    -- an engine address nothing answers on: the refusal must come first
    local removed, err = swarm.reap { docker_host = "unix:///nonexistent/sandstack-test.sock" }
    assert.is_nil(removed)
    assert.are.equal("invalid", err.kind)
    assert.are.equal("filter_required", err.reason)
    assert.has_error(function() swarm.reap { all = "yes" } end)
  end)
end)

describe("sandstack.swarm's boundary", function()
  it("names operations in Lua; the C core makes every Engine path", function()
    local found = {}
    for f in io.popen("ls lua/sandstack/swarm/*.lua"):lines() do
      local text = assert(io.open(f)):read("a")
      for lit in text:gmatch('"(/[%w_]+)') do
        if lit:match("^/services") or lit:match("^/tasks") or lit:match("^/nodes") or lit:match("^/containers")
          or lit:match("^/networks") or lit:match("^/volumes") or lit:match("^/exec") or lit:match("^/info") then
          found[#found + 1] = f .. ": " .. lit
        end
      end
    end
    assert.same({}, found)
    -- the bodies come finished from C: the start and the plan decode and encode none of them
    for _, f in ipairs { "lua/sandstack/swarm/spec.lua", "lua/sandstack/swarm/start.lua",
      "lua/sandstack/swarm/start_tasks.lua" } do
      local text = assert(io.open(f)):read("a")
      assert.is_nil(text:find("json_decode", 1, true), f)
      assert.is_nil(text:find("json_encode", 1, true), f)
      assert.is_nil(text:find("body =", 1, true), f)
    end
    local R = core.session_requests
    assert.same({ { method = "GET", path = "/tasks", query = { filters = '{"service":["a","b"]}' } } },
      R("list_tasks", nil, { services = { "a", "b" } }))
    assert.same({ { method = "DELETE", path = "/services/s1", ok = { 404 } } }, R("remove_service", { "s1" }))
    local c = R("create_service", nil, { body = { Name = "x" } })[1]
    assert.same({ "POST", "/services/create", { Name = "x" } }, { c.method, c.path, core.json_decode(c.body_json) })
    assert.has_error(function() R("create_network", nil, {}) end)
    assert.has_error(function() R("list_tasks", nil, {}) end)
  end)
end)

describe("sandstack.swarm readiness probe argv", function()
  it("reads exactly the request back from socat's own command line", function()
    local argv = ready.argv("sandbox", 8080, "/health", 3)
    assert.equal("socat", argv[1])
    -- what /proc/self/cmdline holds: the argv, each followed by a NUL
    local cmdline = table.concat(argv, "\0") .. "\0"
    local seek, n = argv[5]:match("seek=(%d+),readbytes=(%d+)!!STDOUT$")
    local sent = cmdline:sub(tonumber(seek) + 1, tonumber(seek) + tonumber(n))
    assert.equal("GET /health HTTP/1.0\r\nHost: sandbox\r\nConnection: close\r\n\r\n", sent)
    assert.matches("^TCP:sandbox:8080,connect%-timeout=3,readbytes=%d+$", argv[6])
  end)

  it("parses a status line and nothing else", function()
    assert.equal(200, ready.status("HTTP/1.1 200 OK\r\n"))
    assert.equal(302, ready.status("HTTP/1.0 302 Found\r\nLocation: x"))
    assert.is_nil(ready.status("garbage HTTP/1.1 200 OK"))
    assert.is_nil(ready.status(""))
  end)

  it("refuses a ready_path that would inject into the request", function()
    assert.has_error(function() ready.argv("sandbox", 8080, "/x HTTP/1.0\r\nEvil: 1", 1) end)
    assert.has_error(function() ready.argv("sandbox", 8080, "health", 1) end)
  end)
end)

describe("sandstack.swarm conform helpers", function()
  it("reads a node's local addresses from /proc/net/fib_trie, loopback and broadcasts left out", function()
    local conform = require "sandstack.swarm.conform"
    local fib = table.concat({
      "Main:", "  +-- 0.0.0.0/0 3 0 5", "     +-- 127.0.0.0/8 2 0 2", "        |-- 127.0.0.1",
      "           /32 host LOCAL", "     +-- 172.17.0.0/16 2 0 2", "        |-- 172.17.0.0", "           /16 link UNICAST",
      "        |-- 172.17.0.1", "           /32 host LOCAL", "        |-- 172.17.255.255", "           /32 link BROADCAST",
      "     |-- 192.168.16.2", "        /32 host LOCAL",
      "Local:", "        |-- 172.17.0.1", "           /32 host LOCAL",
    }, "\n")
    assert.same({ "172.17.0.1", "192.168.16.2" }, conform.local_addresses(fib))
    -- this machine's own table, read the same way, holds at least one address
    local f = io.open("/proc/net/fib_trie")
    if f then
      local mine = conform.local_addresses(f:read("*a"))
      f:close()
      assert.truthy(#mine >= 1)
    end
  end)
end)
