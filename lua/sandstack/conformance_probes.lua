-- The probes of the conformance runs (internal to sandstack.conformance, which exports them
-- for the live specs and for the swarm's and sbx's runs): connects attempted from inside a
-- container or from the host, the host's addresses and a listener, the internet stand-in, and
-- one reachability attack that cannot pass vacuously.
local ops = require "sandstack.engine.ops"
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
  local n = ops.call(eng, "inspect_network", name)
  local cfg = n and n.IPAM and n.IPAM.Config and n.IPAM.Config[1]
  if not cfg then return nil, n end
  if cfg.Gateway and cfg.Gateway ~= "" then return cfg.Gateway, n end
  local a, b, c, d = (cfg.Subnet or ""):match("^(%d+)%.(%d+)%.(%d+)%.(%d+)/")
  if not a then return nil, n end
  return ("%s.%s.%s.%d"):format(a, b, c, tonumber(d) + 1), n
end

function M.container_ip(eng, container, network)
  local info = ops.call(eng, "inspect_container", container)
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

-- Every IPv4 address a container has, on any network.
function M.own_addresses(eng, container)
  local info = ops.call(eng, "inspect_container", container)
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
  local info = ops.call(eng, "inspect_container", prober)
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

-- The probes of the internet stand-in, up at STANDIN_ADDR:STANDIN_PORT where the engine's NAT
-- sends egress: the control first (the egress = allow sidecar reaches it), then each container
-- that must not. c: { sandbox =, db =, relay =, forwarder = } (names or ids on eng).
M.STANDIN_PROBES = { "egress = allow sidecar", "sandbox", "egress = none sidecar", "forwarder" }
function M.standin_probes(t, eng, c)
  local sa, sp = M.STANDIN_ADDR, M.STANDIN_PORT
  local relay_reaches = M.can_connect(eng, c.relay, sa, sp) == true
  t.result(relay_reaches, "control: the egress = allow sidecar reaches the internet stand-in")
  M.attack(t, eng, "sandbox: the internet stand-in is unreachable", c.sandbox, sa, sp, function() return relay_reaches end,
    "the egress sidecar")
  M.attack(t, eng, "egress = none sidecar: the internet stand-in is unreachable", c.db, sa, sp,
    function() return relay_reaches end, "the egress sidecar")
  local fw_reaches = M.can_connect(eng, c.forwarder, sa, sp, { tool = "socat" })
  t.result(relay_reaches and fw_reaches == false, "forwarder: the internet stand-in is unreachable")
end

return M
