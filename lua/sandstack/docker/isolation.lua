-- Isolation is verified, not assumed. Before the first stack on an engine, sandstack
-- checks there that the mechanism it relies on works: a network made with the sandbox network's
-- own options must report them back, and a probe container on it must find nothing answering
-- on the network's gateway address or its default route's gateway. Engines differ here (Podman
-- drops inhibit_ipv4 and keeps the gateway; Engine 28 gives the first container the .1 that
-- 20.10 keeps for the gateway), so the check reads what the engine did, not what its version
-- suggests.
--
-- The check costs a network, a container and two or three execs (~2.5 s), so a pass is
-- remembered ON THE ENGINE, where every process finds it: a volume, created by the
-- host after the pass, whose name and labels carry the digest of everything the verdict is
-- about (memo_key below). The sandbox cannot make one (it has no Engine API), and a volume whose
-- labels do not carry the current digest is not trusted. What changes the digest, and so runs
-- the check again: the check's own version (CHECK_VERSION), the engine's ID, product, version,
-- commit, kernel and components, the daemon's start (the default "bridge" network: the daemon
-- deletes and re-creates it each time it starts, so its Id and Created change with every
-- daemon start), the runtime the probe runs under and that runtime's configuration, and the
-- shape of the sandbox network (csrc/stack/plan.c, add_check_shape). A failure is never
-- remembered, so an engine that is fixed is checked again. An engine without a default bridge
-- (no start marker) is checked in every process.
--
-- The refusal is { kind = "engine", reason = "isolation_unsupported", engine =, version =,
-- missing = } with what to do in the message. `sandstack conform` is the full proof; this is the
-- cheap check that guards every start.
local E = require "sandstack.error"
local core = require "sandstack.core"
local batch = require "sandstack.stack.batch"
local run_ctx = require "sandstack.stack.run"

local M = {}

-- Bumped whenever what the probe tests changes: memos of an older check are then not trusted.
M.CHECK_VERSION = "2"

local INHIBIT, GATEWAY_MODE = "com.docker.network.bridge.inhibit_ipv4", "com.docker.network.bridge.gateway_mode_ipv4"

-- The memo's labels. Not io.sandstack.project: a memo belongs to no stack, so list, reap and
-- down leave it alone.
local MEMO = "io.sandstack.isolation"             -- "verified"
local MEMO_KEY = "io.sandstack.isolation.key"     -- the digest of the key text
local MEMO_EPOCH = "io.sandstack.isolation.epoch" -- the digest of the engine-wide part
local MEMO_ENGINE = "io.sandstack.isolation.engine" -- the engine's ID: whose memo it is
local MEMO_PREFIX = "sandstack-isolation-"
M.MEMO_LABEL, M.MEMO_PREFIX = MEMO, MEMO_PREFIX

-- "Docker Engine 20.10.24 (API 1.41)" / "Podman Engine 5.4.2 (API 1.41)" from /version.
local function describe(v)
  local product = v.Platform and v.Platform.Name or ""
  for _, c in ipairs(v.Components or {}) do
    if type(c.Name) == "string" and c.Name:find("Podman", 1, true) then product = c.Name end
  end
  if product == "" then product = "Docker Engine" end
  return product, tostring(v.Version), ("%s %s (API %s)"):format(product, tostring(v.Version), tostring(v.ApiVersion))
end

-- The IPv4 gateways of the default routes in a /proc/net/route text.
local function default_gateways(route)
  local out = {}
  for line in route:gmatch("[^\n]+") do
    local dest, gw = line:match("^%S+%s+(%x+)%s+(%x+)")
    if dest == "00000000" and gw and gw ~= "00000000" then
      local n = tonumber(gw, 16) -- little-endian in the file
      local b = {}
      for i = 1, 4 do b[i] = n % 256; n = math.floor(n / 256) end -- no bit operators: LuaJIT too
      out[#out + 1] = table.concat(b, ".")
    end
  end
  return out
end

local function refuse(desc, product, version, missing, what_to_do)
  return E.fail("engine", "isolation_unsupported", ("%s cannot isolate a sandbox here: %s. %s"):format(desc, missing,
    what_to_do), { engine = product, version = version, missing = missing })
end

local ADVICE_PODMAN = "Podman's netavark ignores the bridge options sandstack relies on (inhibit_ipv4); run"
  .. " the stack on Docker Engine (20.10 or later), and see `sandstack conform` for the full proof"
local ADVICE = "Use a Docker Engine whose bridge driver honours these options (20.10 or later), and run"
  .. " `sandstack conform` on it for the full proof"

-- "containerd 1.6.20, runc 1.1.5": the components /version reports, in name order.
local function components(v)
  local out = {}
  for _, c in ipairs(type(v.Components) == "table" and v.Components or {}) do
    if type(c) == "table" then out[#out + 1] = tostring(c.Name) .. " " .. tostring(c.Version) end
  end
  table.sort(out)
  return table.concat(out, ", ")
end

-- The configuration of the runtime the probe runs under: its path and arguments, as /info shows
-- them (a daemon reload can change the arguments of runsc, and with them its network).
local function runtime_config(info, name)
  local r = type(info.Runtimes) == "table" and info.Runtimes[name]
  if type(r) ~= "table" then return "?" end
  local args = {}
  for i, a in ipairs(type(r.runtimeArgs) == "table" and r.runtimeArgs or {}) do args[i] = tostring(a) end
  return tostring(r.path) .. " " .. table.concat(args, " ")
end

-- The texts a verdict's key is made of: the engine-wide part (epoch) and the whole key, or nil
-- when the engine shows no start marker or the plan no shape (nothing can be remembered then).
local function key_texts(v, info, bridge, check, runtime, check_version)
  if type(bridge) ~= "table" or type(bridge.Id) ~= "string" or bridge.Id == "" or type(check.shape) ~= "string" then
    return nil
  end
  local product = describe(v)
  local epoch = table.concat({
    "check " .. (check_version or M.CHECK_VERSION),
    "engine " .. tostring(info.ID),
    "product " .. product,
    "version " .. tostring(v.Version) .. " api " .. tostring(v.ApiVersion) .. " commit " .. tostring(v.GitCommit),
    "kernel " .. tostring(v.KernelVersion or info.KernelVersion) .. " os " .. tostring(info.OperatingSystem),
    "components " .. components(v),
    "started " .. bridge.Id .. " " .. tostring(bridge.Created),
  }, "\n")
  local rt = runtime or tostring(info.DefaultRuntime)
  return epoch, table.concat({ epoch, "runtime " .. rt .. " = " .. runtime_config(info, rt), "shape " .. check.shape }, "\n")
end

-- The key of a verdict, from the engine's /version, /info and default bridge network and from
-- the plan's check: { key =, memo =, engine =, epoch_text = } (the key's digest, the memo's
-- name, the engine's ID, the engine-wide part), or nil when the engine shows no start marker or
-- the plan no shape (nothing can be remembered then). The epoch's digest is M.epoch(key's).
function M.memo_key(v, info, bridge, check, runtime, check_version)
  local epoch_text, key_text = key_texts(v, info, bridge, check, runtime, check_version)
  if not epoch_text then return nil end
  local digest = core.sha256_hex(key_text)
  return { key = digest, memo = MEMO_PREFIX .. digest:sub(1, 32), engine = tostring(info.ID), epoch_text = epoch_text }
end

-- The digest of a key's epoch, computed when first needed: a start whose memo is there (and no
-- stale one of this engine) never needs it.
function M.epoch(key)
  if not key.epoch then key.epoch = core.sha256_hex(key.epoch_text) end
  return key.epoch
end

-- What the key is made of and the memos on the engine: one parallel round, which the start
-- sends together with its image checks (M.identify_requests, then M.identify).
-- The requests are the C core's (core.engine_reads; a plan's preflight holds the same four).
function M.identify_requests()
  local R = core.engine_reads
  return { R.version, R.info, R.bridge, R.memos }
end

-- The identity from that round's results r. -> id | nil, err
-- id = { product =, version =, desc =, key = (M.memo_key's, or nil),
-- trusted =, stale = {names} }
function M.identify(r, plan)
  for i = 1, 2 do
    if not r[i].ok then return nil, r[i].err end
    if type(r[i].body) ~= "table" then return E.fail("engine", "bad_answer", "the engine's /version or /info is not an object") end
  end
  local v, info = r[1].body, r[2].body
  local product, version, desc = describe(v)
  local id = { product = product, version = version, desc = desc, stale = {} }
  local bridge = r[3].ok and r[3].status ~= 404 and type(r[3].body) == "table" and r[3].body or nil
  id.key = M.memo_key(v, info, bridge, plan.isolation_check, plan.runtime)
  if not id.key then return id end
  local vols = r[4].ok and type(r[4].body) == "table" and r[4].body.Volumes or {}
  for _, vol in ipairs(type(vols) == "table" and vols or {}) do
    local labels = type(vol) == "table" and type(vol.Labels) == "table" and vol.Labels or {}
    if vol.Name == id.key.memo and labels[MEMO] == "verified" and labels[MEMO_KEY] == id.key.key then
      id.trusted = true
    elseif labels[MEMO_ENGINE] == id.key.engine and type(vol.Name) == "string" and labels[MEMO_EPOCH] ~= M.epoch(id.key) then
      id.stale[#id.stale + 1] = vol.Name -- this engine's memo from an earlier start, version or check
    end
  end
  return id
end

-- Writes the memo of a pass and removes this engine's stale ones. Returns the memo's name, or
-- nil and why it could not be written (the start goes on: the check passed).
local function remember(eng, id)
  local key, stale, desc = id.key, id.stale, id.desc
  local labels = { [MEMO] = "verified", [MEMO_KEY] = key.key, [MEMO_EPOCH] = M.epoch(key), [MEMO_ENGINE] = key.engine,
    ["io.sandstack.isolation.checked"] = desc }
  local memo = core.isolation_memo_requests(labels, key.memo, stale) -- the requests, made in C
  local function created(res)
    local l = res.ok and type(res.body) == "table" and type(res.body.Labels) == "table" and res.body.Labels or {}
    return l[MEMO_KEY] == key.key
  end
  local reqs = { memo.create }
  for _, q in ipairs(memo.stale) do reqs[#reqs + 1] = q end
  local res = batch.run(eng, reqs, 30)[1]
  if not created(res) and res.ok then
    -- the name is taken by a volume without this key (the engine answers a create of an
    -- existing name with that volume): it is not a memo of ours, it goes
    batch.run(eng, { memo.replace }, 30)
    res = batch.run(eng, { memo.create }, 30)[1]
  end
  if created(res) then return key.memo end
  return nil, res.err and res.err.message or "the memo volume was not created with its labels"
end

-- The check itself, on run's engine: the network's options as the engine reports them, then a
-- probe container on it connecting to every gateway address it can find. Returns what it
-- probed ({ probed =, gateway_is_probe =, default_routes = }) or nil, err.
local function probe(run, id)
  local eng, check = run.eng, run.plan.isolation_check
  local product, version, desc = id.product, id.version, id.desc
  local err
  local advice = product:find("Podman", 1, true) and ADVICE_PODMAN or ADVICE
  local name = check.name
  local created = {}
  -- one step of the check: the plan's request, its answer's body or nil, err
  local function step(q)
    local r = eng:perform({ q }, 60)[1]
    if r.ok then return r.body or true end
    return nil, r.err
  end
  local function cleanup()
    if created.container then step(check.remove_container) end
    if created.network then step(check.remove_network) end
  end
  local function fail(...)
    cleanup()
    return refuse(...)
  end

  local net
  net, err = step(check.network)
  if not net then return nil, err end
  created.network = true
  local info
  info, err = step(check.inspect_network)
  if not info then cleanup(); return nil, err end
  local opts = info.Options or {}
  if info.Internal ~= true then
    return fail(desc, product, version, "the network was created without Internal", advice)
  end
  if opts[INHIBIT] ~= "true" then
    return fail(desc, product, version, "the network dropped " .. INHIBIT .. "=true", advice)
  end
  if check.gateway_mode and opts[GATEWAY_MODE] ~= check.gateway_mode then
    return fail(desc, product, version, "the network dropped " .. GATEWAY_MODE .. "=" .. check.gateway_mode, advice)
  end
  if info.EnableIPv6 == true then
    return fail(desc, product, version, "the network has IPv6 on although EnableIPv6 = false was sent", advice)
  end

  -- a probe on the network (socat: what the forwarder image must have anyway)
  local c
  c, err = step(check.container)
  if not c then cleanup(); return nil, err end
  created.container = true
  local started
  started, err = step(check.start)
  if not started then cleanup(); return nil, err end
  local cinfo
  cinfo, err = step(check.inspect)
  if not cinfo then cleanup(); return nil, err end
  local ep = (cinfo.NetworkSettings and cinfo.NetworkSettings.Networks or {})[name] or {}
  local own = ep.IPAddress
  local route
  route, err = eng:exec(name, check.route_argv, { timeout = 20 })
  if not route then cleanup(); return nil, err end
  -- the addresses that would carry traffic out: the network's gateway and any default route's
  -- (Engine 28 with inhibit_ipv4 gives the first container the gateway's .1: then it is the
  -- probe's own, which shows the host does not hold it, and there is nothing to connect to)
  local targets, seen, gateway_is_probe = {}, {}, false
  local function add(ip)
    if ip == own then gateway_is_probe = true end
    if ip and ip ~= "" and ip ~= own and not seen[ip] then seen[ip] = true; targets[#targets + 1] = ip end
  end
  for _, cfg in ipairs(info.IPAM and info.IPAM.Config or {}) do add(cfg.Gateway) end
  add(ep.Gateway)
  local routes = default_gateways(route.stdout or "")
  for _, gw in ipairs(routes) do add(gw) end
  for _, ip in ipairs(targets) do
    local res
    res, err = eng:exec(name, { "socat", "-T1", "/dev/null", ("TCP:%s:%d,connect-timeout=1"):format(ip, check.probe_port) },
      { timeout = 20 })
    if not res then cleanup(); return nil, err end
    local text = (res.stderr or "") .. (res.stdout or "")
    if res.exit_code == 0 or text:lower():find("refused", 1, true) then
      return fail(desc, product, version, ("the gateway address %s answers on the sandbox network"):format(ip), advice)
    end
  end
  cleanup()
  return { probed = targets, gateway_is_probe = gateway_is_probe, default_routes = #routes }
end

-- Runs the check on plan's engine unless a memo there says it passed for this very key.
-- Returns true or nil, err. run: { eng =, plan = } as docker.lua makes it; the plan's
-- isolation_check holds the two finished create requests (a network with the sandbox network's
-- own body under another name, and a probe container on it) and the shape of the verdict, or is
-- absent when nothing is promised (no internal bridge).
-- run.identity: that round's results when the start sent them already (A.preflight).
function M.verify(run)
  local eng, plan = run.eng, run.plan
  if not plan.isolation_check then return true end
  local id, err = M.identify(run.identity or batch.run(eng, M.identify_requests(), 30), plan)
  if not id then return nil, err end
  if id.trusted then
    run_ctx.emit(run, "isolation_remembered", nil, { engine = id.desc, memo = id.key.memo })
    return true
  end
  local found
  found, err = probe(run, id)
  if not found then return nil, err end
  local memo, why = nil, "the engine shows no daemon start marker (no default bridge network)"
  if id.key then memo, why = remember(eng, id) end
  found.engine, found.memo, found.memo_error = id.desc, memo, not memo and why or nil
  run_ctx.emit(run, "isolation_verified", nil, found)
  return true
end

-- Removes every memo on eng (the next start there checks again): after a change the key does
-- not see, such as a network setting changed by hand. Returns true or nil, err.
function M.forget(eng)
  local r = batch.run(eng, { core.engine_reads.memos }, 30)[1]
  if not r.ok then return nil, r.err end
  local names = {}
  for _, v in ipairs(type(r.body) == "table" and r.body.Volumes or {}) do names[#names + 1] = v.Name end
  local err = batch.first_error(batch.run(eng, core.stack_removals({ volumes = names }).volumes, 30))
  if err then return nil, err end
  return true
end

M.default_gateways = default_gateways
M.describe = describe
return M
