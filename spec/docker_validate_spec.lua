-- sandstack.docker without an engine: every spec error of API.md, returned before any Engine
-- call, and the plan (networks, hardening, credentials, order) as plain data.
local core = require "sandstack.core"

local function opts(extra)
  local o = { agent_port = 8080, image = "sandstack-test/agent:local" }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

-- The plan through the model, as start makes it; each finished body is also decoded into .body
-- so the posture can be read as data (the engine receives body_json, the text).
local function decode_bodies(p)
  for _, list in ipairs { p.networks, p.volumes, p.containers } do
    for _, o in ipairs(list) do
      o.body = assert(core.json_decode(o.body_json))
      for _, cn in ipairs(o.connects or {}) do cn.body = assert(core.json_decode(cn.body_json)) end
    end
  end
  return p
end

local function plan(o, ctx)
  ctx = ctx or {}
  local model, err = core.stack_model(o, ctx.session_key or "unit", { now = ctx.now, token = ctx.token })
  if not model then return nil, err end
  local p; p, err = model:plan { api_version = ctx.api_version, pool = ctx.pool }
  model:close()
  if not p then return nil, err end
  return decode_bodies(p)
end

local function validate(o, key)
  local model, err = core.stack_model(o, key)
  if not model then return nil, err end
  model:close()
  return true
end

local function refuse(o, reason)
  local p, err = plan(o)
  assert.is_nil(p)
  assert.equal("compose", err.kind)
  assert.equal(reason, err.reason)
  return err
end

local function by_service(p, name)
  for _, c in ipairs(p.containers) do if c.service == name then return c end end
end

local function env_map(c)
  local m = {}
  for _, e in ipairs(c.body.Env or {}) do
    local k, v = e:match("^([^=]+)=(.*)$")
    assert.is_nil(m[k], "duplicate env " .. k)
    m[k] = v
  end
  return m
end

describe("sandstack.docker validation (no engine)", function()
  it("refuses a sidecar without egress, naming it", function()
    local err = refuse(opts { services = { { name = "db", image = "x" } } }, "egress_required")
    assert.equal("db", err.service)
  end)

  it("refuses egress = allow on the sandbox", function()
    refuse(opts { services = { { name = "sandbox", image = "x", egress = "allow" } } }, "sandbox_egress_forbidden")
    refuse(opts { sandbox_service = "agent", services = { { name = "agent", image = "x", egress = "allow" } } },
      "sandbox_egress_forbidden")
  end)

  it("requires the proxy to have egress", function()
    local err = refuse(opts { proxy_service = "px", services = { { name = "px", image = "x", egress = "none", port = 1 } } },
      "proxy_needs_egress")
    assert.equal("px", err.service)
  end)

  it("refuses duplicate services, including the forwarder's name", function()
    refuse(opts { services = { { name = "a", image = "x", egress = "none" }, { name = "a", image = "y", egress = "none" } } },
      "duplicate_service")
    local err = refuse(opts { services = { { name = "forwarder", image = "x", egress = "none" } } }, "duplicate_service")
    assert.equal("forwarder", err.service)
    refuse(opts { sandbox_service = "fw", forwarder_service = "fw" }, "duplicate_service")
  end)

  it("refuses names that are not DNS-safe", function()
    for _, bad in ipairs { "Db", "db_1", "-db", "db-", "", string.rep("a", 64), "a.b" } do
      refuse(opts { services = { { name = bad, image = "x", egress = "none" } } }, "invalid_name")
    end
    refuse(opts { project_name = "bad name" }, "invalid_name")
    refuse(opts { project_name = string.rep("p", 65) }, "invalid_name")
    refuse(opts { sandbox_service = "Sandbox" }, "invalid_name")
    refuse(opts { volumes = { { name = "a/b" } } }, "invalid_name")
    local p, err = plan(opts(), { session_key = "has space" })
    assert.is_nil(p)
    assert.equal("invalid_name", err.reason)
  end)

  it("refuses unknown dependencies and cycles", function()
    local err = refuse(opts { services = { { name = "a", image = "x", egress = "none", depends_on = { "b" } } } },
      "unknown_dependency")
    assert.equal("a", err.service)
    assert.equal("b", err.dependency)
    err = refuse(opts { services = {
      { name = "a", image = "x", egress = "none", depends_on = { "b" } },
      { name = "b", image = "x", egress = "none", depends_on = { "c" } },
      { name = "c", image = "x", egress = "none", depends_on = { "a" } },
      { name = "d", image = "x", egress = "none" },
    } }, "dependency_cycle")
    table.sort(err.services)
    assert.same({ "a", "b", "c" }, err.services)
    refuse(opts { services = { { name = "a", image = "x", egress = "none", depends_on = { "a" } } } }, "dependency_cycle")
    -- the forwarder is not a service one can depend on
    refuse(opts { services = { { name = "a", image = "x", egress = "none", depends_on = { "forwarder" } } } },
      "unknown_dependency")
  end)

  it("refuses an unknown proxy service", function()
    local err = refuse(opts { proxy_service = "nope" }, "unknown_proxy_service")
    assert.equal("nope", err.service)
    refuse(opts { proxy_service = "sandbox" }, "unknown_proxy_service")
  end)

  it("refuses a stack without a sandbox image, or a sidecar without one", function()
    local err = refuse({ agent_port = 1 }, "missing_image")
    assert.equal("sandbox", err.service)
    err = refuse(opts { services = { { name = "db", egress = "none" } } }, "missing_image")
    assert.equal("db", err.service)
    -- the sandbox spec may carry the image instead of `image`
    assert.truthy(plan { agent_port = 1, services = { { name = "sandbox", image = "x" } } })
  end)

  it("refuses invalid option values, naming the option", function()
    local cases = {
      { {}, "agent_port", true },
      { { agent_port = 0 }, "agent_port", true },
      { { agent_port = 70000 }, "agent_port", true },
      { { pull = "sometimes" }, "pull" },
      { { ready_timeout = -1 }, "ready_timeout" },
      { { health_timeout = 0 }, "health_timeout" },
      { { ready_path = "health" }, "ready_path" },
      { { capture_path = "rel/x" }, "capture_path" },
      { { memory = "lots" }, "memory" },
      { { memory = "1k" }, "memory" },
      { { cpus = 0 }, "cpus" },
      { { pids_limit = 1.5 }, "pids_limit" },
      { { tmpfs = { ["tmp"] = "rw" } }, "tmpfs" },
      { { subnet_pool = "10.0.0.0/29" }, "subnet_pool" },
      { { subnet_pool = "nonsense" }, "subnet_pool" },
      { { ready = { nosuch = { test = "true" } } }, "ready.nosuch" },
      { { ready = { sandbox = {} } }, "ready.sandbox.test" },
      { { ready = { sandbox = { test = "true", interval = 0 } } }, "ready.sandbox.interval" },
      { { ready = { sandbox = { log = "" } } }, "ready.sandbox.log" },
      { { ready = { sandbox = { log = ("x"):rep(1025) } } }, "ready.sandbox.log" },
      { { ready = { sandbox = { times = 2 } } }, "ready.sandbox.times" },
      { { ready = { sandbox = { log = "up", times = 0 } } }, "ready.sandbox.times" },
      { { ready = { sandbox = { port = 70000 } } }, "ready.sandbox.port" },
      { { ready = { sandbox = { port = 8080, interval = 1 } } }, "ready.sandbox.interval" },
      { { ready_path = "" }, "ready_path" },
      { { ports = { 0 } }, "ports[1]" },
      { { ports = { { port = 70000 } } }, "ports[1].port" },
      { { services = { { name = "db", image = "x", egress = "maybe" } } }, "services.db.egress" },
      { { services = { { name = "db", image = "x", egress = "none", port = 0 } } }, "services.db.port" },
      { { services = { { name = "db", image = "x", egress = "none", volumes = { { name = "undeclared", target = "/x" } } } } },
        "services.db.volumes" },
      { { volumes = { { name = "w" } }, services = { { name = "db", image = "x", egress = "none",
        volumes = { { name = "w", target = "relative" } } } } }, "services.db.volumes" },
      { { volumes = { { name = "w" }, { name = "w" } } }, "volumes" },
      { { user = "1000", services = { { name = "db", image = "x", egress = "none", user = "0" } } }, "services.db.user" },
      { { proxy_service = "px", services = { { name = "px", image = "x", egress = "allow" } } }, "services.px.port" },
    }
    for _, case in ipairs(cases) do
      local o = case[3] and { image = "x" } or opts()
      for k, v in pairs(case[1]) do o[k] = v end
      local p, err = plan(o)
      assert.is_nil(p, case[2])
      assert.equal("compose", err.kind)
      assert.equal("invalid_option", err.reason, case[2] .. ": " .. tostring(err))
      assert.equal(case[2], err.option)
    end
    -- a value of the wrong type is a programming error: it raises, naming the option
    local mistyped = {
      { { agent_port = "80" }, "agent_port", true }, { { cap_drop = "ALL" }, "cap_drop" },
      { { readonly_rootfs = "yes" }, "readonly_rootfs" }, { { network = { internal = "false" } }, "network.internal" },
      { { network = { internal = 0 } }, "network.internal" }, { { network = { options = { x = 1 } } }, "network.options" },
      { { services = "db" }, "services" },
      { { ready = { sandbox = { log = 5 } } }, "ready.sandbox.log" },
      { { ready = { sandbox = { log = "up", times = "2" } } }, "ready.sandbox.times" },
      { { ready = { sandbox = { port = "8080" } } }, "ready.sandbox.port" },
      { { ready = { sandbox = { test = { "CMD", 1 } } } }, "ready.sandbox.test" },
      { { ready_path = true }, "ready_path" },
      { { ports = 8080 }, "ports" }, { { ports = { "x" } }, "ports[1]" },
      { { ports = { { port = 1, host_port = "2" } } }, "ports[1].host_port" },
      { { services = { { name = "db", image = "x", egress = "none", env = { A = true } } } }, "services.db.env" },
    }
    for _, case in ipairs(mistyped) do
      local o = case[3] and { image = "x" } or opts()
      for k, v in pairs(case[1]) do o[k] = v end
      local ok, msg = pcall(plan, o)
      assert.is_false(ok, case[2])
      assert.matches("option '" .. case[2] .. "' must be", msg, 1, true)
    end
  end)

  it("says what a value of the wrong type was, never quoting a secret", function()
    local raised = {
      { { agent_port = "8080" }, 'agent_port\' must be a port number, got string "8080"' },
      { { agent_port = true }, "agent_port' must be a port number, got boolean true" },
      { { ready_timeout = "60" }, 'ready_timeout\' must be a number of seconds, got string "60"' },
      { { ready_path = 5 }, "ready_path' must be a path starting with '/', or false, got number 5" },
      { { readonly_rootfs = "yes" }, 'readonly_rootfs\' must be true or false, got string "yes"' },
      { { services = { { name = "db", image = "x", egress = "none", port = "5432" } } },
        'services.db.port\' must be a port number, got string "5432"' },
      { { api_key = 12345678901234567 }, "api_key' must be a string, got a number" },
    }
    for _, case in ipairs(raised) do
      local o = opts()
      for k, v in pairs(case[1]) do o[k] = v end
      local ok, msg = pcall(plan, o)
      assert.is_false(ok, case[2])
      assert.matches(case[2], msg, 1, true)
    end
    local p, err = plan(opts { agent_port = 70000 }) -- a number out of range: refused, saying what it was
    assert.is_nil(p)
    assert.matches("agent_port must be a number 1-65535, got number 70000", err.message, 1, true)
    p, err = plan { image = "x" }
    assert.matches("agent_port is required", err.message, 1, true)
  end)

  it("names the rule and the key of a policy refusal, with the nearest known key", function()
    local o = opts { egress_policy = { allow = { "a.example", { host = "b.example", methodz = { "GET" } } } } }
    local p, err = plan(o)
    assert.is_nil(p)
    assert.matches("rule 2: unknown key 'methodz' (did you mean 'methods'?)", err.message, 1, true)
    p, err = plan(opts { egress_policy = { allow = { { host = "b.example", port = 0 } } } })
    assert.is_nil(p)
    assert.matches("rule 1: 'port' must be", err.message, 1, true)
  end)

  it("raises on an unknown option key, at any level, with the nearest known one", function()
    assert.has_error(function() plan(opts { agent_prot = 1 }) end,
      "sandstack.docker.start: unknown option 'agent_prot' (did you mean 'agent_port'?)")
    assert.has_error(function() plan(opts { zzzzzz = 1 }) end, "sandstack.docker.start: unknown option 'zzzzzz'")
    local ok, e = pcall(plan, opts { services = { { name = "db", image = "x", egress = "none", envv = {} } } })
    assert.is_false(ok)
    assert.matches("did you mean 'env'?", tostring(e), 1, true)
    ok, e = pcall(require("sandstack").docker.reap, { older_tahn = 1 })
    assert.is_false(ok)
    assert.matches("unknown option 'older_tahn' (did you mean 'older_than'?)", tostring(e), 1, true)
    assert.has_error(function() plan(opts { services = { { name = "db", image = "x", egress = "none", envv = {} } } }) end)
    assert.has_error(function() plan(opts { network = { internl = true } }) end)
    assert.has_error(function() plan(opts { ready = { sandbox = { test = "true", intervall = 1 } } }) end)
    assert.has_error(function() validate("not a table", "k") end)
  end)

  it("validates once into a model and accepts JSON text", function()
    assert.is_true(validate(opts(), "k"))
    local ok, err = validate('{"agent_port":1}', "k")
    assert.is_nil(ok)
    assert.equal("missing_image", err.reason)
  end)
end)

describe("sandstack.docker plan (no engine)", function()
  local function full()
    return opts {
      api_key = "sk-real-key",
      memory = "256m", cpus = 0.5, cap_drop = { "ALL" }, security_opt = { "no-new-privileges" },
      pids_limit = 64, user = "1000:1000", readonly_rootfs = true, tmpfs = { "/tmp" },
      volumes = { { name = "ws" } },
      services = {
        { name = "db", image = "sandstack-test/base:local", egress = "none", volumes = { { name = "ws", target = "/data" } } },
        { name = "proxy", image = "sandstack-test/agent:local", egress = "allow", port = 3128, depends_on = { "db" },
          env = { LOG = "info" } },
        { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" },
          env = { ANTHROPIC_API_KEY = "sk-sneaked-in" }, depends_on = { "proxy" } },
      },
      proxy_service = "proxy",
      ready = { db = { test = { "agent", "connect", "127.0.0.1", "1" }, interval = 0.5, timeout = 2, retries = 3, start_period = 1 } },
    }
  end

  it("builds the three networks with the isolation options", function()
    local p = assert(plan(full()))
    local nets = {}
    for _, n in ipairs(p.networks) do nets[n.key] = n end
    assert.equal("sandstack-unit-sbx", nets.sbx.name)
    assert.is_true(nets.sbx.body.Internal)
    assert.equal("true", nets.sbx.body.Options["com.docker.network.bridge.inhibit_ipv4"])
    assert.is_nil(nets.sbx.body.Options["com.docker.network.bridge.gateway_mode_ipv4"])
    assert.is_false(nets.pub.body.Internal)
    assert.equal("false", nets.pub.body.Options["com.docker.network.bridge.enable_ip_masquerade"])
    assert.is_false(nets.egress.body.Internal)
    assert.is_true(nets.sbx.body.CheckDuplicate)
    for _, n in pairs(nets) do
      assert.equal("sandstack-unit", n.body.Labels["io.sandstack.project"])
      assert.equal("unit", n.body.Labels["io.sandstack.session"])
      assert.truthy(n.body.Labels["io.sandstack.version"])
      assert.truthy(n.body.Labels["io.sandstack.created"])
    end
  end)

  it("turns IPv6 off on every network, and IPv4 on explicitly where the API has EnableIPv4 (1.48+)", function()
    for _, api in ipairs({ "1.41", "1.47", "1.48", "1.51" }) do
      local p = assert(plan(full(), { api_version = api }))
      for _, n in ipairs(p.networks) do
        assert.is_false(n.body.EnableIPv6, api .. " " .. n.key)
        if api == "1.48" or api == "1.51" then assert.is_true(n.body.EnableIPv4) else assert.is_nil(n.body.EnableIPv4) end
      end
    end
  end)

  it("names an unroutable DNS server for the internal network's containers only", function()
    local p = assert(plan(full()))
    local seen = 0
    for _, c in ipairs(p.containers) do
      local dns = c.body.HostConfig.Dns
      if c.egress or c.service == "forwarder" then
        assert.is_nil(dns, c.service)
      else
        seen = seen + 1
        assert.same({ "203.0.113.53" }, dns, c.service)
      end
    end
    assert.equal(2, seen) -- the sandbox and the egress = "none" sidecar
    -- a sandbox network the user opened to the internet keeps the engine's resolvers
    p = assert(plan(opts { network = { internal = false } }))
    for _, c in ipairs(p.containers) do assert.is_nil(c.body.HostConfig.Dns, c.service) end
  end)

  it("creates no egress network when no sidecar asks for one", function()
    local p = assert(plan(opts { services = { { name = "db", image = "x", egress = "none" } } }))
    assert.equal(2, #p.networks)
  end)

  it("uses the Engine 28 gateway mode only from API 1.48, and create-time dual attach from 1.44", function()
    local p = assert(plan(opts(), { api_version = "1.48" }))
    assert.equal("isolated", p.networks[1].body.Options["com.docker.network.bridge.gateway_mode_ipv4"])
    assert.equal("true", p.networks[1].body.Options["com.docker.network.bridge.inhibit_ipv4"])
    assert.is_nil(p.networks[1].body.CheckDuplicate)
    local fw = by_service(p, "forwarder")
    assert.same({}, fw.connects)
    local eps = fw.body.NetworkingConfig.EndpointsConfig
    assert.truthy(eps["sandstack-unit-pub"])
    assert.same({ "forwarder" }, eps["sandstack-unit-sbx"].Aliases)
    p = assert(plan(opts(), { api_version = "1.47" }))
    assert.is_nil(p.networks[1].body.Options["com.docker.network.bridge.gateway_mode_ipv4"])
  end)

  it("user network options cannot remove the host-address block", function()
    local p = assert(plan(opts { network = { options = { ["com.docker.network.bridge.inhibit_ipv4"] = "false", ["x.y"] = "z" } } }))
    assert.equal("true", p.networks[1].body.Options["com.docker.network.bridge.inhibit_ipv4"])
    assert.equal("z", p.networks[1].body.Options["x.y"])
  end)

  it("gives the sandbox the internet only when internal = false is typed out", function()
    local p = assert(plan(opts { network = { internal = false } }))
    assert.is_false(p.networks[1].body.Internal)
    assert.is_nil(p.networks[1].body.Options["com.docker.network.bridge.inhibit_ipv4"])
    p = assert(plan(opts { network = { internal = true } }))
    assert.is_true(p.networks[1].body.Internal)
  end)

  it("puts the sandbox only on -sbx and the forwarder on -pub then -sbx (connect before start below 1.44)", function()
    local p = assert(plan(full()))
    local sb = by_service(p, "sandbox")
    assert.equal("sandstack-unit-sbx", sb.body.HostConfig.NetworkMode)
    assert.same({ ["sandstack-unit-sbx"] = { Aliases = { "sandbox" } } }, sb.body.NetworkingConfig.EndpointsConfig)
    assert.same({}, sb.connects)
    assert.is_nil(sb.body.HostConfig.PortBindings)
    local px = by_service(p, "proxy")
    assert.equal(1, #px.connects)
    assert.equal("sandstack-unit-egress", px.connects[1].network)
    local db = by_service(p, "db")
    assert.same({}, db.connects)
    local fw = by_service(p, "forwarder")
    assert.equal("sandstack-unit-pub", fw.body.HostConfig.NetworkMode)
    assert.equal(1, #fw.connects)
    local cn = fw.connects[1]
    assert.equal("sandstack-unit-sbx", cn.network)
    assert.equal("POST", cn.method)
    assert.equal("/networks/sandstack-unit-sbx/connect", cn.path)
    assert.same({ Container = "sandstack-unit-forwarder", EndpointConfig = { Aliases = { "forwarder" } } }, cn.body)
    assert.equal("/containers/create?name=sandstack-unit-forwarder", fw.path)
    assert.same({ "socat" }, fw.body.Entrypoint)
    assert.same({ "TCP-LISTEN:8080,fork,reuseaddr", "TCP:sandbox:8080" }, fw.body.Cmd)
    assert.same({ ["8080/tcp"] = { { HostIp = "127.0.0.1", HostPort = "" } } }, fw.body.HostConfig.PortBindings)
    assert.equal("sandstack/socat:" .. core.VERSION, fw.image) -- built locally by `sandstack images`
  end)

  it("applies one hardening overlay to every container, the forwarder included", function()
    local p = assert(plan(full()))
    assert.equal(4, #p.containers)
    local keys = { "NanoCpus", "Memory", "CapDrop", "SecurityOpt", "PidsLimit", "ReadonlyRootfs", "Tmpfs" }
    for _, c in ipairs(p.containers) do
      for _, k in ipairs(keys) do assert.same(p.hardening[k], c.body.HostConfig[k], c.service .. " " .. k) end
      assert.equal("1000:1000", c.body.User, c.service)
    end
    assert.equal(0.5e9, p.hardening.NanoCpus)
    assert.equal(256 * 1024 * 1024, p.hardening.Memory)
    assert.same({ ["/tmp"] = "" }, p.hardening.Tmpfs)
  end)

  it("wires the proxy credentials: the sandbox never holds the real key", function()
    local p = assert(plan(full()))
    local sb, px = env_map(by_service(p, "sandbox")), env_map(by_service(p, "proxy"))
    assert.matches("^[0-9a-f]+$", p.session_token)
    assert.equal(64, #p.session_token)
    assert.equal(p.session_token, sb.ANTHROPIC_API_KEY)
    assert.equal("http://proxy:3128", sb.ANTHROPIC_BASE_URL)
    for _, e in ipairs(by_service(p, "sandbox").body.Env) do assert.falsy(e:find("sk-", 1, true)) end
    assert.equal(p.session_token, px.SANDSTACK_SESSION_TOKEN)
    assert.equal("sk-real-key", px.ANTHROPIC_API_KEY)
    assert.equal("info", px.LOG)
    assert.is_nil(env_map(by_service(p, "db")).ANTHROPIC_API_KEY)
    local q = assert(plan(full()))
    assert.not_equal(p.session_token, q.session_token)
  end)

  it("puts api_key into the sandbox unchanged without a proxy", function()
    local p = assert(plan(opts { api_key = "sk-direct" }))
    local sb = env_map(by_service(p, "sandbox"))
    assert.equal("sk-direct", sb.ANTHROPIC_API_KEY)
    assert.is_nil(sb.ANTHROPIC_BASE_URL)
    assert.is_nil(p.session_token)
    assert.equal("8080", sb.AGENT_PORT)
  end)

  it("hands a rendered egress policy to the proxy", function()
    local o = full()
    o.egress_policy = { allow = { "API.example.com", { host = "*.pypi.org", methods = { "get" } } } }
    local p = assert(plan(o))
    local canonical = require("sandstack.policy").compile(o.egress_policy):render()
    assert.truthy(canonical:find('"api.example.com"', 1, true))
    assert.equal(canonical, env_map(by_service(p, "proxy")).SANDSTACK_EGRESS_POLICY)
  end)

  it("orders by dependency, maps healthchecks to nanoseconds and mounts named volumes", function()
    local p = assert(plan(full()))
    assert.same({ "db", "proxy", "sandbox", "forwarder" }, p.order)
    local db = by_service(p, "db")
    assert.same({ Test = { "CMD", "agent", "connect", "127.0.0.1", "1" }, Interval = 0.5e9, Timeout = 2e9,
      Retries = 3, StartPeriod = 1e9 }, db.body.Healthcheck)
    assert.same({ "agent", "connect", "127.0.0.1", "1" }, db.check)
    assert.is_true(db.healthcheck)
    assert.same({ { Type = "volume", Source = "sandstack-unit-ws", Target = "/data", ReadOnly = false } },
      db.body.HostConfig.Mounts)
    assert.same({ "proxy" }, by_service(p, "sandbox").depends_on)
    assert.equal("sandstack-unit-ws", p.volumes[1].name)
    assert.equal("ws", p.volumes[1].body.Labels["io.sandstack.volume"])
    local q = assert(plan(opts { ready = { sandbox = { test = "wget -q localhost" } } }))
    assert.same({ "CMD-SHELL", "wget -q localhost" }, by_service(q, "sandbox").body.Healthcheck.Test)
    assert.same({ "/bin/sh", "-c", "wget -q localhost" }, by_service(q, "sandbox").check)
  end)

  it("labels every container with project, session, service, version and creation time", function()
    local p = assert(plan(full(), { now = 1234 }))
    for _, c in ipairs(p.containers) do
      local l = c.body.Labels
      assert.equal("sandstack-unit", l["io.sandstack.project"])
      assert.equal("unit", l["io.sandstack.session"])
      assert.equal(c.service, l["io.sandstack.service"])
      assert.equal(core.VERSION, l["io.sandstack.version"])
      assert.equal("1234", l["io.sandstack.created"])
      assert.equal("sandstack-unit-" .. c.service, c.name)
    end
  end)

  it("sends lists as JSON arrays, empty ones included (the bodies never pass through a Lua table)", function()
    local p = assert(plan(opts { cap_drop = {}, security_opt = {} }))
    for _, c in ipairs(p.containers) do
      for _, key in ipairs { "Env", "Mounts", "CapDrop", "SecurityOpt" } do
        assert.falsy(c.body_json:find('"' .. key .. '":{', 1, true), c.service .. " " .. key)
      end
      assert.truthy(c.body_json:find('"CapDrop":[]', 1, true), c.service)
      assert.truthy(c.body_json:find('"Mounts":[', 1, true), c.service)
    end
    assert.truthy(p.containers[#p.containers].body_json:find('"Env":[]', 1, true))
  end)

  it("carves subnets from a pool around the used ones", function()
    assert.equal("10.213.0.0/28", core.stack_pick_subnet("10.213.0.0/16", {}, 0))
    assert.equal("10.213.0.32/28", core.stack_pick_subnet("10.213.0.0/16", { "10.213.0.0/27", "bogus" }, 0))
    assert.equal("10.213.0.16/28", core.stack_pick_subnet("10.213.0.0/16", {}, 1))
    assert.equal("10.213.0.0/28", core.stack_pick_subnet("10.213.0.0/16", {}, 4096)) -- wraps
    local s, err = core.stack_pick_subnet("10.213.0.0/28", { "10.0.0.0/8" }, 0)
    assert.is_nil(s)
    assert.equal("pool_exhausted", err.reason)
    assert.equal(141, require("sandstack_test.stack").api_number("1.41"))
    assert.equal(-1, require("sandstack_test.stack").api_number("x"))
  end)
end)

describe("sandstack.docker.start before the engine (no engine)", function()
  local docker = require("sandstack").docker
  -- an engine address where nothing listens: a spec error must come back before any call
  local nowhere = "unix:///nonexistent/sandstack-test.sock"

  it("returns spec errors without contacting the engine", function()
    local s, err = docker.start("k", { agent_port = 8080, image = "x", docker_host = nowhere,
      services = { { name = "db", image = "y" } } })
    assert.is_nil(s)
    assert.equal("compose", err.kind)
    assert.equal("egress_required", err.reason)
    s, err = docker.start("k", { agent_port = 8080, image = "x", docker_host = nowhere })
    assert.is_nil(s)
    assert.equal("transport", err.kind) -- a valid spec does reach for the engine
  end)

  it("raises on unknown keys and on callbacks that are not functions", function()
    assert.has_error(function() docker.start("k", { agent_port = 1, image = "x", imagee = "y" }) end)
    assert.has_error(function() docker.start("k", { agent_port = 1, image = "x", on_event = "print" }) end)
    assert.has_error(function() docker.start(42, {}) end)
    assert.has_error(function() docker.start("k", nil) end)
  end)

  it("keeps callbacks out of the plan and plans without an engine", function()
    local p = assert(docker.plan("k", { agent_port = 1, image = "x", on_event = function() end,
      req_adapter = function() end }, { api_version = "1.44" }))
    assert.is_true(p.dual_attach_at_create)
    assert.is_nil(p.on_event)
  end)

  it("refuses an egress policy the policy module rejects", function()
    local ok_policy = pcall(require, "sandstack.policy")
    if not ok_policy then return pending("sandstack.policy is not installed") end
    local s, err = docker.start("k", { agent_port = 1, image = "x", docker_host = nowhere, proxy_service = "px",
      services = { { name = "px", image = "p", egress = "allow", port = 1 } }, egress_policy = { allow = { 42 } } })
    assert.is_nil(s)
    assert.equal("invalid_option", err.reason)
    assert.equal("egress_policy", err.option)
  end)
end)

describe("the sandstack command (no engine)", function()
  local real = require "sandstack.cli"
  local printed = {}
  local sink = { write = function(_, ...) for _, x in ipairs { ... } do printed[#printed + 1] = x end end }
  local cli = { main = function(argv) return real.main(argv, sink, sink) end }
  it("prints usage and refuses bad invocations", function()
    assert.equal(2, cli.main({}))
    assert.equal(0, cli.main({ "--help" }))
    assert.equal(2, cli.main({ "up" })) -- a usage error
    assert.equal(1, cli.main({ "up", "/nonexistent.lua" }))
    assert.equal(2, cli.main({ "reap", "--bogus", "1" }))
    local f = os.tmpname()
    local h = io.open(f, "w")
    h:write('return { agent_port = 1, image = "x", services = { { name = "db", image = "y" } } }')
    h:close()
    assert.equal(1, cli.main({ "up", f })) -- egress_required, before any engine call
    os.remove(f)
    assert.truthy(table.concat(printed):find("egress_required", 1, true) or table.concat(printed):find("must say egress", 1, true))
  end)
end)

describe("the executor against a scripted engine (no engine)", function()
  local core = require "sandstack.core"
  local scripted = require "spec.support.scripted_engine"
  local A = require "sandstack.docker.apply"

  -- A stand-in for sandstack.engine: answers from `responder`, logs every call in order.
  local function fake(responder)
    local e = { api_version = "1.41", log = {}, q = {}, n = 0 }
    function e:request(m, p, b, o)
      self.log[#self.log + 1] = m .. " " .. p
      if type(b) == "string" then b = assert(core.json_decode(b)) end -- the plan's finished bodies
      return responder(m, p:gsub("%?.*$", ""), b, o)
    end
    function e:call(m, p, b, o)
      local st, body = self:request(m, p, b, o)
      if st and (st < 300 or (o and o.ok and o.ok[st])) then return body == nil and true or body end
      if not st then return nil, body end
      return nil, core.error("engine", nil, body and body.message or "", { status = st })
    end
    function e:submit(m, p, b, o)
      self.n = self.n + 1
      local st, body = self:request(m, p, b, o)
      self.q[#self.q + 1] = { id = self.n, status = st, body = st and body or nil, err = not st and body or nil }
      return self.n
    end
    function e:poll() local out = self.q; self.q = {}; return out end
    function e:close() end
    return scripted.with(e)
  end

  local function run_for(eng, extra)
    local o = { agent_port = 8080, image = "a", forwarder_image = "f", pull = "never",
      services = { { name = "relay", image = "a", egress = "allow" } }, volumes = { { name = "w" } } }
    for k, v in pairs(extra or {}) do o[k] = v end
    local model = assert(core.stack_model(o, "fake"))
    local run = { eng = eng, model = model, t0 = 0, created = { networks = {}, volumes = {}, containers = {} } }
    assert(A.plan(run))
    return run
  end

  local function logged(eng, pattern)
    for i, l in ipairs(eng.log) do if l:find(pattern) then return i end end
    return false
  end

  it("reports the engine's address-pool exhaustion as such and removes what it created", function()
    local eng = fake(function(m, p, b)
      if m == "POST" and p == "/networks/create" and b.Name:find("%-pub$") then
        return 404, { message = "could not find an available, non-overlapping IPv4 address pool among the defaults to assign to the network" }
      end
      if m == "POST" then return 201, { Id = "id-" .. (b and b.Name or p), Labels = b and b.Labels } end
      return 204
    end)
    local run = run_for(eng)
    local ok, err = A.create_networks_and_volumes(run)
    assert.is_nil(ok)
    assert.equal("address_pool_exhausted", err.reason)
    assert.truthy(err.message:find("subnet_pool", 1, true))
    A.rollback(run)
    assert.truthy(logged(eng, "^DELETE /networks/id%-sandstack%-fake%-sbx$"))
    assert.truthy(logged(eng, "^DELETE /networks/id%-sandstack%-fake%-egress$"))
    assert.truthy(logged(eng, "^DELETE /volumes/sandstack%-fake%-w$"))
    assert.falsy(logged(eng, "^DELETE /networks/id%-sandstack%-fake%-pub$"))
  end)

  it("rolls back when the engine goes away mid-start", function()
    local gone = false
    local eng = fake(function(m, p, b)
      if m == "POST" and p == "/containers/create" and b.Labels["io.sandstack.service"] == "sandbox" then gone = true end
      if gone and m == "POST" then return nil, core.error("transport", nil, "connection refused") end
      if m == "POST" then return 201, { Id = "id-" .. (b and b.Name or b and b.Image or p), Labels = b and b.Labels } end
      return 204
    end)
    local run = run_for(eng)
    assert(A.create_networks_and_volumes(run))
    local ok, err = A.create_containers(run)
    assert.is_nil(ok)
    assert.equal("transport", err.kind)
    gone = false
    A.rollback(run)
    -- the rollback also sweeps by this run's own label, for creates whose answer was lost
    assert.truthy(logged(eng, "^GET /networks$"))
    for _, id in ipairs(run.created.containers) do assert.truthy(logged(eng, "^DELETE /containers/" .. id:gsub("%-", "%%-") .. "$")) end
    assert.equal(3, #run.created.networks)
    for _, id in ipairs(run.created.networks) do assert.truthy(logged(eng, "^DELETE /networks/" .. id:gsub("%-", "%%-") .. "$")) end
  end)

  it("takes a volume the engine already had for another stack's: a conflict, and the rollback leaves it", function()
    -- a volume create of an existing name answers 201 with that volume (its labels are another run's)
    local eng = fake(function(m, p, b)
      if m == "POST" and p == "/volumes/create" then
        return 201, { Name = b.Name, Labels = { ["io.sandstack.project"] = "sandstack-fake", ["io.sandstack.run"] = "other" } }
      end
      if m == "POST" then return 201, { Id = "id-" .. (b and b.Name or p), Labels = b and b.Labels } end
      if m == "GET" then return 200, p == "/volumes" and { Volumes = {} } or {} end
      return 204
    end)
    local run = run_for(eng)
    local ok, err = A.create_networks_and_volumes(run)
    assert.is_nil(ok)
    assert.equal("conflict", err.kind)
    assert.equal("stack_exists", err.reason)
    assert.equal("sandstack-fake-w", err.volume)
    A.rollback(run)
    assert.truthy(logged(eng, "^DELETE /networks/id%-sandstack%-fake%-sbx$"), table.concat(eng.log, "\n"))
    assert.falsy(logged(eng, "^DELETE /volumes/"), table.concat(eng.log, "\n"))
  end)

  it("refuses to start over a project the engine already lists, before any create", function()
    local eng = fake(function(m, p)
      if m == "GET" and p == "/containers/json" then
        return 200, { { Id = "c1", State = "exited", Labels = { ["io.sandstack.project"] = "sandstack-fake",
          ["io.sandstack.service"] = "sandbox" } } }
      end
      if m == "GET" and p == "/volumes" then return 200, { Volumes = {} } end
      if m == "GET" then return 200, {} end
      return 500, { message = "no change expected" }
    end)
    local run = run_for(eng)
    local ok, err = A.preflight(run)
    assert.is_nil(ok)
    assert.equal("conflict", err.kind)
    assert.equal("stack_exists", err.reason)
    assert.equal("stopped", err.state)
    assert.matches("sandstack down fake", err.message, 1, true)
    for _, l in ipairs(eng.log) do assert.matches("^GET ", l) end
  end)

  it("connects second networks after create and before any start (API 1.41), then starts by dependency", function()
    local eng = fake(function(m, p, b)
      if m == "GET" and p:find("/json$") then
        return 200, { State = { Status = "running", Health = { Status = "healthy" } },
          NetworkSettings = { Ports = { ["8080/tcp"] = { { HostIp = "127.0.0.1", HostPort = "40001" } } } } }
      end
      if m == "POST" then return 201, { Id = "x", Labels = b and b.Labels } end
      return 204
    end)
    local run = run_for(eng, { services = { { name = "relay", image = "a", egress = "allow" },
      { name = "sandbox", image = "a", depends_on = { "relay" } } } })
    assert(A.create_networks_and_volumes(run))
    assert(A.create_containers(run))
    assert(A.start_services(run, run.plan.containers))
    assert.equal(40001, A.read_port(run))
    local fw_connect = logged(eng, "^POST /networks/sandstack%-fake%-sbx/connect$")
    local egress_connect = logged(eng, "^POST /networks/sandstack%-fake%-egress/connect$")
    local first_start = logged(eng, "/start$")
    local sandbox_start = logged(eng, "^POST /containers/sandstack%-fake%-sandbox/start$")
    local relay_start = logged(eng, "^POST /containers/sandstack%-fake%-relay/start$")
    assert.truthy(fw_connect and egress_connect and first_start)
    assert.is_true(fw_connect < first_start and egress_connect < first_start)
    assert.is_true(relay_start < sandbox_start)
    assert.falsy(logged(eng, "^POST /networks/sandstack%-fake%-pub/connect$"))
  end)
end)

-- What the original provider's own tests expect of the plan.
describe("sandstack.docker provider fidelity (no engine)", function()
  local store = require "sandstack.store"
  local TOKEN = ("tok-0123456789_abcdef.ghij~KLMNOP"):rep(2)

  local function with_proxy(extra)
    local o = opts {
      services = { { name = "proxy", image = "x", egress = "allow", port = 3128 } },
      proxy_service = "proxy",
    }
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
  end

  it("overlays the agent contract: the sandbox spec's own AGENT_PORT loses to agent_port", function()
    local p = assert(plan(opts { services = { { name = "sandbox", image = "x", env = { AGENT_PORT = "9999", KEEP = "1" } } } }))
    local sb = env_map(by_service(p, "sandbox")) -- env_map also fails on a duplicate entry
    assert.equal("8080", sb.AGENT_PORT)
    assert.equal("1", sb.KEEP)
    p = assert(plan(opts { services = { { name = "sandbox", image = "x", env = { AGENT_PORT = 9999 } } } }))
    assert.equal("8080", env_map(by_service(p, "sandbox")).AGENT_PORT)
  end)

  it("uses a given session_token instead of minting one, for the sandbox and the proxy", function()
    local p = assert(plan(with_proxy { session_token = TOKEN }))
    assert.equal(TOKEN, p.session_token)
    assert.equal(TOKEN, env_map(by_service(p, "sandbox")).ANTHROPIC_API_KEY)
    assert.equal(TOKEN, env_map(by_service(p, "proxy")).SANDSTACK_SESSION_TOKEN)
    -- a token the caller's context hands in still comes first
    assert.equal("from-ctx", assert(plan(with_proxy { session_token = TOKEN }, { token = "from-ctx" })).session_token)
    -- and none given: minted, 64 hex digits
    assert.matches("^%x+$", assert(plan(with_proxy())).session_token)
  end)

  it("refuses a session_token that is short, unsafe, not a string or without a proxy, never quoting it", function()
    for _, t in ipairs { 42, true } do -- a programming error: it raises, never quoting it
      local ok, msg = pcall(plan, with_proxy { session_token = t })
      assert.is_false(ok)
      assert.matches("option 'session_token' must be a string, got a", msg, 1, true)
    end
    local bad = { "", ("a"):rep(31), ("a"):rep(257), TOKEN .. " x", TOKEN .. "\n", TOKEN .. "@host", TOKEN .. ":" }
    for _, t in ipairs(bad) do
      local p, err = plan(with_proxy { session_token = t })
      assert.is_nil(p, tostring(t))
      assert.equal("compose", err.kind)
      assert.equal("invalid_option", err.reason)
      assert.equal("session_token", err.option)
      if type(t) == "string" and #t > 0 then assert.falsy(err.message:find(t, 1, true)) end
    end
    local p, err = plan(opts { session_token = TOKEN })
    assert.is_nil(p)
    assert.equal("session_token", err.option)
    assert.matches("proxy_service", err.message)
    assert.is_true(validate(with_proxy { session_token = ("x"):rep(32) }, "k"))
  end)

  it("keeps a given session_token out of a scrubbed record", function()
    local p = assert(plan(with_proxy { session_token = TOKEN }))
    local r = store.scrub(p)
    local function walk(t)
      for k, v in pairs(t) do
        assert.not_equal("session_token", k)
        if type(v) == "table" then walk(v) else assert.falsy(tostring(v):find(TOKEN, 1, true), k) end
      end
    end
    -- the plan's bodies carry it in Env (they must); the record is the handle's slim view
    r.containers = nil
    walk(r)
  end)

  it("is secure by default: every container, the forwarder included, drops all caps, no-new-privileges, 512 pids, no restart", function()
    local p = assert(plan(opts { services = { { name = "db", image = "x", egress = "none" },
      { name = "out", image = "x", egress = "allow" } } }))
    assert.equal(4, #p.containers)
    for _, c in ipairs(p.containers) do
      local hc = c.body.HostConfig
      assert.same({ "ALL" }, hc.CapDrop, c.service)
      assert.same({ "no-new-privileges" }, hc.SecurityOpt, c.service)
      assert.equal(512, hc.PidsLimit, c.service)
      assert.same({ Name = "no" }, hc.RestartPolicy, c.service)
    end
  end)

  it("applies a typed-out loosening to every container, and only what is typed out", function()
    local p = assert(plan(opts { cap_drop = {}, pids_limit = false,
      services = { { name = "db", image = "x", egress = "none" } } }))
    for _, c in ipairs(p.containers) do
      local hc = c.body.HostConfig
      assert.truthy(c.body_json:find('"CapDrop":[]', 1, true), c.service) -- an empty list: drop nothing
      assert.is_nil(hc.PidsLimit, c.service)
      assert.same({ "no-new-privileges" }, hc.SecurityOpt, c.service)
      assert.same({ Name = "no" }, hc.RestartPolicy, c.service)
    end
    p = assert(plan(opts { security_opt = {}, cap_drop = { "NET_RAW" }, pids_limit = 64 }))
    for _, c in ipairs(p.containers) do
      local hc = c.body.HostConfig
      assert.truthy(c.body_json:find('"SecurityOpt":[]', 1, true), c.service)
      assert.same({ "NET_RAW" }, hc.CapDrop, c.service)
      assert.equal(64, hc.PidsLimit, c.service)
    end
    for _, v in ipairs { 0, -1, 1.5 } do
      local q, err = plan(opts { pids_limit = v })
      assert.is_nil(q, tostring(v))
      assert.equal("pids_limit", err.option)
    end
    for _, v in ipairs { true, "512" } do -- a wrong type raises
      assert.has_error(function() plan(opts { pids_limit = v }) end)
    end
  end)

  it("refuses ready tests that can never report healthy", function()
    local never = { { "NONE" }, { "CMD" }, { "CMD", "" }, { "CMD-SHELL" }, { "CMD-SHELL", "" }, "", { "" } }
    for _, t in ipairs(never) do
      local p, err = plan(opts { ready = { sandbox = { test = t } } })
      assert.is_nil(p, core.json_encode(t))
      assert.equal("compose", err.kind)
      assert.equal("invalid_option", err.reason)
      assert.equal("ready.sandbox.test", err.option)
    end
    for _, t in ipairs { { "CMD", "true" }, { "CMD-SHELL", "true" }, "true", { "true" } } do
      assert.truthy(plan(opts { ready = { sandbox = { test = t } } }), core.json_encode(t))
    end
  end)
end)

-- The bodiless requests of a start come from the plan (csrc/stack/requests.c).
describe("the plan's bodiless requests (no engine)", function()
  local function keyed(q) return q.method .. " " .. q.path end

  it("holds one read and one pull per image, a registry's port never taken for a tag", function()
    local p = assert(plan(opts { image = "reg.example:5000/team/agent", forwarder_image = "socat:1.7",
      pull = "missing" }))
    assert.equal(#p.images, #p.pulls)
    for i, img in ipairs(p.images) do
      assert.equal("GET /images/" .. img .. "/json", keyed(p.preflight[i]))
      assert.same({ 404 }, p.preflight[i].ok)
      assert.equal("POST /images/create", keyed(p.pulls[i]))
    end
    local q = {}
    for i, img in ipairs(p.images) do q[img] = p.pulls[i].query end
    assert.same({ fromImage = "reg.example:5000/team/agent", tag = "latest" }, q["reg.example:5000/team/agent"])
    assert.same({ fromImage = "socat", tag = "1.7" }, q["socat:1.7"])
    -- after the images: the self-check's identity when there is a check, else nothing
    local rest = {}
    for i = #p.images + 1, #p.preflight do rest[#rest + 1] = keyed(p.preflight[i]) end
    if p.isolation_check then
      assert.same({ "GET /version", "GET /info", "GET /networks/bridge", "GET /volumes" }, rest)
    else
      assert.same({}, rest)
    end
  end)

  it("holds each container's start and inspect and the teardown's removals, and a record's names give the same", function()
    local p = assert(plan(opts()))
    for _, c in ipairs(p.containers) do
      assert.equal("POST /containers/" .. c.name .. "/start", keyed(c.start))
      assert.equal("GET /containers/" .. c.name .. "/json", keyed(c.inspect))
    end
    assert.equal(#p.containers, #p.removals.containers)
    assert.equal(#p.networks, #p.removals.networks)
    assert.equal(#p.volumes, #p.removals.volumes)
    assert.same({ force = "1", v = "1" }, p.removals.containers[1].query)
    assert.equal(3, #p.removals.lists)
    -- what a record keeps (names) is turned into the same requests
    local names = { project = p.project, containers = {}, networks = {}, volumes = {} }
    for i, c in ipairs(p.containers) do names.containers[i] = { name = c.name, service = c.service } end
    for i, n in ipairs(p.networks) do names.networks[i] = n.name end
    for i, v in ipairs(p.volumes) do names.volumes[i] = v.name end
    local again = core.stack_lifecycle(names)
    for i, c in ipairs(p.containers) do
      assert.same(c.start, again.containers[i].start)
      assert.same(c.inspect, again.containers[i].inspect)
    end
    assert.same(p.removals, again.removals)
  end)

  it("encodes a label list's filter as JSON, whatever the label holds", function()
    local lists = core.stack_list_requests('io.sandstack.project=a"b\\c', "io.sandstack.pool=p")
    assert.equal(3, #lists)
    local f = assert(core.json_decode(lists[2].query.filters))
    assert.same({ 'io.sandstack.project=a"b\\c', "io.sandstack.pool=p" }, f.label)
    assert.equal("1", lists[1].query.all)
  end)
end)

describe("a teardown against a scripted engine (no engine)", function()
  local scripted = require "spec.support.scripted_engine"
  local inventory = require "sandstack.docker.inventory"

  -- A labelled volume that shares a known network's name (a user volume keyed "sbx" is
  -- <project>-sbx, as the sandbox network is) is another object: the destroy removes it too.
  -- What the lists add goes in the round of its kind: containers, then networks, then volumes
  -- (compose's order), never a volume between two networks.
  it("removes what the label lists add, kind by kind, even under a known object's name, in compose's order", function()
    local p = assert(plan(opts { volumes = { { name = "w" } } }))
    local e = scripted.new(function(m, path)
      if m == "GET" and path == "/volumes" then return 200, { Volumes = { { Name = p.project .. "-sbx" } } } end
      if m == "GET" and path == "/networks" then return 200, { { Name = p.project .. "-extra" } } end
      if m == "GET" then return 200, {} end
      return 204
    end)
    assert(inventory.remove_project(e, p.project, p.removals))
    local sent = table.concat(e.log, "\n") .. "\n"
    assert.truthy(sent:find("DELETE /volumes/" .. p.project .. "-sbx\n", 1, true), sent)
    assert.truthy(sent:find("DELETE /networks/" .. p.project .. "-sbx\n", 1, true), sent)
    assert.truthy(sent:find("DELETE /networks/" .. p.project .. "-extra\n", 1, true), sent)
    local rank, last = { containers = 1, networks = 2, volumes = 3 }, 0
    for _, l in ipairs(e.log) do
      local kind = l:match("^DELETE /(%a+)/")
      if kind then
        assert.is_true(rank[kind] >= last, "out of compose's order:\n" .. sent)
        last = rank[kind]
      end
    end
  end)
end)
