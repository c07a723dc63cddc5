-- The production gateway (sandstack.gateway) and nginx's worker threads, in a real nginx on
-- loopback driven with real HTTP (curl): the thread-pool plumbing, the sbx process runner
-- inside a gateway worker, the port-reuse guard (with a stand-in provider), and real
-- per-session stacks started concurrently, routed, re-read after a forwarder restart, refused
-- with 503 while every thread-pool VM is taken, and removed without a trace.
-- Every test needs nginx (#nginx), which the luajit and asan modes exclude by tag.
local core = require "sandstack.core"
local h = require "helpers"
local harness = require "nginx_harness"
local gh = require "gateway_harness"

local TOKENS = gh.TOKENS
-- The project a node gives a tenant's key (each tenant has its own key space).
local project_for = require("sandstack.gateway").project_for

local function decode(body)
  return core.json_decode(body or "") or {}
end

local function lines(s)
  local t = {}
  for l in s:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

local function sh(cmd)
  return (h.sh(cmd .. " 2>/dev/null"))
end

-- Docker objects of one project, by the label every sandstack object carries (the gateway's
-- marker container carries it too).
local function project_objects(project)
  local label = "label=io.sandstack.project=" .. project
  return {
    containers = lines(sh("docker ps -aq --filter " .. label)),
    networks = lines(sh("docker network ls -q --filter " .. label)),
    volumes = lines(sh("docker volume ls -q --filter " .. label)),
  }
end

local NOTHING = { containers = {}, networks = {}, volumes = {} }

-- The host port Docker publishes for the project's forwarder (the only published port).
local function published_port(project)
  local out = sh("docker ps --filter label=io.sandstack.project=" .. project .. " --format '{{.Ports}}'")
  return tonumber(out:match("127%.0%.0%.1:(%d+)%->") or out:match(":(%d+)%->"))
end

local function published_container(project)
  for _, line in ipairs(lines(sh("docker ps --filter label=io.sandstack.project=" .. project
    .. " --format '{{.ID}} {{.Ports}}'"))) do
    if line:find("->", 1, true) then return line:match("^(%S+)") end
  end
end

-- Values of SANDSTACK_SESSION in the project's running containers.
local function session_envs(project)
  local found = {}
  for _, id in ipairs(lines(sh("docker ps -q --filter label=io.sandstack.project=" .. project))) do
    local env = sh("docker inspect -f '{{range .Config.Env}}{{println .}}{{end}}' " .. id)
    for v in env:gmatch("SANDSTACK_SESSION=([^\n]*)") do found[#found + 1] = v end
  end
  return found
end

-- Request headers of a tenant token and/or a session secret.
local function creds(token, secret)
  local t = {}
  if token then t.Authorization = "Bearer " .. token end
  if secret then t["X-Sandstack-Session-Secret"] = secret end
  return t
end

-- Sends n copies of GET path at once, asserts that each was answered 200, and returns their
-- bodies decoded, in order, each with its text as `body` (for failure messages).
local function all_ok_at_once(srv, n, path, timeout)
  local jobs, out = {}, {}
  for i = 1, n do jobs[i] = srv:spawn("GET", path, { timeout = timeout }) end
  for i = 1, n do
    local status, body = jobs[i]:wait(timeout + 30)
    assert.equal(200, status, body)
    out[i] = decode(body)
    out[i].body = body
  end
  return out
end

-- Real stacks whose sandbox pauses 2 s first, so that "in flight" is never a race.
local function slow_stack(extra)
  local s = gh.stack_options {
    services = { { name = "sandbox", image = "sandstack-test/agent:local",
      command = { "sh", "-c", "sleep 2; exec agent" }, env = { AGENT_PORT = "8080" } } },
  }
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

describe("gateway worker-thread plumbing #nginx #docker", function()
  local P = gh.PREFIX .. "t-"
  local node

  setup(function()
    node = gh.start(gh.config { project_prefix = P, threads = 4, vms = 8, stack = slow_stack() })
  end)

  teardown(function()
    if node then node:stop() end
    gh.cleanup(P)
  end)

  it("serves a trivial location", function()
    local status, body = node.srv:request("GET", "/ping")
    assert.equal(200, status)
    assert.equal("pong\n", body)
  end)

  it("loads sandstack and reaches the Engine from thread-pool VMs, many at once", function()
    for _, doc in ipairs(all_ok_at_once(node.srv, 8, "/health", 30)) do
      assert.equal(core.VERSION, doc.sandstack, doc.body)
      assert.matches("^1%.%d+$", doc.engine_api)
    end
    assert.is_nil(node:error_log():find("[error]", 1, true), node:error_log())
  end)

  it("refuses bad session keys and unknown sessions, starting nothing", function()
    assert.truthy(node:wait_adopted(30), node:error_log())
    local alice = { token = TOKENS.alice }
    assert.equal(400, (node:api("POST", "/sessions/Bad.Key", alice)))
    assert.equal(400, (node:api("POST", "/sessions/" .. ("k"):rep(49), alice)))
    assert.equal(400, (node:api("POST", "/sessions/pool-x", alice))) -- the pool's projects
    assert.equal(400, (node:api("POST", "/sessions/a%20b", alice)))
    -- a key that climbs out of /sessions is no key: nginx normalises it to another route
    local st, doc = node:api("POST", "/sessions/..%2Fx", alice)
    assert.equal(404, st)
    assert.equal("no such route", doc.error.message)
    assert.equal(405, (node:api("GET", "/sessions", alice)))
    local any = { token = TOKENS.alice, secret = core.random_hex(32) }
    assert.equal(404, (node:api("GET", "/sessions/nosuch", any)))
    assert.equal(404, (node:api("DELETE", "/sessions/nosuch", any)))
    assert.equal(404, (node:api("GET", "/sessions/nosuch/echo", any)))
    assert.equal(0, gh.count(P))
  end)

  it("reports a failed start and keeps no entry for it", function()
    local BP = gh.PREFIX .. "f-"
    local bad = gh.start(gh.config { project_prefix = BP, threads = 2, vms = 4,
      stack = gh.stack_options { services = {} } })
    local adopted = bad:wait_adopted(30)
    local status, doc, body = bad:api("POST", "/sessions/bad", { token = TOKENS.alice, timeout = 60 })
    -- an entry (even "starting") would answer 401 to a wrong secret; none answers 404
    local again = bad:api("GET", "/sessions/bad", { token = TOKENS.alice, secret = core.random_hex(32) })
    local log = bad:error_log()
    bad:stop()
    local left = gh.count(BP)
    gh.cleanup(BP)
    assert.truthy(adopted, log)
    assert.equal(502, status, body)
    assert.is_table(doc.error, body)
    assert.equal("compose", doc.error.kind, body)
    assert.equal(404, again)
    assert.equal(0, left)
  end)
end)

-- The sbx backend's process runner (core.sbx_run) inside a real gateway worker, whose SIGCHLD
-- handler reaps every child with waitpid(-1) and whose thread-pool threads block all signals.
-- The probe location and module are the test's, added through the config's nginx.server.
local PROBE_LOCATION = [[
    location = /probe {
      content_by_lua_block {
        local core = require "sandstack.core"
        local ok, res = ngx.run_worker_thread("sandstack", "sstest_probe", ngx.var.arg_fn,
          tonumber(ngx.var.arg_n))
        ngx.say(core.json_encode({ ok = ok, res = res }))
      }
    }
]]

local PROBE_MODULE = [[
local M = {}
function M.sbx_exits(n)
  local core = require "sandstack.core"
  local codes = {}
  for i = 1, n do
    local r = core.sbx_run({ "sh", "-c", "exit " .. i }, { timeout = 10 })
    codes[i] = r and r.exit_code or -1
  end
  return codes
end
function M.sbx_signals()
  local core = require "sandstack.core"
  local r = core.sbx_run({ "sh", "-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status" })
  return r and r.stdout or "failed"
end
function M.os_execute()
  return tostring(os.execute("exit 3"))
end
return M
]]

describe("sbx process runner inside a gateway worker #nginx", function()
  local P = gh.PREFIX .. "x-"
  local node, dir

  setup(function()
    -- 0711: the workers (nobody, unless a worker needs root) load the probe module from it
    dir = h.must("d=$(mktemp -d /tmp/sstest-probe.XXXXXX) && chmod 0711 \"$d\" && echo \"$d\""):match("[^\n]+")
    h.write_file(dir .. "/sstest_probe.lua", PROBE_MODULE)
    node = gh.start(gh.config { project_prefix = P, threads = 4, vms = 8,
      nginx = { server = PROBE_LOCATION } }, { lua_path_prefix = dir .. "/?.lua;" })
  end)

  teardown(function()
    if node then node:stop() end
    if dir then os.execute("rm -rf " .. h.q(dir)) end
  end)

  it("gets every child's exit status from worker threads, raising no SIGCHLD", function()
    for _, doc in ipairs(all_ok_at_once(node.srv, 4, "/probe?fn=sbx_exits&n=20", 60)) do
      assert.is_true(doc.ok, doc.body)
      for code = 1, 20 do assert.equal(code, doc.res[code], doc.body) end
    end
    -- nginx logs each SIGCHLD it handles: the runner's children (exit signal 0) sent none.
    assert.is_nil(node:error_log():find("SIGCHLD", 1, true), node:error_log())
  end)

  it("starts children with no signal blocked or ignored", function()
    local status, body = node.srv:request("GET", "/probe?fn=sbx_signals")
    assert.equal(200, status, body)
    local out = decode(body).res
    assert.matches("SigBlk:%s+0+\n", out)
    assert.matches("SigIgn:%s+%x-0000000\n", out) -- signals 1-31 at their defaults
  end)

  it("(contrast) an ordinary child does raise SIGCHLD, which nginx's handler reaps", function()
    local status, body = node.srv:request("GET", "/probe?fn=os_execute")
    assert.equal(200, status, body)
    for _ = 1, 20 do
      if node:error_log():find("SIGCHLD", 1, true) then break end
      os.execute("sleep 0.1")
    end
    assert.truthy(node:error_log():find("signal 17 (SIGCHLD)", 1, true), node:error_log())
  end)
end)

-- Stand-ins for sandstack.docker and sandstack.engine in the thread VMs: a "stack" is a static
-- HTTP server on a port the test chooses (DIR/<project>.port), so that a host port can be
-- handed from one session's stack to another's on purpose; the engine only accepts the
-- gateway's marker and lists nothing to adopt. Everything else is the production gateway.
local DOCKER_DOUBLE = [[
local DIR = %q
local M = {}
local function port_of(project)
  local f = io.open(DIR .. "/" .. project .. ".port")
  if not f then return nil end
  local p = tonumber(f:read("*a"))
  f:close()
  return p
end
local Stack = {}
Stack.__index = Stack
function Stack:record() return { project = self.project, port = self.port, forwarder = "forwarder" } end
function Stack:close() end
local function handle(project)
  local port = port_of(project)
  if not port then return nil, { kind = "engine", message = "no such stack" } end
  return setmetatable({ project = project, port = port }, Stack)
end
function M.start(_, opts) return handle(opts.project_name) end
function M.reconnect(record) return handle(record.project) end
function M.down(project) os.remove(DIR .. "/" .. project .. ".port"); return true end
return M
]]

local ENGINE_DOUBLE = [[
local M = {}
local Engine = {}
Engine.__index = Engine
function Engine:version() return { ApiVersion = "1.41" } end
function Engine:call(method, path)
  if method == "GET" and path == "/containers/json" then return {} end
  if method == "GET" and path:match("^/containers/[^/]+/json$") then return { Config = { Image = "standin" } } end
  if method == "POST" and path == "/containers/create" then return { Id = "standin-marker" } end
  return nil, { kind = "engine", message = "stand-in engine: " .. method .. " " .. path }
end
function Engine:close() end
function M.new() return setmetatable({}, Engine) end
return M
]]

describe("gateway routing with a stand-in provider #nginx", function()
  local P = gh.PREFIX .. "d-"
  local node, dir
  local servers, secrets = {}, {}

  -- A static server on `port` whose GET /who answers `name`.
  local function serve(name, port)
    local root = dir .. "/www-" .. name
    os.execute("mkdir -p " .. h.q(root))
    h.write_file(root .. "/who", name)
    local pid = h.start("python3 -m http.server " .. port .. " --bind 127.0.0.1 --directory " .. h.q(root)
      .. " >/dev/null 2>&1 </dev/null")
    servers[#servers + 1] = pid
    for _ = 1, 100 do
      if sh("curl -s http://127.0.0.1:" .. port .. "/who") == name then return pid end
      os.execute("sleep 0.05")
    end
    error("static server " .. name .. " did not come up on " .. port)
  end

  local function stop_server(pid)
    h.signal(pid, "TERM")
    for _ = 1, 50 do
      if not h.running(pid) then return end
      os.execute("sleep 0.05")
    end
  end

  local function place(key, port)
    h.write_file(dir .. "/" .. project_for(node.conf, "alice", key) .. ".port", tostring(port))
  end

  setup(function()
    -- 0711: the workers (nobody, unless a worker needs root) load the doubles and read the ports
    dir = h.must("d=$(mktemp -d /tmp/sstest-gwd.XXXXXX) && chmod 0711 \"$d\" && echo \"$d\""):match("[^\n]+")
    os.execute("mkdir -p " .. h.q(dir .. "/lua/sandstack"))
    h.write_file(dir .. "/lua/sandstack/docker.lua", DOCKER_DOUBLE:format(dir))
    h.write_file(dir .. "/lua/sandstack/engine.lua", ENGINE_DOUBLE)
    -- Two workers: the session table is shared, whichever worker takes a request.
    node = gh.start(gh.config { project_prefix = P, workers = 2, threads = 2, vms = 4,
      nginx = { metrics = gh.ENTRY_LOCATION } }, { lua_path_prefix = dir .. "/lua/?.lua;" })
  end)

  teardown(function()
    if node then node:stop() end
    for _, pid in ipairs(servers) do stop_server(pid) end
    if dir then os.execute("rm -rf " .. h.q(dir)) end
  end)

  local function who(k)
    local status, _, body = node:api("GET", "/sessions/" .. k .. "/who", { secret = secrets[k] })
    assert.equal(200, status, body)
    return body
  end

  local function create(k)
    local status, doc, body = node:api("POST", "/sessions/" .. k, { token = TOKENS.alice })
    assert.equal(201, status, body .. node:error_log())
    secrets[k] = doc.secret
  end

  it("never proxies to a port that has since gone to another session's stack", function()
    local pa = harness.free_port()
    local a_old = serve("a", pa)
    place("a", pa)
    create("a")
    assert.equal("a", who("a"))
    -- a's stack restarts on a new port, and b's stack is then given a's old one.
    stop_server(a_old)
    local pa2 = harness.free_port()
    serve("a", pa2)
    place("a", pa2)
    serve("b", pa)
    place("b", pa)
    create("b")
    assert.equal(pa, node:entry("b.alice").record.port)
    -- a's record still says pa, where b's stack answers now: the gateway must notice.
    assert.equal(pa, node:entry("a.alice").record.port)
    assert.equal("a", who("a"))
    assert.equal(pa2, node:entry("a.alice").record.port)
    assert.equal("b", who("b"))
    for _, k in ipairs { "a", "b" } do
      assert.equal(200, (node:api("DELETE", "/sessions/" .. k, { token = TOKENS.alice, secret = secrets[k] })))
    end
  end)
end)

describe("gateway stacks from worker threads #nginx #docker", function()
  local P = gh.PREFIX .. "s-"
  local node
  local s = {} -- name -> {key =, secret =, port =, tenant =}
  local function project(name) return project_for(node.conf, s[name].tenant, s[name].key) end
  local function entry(name) return node:entry(s[name].key .. "." .. s[name].tenant) end

  setup(function()
    node = gh.start(gh.config { project_prefix = P, threads = 8, stack = slow_stack(),
      nginx = { metrics = gh.ENTRY_LOCATION } })
  end)

  teardown(function()
    if node then node:stop() end
    gh.cleanup(P) -- a safety net only: the tests assert that nothing is left
  end)

  -- Proves the gateway reached the agent of `name`: the echo shows the request nginx sent, whose
  -- Host header names the port it connected to, and that port is the one Docker publishes for
  -- the forwarder of the session's own project.
  local function assert_routes_to(name, path)
    local k = s[name].key
    local status, _, body = node:api("GET", "/sessions/" .. k .. path, { secret = s[name].secret })
    assert.equal(200, status, body)
    local expected = published_port(project(name))
    assert.is_number(expected)
    assert.truthy(body:find("Host: 127.0.0.1:" .. expected, 1, true), body)
    assert.truthy(body:find("X-Sandstack-Session: " .. k, 1, true), body)
    return body, expected
  end

  it("creates two sessions concurrently while nginx keeps answering", function()
    -- one key of the client's choosing, one of the gateway's
    local ja = node.srv:spawn("POST", "/sessions/a", { headers = creds(TOKENS.alice), timeout = 120 })
    local jb = node.srv:spawn("POST", "/sessions", { headers = creds(TOKENS.bob), timeout = 120 })
    -- One nginx worker: if a start blocked its event loop, no /ping could be answered until
    -- the POSTs returned.
    local answered_in_flight = 0
    for _ = 1, 20 do
      local status = node.srv:request("GET", "/ping", { timeout = 30 })
      assert.equal(200, status)
      if not ja:done() and not jb:done() then answered_in_flight = answered_in_flight + 1 end
      os.execute("sleep 0.05")
    end
    -- The key is taken from the moment its start begins.
    assert.equal(409, (node:api("POST", "/sessions/a", { token = TOKENS.alice })))
    local sa, ba = ja:wait(150)
    local sb, bb = jb:wait(150)
    assert.equal(201, sa, ba .. node:error_log())
    assert.equal(201, sb, bb .. node:error_log())
    assert.is_true(answered_in_flight >= 3, "pings answered during the starts: " .. answered_in_flight)
    s.a, s.b = decode(ba), decode(bb)
    s.a.tenant, s.b.tenant = "alice", "bob"
    assert.equal("a", s.a.key)
    local st, view, vbody = node:api("GET", "/sessions/a", { token = TOKENS.alice, secret = s.a.secret })
    assert.equal(200, st, vbody)
    assert.equal("ready", view.state)
    assert.is_nil(view.record) -- the stack's configuration is not the client's
    assert.is_nil(view.port)
    for _, name in ipairs { "a", "b" } do
      local e = entry(name)
      assert.equal("ready", e.state)
      assert.equal(project(name), e.record.project)
      assert.is_number(e.record.port)
      s[name].port = e.record.port
    end
    assert.are_not.equal(s.a.port, s.b.port)
  end)

  it("routes each session to its own stack only", function()
    local body, port_a = assert_routes_to("a", "/echo/hello?x=1")
    assert.truthy(body:find("GET /echo/hello?x=1", 1, true), body)
    local _, port_b = assert_routes_to("b", "/echo/")
    assert.are_not.equal(port_a, port_b)
    assert.same({ s.a.key }, session_envs(project("a")))
    assert.same({ s.b.key }, session_envs(project("b")))
    -- The record the gateway routes by is the one it stored when the stack started.
    assert.equal(s.a.port, port_a)
    assert.equal(s.a.port, entry("a").record.port)
    -- And one session's secret opens no other session: that session is not there for it.
    assert.equal(404, (node:api("GET", "/sessions/a/echo/", { secret = s.b.secret })))
  end)

  it("re-reads a session's port after its forwarder restarts", function()
    local before = published_port(project("a"))
    local id = published_container(project("a"))
    assert.is_string(id)
    sh("docker restart -t 1 " .. id)
    local after = published_port(project("a"))
    -- Docker hands out ephemeral host ports in sequence: the restarted forwarder moved.
    assert.are_not.equal(before, after)
    assert_routes_to("a", "/echo/after-restart")
    assert.equal(after, entry("a").record.port)
    assert_routes_to("b", "/echo/still-b")
  end)

  it("deletes both sessions and leaves nothing behind", function()
    for _, name in ipairs { "a", "b" } do
      local k, secret = s[name].key, s[name].secret
      local token = name == "a" and TOKENS.alice or TOKENS.bob
      local status, _, body = node:api("DELETE", "/sessions/" .. k, { token = token, secret = secret })
      assert.equal(200, status, body)
      assert.equal(404, (node:api("GET", "/sessions/" .. k, { token = token, secret = secret })))
      assert.equal(404, (node:api("GET", "/sessions/" .. k .. "/echo", { secret = secret })))
      assert.is_nil(entry(name))
      assert.same(NOTHING, project_objects(project(name)))
    end
  end)

  it("answers 503 at once while every thread-pool VM is taken, then recovers", function()
    local SP = gh.PREFIX .. "v-"
    -- The expiry timer's pass reaps through the thread pool too: every 10 s by default, it would
    -- take the only VM now and then, and a health check landing then answers 503 (seen in CI).
    -- An hour apart, the start below is the only user of the VM.
    local small = gh.start(gh.config { name = "node-" .. gh.run_id .. "-small", project_prefix = SP,
      threads = 1, vms = 1, stack = slow_stack(), expiry_interval = 3600 })
    -- adoption uses the only VM too: let it finish first
    local adopted = small:wait_adopted(30)
    local job = small.srv:spawn("POST", "/sessions/busy", { headers = creds(TOKENS.alice), timeout = 120 })
    -- The POST claims the key and submits its call in one uninterrupted run of the event loop,
    -- so once the claim is visible (a wrong secret gets 401, not 404) the only VM is taken.
    local claimed
    for _ = 1, 100 do
      claimed = small:api("GET", "/sessions/busy", { token = TOKENS.alice, secret = "wrong" }) == 401
      if claimed or job:done() then break end
      os.execute("sleep 0.05")
    end
    local busy_in_flight, other = 0, {}
    for _ = 1, 40 do
      local status, body, headers = small.srv:request("GET", "/health", { timeout = 30 })
      if job:done() then break end
      if status == 503 then
        busy_in_flight = busy_in_flight + 1
        assert.equal("busy", decode(body).error.kind)
        assert.equal("1", headers["retry-after"])
      else
        other[#other + 1] = status
      end
      os.execute("sleep 0.05")
    end
    local status, body = job:wait(150)
    local doc = decode(body)
    local after = small.srv:request("GET", "/health", { timeout = 30 })
    local deleted = small:api("DELETE", "/sessions/busy", { token = TOKENS.alice, secret = doc.secret })
    local log = small:error_log()
    small:stop()
    local left = project_objects(project_for(small.conf, "alice", "busy"))
    gh.cleanup(SP)
    assert.truthy(adopted, log)
    assert.is_true(claimed, log)
    assert.equal(201, status, body)
    assert.is_true(busy_in_flight >= 1, "503s while the start held the only VM: "
      .. busy_in_flight .. ", other answers: " .. table.concat(other, ","))
    assert.equal(200, after)
    assert.equal(200, deleted)
    assert.same(NOTHING, left)
  end)

  it("starts four stacks at once from worker threads, each its own", function()
    local jobs = {}
    for i = 1, 4 do
      jobs[i] = node.srv:spawn("POST", "/sessions/p" .. i, { headers = creds(TOKENS.bob), timeout = 150 })
    end
    local ports = {}
    for i = 1, 4 do
      local status, body = jobs[i]:wait(180)
      assert.equal(201, status, body .. node:error_log())
      local name = "p" .. i
      s[name] = decode(body)
      s[name].tenant = "bob"
      local e = entry(name)
      assert.equal(project(name), e.record.project)
      assert.is_nil(ports[e.record.port], "port handed out twice: " .. tostring(e.record.port))
      ports[e.record.port] = true
    end
    for i = 1, 4 do
      local _, port = assert_routes_to("p" .. i, "/echo/" .. i)
      assert.truthy(ports[port], "routed to a port no session was given: " .. port)
      assert.same({ "p" .. i }, session_envs(project("p" .. i)))
    end
    local dels = {}
    for i = 1, 4 do
      dels[i] = node.srv:spawn("DELETE", "/sessions/p" .. i,
        { headers = creds(TOKENS.bob, s["p" .. i].secret), timeout = 150 })
    end
    for i = 1, 4 do
      local status, body = dels[i]:wait(180)
      assert.equal(200, status, body)
      assert.same(NOTHING, project_objects(project("p" .. i)))
    end
  end)
end)
