-- Several gateway nodes, each on a nested engine of its own, behind the shipped front
-- (examples/openresty-gateway/front.conf), for spec/gateway_scaleout_spec.lua.
--   - an engine: `nested-engine.sh start NAME KIND`, an instance under this run's prefix; it has
--     its own network namespace, reached from here on its address on the host engine's internal
--     network (the host's side of that bridge is on this machine; nothing leaves it);
--   - a node: `sandstack gateway --config F --prefix D` (the deploy command, nginx in the
--     foreground) run with nsenter in that engine's network namespace, so that the stacks'
--     published 127.0.0.1 ports are its own loopback, listening on the engine's address;
--   - the front: front.conf as shipped, with only its listen port and its three servers replaced.
-- Everything is named <prefix>...; cleanup() stops what this run started (by pid, by its own
-- instance names) and leftovers() lists whatever is still there.
local core = require "sandstack.core"
local h = require "helpers"
local nginx = require "nginx_harness"

local S = {}

S.root = h.must("pwd"):match("[^\n]+")
S.nginx_build = os.getenv("SANDSTACK_NGINX_BUILD") or (S.root .. "/build-luajit") -- nginx's LuaJIT
S.lua_build = package.cpath:match("^([^;]*)/%?%.so") or (S.root .. "/build")   -- lua5.4's, for the CLI
S.kind = os.getenv("SANDSTACK_SCALEOUT_ENGINE") or "docker20"
S.prefix = "sstest-h8-" .. core.random_hex(2):lower() .. "-"
S.NODE_PORT = 8088
local NESTED = "bash " .. h.q(S.root .. "/spec/support/nested-engine.sh")
local STATE_ROOT = os.getenv("SANDSTACK_NESTED_DIR") or "/var/lib/sandstack-nested"

local q = h.q

-- The run's processes, by pid and start time (a pid alone may name a later process: helpers.lua)
local alive, stop_pid = h.running, h.stop

local function sleep(s) os.execute("sleep " .. s) end

S.stop_pid = stop_pid

local run = { dir = nil, engines = {}, pids = {}, netns = {} }
S.run = run

function S.workdir()
  if not run.dir then run.dir = h.must("mktemp -d /tmp/" .. S.prefix .. "XXXXXX"):match("[^\n]+") end
  return run.dir
end

-- curl(url, method, opts) -> status (nil: no answer), doc (JSON or {}), body, seconds.
-- opts: token, secret, timeout, unix (a socket path).
function S.curl(url, method, opts)
  opts = opts or {}
  local body_file = S.workdir() .. "/curl.body"
  local args = { "curl", "-sS", "-o", body_file, "-w", "%{http_code} %{time_total}", "-X", method or "GET",
    "--max-time", tostring(opts.timeout or 30) }
  if opts.token then args[#args + 1] = "-H"; args[#args + 1] = "Authorization: Bearer " .. opts.token end
  if opts.secret then args[#args + 1] = "-H"; args[#args + 1] = "X-Sandstack-Session-Secret: " .. opts.secret end
  if opts.unix then args[#args + 1] = "--unix-socket"; args[#args + 1] = opts.unix end
  if opts.data then -- a JSON body (PATCH)
    for _, a in ipairs { "-H", "Content-Type: application/json", "--data-binary", opts.data } do args[#args + 1] = a end
  end
  args[#args + 1] = url
  for i, a in ipairs(args) do args[i] = q(a) end
  os.remove(body_file)
  local out = h.sh(table.concat(args, " "))
  local code, secs = out:match("(%d%d%d) ([%d.]+)%s*$")
  local body = h.read_file(body_file) or ""
  code = tonumber(code)
  if code == 0 then code = nil end
  return code, core.json_decode(body) or {}, body, tonumber(secs)
end

-- start_engine(short) -> engine {name, pid, sock, ip, netns}: a nested engine named <prefix><short>.
function S.start_engine(short)
  local name = S.prefix .. short
  run.engines[#run.engines + 1] = name -- before starting: a half-started one is cleaned up too
  local out = h.must(NESTED .. " start " .. q(name) .. " " .. q(S.kind) .. " 2>&1")
  local e = { name = name, short = short }
  e.pid = tonumber(out:match("PID=(%d+)"))
  e.sock = out:match("SOCK=(%S+)")
  assert(e.pid and e.sock, "nested-engine start said:\n" .. out)
  e.ip = h.must("docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' " .. q(name))
    :match("[%d.]+")
  e.netns = h.must("readlink /proc/" .. e.pid .. "/ns/net"):match("[^\n]+")
  run.netns[#run.netns + 1] = e.netns
  return e
end

-- projects(engine) -> set of io.sandstack.project values of the containers on that engine.
function S.projects(engine)
  local filters = core.json_encode { label = { "io.sandstack.project" } }
  local st, doc, body = S.curl("http://d/containers/json?all=1&filters=" .. filters:gsub("[^%w]", function(c)
    return ("%%%02X"):format(c:byte())
  end), "GET", { unix = engine.sock, timeout = 10 })
  assert(st == 200, "engine " .. engine.name .. " did not list its containers: " .. tostring(st) .. " " .. body)
  local set = {}
  for _, c in ipairs(doc) do set[c.Labels["io.sandstack.project"]] = true end
  return set
end

-- The node's configuration file, as an operator writes it (examples/openresty-gateway/config.lua).
local function config_text(engine, token_sha256)
  local c = {
    name = engine.name, listen = engine.ip .. ":" .. S.NODE_PORT, metrics_listen = "127.0.0.1:9145",
    project_prefix = engine.name .. "-",
    tenants = { { name = "alice", token_sha256 = token_sha256, max_sessions = 20 } },
    max_sessions = 40, expiry_interval = 1,
    lua_path = S.root .. "/lua/?.lua;" .. S.root .. "/lua/?/init.lua;;",
    lua_cpath = S.nginx_build .. "/?.so;;",
    stack = {
      docker_host = "unix://" .. engine.sock, agent_port = 8080, ready_timeout = 60, timeout = 90,
      forwarder_image = "sandstack-test/socat:local",
      services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" },
        env = { AGENT_PORT = "8080" } } },
    },
  }
  local function lit(v, ind)
    if type(v) == "table" then
      local parts, keys = {}, {}
      for k in pairs(v) do keys[#keys + 1] = k end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      for _, k in ipairs(keys) do
        local kk = type(k) == "number" and "" or (k:match("^[%a_][%w_]*$") and k or ("[%q]"):format(k)) .. " = "
        parts[#parts + 1] = ind .. "  " .. kk .. lit(v[k], ind .. "  ")
      end
      return "{\n" .. table.concat(parts, ",\n") .. "\n" .. ind .. "}"
    end
    return type(v) == "string" and ("%q"):format(v) or tostring(v)
  end
  return "-- gateway node " .. engine.name .. " (written by spec/support/scaleout_harness.lua)\nreturn "
    .. lit(c, "") .. "\n"
end

-- start_gateway(engine, token_sha256): `sandstack gateway` in the engine's network namespace;
-- returns when GET /health answers 200 on the node's address.
function S.start_gateway(engine, token_sha256)
  local dir = S.workdir() .. "/" .. engine.short
  h.must("mkdir -p " .. q(dir))
  local conf = dir .. "/config.lua"
  h.write_file(conf, config_text(engine, token_sha256))
  local cmd = ("nsenter -t %d -n -- env LUA_CPATH=%s lua5.4 %s gateway --config %s --prefix %s"
    .. " > %s 2>&1 < /dev/null & echo $!"):format(engine.pid, q(S.lua_build .. "/?.so;;"),
    q(S.root .. "/bin/sandstack"), q(conf), q(dir .. "/prefix"), q(dir .. "/gateway.out"))
  engine.cli_pid = h.track(h.must(cmd):match("%d+"))
  run.pids[#run.pids + 1] = engine.cli_pid
  engine.url = "http://" .. engine.ip .. ":" .. S.NODE_PORT
  for _ = 1, 150 do
    local st = S.curl(engine.url .. "/health", "GET", { timeout = 5 })
    if st == 200 then break end
    if not alive(engine.cli_pid) then break end
    sleep(0.2)
  end
  engine.nginx_pid = h.track((h.read_file(dir .. "/prefix/logs/nginx.pid") or ""):match("%d+"))
  if engine.nginx_pid then run.pids[#run.pids + 1] = engine.nginx_pid end
  local st, _, body = S.curl(engine.url .. "/health", "GET", { timeout = 5 })
  assert(st == 200, "gateway " .. engine.name .. " is not healthy (" .. tostring(st) .. " " .. body .. "):\n"
    .. (h.read_file(dir .. "/gateway.out") or "") .. (h.read_file(dir .. "/prefix/logs/error.log") or ""))
  engine.prefix_dir = dir .. "/prefix"
end

function S.stop_gateway(engine)
  stop_pid(engine.nginx_pid)
  stop_pid(engine.cli_pid, 5)
end

-- start_front(servers, opts) -> front {url, pid, dir}: the shipped front.conf, its listen port
-- and its three `server` lines replaced (and nothing else). opts: name (its directory, default
-- "front"), edit (text -> text: a variant of the shipped file, for a control experiment).
function S.start_front(servers, opts)
  opts = opts or {}
  local text = assert(h.read_file(S.root .. "/examples/openresty-gateway/front.conf"))
  if opts.edit then text = opts.edit(text) end
  local i = 0
  text = text:gsub("\n    server 10%.0%.0%.1%d:8088 ([^;\n]*);", function(params)
    i = i + 1
    return "\n    server " .. assert(servers[i]) .. " " .. params .. ";"
  end)
  assert(i == #servers, "front.conf: expected " .. #servers .. " server lines, found " .. i)
  local dir = S.workdir() .. "/" .. (opts.name or "front")
  h.must("mkdir -p " .. q(dir .. "/logs") .. " " .. q(dir .. "/tmp"))
  for _ = 1, 5 do
    local port = nginx.free_port()
    local t, n = text:gsub("listen 127%.0%.0%.1:8080;", "listen 127.0.0.1:" .. port .. ";")
    assert(n == 1, "front.conf: expected one `listen 127.0.0.1:8080;`")
    h.write_file(dir .. "/front.conf", t)
    local pid = h.track(h.must("nginx -p " .. q(dir .. "/") .. " -c front.conf > " .. q(dir .. "/stdout")
      .. " 2>&1 < /dev/null & echo $!"):match("%d+"))
    run.pids[#run.pids + 1] = pid
    local front = { url = "http://127.0.0.1:" .. port, pid = pid, dir = dir }
    for _ = 1, 50 do
      if not alive(pid) then break end
      if S.curl(front.url .. "/", "GET", { timeout = 2 }) == 404 then return front end
      sleep(0.1)
    end
    stop_pid(pid)
    if not (h.read_file(dir .. "/stdout") or ""):find("Address already in use", 1, true) then
      error("front nginx did not start:\n" .. (h.read_file(dir .. "/stdout") or ""), 0)
    end
  end
  error("front nginx: no free port", 0)
end

-- kill_engine(engine): the node's machine goes: its engine's container is killed (the engine,
-- the stacks in it and the node's network interface die with it). Its address stays on the host
-- engine's bridge, unanswered, until cleanup removes the network.
function S.kill_engine(engine)
  h.must("docker kill " .. q(engine.name))
end

-- cleanup(): every process this run started, then its engines (by instance name), then its files.
function S.cleanup()
  for i = #run.pids, 1, -1 do stop_pid(run.pids[i]) end
  h.sh(NESTED .. " stop-prefix " .. q(S.prefix))
  S.remove_workdir()
end

-- remove_workdir(): the run's directory goes (S.curl makes it again when called after), for a
-- user of S.curl alone that has no engines to clean (spec/support/swarm_gateway_harness.lua).
function S.remove_workdir()
  if run.dir and run.dir:match("^/tmp/sstest%-h8%-") then h.sh("rm -rf " .. q(run.dir)) end
  run.dir = nil
end

-- leftovers() -> list of what is still there of this run (empty when nothing).
function S.leftovers()
  local left = {}
  local function add(what) left[#left + 1] = what end
  for _, pid in ipairs(run.pids) do if alive(pid) then add("process " .. pid) end end
  local fmt = "'{{.Names}} {{.Label \"io.sandstack.nested\"}}'"
  for line in h.sh("docker ps -a --filter label=io.sandstack.test=nested-engine --format " .. fmt):gmatch("[^\n]+") do
    if line:find(S.prefix, 1, true) then add("container " .. line) end
  end
  for line in h.sh("docker network ls --filter label=io.sandstack.test=nested-engine --format "
      .. "'{{.Name}} {{.Label \"io.sandstack.nested\"}}'"):gmatch("[^\n]+") do
    if line:find(S.prefix, 1, true) then add("network " .. line) end
  end
  for line in h.sh("ls -d " .. q(STATE_ROOT) .. "/" .. S.prefix .. "* 2>/dev/null"):gmatch("[^\n]+") do
    add("directory " .. line)
  end
  -- any process still in one of the engines' network namespaces
  local wanted = {}
  for _, ns in ipairs(run.netns) do wanted[ns] = true end
  for line in h.sh("for p in /proc/[0-9]*; do echo \"${p#/proc/} $(readlink $p/ns/net 2>/dev/null)\"; done")
      :gmatch("[^\n]+") do
    local pid, ns = line:match("^(%d+) (%S+)$")
    if ns and wanted[ns] then add("process " .. pid .. " in " .. ns) end
  end
  for line in h.sh("grep -F " .. q(S.prefix) .. " /proc/self/mountinfo"):gmatch("[^\n]+") do add("mount " .. line) end
  for line in h.sh("docker ps -a --filter label=io.sandstack.project --format '{{.Label \"io.sandstack.project\"}}'")
      :gmatch("[^\n]+") do
    if line:sub(1, #S.prefix) == S.prefix then add("host-engine container of " .. line) end
  end
  if run.dir and select(2, h.sh("test -e " .. q(run.dir))) then
    add("directory " .. run.dir)
  end
  return left
end

return S
