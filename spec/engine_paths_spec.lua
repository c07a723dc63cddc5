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

-- A query string or query table written by hand for an Engine request: the query is C's too
-- (the operation's args in, its `query` out, percent-encoded by the C core when sent). Flagged:
--  * `query = <anything>` but a request's own query as C made it (`r.query`) or `true` (an
--    option-key set): a table literal, a local, a helper's result;
--  * a literal opening a query ("?path=", "&name=") or a "?" joined with a "&" or "=" literal;
--  * a percent-encoder named outside the engine client (lua/sandstack/engine.lua and engine/).
local function hand_queries(text, file)
  local found, n = {}, 0
  local client = file and (file:find("/sandstack/engine/", 1, true) or file:find("/sandstack/engine%.lua$"))
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local code = line:gsub("%-%-.*$", "")
    local value = code:match("%f[%w_]query%s*=%s*([^=].*)$")
    local hit = value and not value:match("^[%w_]+%.query%f[^%w_]") and not value:match("^true%f[^%w_]")
    hit = hit or code:match("[\"'][?&][%w_%-]+=") ~= nil
    hit = hit or (code:match("[\"']%?[\"']") and (code:match("[\"']&[\"']") or code:match("[\"']=[\"']"))) ~= nil
    hit = hit or (not client and code:match("urlencode") ~= nil)
    if hit then found[#found + 1] = { line = n, text = line } end
  end
  return found
end

-- Files still allowed to write a query by hand, as [file] = { n = lines allowed, why = what keeps
-- it in Lua }: none.
local QUERIES_STILL_TO_MOVE = {}

-- "file:line: text" for each hit found(file, text) gives in a Lua file under lua/sandstack.
local function offending_lines(found)
  local lines = {}
  for _, file in ipairs(lua_files("lua/sandstack")) do
    local f = assert(io.open(file))
    local text = f:read("*a")
    f:close()
    for _, hit in ipairs(found(file, text)) do
      lines[#lines + 1] = file .. ":" .. hit.line .. ": " .. hit.text:gsub("^%s+", "")
    end
  end
  return lines
end

describe("Engine paths in the Lua files", function()
  it("are written only in C: no Lua file under lua/sandstack holds one", function()
    local lines = offending_lines(function(file, text) return STILL_TO_MOVE[file] and {} or engine_paths(text) end)
    assert(#lines == 0, #lines .. " Engine path literal(s) in Lua (name an operation of "
      .. "core.session_requests instead):\n  " .. table.concat(lines, "\n  "))
  end)

  it("come with their queries made in C: no Lua file under lua/sandstack writes an Engine query", function()
    local lines = offending_lines(function(file, text)
      local hits, still = hand_queries(text, file), QUERIES_STILL_TO_MOVE[file]
      return (still and #hits <= still.n) and {} or hits
    end)
    assert(#lines == 0, #lines .. " Engine query(ies) written in Lua (pass the values as the operation's args "
      .. "and send the request's own query, r.query, as C made it):\n  " .. table.concat(lines, "\n  "))
  end)

  it("finds a query written by hand, and a query C made or an option set is not one", function()
    assert.equal(1, #hand_queries('eng:call("GET", p, nil, { query = { path = path }, raw = true })'))
    assert.equal(1, #hand_queries('eng:upload(p, h, nil, { query = put_query(dir) })'))
    assert.equal(1, #hand_queries('io.call(m, p, nil, { query = q, timeout = 5 })'))
    assert.equal(1, #hand_queries('eng:request(m, p .. "?path=" .. x)'))
    assert.equal(1, #hand_queries('return "?" .. table.concat(keys, "&")'))
    assert.equal(1, #hand_queries('keys[i] = core.urlencode(k) .. "=" .. v', "lua/sandstack/docker/x.lua"))
    assert.equal(0, #hand_queries('eng:stream(r.path, { query = r.query, timeout = 9 })'))
    assert.equal(0, #hand_queries('local KEYS = { max_bytes = true, query = true }'))
    assert.equal(0, #hand_queries('-- the caller gives { query = { path = p } }'))
    assert.equal(0, #hand_queries('if args then uri = uri .. "?" .. args end'))
    assert.equal(0, #hand_queries('O.urlencode = core.urlencode', "lua/sandstack/engine/options.lua"))
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
    local resize = one("exec_resize", "ab12", { h = 24, w = 80 })
    assert.same({ "POST", "/exec/ab12/resize", { h = "24", w = "80" } }, { resize.method, resize.path, resize.query })
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
    assert.same({ path = "/a b", noOverwriteDirNonDir = "1" }, one("put_archive", "c", { path = "/a b", no_overwrite = true }).query)
    assert.same({ path = "/x" }, one("get_archive", "c", { path = "/x", no_overwrite = true }).query)
    assert.same({ stdout = "1", stderr = "1" }, one("logs", "c").query)
    assert.same({ stdout = "1", stderr = "1", since = "1714567890", tail = "5" },
      one("logs", "c", { since = 1714567890, tail = 5 }).query)
    assert.equal("1714567890.25", one("logs", "c", { since = 1714567890.25 }).query.since)
    assert.same({ stream = "false", ["one-shot"] = "true" }, one("stats", "c").query)
    assert.same({ stream = "false" }, one("stats", "c", { one_shot = false }).query)
    assert.same({ quiet = "1" }, one("load_image").query)
    local import = one("import_image", nil, { repo = "r/a b", tag = "t", changes = { "ENV A=b&c", "LABEL x=1" } })
    assert.same({ "POST", "/images/create?fromSrc=-&repo=r%2Fa%20b&tag=t&changes=ENV%20A%3Db%26c&changes=LABEL%20x%3D1" },
      { import.method, import.path })
    assert.is_nil(import.query)
    assert.has_error(function() one("import_image", nil, { repo = "r" }) end)
    local vols = one("list_volumes_with_labels", nil, { labels = { "a=1", "b=2" } })
    assert.same({ "GET", "/volumes", { filters = '{"label":["a=1","b=2"]}' } }, { vols.method, vols.path, vols.query })
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

  it("makes a resize's query from the rows and columns, and refuses a size that is not one", function()
    assert.same({ h = "5", w = "65535" }, ops.request("exec_resize", "e1", { h = 5, w = 65535 }).query)
    for _, bad in ipairs { {}, { h = 24 }, { h = 0, w = 80 }, { h = 24, w = 65536 }, { h = 2.5, w = 80 } } do
      assert.has_error(function() ops.request("exec_resize", "e1", bad) end)
    end
  end)

  it("gives an operation's method and path to a call site with its own options", function()
    assert.same({ "POST", "/exec/e1/resize" }, { ops.target("exec_resize", "e1", { h = 24, w = 80 }) })
    assert.equal("/containers/c/logs", ops.request("logs", "c").path)
  end)
end)
