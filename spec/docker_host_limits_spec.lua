-- The host-limit refusals on a real engine with its limits lowered (#docker): one Docker 20.10
-- engine nested in a container of the host's (spec/support/nested-engine.sh, kind docker20, the
-- rootfs the engine matrix builds), started with an address pool of eight /28s. Its dockerd's
-- open-file limit is lowered from outside (prlimit); kernel.pid_max and the neighbour table's
-- gc_thresh3 are lowered for one child process only, by a file bind-mounted over the /proc/sys
-- file in a mount namespace of its own (unshare -m): the host's values are never changed. Each
-- refusal is a typed host_limit naming the setting, made before any Engine call (nothing of the
-- project is on the engine after it); `sandstack check` reports the pool from the engine's own
-- flags; and a start under the limits still works. The stack is driven from the nested
-- engine's network namespace (the forwarder publishes on its 127.0.0.1). Needs root, nsenter,
-- unshare, prlimit and debootstrap; without them the test is skipped, except under CI=true.
local sandstack = require "sandstack"
local core = sandstack.core
local h = require "helpers"

local NAME = "sstest-lim-" .. core.random_hex(3):lower()
local KEY = "sstest-limits-" .. core.random_hex(3):lower()
local POOL = '{ "default-address-pools": [ { "base": "10.99.0.0/25", "size": 28 } ] }'

-- The child: one start (or its refusal), one JSON line with what it saw.
local CHILD = [==[
local sandstack = require "sandstack"
local core = sandstack.core
local out = {}
local stack, err = sandstack.docker.start(KEY, { project_name = KEY, docker_host = HOST, agent_port = 8080,
  pull = "never", forwarder_image = "sandstack-test/socat:local", ready_timeout = 120,
  services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" } } } })
if stack then
  out.started = true
  out.echo = assert(stack:exec({ "echo", "under the limits" })).stdout
  stack:destroy()
  stack:close()
else
  out.error = { kind = err.kind, reason = err.reason, message = tostring(err.message), setting = err.setting }
end
io.write("RESULT ", core.json_encode(out), "\n")
]==]

describe("host limits on a nested engine #docker", function()
  local started, skip_why, sock, pid, dpid, eng, dir

  -- a test that cannot run here is skipped, except under CI=true, where the setup fails
  local function skip(why)
    skip_why = why
    if os.getenv("CI") == "true" then error(why, 0) end
  end

  setup(function()
    local tools = "nsenter unshare prlimit debootstrap"
    if select(2, h.sh("test $(id -u) = 0 && command -v " .. tools)) ~= true then
      return skip("needs root and " .. tools .. " (the nested engine)")
    end
    started = true
    local out, ok = h.sh(("SANDSTACK_NESTED_DAEMON_JSON=%s bash spec/support/nested-engine.sh start %s docker20 2>&1")
      :format(h.q(POOL), NAME))
    if not ok then return skip("the nested engine did not start: " .. out) end
    sock, pid = out:match("SOCK=(%S+)"), tonumber(out:match("PID=(%d+)"))
    dpid = assert(core.engine_process(sock)).pid -- the nested dockerd, as this pid namespace sees it
    eng = assert(sandstack.engine { host = "unix://" .. sock })
    dir = h.must("mktemp -d /tmp/sstest-limits.XXXXXX"):match("[^\n]+")
  end)

  teardown(function()
    if eng then eng:close() end
    if started then h.sh("bash spec/support/nested-engine.sh stop " .. NAME) end
    if dir then h.sh("rm -rf " .. h.q(dir)) end
  end)

  -- Runs src in a child, with each /proc/sys file of over (path -> value) replaced for that
  -- child alone (in this network namespace: the neighbour table's settings exist only in the
  -- host's), or in the nested engine's network namespace (in_engine_ns: a start that gets as far
  -- as its published port); the child's output.
  local function child(src, over, env, in_engine_ns)
    local script = dir .. "/child-" .. core.random_hex(3) .. ".lua"
    src = src:gsub("HOST", function() return ("%q"):format("unix://" .. sock) end)
      :gsub("KEY", function() return ("%q"):format(KEY) end)
    local cmd = h.child_command(script, src)
    local mounts = {}
    for path, value in pairs(over or {}) do
      local file = dir .. "/" .. path:gsub("/", "_")
      h.write_file(file, value .. "\n")
      mounts[#mounts + 1] = ("mount --bind %s %s && "):format(h.q(file), h.q(path))
    end
    local enter = in_engine_ns and ("nsenter -t %d -n -- "):format(pid) or ""
    return h.sh(("%senv %s unshare -m --propagation private sh -c %s 2>&1"):format(enter, env or "",
      h.q(table.concat(mounts) .. "exec " .. cmd)))
  end

  local function start_result(over, in_engine_ns)
    local out = child(CHILD, over, nil, in_engine_ns)
    local res = core.json_decode(out:match("RESULT (%b{})") or "null")
    assert.is_table(res, out)
    return res, out
  end

  local function refused(res, out, reason, setting)
    assert.is_table(res.error, out)
    assert.equal("host_limit", res.error.kind, out)
    assert.equal(reason, res.error.reason, out)
    assert.equal(setting, res.error.setting, out)
    assert.matches("this start would meet a host limit: " .. setting:gsub("%p", "%%%0") .. " is ", res.error.message)
    assert.matches("raise it with `", res.error.message, 1, true)
    assert.equal(0, h.count_labelled(eng, KEY), "a refused start sent nothing to the engine")
  end

  it("refuses a start with kernel.pid_max lowered, naming the setting", function()
    if skip_why then return pending(skip_why) end
    local res, out = start_result { ["/proc/sys/kernel/pid_max"] = 100 }
    refused(res, out, "pid_max", "kernel.pid_max")
    assert.matches("kernel.pid_max is 100 with %d+ tasks in use: 1 more session needs about 35 more tasks",
      res.error.message)
  end)

  it("refuses a start with the neighbour table's gc_thresh3 lowered, naming the setting", function()
    if skip_why then return pending(skip_why) end
    local res, out = start_result { ["/proc/sys/net/ipv4/neigh/default/gc_thresh3"] = 1 }
    refused(res, out, "neigh_gc_thresh3", "net.ipv4.neigh.default.gc_thresh3")
  end)

  it("refuses a start with the engine's open-file limit lowered, and starts once it is back", function()
    if skip_why then return pending(skip_why) end
    local before = assert(core.engine_process(sock))
    assert.is_number(before.nofile, core.json_encode(before))
    -- room for 5 more files: one session takes about 20
    h.must(("prlimit --pid %d --nofile=%d:"):format(dpid, before.fds + 5))
    local ok, res, out = pcall(start_result)
    h.must(("prlimit --pid %d --nofile=%d:"):format(dpid, before.nofile))
    assert(ok, res)
    refused(res, out, "engine_open_files", "the engine's open-file limit")
    local said = ("the engine's open-file limit is %d with "):format(before.fds + 5)
    assert.matches(said:gsub("%p", "%%%0") .. "%d+ open files in use", res.error.message)
    assert.matches("`LimitNOFILE=", res.error.message, 1, true)
    -- the same start under the limits as they were
    res, out = start_result(nil, true)
    assert.is_true(res.started, out)
    assert.equal("under the limits\n", res.echo, out)
    assert.equal(0, h.count_labelled(eng, KEY))
  end)

  it("reports the pool the engine was started with: eight networks, the default bridge's taken", function()
    if skip_why then return pending(skip_why) end
    local function check(n)
      local src = ('os.exit(require("sandstack.cli").main({ "check", "--json", "--sessions", "%d" }))'):format(n)
      local out = child(src, nil, "DOCKER_HOST=" .. h.q("unix://" .. sock))
      local doc = core.json_decode(out:match("(%b{})%s*$") or "null")
      assert.is_table(doc, out)
      for _, r in ipairs(doc.limits) do
        if r.limit == "address_pool" then return r, doc, out end
      end
      error("no address_pool record: " .. out)
    end
    local r, doc, out = check(3)
    assert.equal("ok", r.status, out)
    assert.equal(8, r.value, out)
    assert.equal(1, r.used, out) -- docker0's /28
    assert.equal(3, r.fit, out)
    assert.is_true(doc.fits, out)
    r, doc, out = check(4)
    assert.equal("exceeded", r.status, out)
    assert.equal("the engine's default address pools (default-address-pools in /run/ext/daemon.json) hold 8 networks with 1 in "
      .. "use: 4 more sessions need 8 more (2 each), room for 3: give the engine larger pools (`default-address-pools` "
      .. "in daemon.json, then restart it) or give sandstack a subnet_pool", r.message)
    assert.is_false(doc.fits, out)
  end)
end)
