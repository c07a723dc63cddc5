-- The session interface on a live sandstack.docker stack (#docker): exec (with the kill on a
-- timeout or an output budget), files, logs and stats. One stack serves every it-block; its
-- project starts "sstest-session-" and is destroyed at the end, with nothing left behind.
local sandstack = require "sandstack"
local core = sandstack.core
local images = require "sandstack.docker.images"

local PREFIX = "sstest-session-"
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"

local eng = assert(sandstack.engine {})

-- The command lines running in a container, read by the engine (GET /containers/{id}/top), so
-- no shell or ps is needed inside it.
local function processes(container)
  local top = assert(eng:call("GET", "/containers/" .. container .. "/top"))
  local col
  for i, t in ipairs(top.Titles) do if t == "CMD" or t == "COMMAND" then col = i end end
  local out = {}
  for _, p in ipairs(top.Processes or {}) do out[#out + 1] = p[col] end
  return table.concat(out, "\n")
end

local function helpers_left(project)
  local list = assert(eng:call("GET", "/containers/json", nil, { query = { all = "1",
    filters = { label = { "io.sandstack.role=exec-kill", "io.sandstack.project=" .. project } } } }))
  return #list
end

describe("the session interface on sandstack.docker #docker", function()
  local stack, sandbox, tool

  setup(function()
    stack = assert(sandstack.docker.start(PREFIX .. core.random_hex(3), { agent_port = 8080, forwarder_image = SOCAT,
      subnet_pool = "10.215.0.0/16", pull = "never",
      services = {
        { name = "sandbox", image = AGENT, command = { "agent" } },
        -- a sidecar whose image has no shell at all: only socat
        { name = "tool", image = images.FORWARDER_IMAGE, command = { "-T", "3600", "TCP-LISTEN:7000,fork", "/dev/null" },
          egress = "none" },
      } }))
    sandbox, tool = stack.project .. "-sandbox", stack.project .. "-tool"
  end)

  teardown(function()
    if stack then
      local project = stack.project
      assert(stack:destroy())
      local left = assert(eng:call("GET", "/containers/json", nil, { query = { all = "1",
        filters = { label = { "io.sandstack.project=" .. project } } } }))
      assert.equal(0, #left)
    end
  end)

  describe("exec", function()
    it("runs an argv or a shell string and returns code, stdout, stderr, killed and seconds", function()
      local r = assert(stack:exec({ "sh", "-c", "printf 'a\\0b'; echo oops >&2; exit 3" }))
      assert.equal(3, r.code)
      assert.equal("a\0b", r.stdout)
      assert.equal("oops\n", r.stderr)
      assert.is_false(r.killed)
      assert.is_true(r.seconds > 0 and r.seconds < 30)
      r = assert(stack:exec("echo \"$FOO\" $(pwd) $(id -u)", { env = { FOO = "bar" }, cwd = "/tmp", user = "1000" }))
      assert.equal("bar /tmp 1000\n", r.stdout)
      assert.equal(0, r.code)
    end)

    it("runs in a named sidecar, and names the services when one is unknown", function()
      local r = assert(stack:exec({ "socat", "-V" }, { service = "tool" }))
      assert.equal(0, r.code)
      assert.matches("socat version", r.stdout)
      local _, err = stack:exec({ "true" }, { service = "nope" })
      assert.equal("invalid", err.kind)
      assert.equal("unknown_service", err.reason)
      assert.matches("sandbox, tool", err.message, 1, true)
    end)

    it("kills the command at its timeout: no sleep is left, the output so far is returned", function()
      local _, err = stack:exec("echo started; exec sleep 300", { timeout = 1 })
      assert.equal("timeout", err.kind)
      assert.is_true(err.killed)
      assert.equal("started\n", err.stdout)
      assert.is_true(err.seconds >= 1)
      local left = processes(sandbox)
      assert.is_nil(left:find("sleep 300", 1, true), left)
      assert.equal(0, helpers_left(stack.project))
    end)

    it("kills a command over its output budget, with its children", function()
      local _, err = stack:exec("sleep 301 & yes", { max_bytes = 100000 })
      assert.equal("output_limit", err.kind)
      assert.is_true(err.killed)
      assert.equal(100000, err.limit)
      assert.is_true(#err.stdout <= 100000)
      local left = processes(sandbox)
      assert.is_nil(left:find("yes", 1, true), left)
      assert.is_nil(left:find("sleep 301", 1, true), left)
    end)

    it("kills in a container whose image has no shell", function()
      local _, err = stack:exec({ "socat", "-u", "/dev/zero", "STDOUT" }, { service = "tool", max_bytes = 65536 })
      assert.equal("output_limit", err.kind)
      assert.is_true(err.killed)
      local left = processes(tool)
      assert.is_nil(left:find("/dev/zero", 1, true), left)
      _, err = stack:exec({ "socat", "-u", "TCP-LISTEN:7001", "STDOUT" }, { service = "tool", timeout = 1 })
      assert.equal("timeout", err.kind)
      assert.is_true(err.killed)
      left = processes(tool)
      assert.is_nil(left:find("7001", 1, true), left)
    end)

    it("feeds stdin, small or large, and still kills at the timeout or the budget", function()
      local r = assert(stack:exec({ "cat" }, { stdin = "hello\0world" }))
      assert.equal(0, r.code)
      assert.equal("hello\0world", r.stdout)
      -- 1 MiB echoed back: cat blocks on its output unless the exec drains it while writing
      local big = string.rep("0123456789abcdef", 65536)
      r = assert(stack:exec({ "cat" }, { stdin = big }))
      assert.equal(#big, #r.stdout)
      assert.is_true(r.stdout == big)
      r = assert(stack:exec("wc -c; exit 4", { stdin = "abc" }))
      assert.equal(4, r.code)
      assert.equal("3", r.stdout:match("%d+"))
      local _, err = stack:exec("cat >/dev/null; echo fed; exec sleep 302", { stdin = "x", timeout = 1 })
      assert.equal("timeout", err.kind)
      assert.is_true(err.killed)
      assert.equal("fed\n", err.stdout)
      local left = processes(sandbox)
      assert.is_nil(left:find("sleep 302", 1, true), left)
      _, err = stack:exec({ "cat" }, { stdin = string.rep("y", 200000), max_bytes = 50000 })
      assert.equal("output_limit", err.kind)
      assert.is_true(err.killed)
      assert.is_true(#err.stdout <= 50000)
      assert.has_error(function() stack:exec({ "cat" }, { stdin = 5 }) end)
    end)

    it("reads the output of a command that never reads its stdin, and ends it by its exit, not its timeout", function()
      -- stdin far past the pipe and socket buffers: the engine stops taking it, and the output
      -- must still be read meanwhile, or the command blocks on a full output pipe until its timeout
      local t = core.engine_clock()
      local r, err = stack:exec("head -c 1000000 /dev/zero; exit 3", { stdin = string.rep("z", 4 * 1024 * 1024),
        timeout = 8 })
      assert.is_nil(err, tostring(err))
      assert.same({ 3, 1000000, "" }, { r.code, #r.stdout, r.stderr })
      assert.is_true(r.stdout == string.rep("\0", 1000000))
      r, err = stack:exec({ "true" }, { stdin = string.rep("z", 1024 * 1024), timeout = 8 })
      assert.is_nil(err, tostring(err))
      assert.same({ 0, "", "" }, { r.code, r.stdout, r.stderr })
      local dt = core.engine_clock() - t
      assert.is_true(dt < 5, ("took %.2fs"):format(dt))
    end)

    it("puts the engine's message in stderr when the program is not there, with docker exec's 126", function()
      for _, o in ipairs { {}, { stdin = "x" } } do -- the one-call exec, and the spawned one stdin takes
        local r = assert(stack:exec({ "no-such-program-here" }, o))
        assert.equal(126, r.code)
        assert.equal("", r.stdout)
        assert.truthy(r.stderr:find("no-such-program-here", 1, true), r.stderr)
        assert.truthy(r.stderr:find("not found", 1, true), r.stderr)
      end
      -- the control: a program that ran and exited 126 keeps what it wrote where it wrote it
      local r = assert(stack:exec({ "sh", "-c", "echo out; exit 126" }))
      assert.same({ 126, "out\n", "" }, { r.code, r.stdout, r.stderr })
    end)

    it("refuses bad arguments as programming errors", function()
      assert.has_error(function() stack:exec({}) end)
      local r, err = stack:exec("true", { timeout = -1 }) -- a value: refused
      assert.is_nil(r)
      assert.same({ "invalid", "invalid_option", "timeout" }, { err.kind, err.reason, err.option })
      assert.has_error(function() stack:exec("true", { bogus = 1 }) end)
    end)
  end)

  describe("files", function()
    it("writes, reads and stats a file with its mode", function()
      assert.is_true(stack:write("/tmp/a.txt", "hello\0world\n", { mode = tonumber("640", 8) }))
      assert.equal("hello\0world\n", stack:read("/tmp/a.txt"))
      local st = assert(stack:stat("/tmp/a.txt"))
      assert.same({ "a.txt", "file", 12, tonumber("640", 8) }, { st.name, st.type, st.size, st.mode })
      assert.is_true(math.abs(st.mtime - os.time()) < 120)
      assert.equal("-rw-r----- 12\n", stack:exec("stat -c '%A %s' /tmp/a.txt").stdout:gsub("^%-", "-"))
    end)

    it("refuses a link and a directory, never following them; a missing file is ENOENT", function()
      assert(stack:exec("ln -sf /etc/passwd /tmp/link; mkdir -p /tmp/dir/sub; echo x > /tmp/dir/f"))
      local _, err = stack:read("/tmp/link")
      assert.same({ "invalid", "symlink", "/etc/passwd" }, { err.kind, err.reason, err.target })
      _, err = stack:read("/tmp/dir")
      assert.same({ "invalid", "not_regular" }, { err.kind, err.reason })
      _, err = stack:read("/tmp/none")
      assert.same({ "io", "ENOENT" }, { err.kind, err.reason })
      _, err = stack:stat("/tmp/none")
      assert.same({ "io", "ENOENT" }, { err.kind, err.reason })
      assert.equal("link", stack:stat("/tmp/link").type)
      assert.equal("/etc/passwd", stack:stat("/tmp/link").link)
      -- a write over a link replaces the link; it never writes through it
      local passwd = assert(stack:read("/etc/passwd"))
      assert.is_true(stack:write("/tmp/link", "mine"))
      assert.equal("file", stack:stat("/tmp/link").type)
      assert.equal(passwd, stack:read("/etc/passwd"))
    end)

    it("keeps a read within its budget", function()
      assert(stack:write("/tmp/big", string.rep("x", 5000)))
      local _, err = stack:read("/tmp/big", { max_bytes = 1000 })
      assert.equal("output_limit", err.kind)
      assert.equal(1000, err.limit)
      assert.equal(5000, #stack:read("/tmp/big", { max_bytes = 5000 }))
    end)

    it("lists a directory's entries and removes", function()
      local names = {}
      for _, m in ipairs(assert(stack:list("/tmp/dir"))) do names[#names + 1] = m.name .. ":" .. m.type end
      assert.same({ "f:file", "sub:directory" }, names)
      assert.is_true(stack:remove("/tmp/dir", { recursive = true }))
      local _, err = stack:stat("/tmp/dir")
      assert.equal("ENOENT", err.reason)
      assert.is_true(stack:remove("/tmp/dir")) -- already gone
      _, err = stack:list("/tmp/a.txt")
      assert.equal("ENOTDIR", err.reason)
    end)

    it("writes into a sidecar whose image has no shell", function()
      assert.is_true(stack:write("/tmp/t.txt", "in the tool", { service = "tool" }))
      assert.equal("in the tool", stack:read("/tmp/t.txt", { service = "tool" }))
      local _, err = stack:read("/tmp/t.txt")
      assert.equal("ENOENT", err.reason)
    end)

    it("streams a 256 MiB upload and download without holding the file in memory", function()
      local up, down = os.tmpname(), os.tmpname()
      assert(os.execute("head -c 268435456 /dev/urandom > " .. up))
      local function hwm()
        local f = assert(io.open("/proc/self/status"))
        local kb = f:read("*a"):match("VmHWM:%s*(%d+)")
        f:close()
        return tonumber(kb) * 1024
      end
      local before = hwm()
      assert.is_true(stack:upload(up, "/tmp/big.bin"))
      assert.equal(268435456, stack:download("/tmp/big.bin", down))
      local grew = hwm() - before
      local same = os.execute("cmp -s " .. up .. " " .. down)
      os.remove(up)
      os.remove(down)
      assert(stack:remove("/tmp/big.bin"))
      assert.is_truthy(same)
      assert.is_true(grew < 64 * 1024 * 1024, "peak memory grew by " .. grew)
    end)
  end)

  describe("logs and stats", function()
    it("reads a service's logs, with tail", function()
      local l = assert(stack:logs())
      assert.matches("agent listening on 8080", l.stdout .. l.stderr)
      local t = assert(stack:logs { service = "sandbox", tail = 0 })
      assert.equal("", t.stdout .. t.stderr)
      local s = assert(stack:logs { follow = true })
      local first = assert(s:read(1))
      assert.matches("agent listening", first.stdout .. first.stderr)
      s:close()
    end)

    it("samples every service at once under E2B's metric names", function()
      local st = assert(stack:stats())
      for _, svc in ipairs { "sandbox", "tool", "forwarder" } do
        local m = st[svc]
        assert.is_table(m, svc)
        assert.is_number(m.cpuUsedPct)
        assert.is_true(m.memUsed > 0 and m.memTotal >= m.memUsed, svc)
        assert.is_true(m.pids >= 1)
        assert.is_number(m.netRx)
      end
    end)

    it("samples over a window as a series, each sample's CPU measured since the one before", function()
      -- one CPU kept busy for the whole window, in the sandbox only
      local busy = assert(stack:spawn({ "sh", "-c", "while :; do :; done" }))
      -- what one-shot reads of the three containers cost now, under this load, one after another
      -- (the engine answers at once, without its own second of CPU measurement)
      local function one_shot_reads()
        local t = core.engine_clock()
        for _, svc in ipairs { "sandbox", "tool", "forwarder" } do
          assert(eng:call("GET", "/containers/" .. stack.project .. "-" .. svc .. "/stats", nil,
            { query = { stream = "false", ["one-shot"] = "true" } }))
        end
        return core.engine_clock() - t
      end
      local per_read = one_shot_reads()
      local t0 = core.engine_clock()
      local series = assert(stack:stats { window = 3, every = 1 })
      local took = core.engine_clock() - t0
      per_read = math.max(per_read, one_shot_reads())
      assert(busy:kill("KILL"))
      busy:wait(10)
      busy:close()
      assert.equal(3, #series)
      -- the window, and the first and last reads on top (not a second's measurement each)
      assert.is_true(took >= 2.9 and took < 3.5 + 3 * per_read, ("the window took %.2fs, one-shot reads %.2fs"):format(took, per_read))
      local last
      for i, st in ipairs(series) do
        for _, svc in ipairs { "sandbox", "tool", "forwarder" } do assert.is_table(st[svc], svc .. " in sample " .. i) end
        -- on a shared machine the loop gets what the load leaves it (under a load of 16 on 2 cores,
        -- 15 to 45%), always far above the idle tool, and never more than every CPU
        local busy_pct, idle_pct = st.sandbox.cpuUsedPct, st.tool.cpuUsedPct
        assert.is_true(busy_pct > 3 and busy_pct > 3 * idle_pct, ("sample %d: the busy sandbox used %.1f%%, the idle "
          .. "tool %.1f%%"):format(i, busy_pct, idle_pct))
        assert.is_true(busy_pct <= 100 * st.sandbox.cpuCount + 5, ("sample %d: %.1f%%"):format(i, busy_pct))
        assert.is_true(not last or st.sandbox.timestamp > last, "samples in time order")
        last = st.sandbox.timestamp
      end
      -- refused values of the right type: nil, err naming the option; a wrong type raises
      for _, c in ipairs { { { window = 0 }, "window" }, { { every = 1 }, "every" }, { { window = 1, every = 2 }, "window" },
        { { window = 3601 }, "window" } } do
        local none, serr = stack:stats(c[1])
        assert.is_nil(none)
        assert.same({ "invalid", "invalid_option", c[2] }, { serr.kind, serr.reason, serr.option })
      end
      assert.has_error(function() stack:stats { window = "3" } end)
    end)
  end)

  describe("the CLI", function()
    local run = require("helpers").cli

    it("exec prints the command's streams and exits with its code; a timeout exits 125", function()
      local code, out, err = run("exec", stack.session_key, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
      assert.same({ 7, "out\n", "err\n" }, { code, out, err })
      code, out, err = run("exec", stack.project, "--timeout", "1", "--", "sh", "-c", "echo so-far; sleep 30")
      assert.equal(125, code)
      assert.equal("so-far\n", out)
      assert.matches("^sandstack: timeout: ", err)
      assert.equal(2, (run("exec", stack.session_key)))
    end)

    it("cp copies both ways; logs and stats answer", function()
      local src, dst = os.tmpname(), os.tmpname()
      local f = assert(io.open(src, "wb"))
      f:write("via cp\n")
      f:close()
      assert.equal(0, (run("cp", src, stack.session_key .. ":/tmp/cp.txt")))
      assert.equal(0, (run("cp", stack.session_key .. ":/tmp/cp.txt", dst)))
      f = assert(io.open(dst, "rb"))
      local got = f:read("*a")
      f:close()
      os.remove(src)
      os.remove(dst)
      assert.equal("via cp\n", got)
      local code, _, err = run("cp", stack.session_key .. ":/tmp/none", dst)
      assert.equal(1, code)
      assert.matches("^sandstack: io: ", err)
      local out
      code, out, err = run("logs", stack.session_key, "--tail", "5")
      assert.equal(0, code)
      assert.matches("agent listening", out .. err)
      code, out = run("stats", stack.session_key, "--json")
      assert.equal(0, code)
      assert.is_number(require("sandstack.core").json_decode(out).sandbox.memUsed)
    end)
  end)
end)
