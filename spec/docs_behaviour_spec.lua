-- What the reference and the guides say a call does, it does (no engine: stand-ins for the
-- engine and the proxy). Each case reads the sentence or the table cell of the docs and runs the
-- code it describes, so neither can change alone.
local sandstack = require "sandstack"
local h = require "helpers"
local tables = require("api_tables").read()

local function row(id, name)
  for _, r in ipairs(assert(tables[id], "no table " .. id).rows) do
    for _, n in ipairs(r.names) do if n == name then return r end end
  end
  error(id .. " documents no " .. name)
end

local function doc(path) return assert(h.read_file(path)) end

-- A docker handle whose engine is a table of stand-in methods.
local function handle(eng)
  return setmetatable({ eng = eng, project = "p", plan = { project = "p", sandbox = "sandbox",
    containers = { { service = "sandbox", name = "p-sandbox" } } } }, { __index = require("sandstack.docker.handle").Stack })
end

describe("what the docs say a call does", function()
  it("h:spawn: the timeout default, on_output's arguments and a tty that is not a boolean", function()
    local process = require "sandstack.docker.process"
    assert.equal(tostring(process.DEFAULT_TIMEOUT), row("h:spawn", "timeout").default:match("^%d+"))
    assert.matches("^function%(data, stream%)", row("h:spawn", "on_output").type)
    assert.matches("not a boolean", row("h:spawn", "tty").refused, 1, true)
    -- the order on_output is called with, through a stand-in attach that sends one stdout frame
    local frame = "\1\0\0\0\0\0\0\5hello"
    local conn = { sent = false, recv = function(self)
      if self.sent then return nil, "eof" end
      self.sent = true
      return frame
    end, close = function() end }
    local io = { call = function() return { Id = "exec-1" } end, attach = function() return conn end }
    local got
    local p = assert(process.spawn(io, "c", { "true" }, { on_output = function(...) got = { ... } end }))
    assert.equal(process.DEFAULT_TIMEOUT, p.timeout)
    assert.is_true(p:read(1))
    assert.same({ "hello", "stdout" }, got)
    assert.has_error(function() process.check({ "true" }, { tty = "yes" }) end)
  end)

  it("h:logs{follow = true}: a stream whose reads are { stdout, stderr } tables", function()
    assert.matches("with `follow` a stream: `s:read(timeout)` returns `{ stdout,", doc("docs/api/session.md"), 1, true)
    assert.matches("gives `{ stdout, stderr }` of what came", doc("docs/session.md"), 1, true)
    local stream = assert(handle({ demux = function() return { stdout = "line\n", stderr = "" } end }):logs { follow = true })
    assert.same({ stdout = "line\n", stderr = "" }, stream:read(0))
    assert.same({ stdout = "", stderr = "" }, stream:read(0)) -- nothing new
    stream:close()
  end)

  it("h:serve: returns { answered = n }, as documented", function()
    assert.matches("`h:serve` returns `{ answered = n }`", doc("docs/api/session.md"), 1, true)
    assert.matches("returns `{ answered = n }`", doc("docs/egress-ask.md"), 1, true)
    local answered = {}
    local stand_in = { egress_asks = function() return { { id = 4, host = "a.test" } } end,
      answer = function(_, id) answered[#answered + 1] = id; return { id = id } end }
    assert.same({ answered = 1 }, require("sandstack.ask_serve").serve(stand_in, 0, { on_ask = function() return "deny" end }))
    assert.same({ 4 }, answered)
  end)

  it("an egress_policy without api_key: a plain allowlist proxy, as docs/docker.md says, never a refusal", function()
    local plan = assert(sandstack.docker.plan("docs-nokey", { agent_port = 8080, image = "x",
      egress_policy = { allow = { "pypi.org" } } }))
    assert.is_true(plan.proxy.added)
    for _, page in ipairs { "README.md", "docs/docker.md" } do
      assert.is_nil(doc(page):find("the start is refused", 1, true), page)
    end
    assert.matches("without one the proxy is a plain allowlist", doc("docs/docker.md"), 1, true)
  end)
end)

describe("the rendered nginx.conf", function()
  local config = require "sandstack.gateway.config"
  local render = require("sandstack.gateway.nginx_conf").render
  local base = { tenants = { { name = "t", token_sha256 = ("a"):rep(64) } }, stack = { agent_port = 8080, image = "x" } }

  local function rendered(t)
    local c = assert(config.check(t))
    return render(c, { config = "/x.json", lua_path = "", lua_cpath = "" })
  end
  local function with(extra)
    local t = {}
    for k, v in pairs(base) do t[k] = v end
    for k, v in pairs(extra) do t[k] = v end
    return t
  end
  local function stack(extra)
    local s = {}
    for k, v in pairs(base.stack) do s[k] = v end
    for k, v in pairs(extra) do s[k] = v end
    return s
  end

  it("runs its workers unprivileged, in the Engine socket's group, unless one needs root", function()
    -- a stand-in for the Engine socket: the choice reads only its group
    local dir = h.must("mktemp -d /tmp/sstest-gwuser.XXXXXX"):match("[^\n]+")
    h.must("chmod 0711 " .. h.q(dir))
    local sock = dir .. "/docker.sock"
    h.must("touch " .. h.q(sock) .. " && chgrp daemon " .. h.q(sock))
    local host = "unix://" .. sock
    assert.matches("\nuser nobody daemon;\n", rendered(with { stack = stack { docker_host = host } }), 1, true)
    assert.matches("only root can give", (select(2, config.default_user(assert(config.check(with {
      stack = stack { docker_host = host, egress_policy = { allow = {} } } }))))), 1, true)
    -- the cases where a worker needs root, or cannot reach the Engine otherwise
    assert.matches("\nuser root;\n", rendered(with { stack = stack { docker_host = host, egress_policy = { allow = {} } } }), 1, true)
    assert.matches("\nuser root;\n", rendered(with { stack = stack { docker_host = host }, pool = { size = 1 } }), 1, true)
    assert.matches("\nuser root;\n", rendered(with { stack = stack { docker_host = "tcp://127.0.0.1:2375" } }), 1, true)
    h.must("chgrp root " .. h.q(sock))
    assert.matches("\nuser root;\n", rendered(with { stack = stack { docker_host = host } }), 1, true)
    -- the file's own choice wins, and says so
    local user, why, chosen = config.worker_user(assert(config.check(with { user = "nobody:docker" })))
    assert.same({ "nobody:docker", nil, false }, { user, why, chosen })
    assert.matches("\nuser nobody docker;\n", rendered(with { user = "nobody:docker" }), 1, true)
    assert.matches("\nuser root;\n", rendered(with { user = "root", stack = stack { docker_host = host } }), 1, true)
    -- a prefix its workers cannot enter is found (nginx keeps their bodies there)
    h.must("mkdir -p " .. h.q(dir .. "/closed/p") .. " && chmod 0700 " .. h.q(dir .. "/closed"))
    assert.same({ dir .. "/closed", 448, "prefix" }, { config.unreachable({ prefix = dir .. "/closed/p" }, "nobody:daemon") })
    assert.is_nil(config.unreachable({ prefix = dir .. "/closed/p" }, "root"))
    assert.is_nil(config.unreachable({ prefix = dir, lua_path = dir .. "/?.lua;;" }, "nobody:daemon"))
    -- and the modules they load
    assert.same({ dir .. "/closed", 448, "lua_path" }, { config.unreachable({ prefix = dir,
      lua_path = "/usr/share/lua/5.1/?.lua;" .. dir .. "/closed/p/?/init.lua;;" }, "nobody:daemon") })
    os.execute("rm -rf " .. h.q(dir))
  end)
end)

describe("an exec of a program that is not there", function()
  it("is documented as 126 with the engine's message in stderr", function()
    assert.matches("code 126, as `docker exec` reports it, and the engine's message", doc("docs/session.md"), 1, true)
    assert.matches("code 126, as `docker exec`, with the engine's message in `stderr`", doc("docs/api/session.md"), 1, true)
    -- the behaviour itself: spec/docker_session_spec.lua, on a live stack
  end)
end)
