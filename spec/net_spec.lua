-- The host side of sandstack.conformance's reachability probes: core.tcp_listen and
-- core.tcp_connect (csrc/util/tcp.c, csrc/lua/net.c), which replaced LuaSocket. No engine
-- needed; loopback only. (Kept apart from spec/docker_conformance_spec.lua, which the engine
-- matrix runs on every nested engine, whose namespaces have no IPv6 loopback.)
local conformance = require "sandstack.conformance"
local core = require "sandstack.core"

describe("sandstack.conformance host TCP probes", function()
  local h = require "helpers"

  it("listens on 0.0.0.0 where a connect gets through without an accept, and is refused after close", function()
    local srv, port = conformance.host_listener()
    assert.is_true(port > 0 and port < 65536)
    assert.equal(port, srv:port())
    for _ = 1, 3 do assert.is_true(conformance.host_can_connect("127.0.0.1", port)) end
    srv:close()
    srv:close() -- idempotent
    assert.is_false(conformance.host_can_connect("127.0.0.1", port))
    local ok, err = core.tcp_connect("127.0.0.1", port, 1)
    assert.is_nil(ok)
    assert.same({ "transport", "refused" }, { err.kind, err.reason })
    assert.is_number(err.errno)
    assert.has_error(function() srv:port() end, "tcp listener: it is closed")
  end)

  it("bounds a connect that gets no answer by its timeout", function()
    -- a listener with a full accept queue (backlog 0, nobody accepts) drops the next SYNs
    local info = os.tmpname()
    -- os.execute, not a popen read: the listener's process outlives the command (the port file
    -- below says when it is up)
    os.execute("python3 -c 'import socket,sys,time,os\n"
      .. "s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(0)\n"
      .. "open(sys.argv[1] + \".tmp\", \"w\").write(\"%d %d\" % (s.getsockname()[1], os.getpid()))\n"
      .. "os.rename(sys.argv[1] + \".tmp\", sys.argv[1]); time.sleep(30)' " .. h.q(info)
      .. " </dev/null >/dev/null 2>&1 &")
    local port, pid
    local deadline = core.engine_clock() + 10
    repeat
      core.sleep(0.02)
      port, pid = (h.read_file(info) or ""):match("^(%d+) (%d+)$")
    until port or core.engine_clock() > deadline
    pid = h.track(pid)
    os.remove(info)
    assert.truthy(port, "the python listener did not start")
    local results = {}
    for i = 1, 3 do
      local t0 = core.engine_clock()
      local ok, err = core.tcp_connect("127.0.0.1", tonumber(port), 0.4)
      results[i] = { ok = ok, err = err, took = core.engine_clock() - t0 }
    end
    h.signal(pid, "TERM")
    assert.is_true(results[1].ok) -- control: the queue had room for one
    local last = results[3]
    assert.is_nil(last.ok)
    assert.same({ "transport", "timeout" }, { last.err.kind, last.err.reason })
    assert.is_true(last.took >= 0.39 and last.took < 2, tostring(last.took))
  end)

  it("refuses what is not a numeric address or a port, and keeps IPv6 listeners IPv6 only", function()
    local ok, err = core.tcp_connect("localhost", 80, 1)
    assert.is_nil(ok)
    assert.same({ "invalid", "address" }, { err.kind, err.reason })
    ok, err = core.tcp_listen("300.1.1.1", 0)
    assert.is_nil(ok)
    assert.equal("invalid", err.kind)
    assert.has_error(function() core.tcp_listen("127.0.0.1", 70000) end)
    assert.has_error(function() core.tcp_connect("127.0.0.1", 80, 0) end)
    local v6 = core.tcp_listen("::", 0)
    if not v6 then pending("no IPv6 on this host") return end
    local port = v6:port()
    -- the control first: a namespace with IPv6 turned off (a nested engine's) takes the listen
    -- but has no ::1 to connect to, and then "IPv4 does not reach it" would prove nothing
    local reached6, err6 = core.tcp_connect("::1", port, 1)
    if not reached6 then
      v6:close()
      pending("no IPv6 loopback in this network namespace: " .. tostring(err6 and err6.message))
      return
    end
    local reached4 = core.tcp_connect("127.0.0.1", port, 1)
    v6:close()
    assert.is_nil(reached4)
  end)
end)
