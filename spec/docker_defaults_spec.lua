-- sandstack.docker against the live engine (#docker): a stack started with no
-- hardening options has the secure defaults on every container (the forwarder included) and
-- still answers; a typed-out loosening reaches every container; a caller's session_token is
-- the token and never reaches a record. Projects start "sstest-defaults-"; each test proves
-- none is left.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker

local PREFIX = "sstest-defaults-"
local POOL = "10.213.0.0/16"
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"

local eng = assert(sandstack.engine {})

local function project(tag) return PREFIX .. tag .. "-" .. core.random_hex(3) end

local function base(name, extra)
  local o = { project_name = name, agent_port = 8080, forwarder_image = SOCAT, subnet_pool = POOL, pull = "never",
    services = { { name = "sandbox", image = AGENT, command = { "agent" } },
      { name = "db", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "5432" }, egress = "none" } },
    ready = { db = { test = { "agent", "connect", "127.0.0.1", "5432", "500" }, interval = 0.5 } } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function leftovers()
  local f = { label = { "io.sandstack.project" } }
  local n = 0
  local function count(list)
    for _, o in ipairs(list) do if o.Labels["io.sandstack.project"]:sub(1, #PREFIX) == PREFIX then n = n + 1 end end
  end
  count(assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } })))
  count(assert(eng:call("GET", "/networks", nil, { query = { filters = f } })))
  count(assert(eng:call("GET", "/volumes", nil, { query = { filters = f } })).Volumes or {})
  return n
end

local function host_config(name)
  return assert(eng:call("GET", "/containers/" .. name .. "/json")).HostConfig
end

local function get(url)
  return require("sandstack.docker.http").request { method = "GET", url = url, timeout = 5 }
end

local SERVICES = { "sandbox", "db", "forwarder" }

describe("sandstack.docker secure defaults live #docker", function()
  after_each(function()
    docker.reap { prefix = PREFIX }
    assert.equal(0, leftovers())
  end)

  it("gives every container CapDrop ALL, no-new-privileges, PidsLimit 512 and no restart, and still answers", function()
    local name = project("on")
    local stack = assert(docker.start(name, base(name)))
    assert.equal(200, get(stack.endpoint .. "/health").status)
    for _, svc in ipairs(SERVICES) do
      local hc = host_config(name .. "-" .. svc)
      assert.same({ "ALL" }, hc.CapDrop, svc)
      assert.same({ "no-new-privileges" }, hc.SecurityOpt, svc)
      assert.equal(512, hc.PidsLimit, svc)
      assert.equal("no", hc.RestartPolicy.Name, svc)
    end
    -- the guest really runs without capabilities and cannot regain them
    local r = assert(eng:exec(name .. "-sandbox", { "sh", "-c", "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status" }))
    assert.matches("CapEff:%s+0+\n", r.stdout)
    assert.matches("NoNewPrivs:%s+1", r.stdout)
    -- and survives a restart under them (the forwarder re-publishes)
    assert(stack:restart())
    assert.equal(200, get(stack.endpoint .. "/health").status)
    assert(stack:destroy())
  end)

  it("applies a typed-out loosening to every container", function()
    local name = project("off")
    local stack = assert(docker.start(name, base(name, { cap_drop = {}, security_opt = {}, pids_limit = false })))
    assert.equal(200, get(stack.endpoint .. "/health").status)
    for _, svc in ipairs(SERVICES) do
      local hc = host_config(name .. "-" .. svc)
      assert.is_true(hc.CapDrop == nil or hc.CapDrop == core.null or #hc.CapDrop == 0, svc)
      assert.is_true(hc.SecurityOpt == nil or hc.SecurityOpt == core.null or #hc.SecurityOpt == 0, svc)
      assert.is_true(hc.PidsLimit == nil or hc.PidsLimit == core.null or hc.PidsLimit <= 0, svc)
      assert.equal("no", hc.RestartPolicy.Name, svc)
    end
    local r = assert(eng:exec(name .. "-sandbox", { "sh", "-c", "grep -E '^CapEff' /proc/self/status" }))
    assert.not_matches("CapEff:%s+0+\n", r.stdout)
    assert(stack:destroy())
  end)

  it("uses a given session_token and keeps it out of the record", function()
    local name = project("tok")
    local token = "sstest-token-" .. core.random_hex(16)
    local stack = assert(docker.start(name, base(name, {
      session_token = token, proxy_service = "proxy", api_key = "sk-defaults-real",
      services = { { name = "sandbox", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "9999" } },
        { name = "proxy", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "3128" }, egress = "allow", port = 3128 } },
      ready = {},
    })))
    -- the sandbox spec's own AGENT_PORT lost to agent_port: the stack answers on 8080
    assert.equal(200, get(stack.endpoint .. "/health").status)
    local env = {}
    for _, e in ipairs(assert(eng:call("GET", "/containers/" .. name .. "-sandbox/json")).Config.Env) do
      local k, v = e:match("^([^=]+)=(.*)$")
      env[k] = v
    end
    assert.equal(token, env.ANTHROPIC_API_KEY)
    assert.equal("8080", env.AGENT_PORT)
    local rec = core.json_encode(stack:record())
    assert.falsy(rec:find(token, 1, true))
    assert.falsy(rec:find("session_token", 1, true))
    assert(stack:destroy())
  end)
end)
