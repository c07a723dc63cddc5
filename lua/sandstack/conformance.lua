-- sandstack.conformance: re-checks spec 000's isolation on the engine at hand by attempting
-- each attack, printing TAP. Run it after every engine upgrade (`sandstack conform`).
--   require("sandstack.conformance").run{ backend = "docker"|"sbx", out = io.stdout,
--     image =, forwarder_image =, subnet_pool =, project_prefix =, docker_host =, standin = true }
-- -> ok (every probe passed), results ({ {ok=, name=, skip=}, ... })
-- The probes are also exported for the live specs.
local core = require "sandstack.core"

local M = {}

M.STANDIN_ADDR = "198.51.100.2"
M.STANDIN_PORT = 8099

local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- A TCP connect attempted from inside a container; true when it succeeded. The default tool
-- is `agent connect HOST PORT MS` of the test image; the forwarder image has only socat.
function M.can_connect(eng, container, host, port, opts)
  opts = opts or {}
  local ms = opts.ms or 1500
  local argv
  if opts.tool == "socat" then
    argv = { "socat", "-T1", "/dev/null", ("TCP:%s:%d,connect-timeout=%g"):format(host, port, ms / 1000) }
  else
    argv = { "agent", "connect", host, tostring(port), tostring(ms) }
  end
  local res, err = eng:exec(container, argv, { timeout = ms / 1000 + 10 })
  if not res then return nil, err end
  return res.exit_code == 0, res
end

-- Several connects from one container at once (each bounded), for probing many addresses.
-- Returns the list of targets reached.
function M.reached(eng, container, targets, ms)
  ms = ms or 1500
  local parts = {}
  for _, t in ipairs(targets) do
    parts[#parts + 1] = ("(agent connect %s %d %d >/dev/null 2>&1 && echo REACHED %s:%d) &"):format(t[1], t[2], ms, t[1], t[2])
  end
  local script = table.concat(parts, " ") .. " wait"
  local res, err = eng:exec(container, { "/bin/sh", "-c", script }, { timeout = ms / 1000 + 15 })
  if not res then return nil, err end
  local out = {}
  for hit in (res.stdout or ""):gmatch("REACHED (%S+)") do out[#out + 1] = hit end
  return out
end

-- The host's IPv4 addresses (loopback excluded), by interface.
function M.host_addresses()
  local p = io.popen("ip -4 -o addr show 2>/dev/null")
  local out = {}
  for line in p:lines() do
    local ifname, addr = line:match("^%d+:%s+(%S+)%s+inet%s+([%d%.]+)/")
    if addr and not addr:match("^127%.") then out[#out + 1] = { ifname = ifname, addr = addr } end
  end
  p:close()
  return out
end

-- A TCP listener on the host bound to 0.0.0.0; a connect succeeds once the kernel answers.
function M.host_listener()
  local socket = require "socket"
  local srv = assert(socket.bind("0.0.0.0", 0))
  local _, port = srv:getsockname()
  return srv, tonumber(port)
end

function M.is_root()
  local p = io.popen("id -u 2>/dev/null")
  local id = p and p:read("*l")
  if p then p:close() end
  return id == "0"
end

local function script_dir()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return src:match("^(.*)/lua/sandstack/conformance%.lua$") or "."
end

-- The "internet" stand-in (spec/support/inet_standin.sh): a netns answering only NATed traffic.
function M.standin_up(name)
  local script = os.getenv("SANDSTACK_STANDIN") or (script_dir() .. "/spec/support/inet_standin.sh")
  local f = io.open(script, "r")
  if not f then return nil, "no stand-in script at " .. script end
  f:close()
  local p = io.popen(("bash %s up %s %d 2>&1"):format(sh_quote(script), sh_quote(name), M.STANDIN_PORT))
  local out = p:read("*a")
  local ok = p:close()
  if not ok or not out:find(M.STANDIN_ADDR, 1, true) then
    os.execute(("bash %s down %s >/dev/null 2>&1"):format(sh_quote(script), sh_quote(name)))
    return nil, out
  end
  return function()
    os.execute(("bash %s down %s >/dev/null 2>&1"):format(sh_quote(script), sh_quote(name)))
  end
end

-- The sbx network's gateway address (held by the host on engines without inhibit_ipv4).
-- The engine reports Gateway only when it chose the subnet itself; with a given subnet the
-- gateway is the subnet's first address, which IPAM reserves either way.
function M.network_gateway(eng, name)
  local n = eng:call("GET", "/networks/" .. name)
  local cfg = n and n.IPAM and n.IPAM.Config and n.IPAM.Config[1]
  if not cfg then return nil, n end
  if cfg.Gateway and cfg.Gateway ~= "" then return cfg.Gateway, n end
  local a, b, c, d = (cfg.Subnet or ""):match("^(%d+)%.(%d+)%.(%d+)%.(%d+)/")
  if not a then return nil, n end
  return ("%s.%s.%s.%d"):format(a, b, c, tonumber(d) + 1), n
end

function M.container_ip(eng, container, network)
  local info = eng:call("GET", "/containers/" .. container .. "/json")
  local n = info and info.NetworkSettings and info.NetworkSettings.Networks[network]
  return n and n.IPAddress
end

-- Three requests at once through the forwarder, one a chunked stream held open n seconds.
function M.concurrent_requests(endpoint, n)
  local cmd = ("cd /tmp; (curl -sS -m 30 %s/stream?n=%d > /tmp/ss-c1.$$; echo c1=$?) & "
    .. "(curl -sS -m 30 %s/echo/a > /tmp/ss-c2.$$; echo c2=$?) & "
    .. "(curl -sS -m 30 %s/health > /tmp/ss-c3.$$; echo c3=$?) & wait; "
    .. "echo STREAM; cat /tmp/ss-c1.$$; rm -f /tmp/ss-c?.$$"):format(endpoint, n, endpoint, endpoint)
  local p = io.popen(cmd)
  local out = p:read("*a")
  p:close()
  local codes = { out:match("c1=(%d+)"), out:match("c2=(%d+)"), out:match("c3=(%d+)") }
  return codes[1] == "0" and codes[2] == "0" and codes[3] == "0", out
end

local function tap(out)
  local t = { n = 0, results = {}, out = out }
  function t.result(ok, name, detail)
    t.n = t.n + 1
    t.results[#t.results + 1] = { ok = ok and true or false, name = name }
    out:write(("%s %d - %s\n"):format(ok and "ok" or "not ok", t.n, name))
    if not ok and detail then out:write("# ", (tostring(detail):gsub("\n", "\n# ")), "\n") end
  end
  function t.skip(name, why)
    t.n = t.n + 1
    t.results[#t.results + 1] = { ok = true, skip = true, name = name }
    out:write(("ok %d - %s # SKIP %s\n"):format(t.n, name, why))
  end
  function t.diag(s) out:write("# ", s, "\n") end
  return t
end

-- The reference stack of the probes: a sandbox, a sidecar without egress and one with.
function M.stack_opts(opts)
  local image = opts.image or "sandstack-test/agent:local"
  return {
    project_name = opts.project, agent_port = 8080, docker_host = opts.docker_host,
    forwarder_image = opts.forwarder_image or "sandstack-test/socat:local",
    subnet_pool = opts.subnet_pool, pull = opts.pull or "never",
    services = {
      { name = "sandbox", image = image, command = { "agent" } },
      { name = "db", image = image, command = { "agent" }, env = { AGENT_PORT = "5432" }, egress = "none" },
      { name = "relay", image = image, command = { "agent" }, env = { AGENT_PORT = "3128" }, egress = "allow" },
    },
    ready = { db = { test = { "agent", "connect", "127.0.0.1", "5432", "500" }, interval = 0.5 } },
    cap_drop = { "ALL" }, security_opt = { "no-new-privileges" }, pids_limit = 256,
  }
end

local function probes(t, eng, stack, opts)
  local p = stack.project
  local sandbox, db, relay, fw = p .. "-sandbox", p .. "-db", p .. "-relay", p .. "-forwarder"
  local res = require("sandstack.docker.http").request { method = "GET", url = stack.endpoint .. "/health", timeout = 5 }
  t.result(res and res.status == 200, "the host reaches the agent through the forwarder's published port")
  local ok, out = M.concurrent_requests(stack.endpoint, 3)
  t.result(ok, "three concurrent requests through the forwarder, one a chunked stream held 3 s, all complete", out)

  local srv, lport = M.host_listener()
  local gw = M.network_gateway(eng, p .. "-sbx")
  local reach = gw and M.reached(eng, sandbox, { { gw, lport } }) or {}
  t.result(gw and #reach == 0, ("sandbox: a host listener on 0.0.0.0 is unreachable on the sbx gateway %s"):format(tostring(gw)))
  local targets, docker0 = {}, nil
  for _, a in ipairs(M.host_addresses()) do
    if a.ifname == "docker0" then docker0 = a.addr
    elseif a.addr ~= gw then targets[#targets + 1] = { a.addr, lport } end
  end
  reach = M.reached(eng, sandbox, targets) or { "exec failed" }
  t.result(#targets > 0 and #reach == 0, ("sandbox: the host listener is unreachable on the host's other %d addresses"):format(#targets),
    table.concat(reach, " "))
  if docker0 then
    reach = M.reached(eng, sandbox, { { docker0, lport } }) or { "exec failed" }
    t.result(#reach == 0, "sandbox: the host listener is unreachable on docker0 " .. docker0)
  else
    t.skip("sandbox: docker0", "no docker0 on this host")
  end
  -- the control: the same listener is reachable from a container with egress, so the probe sees
  local egw = M.network_gateway(eng, p .. "-egress")
  reach = egw and M.reached(eng, relay, { { egw, lport } }) or {}
  t.result(#reach == 1, "control: the egress sidecar does reach the host listener (the probe can see a reachable host)")
  srv:close()

  local relay_egress_ip = M.container_ip(eng, relay, p .. "-egress")
  reach = relay_egress_ip and M.reached(eng, sandbox, { { relay_egress_ip, 3128 } }) or { "no ip" }
  t.result(relay_egress_ip and #reach == 0, "sandbox: a container on another network (the relay's egress address) is unreachable")
  local fw_pub_ip = M.container_ip(eng, fw, p .. "-pub")
  reach = fw_pub_ip and M.reached(eng, sandbox, { { fw_pub_ip, 8080 } }) or { "no ip" }
  t.result(fw_pub_ip and #reach == 0, "sandbox: the forwarder's address on the -pub network is unreachable")
  reach = M.reached(eng, sandbox, { { "db", 5432 }, { "relay", 3128 }, { "forwarder", 8080 } }) or {}
  t.result(#reach == 3, "sandbox: service names on the sandbox network resolve and answer", table.concat(reach, " "))

  if opts.standin_ok then
    local sa, sp = M.STANDIN_ADDR, M.STANDIN_PORT
    t.result(#(M.reached(eng, sandbox, { { sa, sp } }) or { "x" }) == 0, "sandbox: the internet stand-in is unreachable")
    t.result(M.can_connect(eng, relay, sa, sp) == true, "egress = allow sidecar: the internet stand-in is reachable")
    t.result(M.can_connect(eng, db, sa, sp) == false, "egress = none sidecar: the internet stand-in is unreachable")
    t.result(M.can_connect(eng, fw, sa, sp, { tool = "socat" }) == false, "forwarder: the internet stand-in is unreachable")
  else
    for _, n in ipairs { "sandbox", "egress = allow sidecar", "egress = none sidecar", "forwarder" } do
      t.skip(n .. ": internet stand-in", opts.standin_why or "needs root and iproute2")
    end
  end
end

local function leftovers(eng, project)
  local batch = require "sandstack.docker.batch"
  local r = batch.run(eng, batch.list_requests("io.sandstack.project=" .. project), 60)
  local n = 0
  for _, x in ipairs(r) do
    if not x.ok then return -1 end
    n = n + #(x.body.Volumes or x.body)
  end
  return n
end

function M.run(opts)
  opts = opts or {}
  if opts.backend == "sbx" then return require("sandstack.conformance_sbx").run(opts) end
  if opts.backend ~= nil and opts.backend ~= "docker" then
    error("conformance: backend must be \"docker\" or \"sbx\"", 2)
  end
  local out = opts.out or io.stdout
  local t = tap(out)
  local sandstack = require "sandstack"
  local eng, err = sandstack.engine { host = opts.docker_host }
  if not eng then
    t.result(false, "the engine answers", err)
    out:write("1..1\n")
    return false, t.results
  end
  local v = eng:version() or {}
  t.diag(("engine %s, API %s"):format(tostring(v.Version), tostring(eng.api_version)))
  local o = {}
  for k, x in pairs(opts) do o[k] = x end
  o.project = (opts.project_prefix or "sandstack-conform-") .. core.random_hex(4)
  local down
  if opts.standin ~= false and M.is_root() then
    down, o.standin_why = M.standin_up(o.project:sub(1, 40) .. "-inet")
    o.standin_ok = down ~= nil
  end
  local stack
  stack, err = sandstack.docker.start(o.project, M.stack_opts(o))
  t.result(stack ~= nil, "the reference stack comes up", err)
  if stack then
    local okp, perr = pcall(probes, t, eng, stack, o)
    if not okp then t.result(false, "the probes ran to the end", perr) end
    local ok2, derr = stack:destroy()
    t.result(ok2, "the stack is destroyed", derr)
    stack:close()
  end
  if down then down() end
  t.result(leftovers(eng, o.project) == 0, "nothing labelled with the project is left")
  eng:close()
  out:write(("1..%d\n"):format(t.n))
  local all = true
  for _, r in ipairs(t.results) do all = all and r.ok end
  return all, t.results
end

return M
