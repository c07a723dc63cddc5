-- sandstack.conformance: re-checks spec 000's isolation on the engine at hand by attempting
-- each attack, printing TAP. Run it after every engine upgrade (`sandstack conform`).
--   require("sandstack.conformance").run{ backend = "docker"|"sbx"|"swarm", out = io.stdout,
--     image =, forwarder_image =, subnet_pool =, project_prefix =, docker_host =, standin = true,
--     runtime = nil|"runsc" (every container of the reference stack under that engine runtime) }
-- -> ok (every probe passed), results ({ {ok=, name=, skip=}, ... })
-- The probes are also exported for the live specs.
local core = require "sandstack.core"

local M = {}

M.STANDIN_ADDR = require("sandstack.standin").ADDR
M.STANDIN_PORT = 8099

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
-- Returns the list of targets reached, and the lines that name a reach but not this probe's
-- nonce (output this exec did not make: reported, never counted).
function M.reached(eng, container, targets, ms)
  ms = ms or 1500
  local nonce = core.random_hex(6)
  local parts = {}
  for _, t in ipairs(targets) do
    parts[#parts + 1] = ("(agent connect %s %d %d >/dev/null 2>&1 && echo REACHED %s %s:%d) &"):format(t[1], t[2], ms,
      nonce, t[1], t[2])
  end
  local script = table.concat(parts, " ") .. " wait"
  local res, err = eng:exec(container, { "/bin/sh", "-c", script }, { timeout = ms / 1000 + 15 })
  if not res then return nil, err end
  local out, foreign = {}, {}
  for line in (res.stdout or ""):gmatch("[^\n]+") do
    local n, hit = line:match("^REACHED (%x+) (%S+)$")
    if n == nonce then out[#out + 1] = hit
    elseif line:find("REACHED", 1, true) then foreign[#foreign + 1] = line end
  end
  return out, foreign
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

-- A TCP listener on the host bound to 0.0.0.0 (core.tcp_listen); a connect succeeds once the
-- kernel answers. Returns the listener (close it) and its port.
function M.host_listener()
  local srv = assert(core.tcp_listen("0.0.0.0", 0))
  return srv, srv:port()
end

function M.is_root()
  local p = io.popen("id -u 2>/dev/null")
  local id = p and p:read("*l")
  if p then p:close() end
  return id == "0"
end

-- The "internet" stand-in (sandstack.standin): a netns answering only NATed traffic. It ships in
-- the module, so conform from an installed rock runs every probe.
function M.standin_up(name)
  local standin = require "sandstack.standin"
  local addr, err = standin.up(name, M.STANDIN_PORT)
  if not addr then return nil, err end
  return function() standin.down(name) end
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

-- The one TAP writer of every conformance run (docker, swarm, sbx). out: a file (io.stdout) or a
-- function taking each piece of text. t.result returns whether the test passed; t.finish writes
-- the plan line and returns true when none failed (a skip passes) and the results.
local function tap(out)
  local write = type(out) == "function" and out or function(s) out:write(s) end
  local t = { n = 0, failed = 0, results = {} }
  function t.result(ok, name, detail)
    ok = ok and true or false
    t.n = t.n + 1
    t.results[#t.results + 1] = { ok = ok, name = name }
    write(("%s %d - %s\n"):format(ok and "ok" or "not ok", t.n, name))
    if not ok then
      t.failed = t.failed + 1
      if detail then write("# " .. tostring(detail):gsub("\n", "\n# ") .. "\n") end
    end
    return ok
  end
  function t.skip(name, why)
    t.n = t.n + 1
    t.results[#t.results + 1] = { ok = true, skip = true, name = name }
    write(("ok %d - %s # SKIP %s\n"):format(t.n, name, why))
  end
  function t.diag(s) write("# " .. s .. "\n") end
  function t.skip_all(why) write("1..0 # SKIP " .. why .. "\n") end
  function t.finish()
    write(("1..%d\n"):format(t.n))
    return t.failed == 0, t.results
  end
  return t
end

M.tap = tap -- for sandstack.swarm's conform and sandstack.conformance_sbx

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
    runtime = opts.runtime,
  }
end

-- Every IPv4 address a container has, on any network.
function M.own_addresses(eng, container)
  local info = eng:call("GET", "/containers/" .. container .. "/json")
  local out = {}
  for _, n in pairs(info and info.NetworkSettings and info.NetworkSettings.Networks or {}) do
    if n.IPAddress and n.IPAddress ~= "" then out[n.IPAddress] = true end
  end
  return out
end

-- A TCP connect from this process (the engine's host side), bounded (core.tcp_connect).
function M.host_can_connect(addr, port)
  return core.tcp_connect(addr, port, 2) == true
end

local function in_subnet(addr, subnet)
  local function n(a)
    local w, x, y, z = a:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)")
    return w and ((tonumber(w) * 256 + tonumber(x)) * 256 + tonumber(y)) * 256 + tonumber(z)
  end
  local base, bits = (subnet or ""):match("^([%d%.]+)/(%d+)$")
  if not base or not n(addr) then return false end
  local size = 2 ^ (32 - tonumber(bits))
  return math.floor(n(addr) / size) == math.floor(n(base) / size)
end

-- What a failed attack leaves to explain it: whether the probe reaches again a moment later
-- (a passing state or a lasting hole), the prober's addresses, routes and neighbours (which
-- next hop answered), its container's networks as the engine reports them, and the host's
-- addresses and neighbours. Best effort: every part that cannot be read says so.
function M.path_evidence(eng, prober, target, port)
  local out = {}
  local again = M.reached(eng, prober, { { target, port } })
  out[#out + 1] = "probed again: " .. (again and (#again > 0 and "reached" or "not reached") or "exec failed")
  local res = eng:exec(prober, { "/bin/sh", "-c", "ip -4 -o addr; ip route; ip neigh" }, { timeout = 15 })
  out[#out + 1] = "prober: " .. (res and (res.stdout or "") or "exec failed")
  local info = eng:call("GET", "/containers/" .. prober .. "/json")
  for net, n in pairs(info and info.NetworkSettings and info.NetworkSettings.Networks or {}) do
    out[#out + 1] = ("engine: %s on %s as %s gw %s"):format(prober, net, tostring(n.IPAddress), tostring(n.Gateway))
  end
  for _, cmd in ipairs { "ip -4 -o addr show", "ip neigh show" } do
    local p = io.popen(cmd .. " 2>&1")
    out[#out + 1] = "host " .. cmd .. ":\n" .. (p and p:read("*a") or "")
    if p then p:close() end
  end
  return table.concat(out, "\n")
end

-- One reachability attack that cannot pass vacuously: the target must not be the prober's own
-- address, and the control (a function) must reach it first, or the probe would prove nothing.
function M.attack(t, eng, name, prober, target, port, control, control_name)
  local own = M.own_addresses(eng, prober)
  if own[target] then
    t.result(false, name, ("the target %s is the probing container's own address"):format(target))
    return
  end
  if not control() then
    t.result(false, name, ("control: %s cannot reach %s:%d either, so the probe would see nothing")
      :format(control_name, target, port))
    return
  end
  local reach, foreign = M.reached(eng, prober, { { target, port } })
  reach = reach or { "exec failed" }
  if foreign and #foreign > 0 then
    t.diag(("%s: the probe's output held lines it did not write: %s"):format(name, table.concat(foreign, " | ")))
  end
  local detail = table.concat(reach, " ")
  if #reach > 0 then detail = detail .. "\n" .. M.path_evidence(eng, prober, target, port) end
  t.result(#reach == 0, name, detail)
end
local attack = M.attack

-- The probes of the internet stand-in, up at STANDIN_ADDR:STANDIN_PORT where the engine's NAT
-- sends egress: the control first (the egress = allow sidecar reaches it), then each container
-- that must not. c: { sandbox =, db =, relay =, forwarder = } (names or ids on eng).
M.STANDIN_PROBES = { "egress = allow sidecar", "sandbox", "egress = none sidecar", "forwarder" }
function M.standin_probes(t, eng, c)
  local sa, sp = M.STANDIN_ADDR, M.STANDIN_PORT
  local relay_reaches = M.can_connect(eng, c.relay, sa, sp) == true
  t.result(relay_reaches, "control: the egress = allow sidecar reaches the internet stand-in")
  attack(t, eng, "sandbox: the internet stand-in is unreachable", c.sandbox, sa, sp, function() return relay_reaches end,
    "the egress sidecar")
  attack(t, eng, "egress = none sidecar: the internet stand-in is unreachable", c.db, sa, sp,
    function() return relay_reaches end, "the egress sidecar")
  local fw_reaches = M.can_connect(eng, c.forwarder, sa, sp, { tool = "socat" })
  t.result(relay_reaches and fw_reaches == false, "forwarder: the internet stand-in is unreachable")
end

local function probes(t, eng, stack, opts)
  local p = stack.project
  local sandbox, db, relay, fw = p .. "-sandbox", p .. "-db", p .. "-relay", p .. "-forwarder"
  local res = require("sandstack.docker.http").request { method = "GET", url = stack.endpoint .. "/health", timeout = 5 }
  t.result(res and res.status == 200, "the host reaches the agent through the forwarder's published port")
  local ok, out = M.concurrent_requests(stack.endpoint, 3)
  t.result(ok, "three concurrent requests through the forwarder, one a chunked stream held 3 s, all complete", out)

  local srv, lport = M.host_listener()
  -- the engine host's own addresses, each a target only once the egress sidecar reaches it
  local gw, sbxnet = M.network_gateway(eng, p .. "-sbx")
  local subnet = sbxnet and sbxnet.IPAM and sbxnet.IPAM.Config and sbxnet.IPAM.Config[1] and sbxnet.IPAM.Config[1].Subnet
  local on_sbx = {}
  local hosts = M.host_addresses()
  for _, a in ipairs(hosts) do if in_subnet(a.addr, subnet) then on_sbx[#on_sbx + 1] = a.addr end end
  t.result(#hosts > 0 and #on_sbx == 0, ("the engine host holds no address on the sandbox network %s"):format(tostring(subnet)),
    table.concat(on_sbx, " "))
  -- the gateway address the engine reports: the host's on engines that keep it, else nobody's,
  -- or (Engine 28 with inhibit_ipv4) a container's, which the probe must not mistake for the host
  local holder
  for _, c in ipairs({ sandbox, db, relay, fw }) do if gw and M.own_addresses(eng, c)[gw] then holder = c end end
  if holder then
    t.skip("sandbox: the sbx gateway " .. gw, "that address belongs to " .. holder .. ", not to the host")
  elseif gw then
    local reach = M.reached(eng, sandbox, { { gw, lport } }) or { "exec failed" }
    t.result(#reach == 0, ("sandbox: a host listener on 0.0.0.0 is unreachable on the sbx gateway %s"):format(gw))
  else
    t.result(false, "sandbox: the sbx gateway", "the engine reports no subnet for the sandbox network")
  end
  local controlled, missed = 0, {}
  for _, a in ipairs(hosts) do
    if not in_subnet(a.addr, subnet) then
      if #(M.reached(eng, relay, { { a.addr, lport } }) or {}) == 1 then
        controlled = controlled + 1
        attack(t, eng, ("sandbox: the host listener is unreachable on %s %s"):format(a.ifname, a.addr), sandbox,
          a.addr, lport, function() return true end, "the egress sidecar")
      else
        missed[#missed + 1] = a.ifname .. " " .. a.addr
      end
    end
  end
  t.result(controlled > 0, ("control: the egress sidecar reaches the host listener on %d of the host's addresses"):format(controlled),
    "not reached by the control: " .. table.concat(missed, ", "))
  if #missed > 0 then t.diag("host addresses the egress sidecar cannot reach either (not probed): " .. table.concat(missed, ", ")) end
  srv:close()

  local relay_egress_ip = M.container_ip(eng, relay, p .. "-egress")
  attack(t, eng, "sandbox: a container on another network (the relay's egress address) is unreachable", sandbox,
    relay_egress_ip or "none", 3128, function() return relay_egress_ip and M.host_can_connect(relay_egress_ip, 3128) end,
    "the engine host")
  local fw_pub_ip = M.container_ip(eng, fw, p .. "-pub")
  attack(t, eng, "sandbox: the forwarder's address on the -pub network is unreachable", sandbox, fw_pub_ip or "none", 8080,
    function() return fw_pub_ip and M.host_can_connect(fw_pub_ip, 8080) end, "the engine host")
  local reach = M.reached(eng, sandbox, { { "db", 5432 }, { "relay", 3128 }, { "forwarder", 8080 } }) or {}
  t.result(#reach == 3, "sandbox: service names on the sandbox network resolve and answer", table.concat(reach, " "))

  if opts.standin_ok then
    M.standin_probes(t, eng, { sandbox = sandbox, db = db, relay = relay, forwarder = fw })
  else
    for _, n in ipairs(M.STANDIN_PROBES) do t.skip(n .. ": internet stand-in", opts.standin_why or "needs root and iproute2") end
  end
end

local function leftovers(eng, project)
  local batch = require "sandstack.stack.batch"
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
  if opts.backend == "swarm" then return require("sandstack.swarm.conform").run(opts) end
  if opts.backend ~= nil and opts.backend ~= "docker" then
    error("conformance: backend must be \"docker\", \"sbx\" or \"swarm\"", 2)
  end
  local t = tap(opts.out or io.stdout)
  local sandstack = require "sandstack"
  local eng, err = sandstack.engine { host = opts.docker_host }
  if not eng then
    t.result(false, "the engine answers", err)
    return t.finish()
  end
  local v = eng:version() or {}
  local _, _, desc = require("sandstack.docker.isolation").describe(v)
  t.diag(("engine %s, negotiated API %s"):format(desc, tostring(eng.api_version)))
  local o = {}
  for k, x in pairs(opts) do o[k] = x end
  o.project = (opts.project_prefix or "sandstack-conform-") .. core.random_hex(4)
  local down
  if opts.standin ~= false and M.is_root() then
    down, o.standin_why = M.standin_up(o.project:sub(1, 40) .. "-inet")
    o.standin_ok = down ~= nil
  end
  local stack
  -- opts.start: another way to obtain the reference stack (a warm pool's acquire)
  local started
  started, stack, err = pcall(opts.start or sandstack.docker.start, o.project, M.stack_opts(o))
  if not started then -- a raise must not leave the stand-in behind
    if down then down() end
    eng:close()
    error(stack, 0)
  end
  t.result(stack ~= nil, "the reference stack comes up", err)
  if stack then
    -- the stack's own project: a pool names its stacks itself
    local net = eng:call("GET", "/networks/" .. stack.project .. "-sbx") or {}
    local found = {}
    for _, k in ipairs { "inhibit_ipv4", "gateway_mode_ipv4", "enable_ip_masquerade" } do
      local val = (net.Options or {})["com.docker.network.bridge." .. k]
      if val then found[#found + 1] = k .. "=" .. val end
    end
    t.diag(("isolation: Internal=%s, %s, IPv6 %s"):format(tostring(net.Internal), table.concat(found, ", "),
      net.EnableIPv6 and "on" or "off"))
    if o.runtime then -- the probes below prove something about the runtime only if it is in use
      local wrong = {}
      for _, c in ipairs(stack.plan.containers) do
        local info = eng:call("GET", "/containers/" .. c.name .. "/json") or {}
        local rt = info.HostConfig and info.HostConfig.Runtime
        if rt ~= o.runtime then wrong[#wrong + 1] = c.service .. "=" .. tostring(rt) end
      end
      t.result(#wrong == 0, ("every container of the stack runs under the runtime %s"):format(o.runtime),
        table.concat(wrong, " "))
    end
  end
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
  return t.finish()
end

return M
