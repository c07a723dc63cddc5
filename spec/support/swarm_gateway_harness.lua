-- The gateway on the swarm of spec/swarm_cluster_spec.lua (docs/scale-out.md "The gateway on a
-- swarm"): on every node, `sandstack gateway` (the deploy command: nginx in the foreground) run
-- with nsenter in the node's network namespace, so that the forwarders' 127.0.0.1 ports are its
-- own loopback, listening on the node's address on the cluster network; every node labelled
-- io.sandstack.gateway=<address:port> on the manager; and the shipped swarm-front.conf on this
-- machine's loopback with only its listen port and its servers replaced. Processes are the
-- run's: stop() ends them by pid.
local core = require "sandstack.core"
local h = require "helpers"
local nginx = require "nginx_harness"
local SO = require "scaleout_harness" -- curl, stop_pid

local G = {}

local q = h.q
G.PORT = 8088
G.curl = SO.curl
local pids = {}

local alive = h.running -- by pid and start time (helpers.lua)

local function lit(v)
  if type(v) == "table" then
    local keys, parts = {}, {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      parts[#parts + 1] = (type(k) == "number" and "" or ("[%q] = "):format(k)) .. lit(v[k])
    end
    return "{ " .. table.concat(parts, ", ") .. " }"
  end
  return type(v) == "string" and ("%q"):format(v) or tostring(v)
end

-- start(W, mgr, a) -> { nodes = { {url, dir, cli_pid, nginx_pid} }, front = {url, dir} }.
-- a: tenants (the config's), project_prefix, stack (the options every gateway starts sessions with),
-- expiry_interval (nil: the default).
function G.start(W, mgr, a)
  local out = { nodes = {} }
  local root = W.workdir() .. "/gw"
  h.must("mkdir -p " .. q(root))
  for i, n in ipairs(W.cluster.nodes) do
    local addr = n.ip .. ":" .. G.PORT
    -- how any gateway reaches this node's: the node's own label on the manager
    local node = assert(mgr:call("GET", "/nodes/" .. n.name))
    node.Spec.Labels = node.Spec.Labels or {}
    node.Spec.Labels["io.sandstack.gateway"] = addr
    assert(mgr:call("POST", "/nodes/" .. node.ID .. "/update", node.Spec, { query = { version = node.Version.Index } }))
    local dir = root .. "/n" .. i
    h.must("mkdir -p " .. q(dir))
    local c = { name = "gw-n" .. i, listen = addr, metrics_listen = "127.0.0.1:9145", project_prefix = a.project_prefix,
      backend = "swarm", swarm = { node = n.name, cache_ttl = 5 }, max_sessions = 40, expiry_interval = a.expiry_interval,
      tenants = a.tenants,
      lua_path = W.root .. "/lua/?.lua;" .. W.root .. "/lua/?/init.lua;;",
      lua_cpath = (os.getenv("SANDSTACK_NGINX_BUILD") or (W.root .. "/build-luajit")) .. "/?.so;;",
      stack = a.stack }
    h.write_file(dir .. "/config.lua", "-- gateway of node " .. n.name .. " (spec/support/swarm_gateway_harness.lua)\nreturn "
      .. lit(c) .. "\n")
    local cmd = ("nsenter -t %d -n -- env LUA_CPATH=%s lua5.4 %s gateway --config %s --prefix %s > %s 2>&1 < /dev/null & echo $!")
      :format(n.pid, q(W.lua_cpath), q(W.root .. "/bin/sandstack"), q(dir .. "/config.lua"), q(dir .. "/prefix"),
        q(dir .. "/gateway.out"))
    local g = { url = "http://" .. addr, dir = dir, addr = addr }
    g.cli_pid = h.track(h.must(cmd):match("%d+"))
    pids[#pids + 1] = g.cli_pid
    out.nodes[i] = g
  end
  for i, g in ipairs(out.nodes) do
    local st
    for _ = 1, 300 do
      st = G.curl(g.url .. "/health", "GET", { timeout = 5 })
      if st == 200 or not alive(g.cli_pid) then break end
      core.sleep(0.2)
    end
    g.nginx_pid = h.track((h.read_file(g.dir .. "/prefix/logs/nginx.pid") or ""):match("%d+"))
    if g.nginx_pid then pids[#pids + 1] = g.nginx_pid end
    assert(st == 200, "the gateway of node " .. i .. " is not healthy (" .. tostring(st) .. "):\n"
      .. (h.read_file(g.dir .. "/gateway.out") or "") .. (h.read_file(g.dir .. "/prefix/logs/error.log") or ""))
  end
  out.front = G.front(root, out.nodes)
  return out
end

-- The shipped swarm front, its listen port and server lines replaced (nothing else).
function G.front(root, nodes)
  local text = assert(h.read_file(h.must("pwd"):match("[^\n]+") .. "/examples/openresty-gateway/swarm-front.conf"))
  local i = 0
  text = text:gsub("\n    server 10%.0%.0%.1%d:8088 ([^;\n]*);", function(params)
    i = i + 1
    return "\n    server " .. nodes[i].addr .. " " .. params .. ";"
  end)
  assert(i == #nodes, "swarm-front.conf: expected " .. #nodes .. " server lines, found " .. i)
  local dir = root .. "/front"
  h.must("mkdir -p " .. q(dir .. "/logs") .. " " .. q(dir .. "/tmp"))
  for _ = 1, 5 do
    local port = nginx.free_port()
    local t, n = text:gsub("listen 127%.0%.0%.1:8080;", "listen 127.0.0.1:" .. port .. ";")
    assert(n == 1)
    h.write_file(dir .. "/front.conf", t)
    local pid = h.track(h.must("nginx -p " .. q(dir .. "/") .. " -c front.conf > " .. q(dir .. "/stdout")
      .. " 2>&1 < /dev/null & echo $!"):match("%d+"))
    pids[#pids + 1] = pid
    local front = { url = "http://127.0.0.1:" .. port, dir = dir, pid = pid }
    for _ = 1, 50 do
      if not alive(pid) then break end
      if G.curl(front.url .. "/", "GET", { timeout = 2 }) == 404 then return front end
      core.sleep(0.1)
    end
    SO.stop_pid(pid)
  end
  error("swarm front did not start:\n" .. (h.read_file(dir .. "/stdout") or ""), 0)
end

-- sse(url, secret) -> { {t =, line =} }: curl -N, each line stamped when it arrived.
function G.sse(url, secret, dir)
  local out = dir .. "/sse.out"
  h.sh(("curl -sN --max-time 60 -H %s %s | while IFS= read -r l; do echo \"$(date +%%s.%%N) $l\"; done > %s")
    :format(q("X-Sandstack-Session-Secret: " .. secret), q(url), q(out)))
  local lines = {}
  for t, l in (h.read_file(out) or ""):gmatch("([%d.]+) ([^\n]*)") do lines[#lines + 1] = { t = tonumber(t), line = l } end
  return lines
end

function G.access_log(g) return h.read_file(g.dir .. "/prefix/logs/access.log") or "" end

function G.stop()
  for i = #pids, 1, -1 do SO.stop_pid(pids[i]) end
  SO.remove_workdir() -- the body file of SO.curl
end

function G.leftovers()
  local left = {}
  for _, pid in ipairs(pids) do if alive(pid) then left[#left + 1] = "process " .. pid end end
  return left
end

return G
