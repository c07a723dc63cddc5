-- `sandstack conform --backend swarm`: the isolation probes of sandstack.conformance, on a swarm.
-- One reference stack per node that takes tasks (ready and active), pinned there by the node's
-- id, one node after another; with `constraints`, one stack where Swarm places it among the
-- nodes they admit. Every probe runs on the node that holds the stack, through that node's own
-- Engine API, so it works from any machine that reaches the manager and the nodes' engines:
--   - the node's listener: a container on the node's host network (socat on 0.0.0.0:PORT), which
--     is what "the node" is for a connect from a container there;
--   - the node's addresses: read in that container (/proc/net/fib_trie);
--   - each attack from the sandbox after a control that connects (the egress sidecar, the
--     node itself), as on one engine;
--   - the internet stand-in and the credentials probe in the node's own network namespace
--     (sandstack.swarm.conform_outside): a task egresses from its node.
-- A stand-in the node's engine refuses is a skip naming why (standin_refused, standin_failed;
-- no_openssl for the credentials probe's certificate), as is `standin = false`.
--   require("sandstack.swarm.conform").run{ docker_host =, image =, forwarder_image =,
--     constraints =, project_prefix =, standin =, out = io.stdout } -> ok, results
local core = require "sandstack.core"
local C = require "sandstack.conformance_probes"
local run_kit = require "sandstack.conformance_run"
local cluster = require "sandstack.swarm.cluster"
local ready = require "sandstack.swarm.ready"
local inventory = require "sandstack.swarm.inventory"
local O = require "sandstack.swarm.conform_outside"

local M = {}

-- The local IPv4 addresses in a /proc/net/fib_trie text (the "/32 host LOCAL" leaves).
function M.local_addresses(fib)
  local out, seen, last = {}, {}, nil
  for line in fib:gmatch("[^\n]+") do
    local ip = line:match("|%-%-%s+(%d+%.%d+%.%d+%.%d+)%s*$")
    if ip then
      last = ip
    elseif last and line:find("/32 host LOCAL", 1, true) then
      if not last:match("^127%.") and not seen[last] then seen[last] = true; out[#out + 1] = last end
    end
  end
  table.sort(out)
  return out
end

local function in_subnet(addr, subnet)
  local function n(a)
    local w, x, y, z = tostring(a):match("^(%d+)%.(%d+)%.(%d+)%.(%d+)")
    return w and ((tonumber(w) * 256 + tonumber(x)) * 256 + tonumber(y)) * 256 + tonumber(z)
  end
  local base, bits = tostring(subnet):match("^([%d%.]+)/(%d+)$")
  if not base or not n(addr) then return false end
  local size = 2 ^ (32 - tonumber(bits))
  return math.floor(n(addr) / size) == math.floor(n(base) / size)
end

-- The listener on the node: the forwarder's image on the node's host network, labelled with the
-- stack's project (so the stack's destroy removes it).
local function node_listener(stack, image, port)
  local eng = stack.node_eng
  local name = stack.project .. "-nodelisten"
  local body = { Image = image, Entrypoint = { "socat" },
    Cmd = { ("TCP-LISTEN:%d,fork,reuseaddr"):format(port), "OPEN:/dev/null" },
    Labels = { ["io.sandstack.project"] = stack.project, ["io.sandstack.role"] = "conform-listener" },
    HostConfig = { NetworkMode = "host", CapDrop = { "ALL" }, SecurityOpt = { "no-new-privileges" },
      RestartPolicy = { Name = "no" } } }
  local ok, err = cluster.op(eng, "create_container", name, { body = body })
  if not ok then return nil, err end
  ok, err = cluster.op(eng, "start", name)
  if not ok then return nil, err end
  return name
end

local function probes(t, stack, mgr, opts)
  local eng = stack.node_eng
  local ids = {}
  for _, svc in ipairs { "sandbox", "db", "relay" } do
    local id, err = stack:container(svc)
    if not id then t.result(false, "the " .. svc .. " task runs on " .. tostring(stack.node), err); return end
    ids[svc] = id
  end
  local fw = stack:container("forwarder")
  local lport = 20000 + tonumber(core.random_hex(2), 16) % 20000
  local listener, err = node_listener(stack, opts.forwarder_image, lport)
  if not listener then t.result(false, "a listener on the node's host network", err); return end

  -- the agent through the forwarder, from the node itself (its loopback)
  local res = eng:exec(listener, ready.argv("127.0.0.1", stack.port, "/health", 5), { timeout = 10, max_bytes = 4096 })
  t.result(res and ready.status(res.stdout) == 200,
    ("the node %s reaches the agent through the forwarder's port on its loopback"):format(stack.node),
    res and res.stdout or "exec failed")

  local fib = eng:exec(listener, { "socat", "-u", "OPEN:/proc/net/fib_trie", "STDOUT" }, { timeout = 20 })
  local addrs = fib and M.local_addresses(fib.stdout or "") or {}
  local net = cluster.op(mgr, "inspect_network", stack.project .. "-sbx") or {}
  local subnet = net.IPAM and net.IPAM.Config and net.IPAM.Config[1] and net.IPAM.Config[1].Subnet
  t.diag(("sandbox overlay: Internal=%s, Attachable=%s, subnet %s; node addresses %s"):format(tostring(net.Internal),
    tostring(net.Attachable), tostring(subnet), table.concat(addrs, " ")))
  local on_sbx = {}
  for _, a in ipairs(addrs) do if in_subnet(a, subnet) then on_sbx[#on_sbx + 1] = a end end
  t.result(#addrs > 0 and #on_sbx == 0, ("the node holds no address on the sandbox overlay %s"):format(tostring(subnet)),
    table.concat(on_sbx, " "))

  local controlled, missed = 0, {}
  for _, a in ipairs(addrs) do
    if #(C.reached(eng, ids.relay, { { a, lport } }) or {}) == 1 then
      controlled = controlled + 1
      local reach = C.reached(eng, ids.sandbox, { { a, lport } }) or { "exec failed" }
      t.result(#reach == 0, ("sandbox: the node's listener is unreachable on %s"):format(a), table.concat(reach, " "))
    else
      missed[#missed + 1] = a
    end
  end
  t.result(controlled > 0, ("control: the egress sidecar reaches the node's listener on %d of its addresses"):format(controlled),
    "not reached by the control: " .. table.concat(missed, ", "))
  if #missed > 0 then t.diag("node addresses the egress sidecar cannot reach either (not probed): " .. table.concat(missed, ", ")) end

  -- another network: the relay's address on the egress overlay (control: the relay itself)
  local relay_ip
  local tasks = cluster.tasks(mgr, { stack.project .. "-relay" }) or {}
  for _, tk in ipairs(tasks) do
    for _, na in ipairs(tk.DesiredState == "running" and tk.NetworksAttachments or {}) do
      if na.Network.Spec.Name == stack.project .. "-egress" then relay_ip = na.Addresses[1]:match("^([%d.]+)") end
    end
  end
  local ctl = relay_ip and #(C.reached(eng, ids.relay, { { relay_ip, 3128 } }) or {}) == 1
  if not ctl then
    t.result(false, "sandbox: a container on another network is unreachable", "control: the relay's egress address "
      .. tostring(relay_ip) .. " answers nobody")
  else
    local reach = C.reached(eng, ids.sandbox, { { relay_ip, 3128 } }) or { "exec failed" }
    t.result(#reach == 0, ("sandbox: a container on another network (the relay's egress address %s) is unreachable")
      :format(relay_ip), table.concat(reach, " "))
  end
  -- the forwarder's address on its publish network (control: the node itself)
  local fw_ip = C.container_ip(eng, fw, stack.project .. "-pub")
  local fctl = fw_ip and C.can_connect(eng, listener, fw_ip, 8080, { tool = "socat" }) == true
  if not fctl then
    t.result(false, "sandbox: the forwarder's address on the -pub network is unreachable",
      "control: the node cannot reach " .. tostring(fw_ip) .. ":8080 either")
  else
    local reach = C.reached(eng, ids.sandbox, { { fw_ip, 8080 } }) or { "exec failed" }
    t.result(#reach == 0, "sandbox: the forwarder's address on the -pub network is unreachable", table.concat(reach, " "))
  end
  local names = C.reached(eng, ids.sandbox, { { "db", 5432 }, { "relay", 3128 }, { "forwarder", 8080 } }) or {}
  t.result(#names == 3, "sandbox: service names on the sandbox overlay resolve and answer", table.concat(names, " "))

  -- the outside, in the node's own network namespace (where this node's NAT sends egress)
  local out = opts.outside
  if not out.standin then
    for _, n in ipairs(C.STANDIN_PROBES) do t.skip(n .. ": internet stand-in", out.why) end
    t.skip("credentials: the stand-in on the node receives the secret", out.why)
    return
  end
  C.standin_probes(t, eng, { sandbox = ids.sandbox, db = ids.db, relay = ids.relay, forwarder = fw })
  if opts.tls then
    O.credentials(t, eng, mgr, stack, ids, out.standin, opts.forwarder_image, opts.secret)
  else
    t.skip("credentials: the stand-in on the node receives the secret", opts.tls_why)
  end
end

-- What is still labelled with the project, on the manager and on the node: a list of names.
local function leftovers(mgr, node_eng, project)
  local label = "io.sandstack.project=" .. project
  local left = {}
  local services, err = cluster.services(mgr, label)
  if not services then return { "the manager's services: " .. tostring(err) } end
  for _, s in ipairs(services) do left[#left + 1] = "service " .. tostring(s.Spec and s.Spec.Name) end
  local nets; nets, err = cluster.op(mgr, "list_networks", nil, { label = label })
  if not nets then return { "the manager's networks: " .. tostring(err) } end
  for _, n in ipairs(nets) do left[#left + 1] = "network " .. tostring(n.Name) end
  if node_eng then
    local objs; objs, err = inventory.node_objects(node_eng, label)
    if not objs then return { "the node's objects: " .. tostring(err) } end
    for _, kind in ipairs { "containers", "networks", "volumes" } do
      for _, x in ipairs(objs[kind]) do left[#left + 1] = kind .. " " .. x end
    end
  end
  return left
end

-- One node's run: the reference stack placed by constraints (a node's id, or the caller's), the
-- stand-in on the node Swarm chose, the probes, then the destroy and the leftover check.
local function one_stack(t, mgr, opts, constraints)
  local o = { project = (opts.project_prefix or "sandstack-conform-") .. core.random_hex(4), image = opts.image,
    forwarder_image = opts.forwarder_image or "sandstack-test/socat:local", docker_host = opts.docker_host,
    tls = opts.tls, tls_why = opts.tls_why, secret = "cf_" .. core.random_hex(20) }
  local so = run_kit.stack_opts(o)
  so.pull, so.subnet_pool, so.runtime = nil, nil, nil
  so.constraints = constraints
  if o.tls then O.credential_opts(so, o.tls, o.secret) end
  local t0 = core.engine_clock()
  local stack, err = require("sandstack.swarm").start(o.project, so)
  t.result(stack ~= nil, "the reference stack comes up on the swarm", err)
  if not stack then return end
  local t1 = core.engine_clock()
  local node_eng = stack.node_eng
  local _, _, ndesc = require("sandstack.docker.isolation").describe(node_eng:version() or {})
  t.diag(("node %s (%s), placed by Swarm"):format(tostring(stack.node), ndesc))
  o.outside = {}
  if opts.standin == false then
    o.outside.why = "standin = false: the caller asked for no stand-in"
  else
    local code, why
    o.outside.standin, code, why = O.up(node_eng, o.project, o.forwarder_image, o.tls)
    if not o.outside.standin then o.outside.why = code .. ": " .. why end
  end
  local okp, perr = pcall(probes, t, stack, mgr, o)
  if not okp then t.result(false, "the probes ran to the end", perr) end
  O.down(node_eng, o.outside.standin)
  local t2 = core.engine_clock()
  local ok2, derr = stack:destroy()
  t.result(ok2, "the stack is destroyed", derr)
  -- a removed overlay stays in the manager's own list until its engine, as a node, has let go
  -- of its local copy: a few seconds at most
  local left = leftovers(mgr, node_eng, o.project)
  for _ = 1, 50 do
    if #left == 0 then break end
    core.sleep(0.2)
    left = leftovers(mgr, node_eng, o.project)
  end
  t.result(#left == 0, "nothing labelled with the project is left on the manager or the node", table.concat(left, "\n"))
  t.diag(("node %s: the stack up in %.1f s, the probes %.1f s, its removal %.1f s"):format(tostring(stack.node),
    t1 - t0, t2 - t1, core.engine_clock() - t2))
  stack:close()
end

-- Each result's name carries the node it ran on, when the run covers several.
local function for_node(t, label)
  return { result = function(ok, name, d) return t.result(ok, label .. name, d) end,
    skip = function(name, why) return t.skip(label .. name, why) end, diag = t.diag }
end

function M.run(opts)
  opts = opts or {}
  local t = run_kit.tap(opts.out or io.stdout)
  local mgr, err = cluster.manager { docker_host = opts.docker_host }
  if not mgr then
    t.result(false, "the swarm manager answers", err)
    return t.finish()
  end
  local _, _, desc = require("sandstack.docker.isolation").describe(mgr:version() or {})
  t.diag(("swarm manager %s, negotiated API %s"):format(desc, tostring(mgr.api_version)))
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  if opts.standin ~= false then o.tls, o.tls_why = O.certs() end
  o.tls_why = o.tls_why and "no_openssl: " .. o.tls_why
  if opts.constraints then
    one_stack(t, mgr, o, opts.constraints) -- where Swarm places it among the nodes they admit
  else
    -- every node that takes tasks, one after another, each pinned by its id
    local nodes; nodes, err = cluster.nodes(mgr)
    local active = {}
    for _, n in ipairs(nodes or {}) do
      if n.state == "ready" and n.availability == "active" then active[#active + 1] = n end
    end
    table.sort(active, function(a, b) return tostring(a.hostname) < tostring(b.hostname) end)
    t.result(#active > 0, "the swarm has a ready, active node", err or "none is ready and active")
    for _, n in ipairs(active) do
      t.diag(("node %s: the reference stack pinned there (node.id==%s)"):format(tostring(n.hostname), n.id))
      one_stack(#active > 1 and for_node(t, n.hostname .. ": ") or t, mgr, o, { "node.id==" .. n.id })
    end
  end
  mgr:close()
  return t.finish()
end

return M
