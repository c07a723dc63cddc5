-- sandstack.conformance: re-checks spec 000's isolation on the engine at hand by attempting
-- each attack, printing TAP. Run it after every engine upgrade (`sandstack conform`).
--   require("sandstack.conformance").run{ backend = "docker"|"sbx"|"swarm", out = io.stdout,
--     image =, forwarder_image =, subnet_pool =, project_prefix =, docker_host =, standin = true,
--     runtime = nil|"runsc" (every container of the reference stack under that engine runtime) }
-- -> ok (every probe passed), results ({ {ok=, name=, skip=}, ... })
-- The probes are also exported for the live specs.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"

local M = {}

-- The probes (sandstack.conformance_probes), exported here for the live specs and the other runs.
for k, v in pairs(require "sandstack.conformance_probes") do M[k] = v end
local attack = M.attack

-- The TAP writer and the reference stack (sandstack.conformance_run), exported here as before.
local run_kit = require "sandstack.conformance_run"
local tap = run_kit.tap
M.tap, M.stack_opts = run_kit.tap, run_kit.stack_opts

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
    local net = ops.call(eng, "inspect_network", stack.project .. "-sbx") or {}
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
        local info = ops.call(eng, "inspect_container", c.name) or {}
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
