-- A time limit that holds with nothing of sandstack running (#docker): every sandbox runs under
-- sandstack-init, which ends its processes at the ttl (docs/lifecycle.md, "What holds the
-- deadline"). On the live engine: the command composed as the engine composes it, for each form;
-- a ttl of 4 s started by a process that exits, the sandbox stopped at it with no sandstack
-- process alive and the objects gone at the next pass (Lua and `sandstack reap --expired`); a
-- guest that kills, stops and signals its PID 1 and writes the deadline store; set_timeout
-- extending and shortening; a wake after the ttl; a snapshot and restore (one init, not two); an
-- image without a shell; gVisor, which lets a guest stop PID 1. Objects: projects
-- "sstest-dl-<random>-...", removed by prefix at the end, and counted.
local sandstack = require "sandstack"
local h = require "helpers"
local core = sandstack.core
local docker = sandstack.docker
local images = require "sandstack.docker.images"

local PREFIX = "sstest-dl-" .. h.random_suffix(3)
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
-- sandstack-init's contract (docs/lifecycle.md): its path, its deadline file, its exit status,
-- the health check's interval under a runtime such as gVisor
local INIT, DEADLINE_FILE, EXIT, CHECK_INTERVAL = "/.sandstack/init", "/.sandstack/deadline", 124, 5
local function deadline_line(at) return ("sandstack-init 1 deadline %d\n"):format(at) end
-- How long after its deadline a sandbox may still run: the init's grace (2 s), which the agent
-- does not need (it ends at SIGTERM), and the engine's own pace on a loaded machine.
local BOUND = 4
local eng = assert(sandstack.engine {})

local function opts(project, extra)
  local o = { project_name = project, agent_port = 8080, forwarder_image = SOCAT, pull = "never",
    services = { { name = "sandbox", image = AGENT, command = { "agent" } } } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function info(name) return assert(eng:call("GET", "/containers/" .. name .. "/json")) end

local function sh_in(container, cmd)
  return h.sh(("docker exec %s sh -c %s"):format(h.q(container), h.q(cmd)))
end

-- Waits, reading the engine by the docker CLI only (no sandstack call that could act on the
-- stack), until the container no longer runs; at most until `at` + limit. The time it was seen
-- stopped (epoch seconds, fractional from the engine's FinishedAt) and its state, or nil.
local function stopped(container, at, limit)
  local seen
  pcall(h.wait_for, container .. " to stop", function()
    local out = h.sh("docker inspect -f '{{.State.Running}} {{.State.ExitCode}} {{.State.FinishedAt}}' " .. h.q(container))
    local running, code, fin = out:match("^(%a+) (%d+) (%S+)")
    if running == "false" then seen = { code = tonumber(code), finished = fin } end
    return seen
  end, math.max(1, at + limit - os.time()), 0.2)
  if not seen then return nil end
  local y, mo, d, hh, mi, ss, frac = seen.finished:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)%.?(%d*)Z$")
  local t = os.time { year = y, month = mo, day = d, hour = hh, min = mi, sec = ss, isdst = false }
  local utc = t + (os.time() - os.time(os.date("!*t"))) -- FinishedAt is UTC
  seen.at = utc + (frac ~= "" and tonumber("0." .. frac) or 0)
  return seen
end

-- The stack's objects on the engine (containers, networks, volumes).
local function count(project) return h.count_labelled(eng, project) end

describe("sandstack-init: a time limit that holds with nothing of sandstack running #docker", function()
  teardown(function() docker.reap { prefix = PREFIX } end)

  it("composes the sandbox's command exactly as the engine does, for every form of entrypoint and command", function()
    local forms_e = { false, {}, "", { "echo", "e" } }
    local forms_c = { false, {}, { "c1" } }
    local made = {}
    for _, image in ipairs { AGENT, images.FORWARDER_IMAGE } do
      local config = assert(eng:call("GET", "/images/" .. image .. "/json")).Config
      for _, e in ipairs(forms_e) do
        for _, c in ipairs(forms_c) do
          local svc = { name = "sandbox", image = image, entrypoint = e or nil, command = c or nil }
          local o = opts(PREFIX .. "-cmd", { services = { svc } })
          local model = assert(core.stack_model(o, "k"))
          local plain = assert(model:plan {})
          local wrapped = assert(model:plan { init = { image = { Entrypoint = config.Entrypoint, Cmd = config.Cmd } } })
          model:close()
          local function sandbox(p)
            for _, x in ipairs(p.containers) do if x.service == "sandbox" then return core.json_decode(x.body_json) end end
          end
          local after = sandbox(wrapped)
          -- what the engine makes of the body as it was before the init (its Entrypoint and Cmd as
          -- the plan writes them, [] kept): create, never start
          local raw
          for _, x in ipairs(plain.containers) do if x.service == "sandbox" then raw = x.body_json end end
          local name = PREFIX .. "-cmd-" .. h.random_suffix(3)
          local e_text, c_text = raw:match('"Entrypoint":(%b[])'), raw:match('"Cmd":(%b[])')
          local text = ('{"Image":%s,%s%s"Labels":{"io.sandstack.project":%s}}'):format(core.json_encode(image),
            e_text and ('"Entrypoint":' .. e_text .. ",") or "", c_text and ('"Cmd":' .. c_text .. ",") or "",
            core.json_encode(PREFIX .. "-cmd"))
          local r = require("sandstack.stack.batch").run(eng, { { method = "POST",
            path = "/containers/create?name=" .. name, body_json = text } }, 60)[1]
          local created, err = r.ok, r.err
          local what = ("%s entrypoint=%s command=%s"):format(image, core.json_encode(e or "-"), core.json_encode(c or "-"))
          if not created then
            -- nothing to run: the engine refuses the create, and the plan left the body to it
            assert.matches("command", tostring(err), nil, true)
            assert.not_equal(INIT, (after.Entrypoint or {})[1], what)
          else
            made[#made + 1] = name
            local cfg = info(name).Config
            assert.same({ INIT, "--" }, { after.Entrypoint[1], after.Entrypoint[2] }, what)
            local want = {}
            for _, a in ipairs(cfg.Entrypoint or {}) do want[#want + 1] = a end
            local nentry = #want
            for _, a in ipairs(cfg.Cmd or {}) do want[#want + 1] = a end
            local got = {}
            for i = 3, #after.Entrypoint do got[#got + 1] = after.Entrypoint[i] end
            assert.equal(nentry, #got, what .. ": the entrypoint's part")
            for _, a in ipairs(after.Cmd) do got[#got + 1] = a end
            assert.same(want, got, what)
          end
        end
      end
    end
    for _, n in ipairs(made) do eng:call("DELETE", "/containers/" .. n, nil, { query = { force = "1" } }) end
    assert.equal(0, count(PREFIX .. "-cmd"))
  end)

  it("ends a sandbox at its ttl of 4 s with no process of sandstack alive; the next pass removes its objects", function()
    local project = PREFIX .. "-ttl"
    -- started by a child process that exits as soon as the start returns
    local script = os.tmpname()
    local out = h.must(h.child_command(script, ([[
      local docker = require("sandstack").docker
      local stack = assert(docker.start(%q, %s))
      io.write(stack:expires().at, "\n")
      stack:close()
    ]]):format(project, "{ project_name = " .. ("%q"):format(project) .. [[, agent_port = 8080,
      forwarder_image = "sandstack-test/socat:local", pull = "never", ttl = 4,
      services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" } } } }]])))
    os.remove(script)
    local at = assert(tonumber(out:match("(%d+)%s*$")), out)
    assert.equal("true", h.must("docker inspect -f '{{.State.Running}}' " .. h.q(project .. "-sandbox")):match("%a+"),
      "the sandbox runs once the start returned")
    local s = stopped(project .. "-sandbox", at, BOUND + 20)
    assert.truthy(s, ("the sandbox still runs %d s after its ttl"):format(os.time() - at))
    assert.equal(EXIT, s.code)
    assert.is_true(s.at >= at - 1, ("stopped %.1f s before its deadline"):format(at - s.at))
    assert.is_true(s.at <= at + BOUND, ("stopped %.1f s after its deadline"):format(s.at - at))
    -- nothing of sandstack acted: the forwarder runs and every object is still there
    assert.equal("true", h.must("docker inspect -f '{{.State.Running}}' " .. h.q(project .. "-forwarder")):match("%a+"))
    assert.matches("the deadline passed", h.must("docker logs " .. h.q(project .. "-sandbox") .. " 2>&1"))
    assert.is_true(count(project) > 3)
    -- the next pass: sandstack reap --expired
    local code, text, err = h.cli("reap", "--expired", "--prefix", project)
    assert.equal(0, code, err)
    assert.equal("removed " .. project .. " (ttl)\n", text)
    assert.equal(0, count(project))
  end)

  it("keeps its deadline whatever the guest does to PID 1 or the deadline store", function()
    local project = PREFIX .. "-guest"
    local stack = assert(docker.start(project, opts(project, { ttl = 12 })))
    local at = stack:expires().at
    local sb = project .. "-sandbox"
    assert.equal(200, require("sandstack.docker.http").request { url = stack.endpoint .. "/health" }.status)
    stack:close()
    -- as root in the sandbox: every signal to PID 1, a forged deadline written where the init
    -- reads it and the signal that makes it read again, a remount, its memory and environment
    local out = assert(sh_in(sb, table.concat({
      "for s in KILL TERM STOP INT HUP QUIT USR1 SEGV; do kill -$s 1; done",
      "echo 'sandstack-init 1 deadline 9999999999' > " .. DEADLINE_FILE .. " 2>/dev/null && echo WROTE",
      "rm -f " .. DEADLINE_FILE .. " 2>/dev/null && echo REMOVED",
      "touch /.sandstack/x 2>/dev/null && echo CREATED",
      "mount -o remount,rw /.sandstack 2>/dev/null && echo REMOUNTED",
      "kill -16 1", -- SIGSTKFLT: "read the deadline file again"
      "cat /proc/1/environ >/dev/null 2>&1 && echo ENVIRON",
      "head -c 1 /proc/1/mem >/dev/null 2>&1 && echo MEMORY",
      "sleep 1; grep State /proc/1/status; tr '\\0' ' ' < /proc/1/cmdline; echo",
    }, "\n")))
    local s = stopped(sb, at, BOUND + 20)
    assert.truthy(s, "the guest kept its sandbox past the deadline:\n" .. out)
    assert.equal(EXIT, s.code)
    assert.is_true(s.at <= at + BOUND and s.at >= at - 1, ("stopped %.1f s from its deadline"):format(s.at - at))
    for _, word in ipairs { "WROTE", "REMOVED", "CREATED", "REMOUNTED", "ENVIRON", "MEMORY" } do
      assert.is_nil(out:find(word, 1, true), word .. ":\n" .. out)
    end
    assert.matches("State:%s+S", out) -- neither ended nor stopped
    assert.truthy(out:find(INIT .. " -- agent", 1, true), out)
    docker.down(project)
  end)

  it("moves the deadline with set_timeout: the sandbox outlives the old one, then stops at a shorter one", function()
    local project = PREFIX .. "-move"
    -- a ttl long enough for a set_timeout to arrive before it on a loaded engine
    local stack = assert(docker.start(project, opts(project, { ttl = 12 })))
    local old = stack:expires().at
    local set_at = os.time()
    assert.is_true(assert(stack:set_timeout(60)))
    stack:close()
    local again = assert(docker.open(project)) -- another handle, as another process would have
    local later = again:expires().at
    -- 60 s from the call (a second of rounding), well past the start's 12
    assert.is_true(later >= set_at + 59 and later > old + 40, ("old %s, set at %s, now %s"):format(old, set_at, later))
    assert.is_nil(stopped(project .. "-sandbox", old, BOUND + 2), "stopped at the deadline set_timeout moved")
    local file = h.sh("docker exec " .. project .. "-sandbox cat " .. DEADLINE_FILE)
    assert.is_true(assert(again:set_timeout(2))) -- shortened
    local short = again:expires().at
    local s = stopped(project .. "-sandbox", short, BOUND + 20)
    assert.truthy(s, "the shortened deadline did not hold")
    assert.equal(EXIT, s.code)
    assert.is_true(s.at <= short + BOUND, ("stopped %.1f s after the shortened deadline"):format(s.at - short))
    assert.equal(deadline_line(later), file)
    -- a wake after the ttl is refused until set_timeout gives it time again
    local ok, err = again:wake()
    assert.is_nil(ok)
    assert.equal("invalid", err.kind)
    assert.equal("expired", err.reason)
    assert.equal("exited", info(project .. "-sandbox").State.Status)
    assert(again:set_timeout(60))
    assert(again:wake())
    assert.equal(deadline_line(again:expires().at),
      h.must("docker exec " .. project .. "-sandbox cat " .. DEADLINE_FILE))
    local done = assert(docker.reap { expired = true, project = project })
    assert.same({}, done) -- not due
    again:destroy()
    again:close()
  end)

  it("snapshots a sandbox under its init into an image of its own command, and restores it under one init", function()
    local project = PREFIX .. "-snap"
    local stack = assert(docker.start(project, opts(project, { ttl = 120 })))
    assert(sh_in(project .. "-sandbox", "echo kept > /tmp/kept"))
    local snap = assert(stack:snapshot { name = "dl" })
    finally(function() pcall(docker.remove_snapshot, snap) end) -- a failure below leaves no image
    local cfg = assert(eng:call("GET", "/images/" .. snap.image .. "/json")).Config
    assert.equal(0, #(cfg.Entrypoint or {}), "the image's entrypoint holds the init")
    assert.same({ "agent" }, cfg.Cmd)
    stack:destroy()
    stack:close()
    local child = project .. "-r"
    local restored = assert(docker.start(child, { from_snapshot = snap, project_name = child, ttl = 12 }))
    assert.equal("kept\n", (sh_in(child .. "-sandbox", "cat /tmp/kept")))
    local at = restored:expires().at
    restored:close()
    local s = stopped(child .. "-sandbox", at, BOUND + 20)
    assert.truthy(s, "the restored sandbox outlived its ttl")
    assert.equal(EXIT, s.code)
    local c = info(child .. "-sandbox").Config
    assert.same({ INIT, "--" }, c.Entrypoint) -- one init, not two
    assert.same({ "agent" }, c.Cmd)
    docker.down(child)
    assert(docker.remove_snapshot(snap))
  end)

  it("runs a sandbox whose image has no shell under the init, and ends it at its ttl", function()
    local project = PREFIX .. "-noshell"
    -- the sandbox is the shell-less socat image, relaying to an agent beside it
    local stack = assert(docker.start(project, opts(project, { ttl = 4, services = {
      { name = "sandbox", image = images.FORWARDER_IMAGE, command = { "TCP-LISTEN:8080,fork,reuseaddr", "TCP:web:8080" },
        depends_on = { "web" } },
      { name = "web", image = AGENT, command = { "agent" }, egress = "none" } } })))
    assert.is_false(select(2, h.sh("docker exec " .. project .. "-sandbox /bin/sh -c true")), "the image has a shell")
    assert.equal(200, require("sandstack.docker.http").request { url = stack.endpoint .. "/health" }.status)
    local at = stack:expires().at
    stack:close()
    local s = stopped(project .. "-sandbox", at, BOUND + 20)
    assert.truthy(s, "the shell-less sandbox outlived its ttl")
    assert.equal(EXIT, s.code)
    assert.is_true(s.at <= at + BOUND, ("stopped %.1f s after its deadline"):format(s.at - at))
    assert.same({ INIT, "--", "/usr/bin/socat" }, info(project .. "-sandbox").Config.Entrypoint)
    docker.down(project)
  end)

  it("under gVisor, where a guest can stop PID 1, ends the sandbox by the engine's health check", function()
    local runtimes = assert(eng:call("GET", "/info")).Runtimes or {}
    if not runtimes.runsc then
      pending("runsc is not registered with this engine (spec/support/runsc-setup.sh)")
      return
    end
    local project = PREFIX .. "-runsc"
    local stack = assert(docker.start(project, opts(project, { ttl = 10, runtime = "runsc" })))
    local at = stack:expires().at
    -- gVisor delivers a guest's SIGSTOP to its PID 1 (Linux drops it): stopped again and again
    local out = assert(sh_in(project .. "-sandbox", "(while :; do kill -STOP 1; sleep 0.2; done) >/dev/null 2>&1 & "
      .. "sleep 0.5; grep State /proc/1/status"))
    assert.matches("State:%s+T", out) -- the init is stopped: only the check can end the sandbox
    stack:close()
    local limit = CHECK_INTERVAL + BOUND + 4 -- a check every 5 s, each one an exec under gVisor
    local s = stopped(project .. "-sandbox", at, limit + 20)
    assert.truthy(s, "the guest kept its sandbox past the deadline under gVisor")
    assert.is_true(s.at <= at + limit, ("stopped %.1f s after its deadline"):format(s.at - at))
    docker.down(project)
  end)

  it("leaves nothing of this spec behind", function()
    docker.reap { prefix = PREFIX }
    assert.equal(0, count(PREFIX))
  end)
end)
