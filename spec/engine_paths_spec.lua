-- Engine requests are planned in C (csrc/stack/session_requests.c, core.session_requests): a Lua
-- file under lua/sandstack names an operation and never writes an Engine API path. This spec
-- reads every Lua file there as text and fails naming file:line for each string literal that
-- begins with an Engine path ("/containers/", "/exec/", "/_ping", ...), and checks the requests
-- C makes for the operations the Lua files name.
local core = require "sandstack.core"

-- The Engine API's top-level path segments; a literal opening with one of them, followed by
-- '/', '?' or the literal's end, is an Engine path.
local ROOTS = { "containers", "exec", "networks", "volumes", "images", "info", "version", "_ping",
  "events", "build", "swarm", "services", "tasks", "nodes", "secrets", "configs", "plugins", "system",
  "distribution", "commit", "auth", "session" }

-- Files still allowed to hold Engine paths: each entry is still to move to a named operation.
local STILL_TO_MOVE = {}

local function lua_files(root)
  local out = {}
  local p = assert(io.popen("find '" .. root .. "' -name '*.lua' -type f | sort"))
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

-- The Engine path literals of one text: { {line =, text =}, ... }.
local function engine_paths(text)
  local found, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    for _, q in ipairs { '"', "'" } do
      for lit in line:gmatch(q .. "(/[%w_]+[^" .. q .. "]?)") do
        local root, after = lit:match("^/([%w_]+)(.?)$")
        if root and (after == "/" or after == "?" or after == "" or after == q) then
          for _, r in ipairs(ROOTS) do
            if r == root then found[#found + 1] = { line = n, text = line } end
          end
        end
      end
    end
  end
  return found
end

describe("Engine paths in the Lua files", function()
  it("are written only in C: no Lua file under lua/sandstack holds one", function()
    local lines = {}
    for _, file in ipairs(lua_files("lua/sandstack")) do
      local f = assert(io.open(file))
      local text = f:read("*a")
      f:close()
      if not STILL_TO_MOVE[file] then
        for _, hit in ipairs(engine_paths(text)) do
          lines[#lines + 1] = file .. ":" .. hit.line .. ": " .. hit.text:gsub("^%s+", "")
        end
      end
    end
    assert(#lines == 0, #lines .. " Engine path literal(s) in Lua (name an operation of "
      .. "core.session_requests instead):\n  " .. table.concat(lines, "\n  "))
  end)

  it("are found by the scan in either quote, and a file path or a URL is not one", function()
    assert.equal(1, #engine_paths('x = eng:call("GET", "/containers/" .. n .. "/json")'))
    assert.equal(1, #engine_paths("x = '/_ping'"))
    assert.equal(1, #engine_paths('p = "/events"'))
    assert.equal(1, #engine_paths('p = "/volumes?x=1"'))
    assert.equal(0, #engine_paths('p = "/tmp/x"'))
    assert.equal(0, #engine_paths('p = "/containersx"'))
    assert.equal(0, #engine_paths('p = "/etc/containers/x"'))
  end)
end)

-- The operations the Lua files name, as C makes them (csrc/stack/session_requests.c): the
-- method, path and query each call site sent when it wrote the path itself.
describe("the named Engine operations", function()
  local function one(action, name, args) return core.session_requests(action, name and { name } or nil, args)[1] end

  it("make a process's exec requests by the exec's id, encoded", function()
    local r = one("exec_create", "p-sandbox")
    assert.same({ "POST", "/containers/p-sandbox/exec" }, { r.method, r.path })
    assert.is_nil(r.query)
    r = one("exec_start", "ab12")
    assert.same({ "POST", "/exec/ab12/start" }, { r.method, r.path })
    assert.same({ "POST", "/exec/ab12/resize" }, { one("exec_resize", "ab12").method, one("exec_resize", "ab12").path })
    r = one("inspect_exec", "a b/c")
    assert.same({ "GET", "/exec/a%20b%2Fc/json" }, { r.method, r.path })
    assert.is_nil(r.ok)
  end)

  it("read a container strictly (inspect_container) or with 404 as an answer (inspect)", function()
    local strict, lenient = one("inspect_container", "x-y_z.1"), one("inspect", "x-y_z.1")
    assert.equal("/containers/x-y_z.1/json", strict.path)
    assert.is_nil(strict.ok)
    assert.equal(strict.path, lenient.path)
    assert.same({ 404 }, lenient.ok)
  end)

  it("list running containers by every label, without all=1", function()
    local r = one("list_running_containers", nil, { labels = { "a=1", "b=2" } })
    assert.same({ "GET", "/containers/json" }, { r.method, r.path })
    assert.same({ filters = '{"label":["a=1","b=2"]}' }, r.query)
    assert.has_error(function() one("list_running_containers") end)
  end)

  it("name the archive, rename, image and daemon paths", function()
    assert.same({ "HEAD", "/containers/c%3A1/archive" }, { one("stat_archive", "c:1").method, one("stat_archive", "c:1").path })
    assert.equal("PUT", one("put_archive", "c").method)
    assert.equal("GET", one("get_archive", "c").method)
    assert.equal("/containers/p-ready/rename", one("rename_container", "p-ready").path)
    assert.same({ "POST", "/images/create" }, { one("pull_image").method, one("pull_image").path })
    assert.same({ "POST", "/images/load" }, { one("load_image").method, one("load_image").path })
    assert.equal("/_ping", one("ping").path)
    assert.equal("/version", one("version").path)
    assert.equal("/events", one("events").path)
    assert.equal("/containers/a%2Fb", one("remove_container", "a/b").path)
  end)

  it("make the queries their callers used to write: a removal's volumes, an archive's path, a rename's name", function()
    assert.same({ force = "1" }, one("remove_container", "c").query)
    assert.same({ force = "1", v = "1" }, one("remove_container", "c", { volumes = true }).query)
    assert.same({ 404 }, one("remove_container", "c", { volumes = true }).ok)
    for _, op in ipairs { "put_archive", "get_archive", "stat_archive" } do
      assert.is_nil(one(op, "c").query)
      assert.same({ path = "/a b" }, one(op, "c", { path = "/a b" }).query)
    end
    assert.is_nil(one("rename_container", "p-ready").query)
    assert.same({ name = "p-claim" }, one("rename_container", "p-ready", { name = "p-claim" }).query)
    local stop = one("stop", "c", { t = 7 })
    assert.same({ { t = "7" }, 37, { 304 } }, { stop.query, stop.timeout, stop.ok })
  end)
end)

describe("sandstack.engine.ops", function()
  local ops = require "sandstack.engine.ops"

  -- a stand-in with eng:call's contract that records what it was asked
  local function recorder()
    local seen = {}
    return { call = function(_, method, path, body, opts)
      seen[#seen + 1] = { method = method, path = path, body = body, opts = opts }
      return { answered = true }
    end }, seen
  end

  it("sends an operation with C's query and statuses and the caller's body and call options", function()
    local eng, seen = recorder()
    ops.send(eng, "put_archive", "c", { path = "/" }, "tar bytes", { content_type = "application/x-tar", timeout = 9 })
    assert.same({ method = "PUT", path = "/containers/c/archive", body = "tar bytes",
      opts = { query = { path = "/" }, content_type = "application/x-tar", timeout = 9 } }, seen[1])
  end)

  it("calls an operation through eng:call with C's method, path, query and statuses", function()
    local eng, seen = recorder()
    assert.same({ answered = true }, ops.call(eng, "list_containers", nil, { label = "io.sandstack.project=p" }))
    assert.same({ method = "GET", path = "/containers/json",
      opts = { query = { all = "1", filters = '{"label":["io.sandstack.project=p"]}' } } }, seen[1])
    ops.call(eng, "inspect", "p-sandbox")
    assert.same({ 404 }, seen[2].opts.ok)
    local body = { Image = "x" }
    ops.call(eng, "create_container", "p-gw", { body = body })
    assert.equal(body, seen[3].body)
    assert.same({ name = "p-gw" }, seen[3].opts.query)
  end)

  it("gives an operation's method and path to a call site with its own options", function()
    assert.same({ "POST", "/exec/e1/resize" }, { ops.target("exec_resize", "e1") })
    assert.equal("/containers/c/logs", ops.request("logs", "c").path)
  end)
end)
