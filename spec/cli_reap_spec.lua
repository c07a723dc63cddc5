-- reap and down do what they say, against the engine double (spec/support/engine_double.py) that
-- lists three stacks and records every removal: never the shared engine, where other sessions
-- live. --older-than takes durations and refuses anything else (exit 2, nothing removed); a reap
-- with no filter asks for --all; --dry-run removes nothing; every command takes the session key
-- or the project; down on nothing says so (exit 1); docker.reap refuses a non-number age.
local core = require "sandstack.core"

local NOW = os.time()

-- A stack as the engine lists it: one container, one network, one volume, all labelled.
local function stack(project, key, age, extra)
  local labels = { ["io.sandstack.project"] = project, ["io.sandstack.session"] = key,
    ["io.sandstack.created"] = tostring(NOW - age) }
  for k, v in pairs(extra or {}) do labels[k] = v end
  local c = { Id = "id-" .. project .. "-sandbox", Names = { "/" .. project .. "-sandbox" },
    State = labels["io.sandstack.pool"] and "running" or "exited",
    Image = "x", Labels = labels }
  c.Labels["io.sandstack.service"] = "sandbox"
  local nl, vl = {}, {}
  for k, v in pairs(labels) do if k ~= "io.sandstack.service" then nl[k], vl[k] = v, v end end
  return c, { Id = "net-" .. project, Name = project .. "-sbx", Labels = nl }, { Name = project .. "-ws", Labels = vl }
end

describe("sandstack reap and down (a stand-in engine)", function()
  local fake, volumes

  setup(function()
    fake = require("engine_double").start("lists")
    local cs, ns, vs = {}, {}, {}
    for _, s in ipairs {
      { "sandstack-old1", "old1", 3 * 3600 },
      { "sandstack-new1", "new1", 2 },
      { "pp-0a1b", "pool-placeholder", 5, { ["io.sandstack.pool"] = "pp" } },
    } do
      local c, n, v = stack(s[1], s[2], s[3], s[4])
      cs[#cs + 1], ns[#ns + 1], vs[#vs + 1] = c, n, v
    end
    -- the pool's stack is marked ready (a mark container, as a filler leaves it)
    cs[#cs + 1] = { Id = "id-pp-0a1b-ready", Names = { "/pp-0a1b-ready" }, State = "created", Image = "x",
      Labels = { ["io.sandstack.project"] = "pp-0a1b", ["io.sandstack.pool"] = "pp", ["io.sandstack.role"] = "ready" } }
    fake.answer("containers", core.json_encode(cs))
    fake.answer("networks", core.json_encode(ns))
    volumes = core.json_encode { Volumes = vs }
    fake.answer("volumes", volumes)
  end)

  teardown(function() if fake then fake.stop() end end)

  before_each(function() fake.forget() end)

  -- The projects whose objects were removed, sorted.
  local function removed()
    local seen, out = {}, {}
    for path in fake.deletes():gmatch("[^\n]+") do
      local p = path:match("/containers/id%-(.-)%-sandbox") or path:match("/networks/(.-)%-sbx$")
        or path:match("/volumes/(.+)%-ws$") or path:match("/containers/id%-(.-)%-ready")
        or path:match("/volumes/(.+)%-expiry%-%x+$")
      assert(p, "a removal of an object no stack has: " .. path)
      if not seen[p] then seen[p] = true; out[#out + 1] = p end
    end
    table.sort(out)
    return out
  end

  local function one(argv)
    local r = fake.cli { argv }[1]
    assert.is_nil((r.out .. r.err):lower():find("traceback", 1, true), r.out .. r.err)
    return r
  end

  it("--older-than takes 90s, 30m, 1h, 2d and seconds, and removes only stacks that old", function()
    local r = one { "reap", "--older-than", "1h" }
    assert.equal(0, r.code, r.err)
    assert.same({ "sandstack-old1" }, removed())
    assert.matches("removed sandstack%-old1", r.out)
    for _, d in ipairs { "2d", "30m", "90s", "7200" } do
      fake.forget()
      r = one { "reap", "--older-than", d, "--dry-run" }
      assert.equal(0, r.code, d .. ": " .. r.err)
      assert.same({}, removed())
    end
    assert.matches("would remove sandstack%-old1", one({ "reap", "--older-than=7200", "--dry-run" }).out)
  end)

  it("refuses any other --older-than as a usage error (exit 2) and removes nothing", function()
    for _, bad in ipairs { "abc", "1x", "-5", "1h30m", "" } do
      local r = one { "reap", "--older-than", bad }
      assert.equal(2, r.code, bad .. ": " .. r.out .. r.err)
      assert.matches("^sandstack: usage: %-%-older%-than takes a duration", r.err)
    end
    assert.same({}, removed())
  end)

  it("asks for --all when no filter is given; --dry-run lists and removes nothing; --all removes every stack", function()
    local r = one { "reap" }
    assert.equal(2, r.code)
    assert.matches("%-%-all", r.err)
    assert.same({}, removed())
    r = one { "reap", "--all", "--dry-run", "--json" }
    assert.equal(0, r.code, r.err)
    local doc = assert(core.json_decode(r.out))
    assert.is_true(doc.dry_run)
    table.sort(doc.would_remove)
    assert.same({ "pp-0a1b", "sandstack-new1", "sandstack-old1" }, doc.would_remove)
    assert.same({}, removed())
    r = one { "reap", "--all" }
    assert.equal(0, r.code, r.err)
    assert.same({ "pp-0a1b", "sandstack-new1", "sandstack-old1" }, removed())
  end)

  it("lists the engine as often to remove three stacks as to remove one (their removals go together)", function()
    local function lists()
      local n = 0
      for _ in fake.lists():gmatch("[^\n]+") do n = n + 1 end
      return n
    end
    assert.equal(0, one({ "reap", "--project", "old1" }).code)
    assert.same({ "sandstack-old1" }, removed())
    local for_one = lists()
    fake.forget()
    assert.equal(0, one({ "reap", "--all" }).code)
    assert.same({ "pp-0a1b", "sandstack-new1", "sandstack-old1" }, removed())
    -- one stack at a time, each removal listed the engine again: 21 lists for three, 9 for one
    assert.equal(for_one, lists())
  end)

  it("takes the session key where it takes a project: reap --project, reap --prefix, down, status", function()
    assert.equal(0, one({ "reap", "--project", "old1" }).code)
    assert.same({ "sandstack-old1" }, removed())
    fake.forget()
    assert.equal(0, one({ "reap", "--prefix", "new" }).code)
    assert.same({ "sandstack-new1" }, removed())
    fake.forget()
    local r = one { "down", "old1" }
    assert.equal(0, r.code, r.err)
    assert.equal("removed sandstack-old1\n", r.out)
    assert.same({ "sandstack-old1" }, removed())
    fake.forget()
    assert.equal(0, one({ "down", "sandstack-new1" }).code)
    assert.same({ "sandstack-new1" }, removed())
    r = one { "status", "old1", "--json" }
    assert.equal(0, r.code, r.err)
    assert.equal("sandstack-old1", assert(core.json_decode(r.out)).project)
  end)

  it("down on a name that matches nothing says so, exits 1 and removes nothing; down --help removes nothing", function()
    local r = one { "down", "nosuch" }
    assert.equal(1, r.code)
    assert.matches("^sandstack: not_found: no stack has the project name or session key \"nosuch\"", r.err)
    r = one { "down", "--help" }
    assert.equal(0, r.code)
    assert.matches("^usage: sandstack down", r.out)
    assert.same({}, removed())
  end)

  it("lists a pool's stack with its state and age, never nil or ?", function()
    local r = one { "ls" }
    assert.equal(0, r.code, r.err)
    assert.is_nil(r.out:find("nil", 1, true), r.out)
    assert.is_nil(r.out:find("?", 1, true), r.out)
    assert.matches("pp%-0a1b +%(ready%) +%d+s", r.out)
    r = one { "ls", "--json" }
    local doc = assert(core.json_decode(r.out))
    local pooled
    for _, s in ipairs(doc.stacks) do if s.project == "pp-0a1b" then pooled = s end end
    assert.equal("ready", pooled.state)
    assert.equal("pp", pooled.pool)
    assert.is_number(pooled.age_seconds)
  end)

  it("reap --expired removes the stacks whose ttl has passed, and only those; it takes no age and no --dry-run", function()
    -- two expiry marks as sandstack.docker.start leaves them (docker/expiry.lua): old1's ttl
    -- passed a minute ago, new1's is an hour away
    local vols = {}
    for _, m in ipairs { { "sandstack-old1", "old1", NOW - 60 }, { "sandstack-new1", "new1", NOW + 3600 } } do
      local _, _, v = stack(m[1], m[2], 10)
      vols[#vols + 1] = v
      vols[#vols + 1] = { Name = m[1] .. "-expiry-0a1b2c3d", Labels = { ["io.sandstack.project"] = m[1],
        ["io.sandstack.session"] = m[2], ["io.sandstack.role"] = "expiry", ["io.sandstack.expires"] = tostring(m[3]),
        ["io.sandstack.idle_timeout"] = "", ["io.sandstack.on_expiry"] = "destroy",
        ["io.sandstack.expiry_set"] = ("%.3f"):format(NOW - 100) } }
    end
    fake.answer("volumes", core.json_encode { Volumes = vols })
    local r = one { "reap", "--expired", "--older-than", "1h" }
    assert.equal(2, r.code, r.out .. r.err)
    assert.matches("^sandstack: usage: %-%-expired", r.err)
    assert.equal(2, one({ "reap", "--expired", "--dry-run" }).code)
    assert.same({}, removed())
    r = one { "reap", "--expired", "--prefix", "nothing-" }
    assert.equal(0, r.code, r.err)
    assert.equal("no stack is due\n", r.out)
    assert.same({}, removed())
    r = one { "reap", "--expired", "--json" }
    assert.equal(0, r.code, r.err)
    assert.same({ expired = { { project = "sandstack-old1", reason = "ttl", action = "destroy" } } }, core.json_decode(r.out))
    assert.same({ "sandstack-old1" }, removed())
    fake.forget()
    r = one { "reap", "--expired", "--project", "old1" } -- a session key names its project
    assert.equal(0, r.code, r.err)
    assert.equal("removed sandstack-old1 (ttl)\n", r.out)
    fake.answer("volumes", volumes)
  end)

  it("docker.reap refuses an age that is not a number, before it lists or removes anything", function()
    local docker = require("sandstack").docker
    for _, bad in ipairs { "1h", "3600", true } do -- a wrong type raises
      local ok, err = pcall(docker.reap, { docker_host = fake.host, older_than = bad })
      assert.is_false(ok, tostring(bad))
      assert.matches("option 'older_than' must be a number", tostring(err))
    end
    for _, bad in ipairs { -1, 0 / 0 } do -- a number out of range is refused
      local r, err = docker.reap { docker_host = fake.host, older_than = bad }
      assert.is_nil(r, tostring(bad))
      assert.same({ "invalid", "invalid_option", "older_than" }, { err.kind, err.reason, err.option })
    end
    assert.same({}, removed())
  end)
end)
