-- sandstack-init in the plan, without an engine: the sandbox's command wrapped from the image's,
-- the init's volume read-only in the sandbox and read-write in a holder that never runs, the
-- health check under another runtime, the requests of a moved deadline and of a commit, and the
-- deadline file's text. The live half is spec/docker_deadline_spec.lua.
local sandstack = require "sandstack"
local core = sandstack.core

local AGENT = "sandstack-test/agent:local"

local function opts(extra, service)
  local s = { name = "sandbox", image = AGENT }
  for k, v in pairs(service or {}) do s[k] = v end
  local o = { project_name = "sstest-dlu", agent_port = 8080, forwarder_image = "sandstack-test/socat:local",
    services = { s } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

-- The plan a start applies, with the sandbox image's Config `image`.
local function plan(o, image)
  local model = assert(core.stack_model(o, "k1"))
  local p = assert(model:plan { init = { image = image or { Cmd = { "/bin/sh" } } } })
  model:close()
  return p
end

local function body(p, name)
  for _, c in ipairs(p.containers) do
    if c.service == name then return core.json_decode(c.body_json) end
  end
end

local function mount_at(b, target)
  for _, m in ipairs(b.HostConfig.Mounts or {}) do if m.Target == target then return m end end
end

describe("sandstack-init in the plan", function()
  local D = core.DEADLINE

  it("wraps the sandbox's command as the engine would run it, and only the sandbox's", function()
    local p = plan(opts({}, { command = { "agent" } }))
    local sb = body(p, "sandbox")
    assert.same({ D.program, "--" }, sb.Entrypoint)
    assert.same({ "agent" }, sb.Cmd)
    assert.not_equal(D.program, (body(p, "forwarder").Entrypoint or {})[1])
    assert.is_nil(mount_at(body(p, "forwarder"), D.dir))
    -- the image's command when the service gives none, the image's entrypoint before it
    sb = body(plan(opts(), { Entrypoint = { "/usr/bin/socat" }, Cmd = { "-h" } }), "sandbox")
    assert.same({ D.program, "--", "/usr/bin/socat" }, sb.Entrypoint)
    assert.same({ "-h" }, sb.Cmd)
    -- a string command runs through /bin/sh -c, as without the init
    sb = body(plan(opts({}, { command = "echo hi" })), "sandbox")
    assert.same({ "/bin/sh", "-c", "echo hi" }, sb.Cmd)
  end)

  it("mounts its volume read-only in the sandbox and read-write in a holder that has no network and never runs", function()
    local p = plan(opts({}, { command = { "agent" } }))
    local m = assert(mount_at(body(p, "sandbox"), D.dir))
    assert.same({ Type = "volume", Source = "sstest-dlu-sandstack_init", Target = D.dir, ReadOnly = true,
      VolumeOptions = { NoCopy = true } }, m)
    local vol
    for _, v in ipairs(p.volumes) do if v.name == "sstest-dlu-sandstack_init" then vol = v end end
    assert.truthy(vol, "the init's volume is planned")
    assert.equal("sstest-dlu", core.json_decode(vol.body_json).Labels["io.sandstack.project"])
    local holder = p.init.holder
    assert.equal("sstest-dlu-sandstack_init", holder.name)
    assert.equal("/containers/create?name=sstest-dlu-sandstack_init", holder.path)
    local hb = core.json_decode(holder.body_json)
    assert.is_true(hb.NetworkDisabled)
    assert.equal("none", hb.HostConfig.NetworkMode)
    assert.same({ "ALL" }, hb.HostConfig.CapDrop)
    assert.is_false(mount_at(hb, D.dir).ReadOnly)
    assert.equal("init", hb.Labels["io.sandstack.role"])
    assert.equal("sstest-dlu", hb.Labels["io.sandstack.project"])
    assert.equal("sstest-dlu-sandbox", p.init.container)
    -- a plan shown has the init too: the image's Config is the caller's (ctx.image), none by default
    local shown = assert(sandstack.docker.plan("k1", opts({}, { command = { "agent" } })))
    assert.same({ D.program, "--" }, body(shown, "sandbox").Entrypoint)
    assert.same({ "PUT", "/containers/sstest-dlu-sandstack_init/archive", D.dir }, { shown.init.write.method,
      shown.init.write.path, shown.init.write.query.path })
    shown = assert(sandstack.docker.plan("k1", opts(), { image = { Entrypoint = { "/e" }, Cmd = { "c" } } }))
    assert.same({ D.program, "--", "/e" }, body(shown, "sandbox").Entrypoint)
    assert.same({ "c" }, body(shown, "sandbox").Cmd)
  end)

  it("under another runtime, makes the engine's health check sandstack-init --check, before the user's own test", function()
    local sb = body(plan(opts({ runtime = "runsc" }, { command = { "agent" } })), "sandbox")
    assert.same({ "CMD", D.program, "--check" }, sb.Healthcheck.Test)
    assert.equal(D.check_interval * 1e9, sb.Healthcheck.Interval)
    local p = plan(opts({ runtime = "runsc", ready = { sandbox = { test = "wget -q -O- localhost:8080/health", interval = 30 } } },
      { command = { "agent" } }))
    sb = body(p, "sandbox")
    assert.same({ "CMD", D.program, "--check", "--", "/bin/sh", "-c", "wget -q -O- localhost:8080/health" },
      sb.Healthcheck.Test)
    assert.equal(D.check_interval * 1e9, sb.Healthcheck.Interval) -- at most the check's interval
    local c
    for _, x in ipairs(p.containers) do if x.service == "sandbox" then c = x end end
    assert.same({ "/bin/sh", "-c", "wget -q -O- localhost:8080/health" }, c.check) -- start's own probe: the user's
    assert.is_true(c.healthcheck)
    for _, x in ipairs(plan(opts({ runtime = "runsc" }, { command = { "agent" } })).containers) do
      if x.service == "sandbox" then assert.is_false(x.healthcheck) end -- the guard gates no start
    end
    assert.is_nil(body(plan(opts({}, { command = { "agent" } })), "sandbox").Healthcheck) -- runc: the kernel guards PID 1
  end)

  it("refuses a service volume mounted where the init lives", function()
    for _, target in ipairs { D.dir, D.dir .. "/x" } do
      local o = opts({ volumes = { { name = "ws" } } }, { volumes = { { name = "ws", target = target } } })
      local p, err = sandstack.docker.plan("k1", o)
      assert.is_nil(p)
      assert.equal("invalid_option", err.reason)
      assert.matches("sandstack%-init", err.message)
    end
    local o = opts({ volumes = { { name = "ws" } } }, { volumes = { { name = "ws", target = D.dir .. "x" } } })
    assert.truthy(sandstack.docker.plan("k1", o))
  end)
end)

describe("the init's deadline on the wire", function()
  it("is one line the init parses, 0 for none; anything else raises", function()
    assert.equal("sandstack-init 1 deadline 1765000000\n", core.deadline_file(1765000000))
    assert.equal("sandstack-init 1 deadline 0\n", core.deadline_file(0))
    for _, bad in ipairs { -1, 1.5, 1e16, 0 / 0 } do
      assert.has_error(function() core.deadline_file(bad) end)
    end
  end)

  it("is moved by a signal to the sandbox's PID 1 (gone or stopped: done), and a commit drops the wrap", function()
    local r = core.session_requests("signal", { "p-sandbox" }, { signal = core.DEADLINE.signal })[1]
    assert.equal("POST", r.method)
    assert.equal("/containers/p-sandbox/kill", r.path)
    assert.same({ signal = tostring(core.DEADLINE.signal) }, r.query)
    assert.same({ 404, 409 }, r.ok)
    assert.has_error(function() core.session_requests("signal", { "p" }, { signal = 99 }) end)
    local c = core.session_requests("commit", { "p-sandbox" }, { repo = "r", tag = "t", labels = {},
      config = { Entrypoint = { core.DEADLINE.program, "--", "/usr/bin/socat" }, Cmd = { "-h" } } })[1]
    local b = core.json_decode(c.body_json)
    assert.same({ "/usr/bin/socat" }, b.Entrypoint)
    assert.same({ "-h" }, b.Cmd)
    -- none of its own: [] (kept as none by the engine), the Cmd as it was
    local text = core.session_requests("commit", { "p" }, { repo = "r", tag = "t",
      config = { Entrypoint = { core.DEADLINE.program, "--" }, Cmd = { "agent" } } })[1].body_json
    assert.truthy(text:find('"Entrypoint":[]', 1, true), text)
    assert.same({ "agent" }, core.json_decode(text).Cmd)
    -- a container not under the init: the commit is as before
    b = core.json_decode(core.session_requests("commit", { "p" }, { repo = "r", tag = "t",
      config = { Cmd = { "agent" } } })[1].body_json)
    assert.is_nil(b.Entrypoint)
    assert.is_nil(b.Cmd)
  end)
end)
