-- The readiness wait (A.wait_ready) and its HTTP probe (core.http_probe) against hostile agents
-- on 127.0.0.1 (spec/support/hostile_http.py): no engine needed, so it runs in every mode.
-- Each attack test really attempts the attack: an agent that drips its answer, one that sends
-- 512 MiB, one that redirects the host to another local service.
local A = require "sandstack.docker.apply"
local core = require "sandstack.core"
local h = require "helpers"

local clock = core.engine_clock

-- A minimal executor run: wait_ready reads the plan's readiness fields, emits events, and
-- inspects each container of the plan (none here, so it needs no engine).
local function fake_run(ready_timeout, extra)
  local run = { plan = { project = "sstest-ready", sandbox = "sandbox", ready_path = "/health",
    ready_timeout = ready_timeout, containers = {} }, t0 = A.now(), events = {} }
  run.on_event = function(ev) run.events[#run.events + 1] = ev end
  for k, v in pairs(extra or {}) do run[k] = v end
  return run
end

local function timed(fn, ...)
  local t = clock()
  local a, b = fn(...)
  return clock() - t, a, b
end

-- kB figures of /proc/self/status (VmHWM is the peak resident size so far).
local function vm(field)
  local s = h.read_file("/proc/self/status") or ""
  return tonumber(s:match(field .. ":%s*(%d+)")) or 0
end

local srv = {}

local function read_ports(file)
  local ports = {}
  for name, port in (h.read_file(file) or ""):gmatch("(%w+) (%d+)") do ports[name] = tonumber(port) end
  return ports
end

local function hits() return h.read_file(srv.dir .. "/hits") or "" end

describe("readiness probe against hostile agents", function()
  setup(function()
    srv.dir = h.must("mktemp -d /tmp/sstest-ready.XXXXXX"):gsub("%s+$", "")
    srv.pid = h.start(("python3 spec/support/hostile_http.py %s %s 600 >/dev/null 2>&1")
      :format(h.q(srv.dir .. "/ports"), h.q(srv.dir .. "/hits")))
    local t = clock()
    repeat
      srv.ports = read_ports(srv.dir .. "/ports")
      if srv.ports.control then break end
      A.sleep(0.05)
    until clock() - t > 10
    assert(srv.ports.control, "the hostile servers did not start")
  end)

  teardown(function()
    if srv.pid then h.stop(srv.pid) end
    if srv.dir then h.sh("rm -rf " .. h.q(srv.dir)) end
  end)

  describe("A.wait_ready", function()
    it("control: an agent answering 200 is ready", function()
      local run = fake_run(5)
      local dt, ok, err = timed(A.wait_ready, run, srv.ports.ok)
      assert.is_true(ok, tostring(err))
      assert.is_true(dt < 2, ("took %.2fs"):format(dt))
      assert.equal("ready", run.events[#run.events].phase)
    end)

    it("drip: an agent dripping a byte every 0.5 s cannot hold it past ready_timeout", function()
      local dt, ok, err = timed(A.wait_ready, fake_run(2), srv.ports.drip)
      assert.is_nil(ok)
      assert.equal("timeout", err.kind)
      assert.equal("ready", err.phase)
      assert.is_true(dt < 2 + 1.5, ("wait_ready took %.2fs with ready_timeout = 2"):format(dt))
      print(("# drip: wait_ready(ready_timeout = 2) returned timeout after %.2fs"):format(dt))
    end)

    it("huge body: a 512 MiB answer costs neither time nor memory", function()
      collectgarbage()
      local hwm0, rss0 = vm("VmHWM"), vm("VmRSS")
      local dt, ok, err = timed(A.wait_ready, fake_run(10), srv.ports.huge)
      local growth = (vm("VmHWM") - hwm0) / 1024
      print(("# huge: %.2fs, VmHWM %+.1f MiB, VmRSS %d -> %d kB"):format(dt, growth, rss0, vm("VmRSS")))
      assert.is_true(ok == true or (err and err.kind ~= nil), "no typed answer")
      assert.is_true(growth < 64, ("peak RSS grew by %.1f MiB"):format(growth))
      assert.is_true(dt < 5, ("took %.2fs"):format(dt))
    end)

    it("redirect: a 302 to another local service is neither followed nor counted as ready", function()
      local before = hits()
      local dt, ok, err = timed(A.wait_ready, fake_run(2), srv.ports.redirect)
      A.sleep(0.2) -- a request in flight to the control listener would be logged by now
      assert.equal(before, hits(), "the host sent a request to the redirect's target")
      assert.is_nil(ok, "the 302 was counted as ready")
      assert.equal("timeout", err.kind)
      assert.matches("HTTP 302", err.message, 1, true)
      assert.is_true(dt < 2 + 1.5, ("took %.2fs"):format(dt))
    end)

    it("an agent that answered, then hung: the timeout still names its last answer", function()
      -- a loaded host can cut the wait's last attempt to READY_MIN_ATTEMPT, so the last attempt's
      -- own outcome is a timeout even when the agent answered every other one (a CI run's
      -- "last answer: timeout ... within 0.05s" for an agent that only ever answered 302)
      local dt, ok, err = timed(A.wait_ready, fake_run(1.5), srv.ports.once)
      assert.is_nil(ok)
      assert.equal("timeout", err.kind)
      assert.equal("HTTP 302", err.answer)
      assert.matches("^timeout", err.last)
      assert.matches("last answer: HTTP 302 (the attempt after it: timeout", err.message, 1, true)
      assert.is_true(dt < 1.5 + 1.5, ("took %.2fs"):format(dt))
    end)

    it("a service that ends meanwhile ends the wait with the backend's own error (stack/readiness.lua)", function()
      local readiness = require "sandstack.stack.readiness"
      local gone, checks = { kind = "exited", service = "db" }, 0
      local exited = function() checks = checks + 1; return checks >= 2 and gone or nil end
      local dt, ok, err = timed(readiness.wait_ready, fake_run(10), srv.ports.redirect, exited)
      assert.is_nil(ok)
      assert.equal(gone, err)
      assert.is_true(dt < 3, ("took %.2fs with ready_timeout = 10"):format(dt))
      assert.has_error(function() readiness.wait_ready(fake_run(1), srv.ports.ok) end)
    end)

    it("a wait that never connected says what the forwarder publishes now", function()
      -- a refused connection for the whole wait: nothing listens on the host's side of the port
      -- (the forwarder, or the engine's proxy of its port, went); its state and the port it
      -- publishes now tell which, and whether the port moved
      local fw = { State = { Status = "running" },
        NetworkSettings = { Ports = { ["8080/tcp"] = { { HostIp = "127.0.0.1", HostPort = "41234" } } } } }
      local run = fake_run(1, { eng = { perform = function(_, reqs)
        local out = {}
        for i = 1, #reqs do out[i] = { ok = true, body = fw } end
        return out
      end } })
      run.plan.forwarder, run.plan.agent_port = "forwarder", 8080
      run.plan.containers = { { name = "sstest-ready-forwarder", service = "forwarder", inspect = {} } }
      local ok, err = A.wait_ready(run, 1) -- port 1 of loopback: nothing listens there
      assert.is_nil(ok)
      assert.equal("not_ready", err.reason)
      assert.matches("cannot connect", err.last, 1, true)
      assert.same({ state = "running", host_port = 41234 }, err.forwarder)
      assert.matches("(the forwarder is running, publishing port 41234)", err.message, 1, true)
    end)

    it("a user req_adapter is still used, and each attempt gets at most the time left", function()
      local calls = {}
      local t0 = clock()
      local adapter = function(req)
        calls[#calls + 1] = { timeout = req.timeout, left = 3 - (clock() - t0), method = req.method, url = req.url }
        A.sleep(math.min(req.timeout, 0.4)) -- a slow agent that honours the deadline
        return nil, "slow"
      end
      local dt, ok, err = timed(A.wait_ready, fake_run(3, { req_adapter = adapter }), srv.ports.ok)
      assert.is_nil(ok)
      assert.equal("timeout", err.kind)
      assert.is_true(#calls >= 3)
      assert.equal("GET", calls[1].method)
      assert.equal(("http://127.0.0.1:%d/health"):format(srv.ports.ok), calls[1].url)
      for _, c in ipairs(calls) do
        assert.is_true(c.timeout <= math.max(c.left, 0) + 0.15, ("attempt timeout %.2f with %.2f left"):format(c.timeout, c.left))
      end
      assert.is_true(dt < 3 + 1, ("took %.2fs"):format(dt))
      local n = 0
      local ready = function() n = n + 1; return n >= 2 and { status = 204 } or { status = 503 } end
      assert.is_true(A.wait_ready(fake_run(3, { req_adapter = ready }), srv.ports.ok))
    end)
  end)

  describe("core.http_probe", function()
    it("reports the status and the body's size, keeping none of it", function()
      local r = assert(core.http_probe(("http://127.0.0.1:%d/health"):format(srv.ports.ok), { timeout = 2 }))
      assert.equal(200, r.status)
      assert.equal(3, r.bytes)
      assert.is_false(r.truncated)
      assert.is_nil(r.body)
    end)

    it("ends a dripping answer at its overall deadline", function()
      local dt, r, err = timed(core.http_probe, ("http://127.0.0.1:%d/"):format(srv.ports.drip), { timeout = 1 })
      assert.is_nil(r)
      assert.equal("timeout", err.kind)
      assert.is_true(dt < 1.5, ("took %.2fs"):format(dt))
    end)

    it("stops reading a body at max_bytes", function()
      local dt, r = timed(core.http_probe, ("http://127.0.0.1:%d/"):format(srv.ports.huge), { timeout = 5, max_bytes = 4096 })
      assert.equal(200, r.status)
      assert.equal(4096, r.bytes)
      assert.is_true(r.truncated)
      assert.is_true(dt < 2, ("took %.2fs"):format(dt))
    end)

    it("returns a redirect's status without following it", function()
      local before = hits()
      local r = assert(core.http_probe(("http://127.0.0.1:%d/"):format(srv.ports.redirect), { timeout = 2 }))
      assert.equal(302, r.status)
      A.sleep(0.2)
      assert.equal(before, hits())
    end)

    it("speaks plain http only, and refuses URLs with control bytes", function()
      for _, url in ipairs { "https://127.0.0.1:1/", "ftp://127.0.0.1/", "file:///etc/passwd", "gopher://127.0.0.1/",
        "http://127.0.0.1:1/a b", "http://127.0.0.1:1/\r\nX: y" } do
        local r, err = core.http_probe(url, { timeout = 1 })
        assert.is_nil(r, url)
        assert.equal("invalid", err.kind, url)
      end
      assert.has_error(function() core.http_probe("http://127.0.0.1:1/", { timeout = 1, body = "x" }) end)
      assert.has_error(function() core.http_probe("http://127.0.0.1:1/", { timeout = -1 }) end)
    end)

    it("reports a closed port as a transport error", function()
      -- a port that was just free: bind-and-close through the hostile server's own listener is
      -- racy, so use port 1 on loopback, where nothing listens on a test machine
      local r, err = core.http_probe("http://127.0.0.1:1/", { timeout = 1 })
      assert.is_nil(r)
      assert.equal("transport", err.kind)
      assert.equal("unreachable", err.reason)
    end)

    it("ignores proxy settings from the environment", function()
      -- In a child process of the same interpreter and build, with every proxy variable
      -- pointing at the control listener: a probe that used them would log a hit there.
      local child = h.child_command(srv.dir .. "/child.lua", ("local core = require 'sandstack.core'\n"
        .. "local r, e = core.http_probe('http://127.0.0.1:%d/health', { timeout = 2 })\n"
        .. "io.write(r and tostring(r.status) or tostring(e))\n"):format(srv.ports.ok))
      local proxy = ("http://127.0.0.1:%d"):format(srv.ports.control)
      local before = hits()
      local out = h.must(("http_proxy=%s HTTP_PROXY=%s ALL_PROXY=%s all_proxy=%s %s")
        :format(proxy, proxy, proxy, proxy, child))
      assert.equal("200", out)
      assert.equal(before, hits(), "the probe went through the proxy")
    end)
  end)
end)
