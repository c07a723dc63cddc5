-- sandstack.swarm without a cluster (issue 27): the Swarm bodies are the docker plan re-expressed,
-- never a second plan. For the same options, run label, clock and token, every service carries
-- the docker container's own image, command, env, labels, limits and healthcheck; the forwarder
-- and its publish network are the docker plan's bodies byte for byte; whatever Swarm cannot
-- express is refused by name. The readiness probe's argv is checked against the bytes it sends.
local sandstack = require "sandstack"
local core = sandstack.core
local swarm = require "sandstack.swarm"
local spec = require "sandstack.swarm.spec"
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
      local cs = s.body.TaskTemplate.ContainerSpec
      assert.equal(c.Image, cs.Image)
      assert.same(c.Entrypoint, cs.Command)
      assert.same(c.Cmd, cs.Args)
      assert.same(c.Env and #c.Env > 0 and c.Env or nil, cs.Env)
      assert.same(c.Labels, cs.Labels)
      assert.same(c.Labels, s.body.Labels)
      assert.same(c.Healthcheck, cs.HealthCheck)
      assert.same(c.HostConfig.CapDrop, cs.CapabilityDrop)
      assert.equal(c.Name, nil)
      assert.equal(containers[s.service].name, s.body.Name)
      local lim = s.body.TaskTemplate.Resources.Limits
      assert.equal(c.HostConfig.NanoCpus, lim.NanoCPUs)
      assert.equal(c.HostConfig.Memory, lim.MemoryBytes)
      assert.equal(c.HostConfig.PidsLimit, lim.Pids)
      assert.same({ NoNewPrivileges = true }, cs.Privileges)
      assert.equal("dnsrr", s.body.EndpointSpec.Mode)
      assert.same({ Condition = "none", MaxAttempts = 0 }, s.body.TaskTemplate.RestartPolicy)
      assert.same({ Replicated = { Replicas = 1 } }, s.body.Mode)
      assert.same(c.HostConfig.Dns and { Nameservers = c.HostConfig.Dns } or nil, cs.DNSConfig)
    end
    -- the session token reached the services exactly as the docker plan put it
    local sb = by_name(shape.services, "service").sandbox.body.TaskTemplate.ContainerSpec
    local found = false
    for _, e in ipairs(sb.Env) do if e == "ANTHROPIC_API_KEY=" .. FIXED.token then found = true end end
    assert.is_true(found)
  end)

  it("puts the whole session's reservation on the first service Swarm places, and none on the others", function()
    local n = #dplan.containers -- the forwarder counts: it runs on the node Swarm chose
    assert.same({ NanoCPUs = n * 0.5e9, MemoryBytes = n * 256 * 2 ^ 20 }, shape.reservation)
    assert.same(shape.reservation, shape.services[1].body.TaskTemplate.Resources.Reservations)
    for i = 2, #shape.services do
      assert.is_nil(shape.services[i].body.TaskTemplate.Resources.Reservations)
      assert.is_nil(shape.services[i].body.TaskTemplate.Placement.Constraints)
    end
    local pinned = spec.pin(shape.services[2].body, "node-abc")
    assert.same({ "node.id==node-abc" }, pinned.TaskTemplate.Placement.Constraints)
  end)

  it("makes the sandbox network an internal attachable overlay and the egress network a plain one", function()
    local nets = by_name(shape.overlays, "key")
    assert.same({ "egress", "sbx" }, (function()
      local k = {}
      for key in pairs(nets) do k[#k + 1] = key end
      table.sort(k)
      return k
    end)())
    assert.equal("overlay", nets.sbx.body.Driver)
    assert.is_true(nets.sbx.body.Internal)
    assert.is_true(nets.sbx.body.Attachable)
    assert.is_false(nets.egress.body.Internal)
    assert.is_false(nets.egress.body.Attachable)
    assert.is_nil(nets.sbx.body.Options) -- no bridge option leaks into an overlay
  end)

  it("attaches the sandbox to its overlay only, and egress sidecars to both, under their names", function()
    local s = by_name(shape.services, "service")
    assert.same({ { Target = "sandstack-s1-sbx", Aliases = { "sandbox" } } }, s.sandbox.body.TaskTemplate.Networks)
    assert.same({ { Target = "sandstack-s1-sbx", Aliases = { "db" } } }, s.db.body.TaskTemplate.Networks)
    assert.same({ { Target = "sandstack-s1-sbx", Aliases = { "web" } }, { Target = "sandstack-s1-egress" } },
      s.web.body.TaskTemplate.Networks)
    assert.same({ "10.0.0.1 a.test" }, s.web.body.TaskTemplate.ContainerSpec.Hosts)
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
    local mounts = s.sandbox.body.TaskTemplate.ContainerSpec.Mounts
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
    assert.is_nil(loose.services[1].body.TaskTemplate.ContainerSpec.Privileges)
    assert.is_nil(loose.services[1].body.TaskTemplate.ContainerSpec.CapabilityDrop)
  end)

  it("gives the credentials to the proxy's service alone, the CA volume shared on the node", function()
    local GH = "ghp_" .. ("g"):rep(36)
    local s = assert(swarm.plan("s1", opts { credentials = { { name = "GH_TOKEN", host = "gh.test",
      header = "Authorization", format = "Bearer %s", secret = GH } }, egress_policy = { allow = { "gh.test" } } }, FIXED))
    local by = by_name(s.services, "service")
    local function env(svc) return table.concat(by[svc].body.TaskTemplate.ContainerSpec.Env or {}, "\n") end
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
      for _, m in ipairs(by[svc].body.TaskTemplate.ContainerSpec.Mounts or {}) do
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
    assert.has_error(function() st:set_egress { allow = {} } end, "the stack handle is closed")
  end)

  it("checks its own option shapes as programming errors", function()
    assert.has_error(function() swarm.plan("s1", opts { constraints = "node.role==worker" }) end)
    assert.has_error(function() swarm.plan("s1", opts { constraints = { "node.role worker" } }) end)
    assert.has_error(function() swarm.plan("s1", opts { placement_timeout = -1 }) end)
    local s = assert(swarm.plan("s1", opts { constraints = { "node.labels.sandstack==yes" } }))
    assert.same({ "node.labels.sandstack==yes" }, s.services[1].body.TaskTemplate.Placement.Constraints)
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
