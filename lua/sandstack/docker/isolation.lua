-- Isolation is verified, not assumed (issue 10). Before the first stack on an engine, sandstack
-- checks there that the mechanism it relies on works: a network made with the sandbox network's
-- own options must report them back, and a probe container on it must find nothing answering
-- on the network's gateway address or its default route's gateway. Engines differ here (Podman
-- drops inhibit_ipv4 and keeps the gateway; Engine 28 gives the first container the .1 that
-- 20.10 keeps for the gateway), so the check reads what the engine did, not what its version
-- suggests. A success is cached per engine (host, product and version) in this Lua state; a
-- failure is not, so an engine that is fixed is checked again.
--
-- The refusal is { kind = "engine", reason = "isolation_unsupported", engine =, version =,
-- missing = } with what to do in the message. `sandstack conform` is the full proof; this is the
-- cheap check that guards every start (one network, one short-lived container, ~1-2 s once).
local E = require "sandstack.error"

local M = {}

local verified = {} -- "host|product|version" -> true
local INHIBIT, GATEWAY_MODE = "com.docker.network.bridge.inhibit_ipv4", "com.docker.network.bridge.gateway_mode_ipv4"
local PROBE_PORT = 9 -- discard: nothing listens on it, so an answer is a refusal (RST) or a timeout

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

-- Runs the check on plan's engine unless it passed there before. Returns true or nil, err.
-- run: { eng =, plan = } as docker.lua makes it; the plan's isolation_check holds the two
-- finished create requests (a network with the sandbox network's own body under another name,
-- and a probe container on it), or is absent when nothing is promised (no internal bridge).
function M.verify(run)
  local eng, plan = run.eng, run.plan
  local check = plan.isolation_check
  if not check then return true end
  local v, err = eng:call("GET", "/version")
  if not v then return nil, err end
  local product, version, desc = describe(v)
  -- the probe runs under the stack's runtime (runsc has its own network stack): one pass per runtime
  local key = table.concat({ eng.host or "", product, version, plan.runtime or "" }, "|")
  if verified[key] then return true end
  local advice = product:find("Podman", 1, true) and ADVICE_PODMAN or ADVICE
  local name = check.name
  local created = {}
  local function cleanup()
    if created.container then eng:call("DELETE", "/containers/" .. name, nil, { query = { force = "1" }, ok = { [404] = true } }) end
    if created.network then eng:call("DELETE", "/networks/" .. name, nil, { ok = { [404] = true } }) end
  end
  local function fail(...)
    cleanup()
    return refuse(...)
  end

  local net
  net, err = eng:call(check.network.method, check.network.path, check.network.body_json)
  if not net then return nil, err end
  created.network = true
  local info
  info, err = eng:call("GET", "/networks/" .. name)
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
  c, err = eng:call(check.container.method, check.container.path, check.container.body_json)
  if not c then cleanup(); return nil, err end
  created.container = true
  local started
  started, err = eng:call("POST", "/containers/" .. name .. "/start", nil, { ok = { [304] = true } })
  if not started then cleanup(); return nil, err end
  local cinfo
  cinfo, err = eng:call("GET", "/containers/" .. name .. "/json")
  if not cinfo then cleanup(); return nil, err end
  local ep = (cinfo.NetworkSettings and cinfo.NetworkSettings.Networks or {})[name] or {}
  local own = ep.IPAddress
  local route
  route, err = eng:exec(name, { "socat", "-u", "OPEN:/proc/net/route", "STDOUT" }, { timeout = 20 })
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
    res, err = eng:exec(name, { "socat", "-T1", "/dev/null", ("TCP:%s:%d,connect-timeout=1"):format(ip, PROBE_PORT) },
      { timeout = 20 })
    if not res then cleanup(); return nil, err end
    local text = (res.stderr or "") .. (res.stdout or "")
    if res.exit_code == 0 or text:lower():find("refused", 1, true) then
      return fail(desc, product, version, ("the gateway address %s answers on the sandbox network"):format(ip), advice)
    end
  end
  cleanup()
  verified[key] = true
  require("sandstack.docker.apply").emit(run, "isolation_verified", nil, { engine = desc, probed = targets,
    gateway_is_probe = gateway_is_probe, default_routes = #routes })
  return true
end

-- For tests: forget what was verified in this Lua state.
function M.forget() verified = {} end

M.default_gateways = default_gateways
M.describe = describe
return M
