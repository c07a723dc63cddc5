-- sandstack.engine against the live engine (Docker 20.10, API 1.41 here). Every object carries
-- io.sandstack.project=sstest-engine-<random>; only those are removed afterwards.
local sandstack = require "sandstack"
local core = sandstack.core
local E = require "sandstack.error"

local IMAGE = "sandstack-test/base:local"

local function rss_kib()
  local f = io.open("/proc/self/status")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)"))
end

describe("sandstack.engine #docker", function()
  local eng, project, label

  local function cleanup()
    if not eng then return end
    local filters = { label = { label } }
    local list = assert(eng:call("GET", "/containers/json", nil, { query = { all = true, filters = filters } }))
    for _, c in ipairs(list) do
      assert(eng:call("DELETE", "/containers/" .. c.Id, nil, { query = { force = true, v = true }, ok = { [404] = true } }))
    end
    local nets = assert(eng:call("GET", "/networks", nil, { query = { filters = filters } }))
    for _, n in ipairs(nets) do
      assert(eng:call("DELETE", "/networks/" .. n.Id, nil, { ok = { [404] = true } }))
    end
  end

  -- A running container of this test, removed in after_each.
  local function container(cmd, extra)
    local name = project .. "-" .. core.random_hex(3)
    local body = { Image = IMAGE, Cmd = cmd or { "sleep", "300" }, Labels = { ["io.sandstack.project"] = project } }
    for k, v in pairs(extra or {}) do body[k] = v end
    local c = assert(eng:call("POST", "/containers/create", body, { query = { name = name } }))
    assert.is_true(eng:call("POST", "/containers/" .. c.Id .. "/start"))
    return c.Id, name
  end

  before_each(function()
    project = "sstest-engine-" .. core.random_hex(4)
    label = "io.sandstack.project=" .. project
    eng = assert(sandstack.engine { timeout = 30 })
  end)

  after_each(function()
    cleanup()
    eng:close()
    eng = nil
  end)

  it("pings", function()
    assert.is_true(eng:ping())
  end)

  it("negotiates the API version from /version ApiVersion and honours a pin", function()
    local v = assert(eng:version())
    assert.equal(v.ApiVersion, eng.api_version)
    -- the host's own engine is Debian 12's 20.10 (API 1.41); spec/engines.t runs this file on
    -- nested engines too, where /version is the only truth
    if not os.getenv("DOCKER_HOST") then assert.equal("1.41", eng.api_version) end
    assert.not_equal(v.MinAPIVersion, eng.api_version)
    local st, _, headers = eng:request("GET", "/_ping")
    assert.equal(200, st)
    assert.equal(v.ApiVersion, headers["api-version"])

    local pinned = assert(sandstack.engine { api_version = "1.40" })
    assert.equal("1.40", pinned.api_version)
    assert.is_true(pinned:ping())
    pinned:close()
    -- The pin really prefixes requests: a version above the daemon's maximum is refused by it.
    local high = assert(sandstack.engine { api_version = "1.99" })
    local _, err = high:call("GET", "/containers/json")
    assert.equal("engine", err.kind)
    assert.equal(400, err.status)
    assert.matches("1.99", err.message)
    -- ... and one below its minimum gets a text/plain error on 20.10: tolerated, message kept.
    local low = assert(sandstack.engine { api_version = "1.11" })
    _, err = low:call("GET", "/containers/json")
    assert.equal("engine", err.kind)
    assert.equal(400, err.status)
    assert.matches("too old", err.message)
    high:close()
    low:close()
  end)

  it("raises for an unknown option key", function()
    assert.has_error(function() sandstack.engine { hots = "unix:///x" } end)
    assert.has_error(function() eng:call("GET", "/_ping", nil, { tiemout = 1 }) end)
    assert.has_error(function() eng:exec("x", { "true" }, { bogus = 1 }) end)
  end)

  it("creates, inspects and removes a labelled container and network", function()
    local net = assert(eng:call("POST", "/networks/create", {
      Name = project .. "-net", Internal = true, CheckDuplicate = true,
      Labels = { ["io.sandstack.project"] = project },
    }))
    assert.is_string(net.Id)
    local ninfo = assert(eng:call("GET", "/networks/" .. net.Id))
    assert.is_true(ninfo.Internal)
    assert.equal(project, ninfo.Labels["io.sandstack.project"])

    local name = project .. "-c"
    local c = assert(eng:call("POST", "/containers/create", {
      Image = IMAGE, Cmd = { "sleep", "300" }, Labels = { ["io.sandstack.project"] = project },
      HostConfig = { NetworkMode = project .. "-net" },
    }, { query = { name = name } }))
    local info = assert(eng:call("GET", "/containers/" .. name .. "/json"))
    assert.equal(c.Id, info.Id)
    assert.equal("created", info.State.Status)
    assert.equal(project, info.Config.Labels["io.sandstack.project"])
    -- The body-less POST: an explicit empty body, or the daemon answers 400 (engine-api.md §1).
    assert.is_true(eng:call("POST", "/containers/" .. c.Id .. "/start"))
    local again, err = eng:call("POST", "/containers/" .. c.Id .. "/start")
    assert.is_nil(again)
    assert.equal(304, err.status)
    assert.is_true(eng:call("POST", "/containers/" .. c.Id .. "/start", nil, { ok = { [304] = true } }))
    local list = assert(eng:call("GET", "/containers/json", nil,
      { query = { filters = { label = { label } } } }))
    assert.equal(1, #list)
    assert.is_true(eng:call("DELETE", "/containers/" .. c.Id, nil, { query = { force = true } }))
    assert.is_true(eng:call("DELETE", "/networks/" .. net.Id))
    local st = eng:request("GET", "/containers/" .. c.Id .. "/json")
    assert.equal(404, st)
  end)

  it("surfaces a 404 and a 409 as structured engine errors", function()
    local v, err = eng:call("GET", "/containers/" .. project .. "-absent/json")
    assert.is_nil(v)
    assert.equal("engine", err.kind)
    assert.equal("not_found", err.reason)
    assert.equal(404, err.status)
    assert.equal("GET", err.method)
    assert.equal("/containers/" .. project .. "-absent/json", err.path)
    assert.matches("No such container", err.message)
    assert.equal("engine: " .. err.message, tostring(err))

    local _, name = container()
    v, err = eng:call("POST", "/containers/create", { Image = IMAGE, Labels = { ["io.sandstack.project"] = project } },
      { query = { name = name } })
    assert.is_nil(v)
    assert.equal("engine", err.kind)
    assert.equal("conflict", err.reason)
    assert.equal(409, err.status)
    assert.equal("POST", err.method)
    assert.equal("/containers/create", err.path)
    assert.matches("already in use", err.message)

    -- request() returns every answer instead: status, decoded body, headers.
    local st, body, headers = eng:request("DELETE", "/containers/" .. project .. "-absent")
    assert.equal(404, st)
    assert.matches("No such container", body.message)
    assert.matches("json", headers["content-type"])
  end)

  it("demultiplexes an exec stream byte-exact, stderr apart, with the exit code", function()
    local id = container()
    -- Every byte value 0..255 on stdout (NUL and 0xff included), text on stderr, exit 7.
    local script = [[for i in $(seq 0 255); do printf "\\$(printf %o $i)"; done; printf 'to\0err\n' >&2; exit 7]]
    local r = assert(eng:exec(id, { "bash", "-c", script }))
    local all = {}
    for i = 0, 255 do all[#all + 1] = string.char(i) end
    assert.equal(table.concat(all), r.stdout)
    assert.equal("to\0err\n", r.stderr)
    assert.equal(7, r.exit_code)

    -- Many frames, interleaved streams, env and workdir and user.
    r = assert(eng:exec(id, { "sh", "-c", "seq 1 40000; echo \"$FOO $BAR $(pwd) $(id -u)\" >&2" },
      { env = { FOO = "foo", "BAR=bar" }, workdir = "/tmp", user = "1000" }))
    local want = {}
    for i = 1, 40000 do want[i] = tostring(i) end
    assert.equal(table.concat(want, "\n") .. "\n", r.stdout)
    assert.equal("foo bar /tmp 1000\n", r.stderr)
    assert.equal(0, r.exit_code)

    local _, err = eng:exec(project .. "-absent", { "true" })
    assert.equal("engine", err.kind)
    assert.equal(404, err.status)
  end)

  it("stops an exec over its byte budget with output_limit and bounded memory", function()
    local id = container()
    local before = rss_kib()
    local r, err = eng:exec(id, { "sh", "-c", "head -c 200000000 /dev/zero" }, { max_bytes = 1024 * 1024 })
    assert.is_nil(r)
    assert.equal("output_limit", err.kind)
    assert.equal(1024 * 1024, err.limit)
    local after = rss_kib()
    -- 200 MB of output went by; only the 1 MiB budget (plus curl's buffers) may be held.
    if before and after then assert.is_true(after - before < 64 * 1024, "RSS grew by " .. (after - before) .. " KiB") end
    -- The client is still usable afterwards.
    assert.is_true(eng:ping())
    r = assert(eng:exec(id, { "echo", "ok" }))
    assert.equal("ok\n", r.stdout)
  end)

  it("keeps several submitted requests in flight and mixes them with blocking calls", function()
    local id = container()
    -- /wait only answers once the container stops: it stays in flight while we do other work.
    local wait = eng:submit("POST", "/containers/" .. id .. "/wait", nil, { query = { condition = "not-running" }, timeout = 60 })
    local ids = {
      [eng:submit("GET", "/_ping", nil, { raw = true })] = "ping",
      [eng:submit("GET", "/version")] = "version",
      [eng:submit("GET", "/containers/" .. id .. "/json")] = "inspect",
      [eng:submit("GET", "/containers/" .. project .. "-absent/json")] = "missing",
      [eng:submit("GET", "/containers/json", nil, { query = { all = true, filters = { label = { label } } } })] = "list",
    }
    ids[wait] = "wait"
    assert.equal(6, eng:pending())
    -- Blocking calls while those run: an exec, then the kill that lets /wait answer.
    local r = assert(eng:exec(id, { "echo", "mixed" }))
    assert.equal("mixed\n", r.stdout)
    local seen = {}
    local deadline = os.time() + 60
    while eng:pending() > 1 and os.time() < deadline do
      for _, res in ipairs(eng:poll(5)) do
        assert.is_nil(seen[res.id], "an id came back twice")
        seen[res.id] = res
      end
    end
    assert.equal(1, eng:pending())
    assert.is_nil(seen[wait]) -- still waiting for the container to stop
    assert.is_true(eng:call("POST", "/containers/" .. id .. "/kill"))
    while eng:pending() > 0 and os.time() < deadline do
      for _, res in ipairs(eng:poll(5)) do seen[res.id] = res end
    end
    assert.equal(0, eng:pending())
    for sid, what in pairs(ids) do
      local res = seen[sid]
      assert.is_table(res, what)
      if what == "missing" then
        assert.is_false(res.ok)
        assert.equal(404, res.status)
        assert.equal("engine", res.err.kind)
        assert.equal("not_found", res.err.reason)
      else
        assert.is_true(res.ok, what)
        assert.equal(200, res.status)
      end
    end
    for sid, what in pairs(ids) do
      if what == "ping" then assert.equal("OK", seen[sid].body) end
      if what == "version" then assert.equal(eng.api_version, seen[sid].body.ApiVersion) end
      if what == "inspect" then assert.equal(id, seen[sid].body.Id) end
      if what == "list" then assert.equal(1, #seen[sid].body) end
    end
    assert.equal(137, seen[wait].body.StatusCode)
    assert.same({}, eng:poll(0))
  end)

  it("reads an events stream filtered by label, and closes it", function()
    -- since: the daemon subscribes just after it sends the headers; replaying the last second
    -- (nothing of this fresh project happened before) leaves no window to miss our events.
    local s = assert(eng:events { filters = { label = { label } }, since = os.time() - 1 })
    local id = container()
    local actions = {}
    for _ = 1, 10 do
      local ev, err = s:read(20)
      assert.is_table(ev, tostring(err))
      assert.equal(project, ev.Actor.Attributes["io.sandstack.project"])
      assert.equal(id, ev.Actor.ID)
      actions[ev.Action] = true
      if ev.Action == "start" then break end
    end
    assert.is_true(actions.create)
    assert.is_true(actions.start)
    -- Nothing else of ours happens: the read times out instead of blocking.
    local t0 = core.engine_clock()
    local ev, why = s:read(0.3)
    assert.is_nil(ev)
    assert.is_true(E.is(why))
    assert.same({ "transport", "timeout", 0.3 }, { why.kind, why.reason, why.timeout })
    assert.is_true(core.engine_clock() - t0 >= 0.3)
    s:close()
    s:close()
    local none, closed = s:read(1)
    assert.is_nil(none)
    assert.is_true(E.is(closed))
    assert.same({ "transport", "closed" }, { closed.kind, closed.reason })
    assert.matches("closed", tostring(closed))
  end)

  it("ends an events stream bounded by until with 'closed'", function()
    local t0 = os.time()
    container()
    -- until a few seconds ahead: on a loaded machine the request itself can take over a second,
    -- and an until already past when the engine reads it replays only part of the log (seen once)
    local s = assert(eng:events { filters = { label = { label } }, since = t0 - 1, ["until"] = os.time() + 3 })
    local n = 0
    while true do
      local ev, why = s:read(20)
      if not ev then
        assert.equal("closed", why.reason, tostring(why))
        assert.equal("transport", why.kind)
        break
      end
      n = n + 1
    end
    assert.is_true(n >= 2) -- create and start at least
  end)

  it("downloads an archive to a file under a byte budget", function()
    local id = container()
    local file = os.tmpname()
    local ok, n = eng:download("/containers/" .. id .. "/archive", file, { query = { path = "/etc/passwd" } })
    assert.is_true(ok)
    local f = assert(io.open(file, "rb"))
    local tar = f:read("a")
    f:close()
    assert.equal(#tar, n)
    assert.equal("ustar", tar:sub(258, 262))
    assert.truthy(tar:find("root:x:0:0", 1, true))

    local _, err = eng:download("/containers/" .. id .. "/archive", file, { query = { path = "/bin" }, max_bytes = 4096 })
    assert.equal("output_limit", err.kind)
    assert.is_nil(io.open(file, "rb")) -- the partial file is removed

    _, err = eng:download("/containers/" .. id .. "/archive", file, { query = { path = "/nonexistent" } })
    assert.equal("engine", err.kind)
    assert.equal(404, err.status)
    assert.is_nil(io.open(file, "rb"))
  end)

  it("closes idempotently and refuses use after close", function()
    local e2 = assert(sandstack.engine {})
    e2:close()
    e2:close()
    assert.has_error(function() e2:ping() end)
  end)
end)
