-- The one session interface: every backend's handle has every method of sandstack.session,
-- and what a backend lacks answers kind = "unsupported", naming the backend and the method.
local session = require "sandstack.session"
local docker_handle = require "sandstack.docker.handle"
local swarm_handle = require "sandstack.swarm.handle"
local box = require "sandstack.sbx.box"

local backends = {
  { name = "docker", methods = docker_handle.Stack },
  { name = "swarm", methods = swarm_handle.Stack },
  { name = "sbx", methods = getmetatable(box.new {}).__index },
}

describe("the session interface", function()
  it("lists the methods every handle has", function()
    for _, m in ipairs { "exec", "spawn", "read", "write", "list", "stat", "remove", "upload", "download",
      "logs", "stats", "pause", "resume", "hibernate", "snapshot", "fork", "changes", "set_timeout", "expires",
      "stop", "start", "restart", "set_egress", "egress", "set_credentials", "set_model_key", "credentials" } do
      assert.is_true(session.KNOWN[m], m)
    end
  end)

  for _, b in ipairs(backends) do
    it("gives the " .. b.name .. " handle every method, stubs typed as unsupported", function()
      local real = {}
      for _, m in ipairs(session.implemented(b.methods)) do real[m] = true end
      for _, m in ipairs(session.METHODS) do
        assert.is_function(b.methods[m], b.name .. " lacks " .. m)
        if not real[m] then
          local r, err = b.methods[m]({}, "x")
          assert.is_nil(r)
          assert.equal("unsupported", err.kind)
          assert.equal(b.name, err.backend)
          assert.equal(m, err.method)
          assert.matches(m .. " is not supported on the " .. b.name .. " backend", tostring(err), 1, true)
        end
      end
    end)
  end

  it("says a handle is closed in one place for every backend (sandstack.session.closed)", function()
    local p = assert(io.popen("grep -rln 'handle is closed:' lua/sandstack"))
    local files = p:read("a")
    p:close()
    assert.equal("lua/sandstack/session.lua\n", files)
    local ok, err = pcall(require("sandstack.session").closed, "sandstack.docker.reconnect or open")
    assert.is_false(ok)
    assert.matches("the stack handle is closed: make a new one with sandstack.docker.reconnect or open$", err)
  end)

  it("never replaces a method a backend defines", function()
    local cls = { exec = function() return "mine" end }
    session.install(cls, "test")
    assert.equal("mine", cls.exec())
    assert.same({ "exec" }, session.implemented(cls))
    local _, err = cls.stats()
    assert.equal("test", err.backend)
  end)

  it("refuses a docker handle part that defines a method twice", function()
    assert.has_error(function() docker_handle.mixin { record = function() end } end,
      "sandstack.docker handle: method record is defined twice")
  end)

  -- A stand-in engine that records what it is asked: the exec times out, the kill's requests
  -- answer as the Engine does.
  local function recording_engine()
    local calls = {}
    local eng = { timeout = 30, calls = calls }
    function eng.exec(_, container, argv, opts)
      calls[#calls + 1] = { "exec", container, argv, opts }
      return nil, require("sandstack.core").error("transport", "timeout", "no answer in time",
        { stdout = "so far", stderr = "", exec_id = "e1" })
    end
    function eng.call(_, method, path, body, opts)
      calls[#calls + 1] = { method, path, body, opts }
      if path:match("/json$") then return { Id = "cid", Name = "/p-sandbox", Image = "sha256:img",
        Config = { Labels = { ["io.sandstack.project"] = "p" } } } end
      if path == "/containers/create" then return { Id = "helper" } end
      if path:match("/wait$") then return { StatusCode = 0 } end
      return ""
    end
    return eng
  end

  it("swarm's exec in the session form runs the docker exec and its kill on the node's engine", function()
    local eng = recording_engine()
    local h = setmetatable({ mgr = {}, node_eng = eng, plan = { sandbox = "sandbox" } }, { __index = swarm_handle.Stack })
    local asked = {}
    h.container = function(_, service) asked[#asked + 1] = service or "default"; return "cid" end
    local r, err = h:exec("sleep 300", { timeout = 1 })
    assert.is_nil(r)
    assert.same({ "timeout", true, "so far" }, { err.kind, err.killed, err.stdout })
    local c = eng.calls
    assert.same({ "exec", "cid", { "/bin/sh", "-c", "sleep 300" } }, { c[1][1], c[1][2], c[1][3] })
    local token = c[1][4].env.SANDSTACK_EXEC
    assert.matches("^%x+$", token)
    assert.same({ "GET", "/containers/cid/json" }, { c[2][1], c[2][2] })
    local create = c[3][3]
    assert.same({ "POST", "/containers/create" }, { c[3][1], c[3][2] })
    assert.same({ "sha256:img", { token }, "container:cid", "none" }, { create.Image, create.Cmd,
      create.HostConfig.PidMode, create.HostConfig.NetworkMode })
    assert.same({ "ALL" }, create.HostConfig.CapDrop)
    assert.equal("p", create.Labels["io.sandstack.project"])
    assert.same({ "PUT", "/containers/helper/archive" }, { c[4][1], c[4][2] })
    assert.same({ "POST", "/containers/helper/start" }, { c[5][1], c[5][2] })
    assert.same({ "POST", "/containers/helper/wait" }, { c[6][1], c[6][2] })
    assert.same({ "DELETE", "/containers/helper" }, { c[7][1], c[7][2] })
    -- the older form stays the engine client's own exec
    eng.calls = {}
    eng.exec = function(_, container, argv) eng.calls[#eng.calls + 1] = { container, argv } return { exit_code = 0 } end
    assert.same({ exit_code = 0 }, h:exec("sandbox", { "true" }, {}))
    assert.same({ "default", "sandbox" }, asked)
  end)

  it("swarm's files, logs and stats are docker's, on the task container of the session's node", function()
    local core = require "sandstack.core"
    local asked = {}
    local eng = { timeout = 30 }
    function eng.call(_, method, path, _, opts)
      asked[#asked + 1] = method .. " " .. path .. " " .. tostring(opts and opts.query and opts.query.path)
      return core.tar_header("x.txt", 5, 420, 0) .. "hello" .. string.rep("\0", 507 + 1024)
    end
    function eng.demux(_, path) asked[#asked + 1] = "GET " .. path; return { stdout = "log\n", stderr = "" } end
    local h = setmetatable({ mgr = {}, node_eng = eng, plan = { sandbox = "sandbox" } }, { __index = swarm_handle.Stack })
    h.container = function(_, service) return service == "db" and "db-task" or "sbx-task" end
    assert.equal("hello", h:read("/tmp/x.txt"))
    assert.equal("log\n", h:logs({ service = "db" }).stdout)
    assert.same({ "GET /containers/sbx-task/archive /tmp/x.txt", "GET /containers/db-task/logs" }, asked)
    function eng.perform(_, reqs)
      local out = {}
      for i, r in ipairs(reqs) do
        asked[#asked + 1] = r[1] .. " " .. r[2]
        out[i] = { ok = true, body = { read = "t", cpu_stats = { online_cpus = 2, system_cpu_usage = 2000,
          cpu_usage = { total_usage = 150 } }, precpu_stats = { system_cpu_usage = 1000, cpu_usage = { total_usage = 50 } },
          memory_stats = { usage = 300, limit = 1000, stats = { inactive_file = 100 } }, pids_stats = { current = 3 },
          networks = { eth0 = { rx_bytes = 5, tx_bytes = 7 }, eth1 = { rx_bytes = 1, tx_bytes = 1 } } } }
      end
      return out
    end
    h.plan.containers = { { service = "sandbox" }, { service = "db" } }
    local st = assert(h:stats())
    assert.same({ cpuUsedPct = 20, cpuCount = 2, memUsed = 200, memTotal = 1000, netRx = 6, netTx = 8, pids = 3,
      timestamp = "t" }, st.db)
    assert.same({ "GET /containers/sbx-task/stats", "GET /containers/db-task/stats" }, { asked[3], asked[4] })
    h.mgr = nil
    assert.has_error(function() h:read("/tmp/x.txt") end, "the stack handle is closed: make a new one with sandstack.swarm.reconnect")
    assert.has_error(function() h:stats() end, "the stack handle is closed: make a new one with sandstack.swarm.reconnect")
  end)

  it("lists a directory too large for the archive by names, in a confined helper sharing its PID namespace", function()
    local core = require "sandstack.core"
    local listing = "sandstack-list 1\nf 644 17179869184 5 6 0\nsparse\nl 777 4 -3 1 4\nl/etc\nend 2\n"
    local eng, calls = { timeout = 30 }, {}
    local runtime = "runc"
    function eng.call(_, method, path, body, opts)
      calls[#calls + 1] = { method, path, body, opts }
      if path == "/containers/sbx-task/archive" then
        return nil, core.error("output_limit", nil, "over the budget", { limit = opts.max_bytes })
      end
      if path == "/containers/sbx-task/json" then
        return { Id = "cid", Name = "/p-sandbox", Image = "sha256:img", State = { Running = true },
          Config = { Labels = { ["io.sandstack.project"] = "p" } }, HostConfig = { Runtime = runtime } }
      end
      if path == "/containers/create" then return { Id = "helper" } end
      if path:match("/wait$") then return { StatusCode = 0 } end
      if method == "GET" and path == "/containers/helper/archive" then
        return core.tar_header("x.out", #listing, 384, 0) .. listing .. string.rep("\0", 512 - #listing % 512 + 1024)
      end
      return true
    end
    local h = setmetatable({ mgr = {}, node_eng = eng, plan = { sandbox = "sandbox" } }, { __index = swarm_handle.Stack })
    h.container = function() return "sbx-task" end
    local list = assert(h:list("/work/big"))
    assert.same({ "l", "link", "/etc", -3 }, { list[1].name, list[1].type, list[1].link, list[1].mtime })
    assert.same({ "sparse", "file", 17179869184 }, { list[2].name, list[2].type, list[2].size })
    assert.equal(4 * 1024 * 1024, calls[1][4].max_bytes) -- the archive was read in memory, to 4 MiB only
    local create = calls[3][3]
    assert.same({ "POST", "/containers/create" }, { calls[3][1], calls[3][2] })
    assert.same({ "sha256:img", { "/sandstack-list" }, "/work/big", "0", { "GLIBC_TUNABLES=" } }, { create.Image,
      create.Entrypoint, create.Cmd[1], create.User, create.Env })
    local hc = create.HostConfig
    assert.same({ "container:cid", "none", { "ALL" }, { "SYS_PTRACE", "DAC_READ_SEARCH" }, { "no-new-privileges" },
      "runc", 16 }, { hc.PidMode, hc.NetworkMode, hc.CapDrop, hc.CapAdd, hc.SecurityOpt, hc.Runtime, hc.PidsLimit })
    assert.equal("p", create.Labels["io.sandstack.project"])
    assert.same({ "PUT", "/containers/helper/archive", "/" }, { calls[4][1], calls[4][2], calls[4][4].query.path })
    assert.same({ "DELETE", "/containers/helper" }, { calls[#calls][1], calls[#calls][2] })
    -- under runsc no helper can see the guest's processes: the budget's error, nothing created
    runtime, calls = "runsc", {}
    local _, err = h:list("/work/big")
    assert.same({ "output_limit", 4 * 1024 * 1024 }, { err.kind, err.limit })
    assert.matches("runsc", err.message)
    for _, c in ipairs(calls) do assert.not_equal("/containers/create", c[2]) end
  end)

  it("reads the list helper's output as data a guest chose the names of", function()
    local core = require "sandstack.core"
    local head = "sandstack-list 1\n"
    local function parse(body, max) return core.list_parse(head .. body, max or 10) end
    assert.same({}, parse("end 0\n"))
    local _, err = parse("f 644 1 1 1 0\na\nf 644 1 1 1 0\nb\nover 2\n", 2)
    assert.same({ "output_limit", 2 }, { err.kind, err.limit })
    _, err = parse("f 644 1 1 1 0\na\nf 644 1 1 1 0\nb\nend 2\n", 1)
    assert.equal("output_limit", err.kind)
    _, err = parse("error EACCES\n")
    assert.same({ "io", "EACCES" }, { err.kind, err.reason })
    for _, bad in ipairs {
      "f 644 1 1 3 0\na/b\nend 1\n",          -- a name with a slash
      "f 644 1 1 2 0\n..\nend 1\n",           -- dot-dot
      "f 644 1 1 9 0\nshort\nend 1\n",        -- a length past the data
      "f 644 1 1 1 0\na\nend 2\n",            -- a count that does not match
      "f 644 1 1 1 0\na\n",                   -- no end
      "f 99999 1 1 1 0\na\nend 1\n",          -- not a mode
      "f 644 99999999999999999999 1 1 0\na\nend 1\n", -- past a number
      "f 644 1 1 1 5000\na\nend 1\n",         -- a link too long
      "error enoent\n", "end 0\ntrailing",
    } do
      local r, e = parse(bad)
      assert.is_nil(r, bad)
      assert.same({ "engine", "bad_answer" }, { e.kind, e.reason }, bad)
    end
    assert.is_nil(core.list_parse("not the header\n", 1))
  end)
end)
