-- The OpenResty gateway example (examples/openresty-gateway) in a real nginx on loopback, driven
-- with real HTTP (curl): worker-thread plumbing, then real per-session stacks.
--
-- Every test needs nginx (#nginx), which the luajit and asan modes exclude by tag.
local core = require "sandstack.core"
local harness = require "nginx_harness"

local function have_docker_provider()
  local ok, docker = pcall(require, "sandstack.docker")
  return ok and type(docker) == "table" and type(docker.start) == "function"
end

local function decode(body)
  return core.json_decode(body) or {}
end

-- A short random suffix so that two runs of this file never share names.
local run_id = core.random_hex(3)
run_id = run_id:lower():gsub("[^a-z0-9]", ""):sub(1, 6)
local PREFIX = "sstest-gw-"

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>/dev/null"))
  local out = p:read("a")
  p:close()
  return out
end

local function lines(s)
  local t = {}
  for l in s:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

-- Docker objects of one project, by the label every sandstack object carries.
local function project_objects(project)
  local label = "label=io.sandstack.project=" .. project
  return {
    containers = lines(sh("docker ps -aq --filter " .. label)),
    networks = lines(sh("docker network ls -q --filter " .. label)),
    volumes = lines(sh("docker volume ls -q --filter " .. label)),
  }
end

-- Removes what a failed run may have left of these projects (this run's names only).
local function remove_projects(projects)
  for _, project in ipairs(projects) do
    local o = project_objects(project)
    if #o.containers > 0 then sh("docker rm -fv " .. table.concat(o.containers, " ")) end
    if #o.networks > 0 then sh("docker network rm " .. table.concat(o.networks, " ")) end
    if #o.volumes > 0 then sh("docker volume rm " .. table.concat(o.volumes, " ")) end
  end
end

-- The host port Docker publishes for the project's forwarder (the only published port).
local function published_port(project)
  local out = sh("docker ps --filter label=io.sandstack.project=" .. project
    .. " --format '{{.Ports}}'")
  return tonumber(out:match("127%.0%.0%.1:(%d+)%->") or out:match(":(%d+)%->"))
end

local function published_container(project)
  for _, line in ipairs(lines(sh("docker ps --filter label=io.sandstack.project=" .. project
    .. " --format '{{.ID}} {{.Ports}}'"))) do
    if line:find("->", 1, true) then return line:match("^(%S+)") end
  end
end

-- Values of SANDSTACK_SESSION in the project's containers.
local function session_envs(project)
  local ids = lines(sh("docker ps -q --filter label=io.sandstack.project=" .. project))
  local found = {}
  for _, id in ipairs(ids) do
    local env = sh("docker inspect -f '{{range .Config.Env}}{{println .}}{{end}}' " .. id)
    for v in env:gmatch("SANDSTACK_SESSION=([^\n]*)") do found[#found + 1] = v end
  end
  return found
end

-- Sends n copies of one request at once; returns their answers as {status, body} in order.
local function all_at_once(srv, n, method, path, timeout)
  local jobs, out = {}, {}
  for i = 1, n do jobs[i] = srv:spawn(method, path, { timeout = timeout }) end
  for i = 1, n do
    local status, body = jobs[i]:wait(timeout + 30)
    out[i] = { status = status, body = body }
  end
  return out
end

local function stack_config(extra)
  local c = {
    thread_pool = "sandstack",
    project_prefix = PREFIX,
    stack = {
      agent_port = 8080,
      ready_timeout = 60,
      timeout = 90, -- per Engine request: the shared test engine can be slow under load
      forwarder_image = "sandstack-test/socat:local",
      services = {
        { name = "sandbox", image = "sandstack-test/agent:local",
          -- The pause makes every start last seconds, so "in flight" is not a race.
          command = { "sh", "-c", "sleep 2; exec agent" }, env = { AGENT_PORT = "8080" } },
      },
    },
  }
  for k, v in pairs(extra or {}) do c[k] = v end
  return c
end

describe("openresty gateway plumbing #nginx #docker", function()
  local srv

  setup(function()
    srv = harness.start({ config = stack_config(), workers = 1, threads = 4 })
  end)

  teardown(function()
    if srv then srv:stop() end
  end)

  it("serves a trivial location", function()
    local status, body = srv:request("GET", "/ping")
    assert.equal(200, status)
    assert.equal("pong\n", body)
  end)

  it("loads sandstack and reaches the Engine from thread-pool VMs, many at once", function()
    for _, r in ipairs(all_at_once(srv, 8, "GET", "/health", 30)) do
      assert.equal(200, r.status, r.body)
      local doc = decode(r.body)
      assert.equal(core.VERSION, doc.sandstack)
      assert.matches("^1%.%d+$", doc.engine_api)
    end
    assert.is_nil(srv:error_log():find("[error]", 1, true), srv:error_log())
  end)

  it("refuses bad session keys and unknown sessions", function()
    assert.equal(400, (srv:request("POST", "/sessions?key=Bad.Key")))
    assert.equal(400, (srv:request("POST", "/sessions", { body = '{"key":"../x"}' })))
    assert.equal(400, (srv:request("POST", "/sessions")))
    assert.equal(405, (srv:request("GET", "/sessions")))
    assert.equal(404, (srv:request("GET", "/sessions/nosuch-" .. run_id)))
    assert.equal(404, (srv:request("DELETE", "/sessions/nosuch-" .. run_id)))
    assert.equal(404, (srv:request("GET", "/sessions/nosuch-" .. run_id .. "/echo")))
  end)

  it("reports a failed start and keeps no entry for it", function()
    local bad = harness.start({ config = stack_config({ stack = { services = {} } }), threads = 2 })
    local key = "bad-" .. run_id
    local status, body = bad:request("POST", "/sessions?key=" .. key, { timeout = 60 })
    local again = bad:request("GET", "/sessions/" .. key)
    bad:stop()
    assert.equal(502, status, body)
    local err = decode(body).error
    assert.is_table(err)
    if have_docker_provider() then assert.equal("compose", err.kind, body) end
    assert.equal(404, again)
  end)
end)

-- The sbx backend's process runner (core.sbx_run) inside a real nginx worker, whose SIGCHLD
-- handler reaps every child with waitpid(-1) and whose thread-pool threads block all signals.
local PROBE_CONF = [[
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
user {{user}};
worker_processes 1;
daemon off;
pid logs/nginx.pid;
error_log logs/error.log notice;
thread_pool probe threads={{threads}};
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path tmp/body;
  proxy_temp_path tmp/proxy;
  lua_package_path "{{lua_path}}";
  lua_package_cpath "{{lua_cpath}}";
  lua_worker_thread_vm_pool_size {{vms}};
  server {
    listen {{listen}};
    location = /ping { return 200 "pong\n"; }
    location = /probe {
      content_by_lua_block {
        local core = require "sandstack.core"
        local ok, res = ngx.run_worker_thread("probe", "sstest_probe", ngx.var.arg_fn,
          tonumber(ngx.var.arg_n))
        ngx.say(core.json_encode({ ok = ok, res = res }))
      }
    }
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

describe("sbx process runner inside nginx #nginx", function()
  local srv, dir

  setup(function()
    dir = sh("mktemp -d /tmp/sstest-probe.XXXXXX"):match("[^\n]+")
    local f = assert(io.open(dir .. "/sstest_probe.lua", "w"))
    f:write(PROBE_MODULE)
    f:close()
    srv = harness.start({ template = PROBE_CONF, threads = 4, vms = 8,
      lua_path_prefix = dir .. "/?.lua;" })
  end)

  teardown(function()
    if srv then srv:stop() end
    if dir then os.execute("rm -rf '" .. dir .. "'") end
  end)

  it("gets every child's exit status from worker threads, raising no SIGCHLD", function()
    for _, r in ipairs(all_at_once(srv, 4, "GET", "/probe?fn=sbx_exits&n=20", 60)) do
      assert.equal(200, r.status, r.body)
      local doc = decode(r.body)
      assert.is_true(doc.ok, r.body)
      for code = 1, 20 do assert.equal(code, doc.res[code], r.body) end
    end
    -- nginx logs each SIGCHLD it handles: the runner's children (exit signal 0) sent none.
    assert.is_nil(srv:error_log():find("SIGCHLD", 1, true), srv:error_log())
  end)

  it("starts children with no signal blocked or ignored", function()
    local status, body = srv:request("GET", "/probe?fn=sbx_signals")
    assert.equal(200, status, body)
    local out = decode(body).res
    assert.matches("SigBlk:%s+0+\n", out)
    assert.matches("SigIgn:%s+%x-0000000\n", out) -- signals 1-31 at their defaults
  end)

  it("(contrast) an ordinary child does raise SIGCHLD, which nginx's handler reaps", function()
    local status, body = srv:request("GET", "/probe?fn=os_execute")
    assert.equal(200, status, body)
    for _ = 1, 20 do
      if srv:error_log():find("SIGCHLD", 1, true) then break end
      os.execute("sleep 0.1")
    end
    assert.truthy(srv:error_log():find("signal 17 (SIGCHLD)", 1, true), srv:error_log())
  end)
end)

-- A stand-in for sandstack.docker whose "stacks" are static HTTP servers on ports the test
-- chooses, so that a host port can be handed from one session's stack to another's on purpose.
local DOUBLE = [[
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
function Stack:record() return { project = self.project, port = self.port } end
function Stack:close() end
function Stack:destroy() os.remove(DIR .. "/" .. self.project .. ".port"); return true end
local function handle(project)
  local port = port_of(project)
  if not port then return nil, { kind = "engine", message = "no such stack" } end
  return setmetatable({ project = project, port = port }, Stack)
end
function M.start(_, opts) return handle(opts.project_name) end
function M.reconnect(record) return handle(record.project) end
function M.down() return true end
return M
]]

describe("openresty gateway routing with a stand-in provider #nginx", function()
  local srv, dir
  local servers = {}

  local function write(path, data)
    local f = assert(io.open(path, "w"))
    f:write(data)
    f:close()
  end

  -- A static server on `port` whose GET /who answers `name`.
  local function serve(name, port)
    local root = dir .. "/www-" .. name
    os.execute("mkdir -p '" .. root .. "'")
    write(root .. "/who", name)
    local pid = sh("python3 -m http.server " .. port .. " --bind 127.0.0.1 --directory '"
      .. root .. "' >/dev/null 2>&1 </dev/null & echo $!"):match("%d+")
    servers[#servers + 1] = pid
    for _ = 1, 100 do
      if sh("curl -s http://127.0.0.1:" .. port .. "/who") == name then return pid end
      os.execute("sleep 0.05")
    end
    error("static server " .. name .. " did not come up on " .. port)
  end

  local function stop_server(pid)
    os.execute("kill " .. pid .. " 2>/dev/null")
    for _ = 1, 50 do
      if not os.execute("kill -0 " .. pid .. " 2>/dev/null") then return end
      os.execute("sleep 0.05")
    end
  end

  setup(function()
    dir = sh("mktemp -d /tmp/sstest-gwd.XXXXXX"):match("[^\n]+")
    os.execute("mkdir -p '" .. dir .. "/lua/sandstack'")
    write(dir .. "/lua/sandstack/docker.lua", DOUBLE:format(dir))
    -- Two workers: the session table is shared, whichever worker takes a request.
    srv = harness.start({ config = stack_config({ project_prefix = "sstest-gwd-" }), workers = 2,
      threads = 2, lua_path_prefix = dir .. "/lua/?.lua;" })
  end)

  teardown(function()
    if srv then srv:stop() end
    for _, pid in ipairs(servers) do stop_server(pid) end
    if dir then os.execute("rm -rf '" .. dir .. "'") end
  end)

  local function who(k)
    local status, body = srv:request("GET", "/sessions/" .. k .. "/who")
    assert.equal(200, status, body)
    return body
  end

  it("never proxies to a port that has since gone to another session's stack", function()
    local pa = harness.free_port()
    local a_old = serve("a", pa)
    write(dir .. "/sstest-gwd-a.port", tostring(pa))
    assert.equal(201, (srv:request("POST", "/sessions?key=a")))
    assert.equal("a", who("a"))
    -- a's stack restarts on a new port, and b's stack is then given a's old one.
    stop_server(a_old)
    local pa2 = harness.free_port()
    serve("a", pa2)
    write(dir .. "/sstest-gwd-a.port", tostring(pa2))
    serve("b", pa)
    write(dir .. "/sstest-gwd-b.port", tostring(pa))
    local status, body = srv:request("POST", "/sessions?key=b")
    assert.equal(201, status, body)
    assert.equal(pa, decode(body).port)
    -- a's record still says pa, where b's stack answers now: the gateway must notice.
    assert.equal("a", who("a"))
    local _, doc = srv:request("GET", "/sessions/a")
    assert.equal(pa2, decode(doc).port)
    assert.equal("b", who("b"))
    assert.equal(200, (srv:request("DELETE", "/sessions/a")))
    assert.equal(200, (srv:request("DELETE", "/sessions/b")))
  end)
end)

describe("openresty gateway stacks #nginx #docker", function()
  local srv
  local keys = {}
  local projects = {}
  local records = {}

  local function key(name)
    local k = name .. "-" .. run_id
    if not keys[k] then
      keys[k] = true
      projects[#projects + 1] = PREFIX .. k
    end
    return k
  end

  setup(function()
    if not have_docker_provider() then return end
    srv = harness.start({ config = stack_config(), workers = 1, threads = 8 })
  end)

  teardown(function()
    if srv then srv:stop() end
    remove_projects(projects) -- a safety net only: the tests assert that nothing is left
  end)

  -- Proves the gateway reached the agent of `k`: the echo shows the request nginx sent, whose
  -- Host header names the port it connected to, and that port is the one Docker publishes
  -- for the forwarder of k's own project.
  local function assert_routes_to(k, path)
    local status, body, headers = srv:request("GET", "/sessions/" .. k .. path)
    assert.equal(200, status, body)
    local expected = published_port(PREFIX .. k)
    assert.is_number(expected)
    assert.truthy(body:find("Host: 127.0.0.1:" .. expected, 1, true), body)
    assert.truthy(body:find("X-Sandstack-Session: " .. k, 1, true), body)
    return body, headers, expected
  end

  local function pending_without_provider()
    if not have_docker_provider() then
      pending("lua/sandstack/docker.lua (sandstack.docker.start/destroy) has not landed yet")
      return true
    end
  end

  it("creates two sessions concurrently while nginx keeps answering", function()
    if pending_without_provider() then return end
    local a, b = key("a"), key("b")
    local ja = srv:spawn("POST", "/sessions?key=" .. a, { timeout = 120 })
    local jb = srv:spawn("POST", "/sessions", { body = '{"key":"' .. b .. '"}', timeout = 120 })
    -- One nginx worker: if a start blocked its event loop, no /ping could be answered until
    -- the POSTs returned.
    local answered_in_flight = 0
    for _ = 1, 20 do
      local status = srv:request("GET", "/ping", { timeout = 30 })
      assert.equal(200, status)
      if not ja:done() and not jb:done() then answered_in_flight = answered_in_flight + 1 end
      os.execute("sleep 0.05")
    end
    -- While starting, the key is taken and its location answers "not yet".
    assert.equal(409, (srv:request("POST", "/sessions?key=" .. a)))
    local sa, ba = ja:wait(150)
    local sb, bb = jb:wait(150)
    assert.equal(201, sa, ba .. srv:error_log())
    assert.equal(201, sb, bb .. srv:error_log())
    assert.is_true(answered_in_flight >= 3, "pings answered during the starts: " .. answered_in_flight)
    records[a], records[b] = decode(ba), decode(bb)
    assert.equal("ready", records[a].state)
    assert.is_nil(records[a].record) -- the stack's configuration is not the client's
    assert.equal(PREFIX .. a, records[a].project)
    assert.equal(PREFIX .. b, records[b].project)
    assert.is_number(records[a].port)
    assert.are_not.equal(records[a].port, records[b].port)
  end)

  it("routes each session to its own stack only", function()
    if pending_without_provider() then return end
    local a, b = key("a"), key("b")
    local body, _, port_a = assert_routes_to(a, "/echo/hello?x=1")
    assert.truthy(body:find("GET /echo/hello?x=1", 1, true), body)
    local _, _, port_b = assert_routes_to(b, "/echo/")
    assert.are_not.equal(port_a, port_b)
    assert.same({ a }, session_envs(PREFIX .. a))
    assert.same({ b }, session_envs(PREFIX .. b))
    -- The stored record is the one the POST returned.
    local status, doc = srv:request("GET", "/sessions/" .. a)
    assert.equal(200, status)
    assert.equal(records[a].port, decode(doc).port)
  end)

  it("re-reads a session's port after its forwarder restarts", function()
    if pending_without_provider() then return end
    local a, b = key("a"), key("b")
    local before = published_port(PREFIX .. a)
    local id = published_container(PREFIX .. a)
    assert.is_string(id)
    sh("docker restart -t 1 " .. id)
    local after = published_port(PREFIX .. a)
    -- Docker hands out ephemeral host ports in sequence: the restarted forwarder moved.
    assert.are_not.equal(before, after)
    assert_routes_to(a, "/echo/after-restart")
    local _, doc = srv:request("GET", "/sessions/" .. a)
    assert.equal(after, decode(doc).port)
    assert_routes_to(b, "/echo/still-b")
  end)

  it("deletes both sessions and leaves nothing behind", function()
    if pending_without_provider() then return end
    local a, b = key("a"), key("b")
    for _, k in ipairs({ a, b }) do
      local status, body = srv:request("DELETE", "/sessions/" .. k, { timeout = 120 })
      assert.equal(200, status, body)
      assert.equal(404, (srv:request("GET", "/sessions/" .. k)))
      assert.equal(404, (srv:request("GET", "/sessions/" .. k .. "/echo")))
      assert.same({ containers = {}, networks = {}, volumes = {} }, project_objects(PREFIX .. k))
    end
  end)

  it("answers 503 at once while every thread-pool VM is taken, then recovers", function()
    if pending_without_provider() then return end
    local small = harness.start({ config = stack_config(), threads = 1, vms = 1 })
    local k = key("busy")
    local job = small:spawn("POST", "/sessions?key=" .. k, { timeout = 120 })
    -- The POST marks the key "starting" and submits its call in one uninterrupted run of the
    -- event loop, so once the mark is visible the only VM is taken.
    for _ = 1, 100 do
      local _, doc = small:request("GET", "/sessions/" .. k)
      if decode(doc).state == "starting" or job:done() then break end
      os.execute("sleep 0.05")
    end
    local busy_in_flight, other = 0, {}
    for _ = 1, 40 do
      local status, body, headers = small:request("GET", "/health", { timeout = 30 })
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
    local after = small:request("GET", "/health", { timeout = 30 })
    local deleted = small:request("DELETE", "/sessions/" .. k, { timeout = 120 })
    small:stop()
    assert.equal(201, status, body)
    assert.is_true(busy_in_flight >= 1, "503s while the start held the only VM: "
      .. busy_in_flight .. ", other answers: " .. table.concat(other, ","))
    assert.equal(200, after)
    assert.equal(200, deleted)
    assert.same({ containers = {}, networks = {}, volumes = {} }, project_objects(PREFIX .. k))
  end)

  it("starts four stacks at once from worker threads, each its own", function()
    if pending_without_provider() then return end
    local ks, jobs = {}, {}
    for i = 1, 4 do
      ks[i] = key("p" .. i)
      jobs[i] = srv:spawn("POST", "/sessions?key=" .. ks[i], { timeout = 150 })
    end
    local ports = {}
    for i = 1, 4 do
      local status, body = jobs[i]:wait(180)
      assert.equal(201, status, body .. srv:error_log())
      local rec = decode(body)
      assert.equal(PREFIX .. ks[i], rec.project)
      assert.is_nil(ports[rec.port], "port handed out twice: " .. tostring(rec.port))
      ports[rec.port] = true
    end
    for i = 1, 4 do
      assert_routes_to(ks[i], "/echo/" .. i)
      assert.same({ ks[i] }, session_envs(PREFIX .. ks[i]))
    end
    local dels = {}
    for i = 1, 4 do dels[i] = srv:spawn("DELETE", "/sessions/" .. ks[i], { timeout = 150 }) end
    for i = 1, 4 do
      local status, body = dels[i]:wait(180)
      assert.equal(200, status, body)
      assert.same({ containers = {}, networks = {}, volumes = {} }, project_objects(PREFIX .. ks[i]))
    end
  end)
end)
