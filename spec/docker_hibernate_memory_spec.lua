-- hibernate{memory = true} on an engine that can checkpoint (#docker): a Docker engine nested
-- in a container of the host's (spec/support/nested-engine.sh, kind docker26-criu: Debian 13's
-- docker.io with sid's CRIU, the daemon in experimental mode). The host's own engine cannot (not
-- experimental, no CRIU); its refusal is docker_lifecycle_spec's.
-- One stack on the nested engine; a counter runs in the sandbox as a process of its own (its
-- count lives in the shell's memory). Hibernated with memory and woken twice, with a file
-- written between the cycles: the same process (same pid) goes on counting from where it was,
-- the containers were stopped in between, and the file is still there.
-- The stack is driven by a child process inside the nested engine's network namespace (the
-- forwarder publishes on that namespace's 127.0.0.1). Needs root (nsenter) and debootstrap;
-- without them the test is skipped, except under CI=true, where it fails.
local sandstack = require "sandstack"
local core = sandstack.core
local h = require "helpers"

local NAME = "sstest-cr-" .. core.random_hex(3):lower()
local KIND = "docker26-criu"
local KEY = "sstest-crmem-" .. core.random_hex(3):lower()

-- The child: starts the stack, runs the counter, hibernates and wakes twice; prints one JSON
-- line with what it saw.
local CHILD = [==[
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local out = { cycles = {} }
local function finish(err)
  if err then out.error = { kind = err.kind, reason = err.reason, message = tostring(err.message) } end
  io.write("RESULT ", core.json_encode(out), "\n")
end
local host, key = HOST, KEY
local stack, err = docker.start(key, { project_name = key, docker_host = host, agent_port = 8080, pull = "never",
  forwarder_image = "sandstack-test/socat:local", ready_timeout = 120,
  services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" } } } })
if not stack then return finish(err) end
local function sh(cmd) return assert(stack:exec({ "sh", "-c", cmd })).stdout end
-- the counter rewrites its file 20 times a second: a read between truncate and write is empty
local function count()
  for _ = 1, 50 do
    local n = tonumber(sh("cat /tmp/count"))
    if n then return n end
    core.sleep(0.02)
  end
end
local eng = assert(sandstack.engine { host = host })
-- the engine lists no checkpoint as null
local function checkpoints()
  local list = eng:call("GET", "/containers/" .. key .. "-sandbox/checkpoints")
  return type(list) == "table" and #list or 0
end
local function state(service)
  return assert(eng:call("GET", "/containers/" .. key .. "-" .. service .. "/json")).State.Status
end
out.pid = tonumber(sh("sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done' "
  .. ">/dev/null 2>&1 </dev/null & echo $!"))
core.sleep(0.3)
for cycle = 1, 2 do
  local c = {}
  out.cycles[cycle] = c
  sh("echo kept-" .. cycle .. " > /tmp/file-" .. cycle)
  c.before = count() -- what the process had counted just before its dump
  local t0 = core.engine_clock()
  local ok; ok, err = stack:hibernate { memory = true }
  c.hibernate_s = core.engine_clock() - t0
  if not ok then
    -- what a refused dump left: the stack as it was, the same process still counting
    local r = require("sandstack.docker.http").request { url = stack.endpoint .. "/health", timeout = 10 }
    c.refused = { sandbox = state("sandbox"), forwarder = state("forwarder"), answer = r and r.status,
      alive = sh("kill -0 " .. out.pid .. " && echo alive || echo gone"):match("%a+"), count = count(),
      checkpoints = checkpoints() }
    break
  end
  c.states = { sandbox = state("sandbox"), forwarder = state("forwarder") }
  c.port_after_hibernate = stack.port
  t0 = core.engine_clock()
  ok, err = stack:wake()
  c.wake_s = core.engine_clock() - t0
  if not ok then break end
  c.port = stack.port
  c.alive = sh("kill -0 " .. out.pid .. " && echo alive || echo gone"):match("%a+")
  c.after = count()
  core.sleep(0.3)
  c.later = count()
  c.files = sh("cat /tmp/file-*")
  c.checkpoints = checkpoints()
  err = nil
end
eng:close()
stack:destroy()
stack:close()
finish(err)
]==]

-- "6.18.4-x" -> 6.18, "Version: 4.1.1" -> 4.1: { major, minor } compared as one number
local function version(text)
  local a, b = tostring(text):match("(%d+)%.(%d+)")
  return a and tonumber(a) * 1000 + tonumber(b) or 0
end

describe("hibernate{memory = true} on an engine with CRIU #docker", function()
  local started, skip_why, sock, pid, criu, kernel

  setup(function()
    if select(2, h.sh("test $(id -u) = 0 && command -v nsenter && command -v debootstrap")) ~= true then
      skip_why = "needs root, nsenter and debootstrap (the nested engine)"
      if os.getenv("CI") == "true" then error(skip_why, 0) end
      return
    end
    local out, ok = h.sh(("bash spec/support/nested-engine.sh start %s %s 2>&1"):format(NAME, KIND))
    started = true
    if not ok then
      skip_why = "the nested engine did not start: " .. out
      if os.getenv("CI") == "true" then error(skip_why, 0) end
      return
    end
    sock, pid = out:match("SOCK=(%S+)"), tonumber(out:match("PID=(%d+)"))
    criu = version((h.sh("docker exec " .. NAME .. " criu --version")))
    kernel = version((h.sh("uname -r")))
  end)

  teardown(function()
    if started then h.sh("bash spec/support/nested-engine.sh stop " .. NAME) end
  end)

  -- Kernels from 6.16 on refuse SO_PASSCRED/SO_PASSSEC on an inet socket; CRIU before 4.2 asks for
  -- both on every socket it dumps, so any process holding one (the agent's listener) cannot be
  -- dumped. Then the call must be a typed checkpoint_failed that left the stack as it was.
  it("keeps the processes: the same counter goes on after each wake, with the files (or, where CRIU cannot dump, a typed refusal that changes nothing)", function()
    if skip_why then return pending(skip_why) end
    local script = os.tmpname()
    local src = CHILD:gsub("HOST, KEY", function() return ("%q, %q"):format("unix://" .. sock, KEY) end)
    local cmd = h.child_command(script, src)
    local out = h.sh(("nsenter -t %d -n -- %s 2>&1"):format(pid, cmd))
    os.remove(script)
    local res = core.json_decode(out:match("RESULT (%b{})") or "null")
    assert.is_table(res, out)
    assert.is_true(res.pid > 1, out)
    if kernel >= 6016 and criu < 4002 then
      io.stderr:write(("# criu: CRIU %d.%d on kernel %d.%d cannot dump an inet socket: expecting the refusal\n"):format(
        math.floor(criu / 1000), criu % 1000, math.floor(kernel / 1000), kernel % 1000))
      assert.same({ "engine", "checkpoint_failed" }, { res.error and res.error.kind, res.error and res.error.reason }, out)
      assert.matches("criu", res.error.message)
      local r = res.cycles[1].refused
      assert.same({ sandbox = "running", forwarder = "running", answer = 200, alive = "alive", checkpoints = 0 },
        { sandbox = r.sandbox, forwarder = r.forwarder, answer = r.answer, alive = r.alive, checkpoints = r.checkpoints })
      assert.is_true(r.count > res.cycles[1].before, out) -- still counting, never stopped
      return
    end
    assert.is_nil(res.error, out)
    assert.equal(2, #res.cycles)
    local last_port
    for i, c in ipairs(res.cycles) do
      assert.same({ sandbox = "exited", forwarder = "exited" }, c.states) -- memory freed in between
      assert.is_nil(c.port_after_hibernate)
      assert.equal("alive", c.alive, "cycle " .. i .. ": the counting process is gone")
      assert.is_true(c.before >= 1, out)
      -- it went on from its own count: a process started afresh would count from 1 again
      assert.is_true(c.after >= c.before, out)
      assert.is_true(c.later > c.after, "cycle " .. i .. ": the counter stopped")
      assert.equal(i == 1 and "kept-1\n" or "kept-1\nkept-2\n", c.files)
      assert.equal(0, c.checkpoints) -- the checkpoint is removed once the stack runs
      assert.is_number(c.port)
      assert.not_equal(last_port, c.port)
      last_port = c.port
      io.stderr:write(("# criu: cycle %d: hibernate with memory %.2f s, wake %.2f s, counter %d -> %d\n"):format(i,
        c.hibernate_s, c.wake_s, c.before, c.after))
    end
  end)
end)
