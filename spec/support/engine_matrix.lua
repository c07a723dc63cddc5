-- Helpers of the CI engine matrix (spec/engines.t), run inside a nested engine's network
-- namespace with DOCKER_HOST at its socket:
--   lua5.4 spec/support/engine_matrix.lua facts     one line "FACT key value" per engine fact
--   lua5.4 spec/support/engine_matrix.lua refusal   exit 0 when start is refused with
--                                                   engine/isolation_unsupported (prints why not)
-- Each fact is measured by attempting the thing: a TCP connect from a container to a listener
-- on the engine host (reached only when the kernel answers for the host) or to the "internet"
-- stand-in (spec/support/inet_standin.sh, answers only NATed traffic). A probe never runs from
-- the container that holds the address it aims at, and the "honoured" facts need their control
-- to pass first, so no fact can read "isolated" just because nothing worked.
local sandstack = require "sandstack"
local core = sandstack.core
local conf = require "sandstack.conformance"

local AGENT = "sandstack-test/agent:local"
local LABEL = "io.sandstack.test" -- never io.sandstack.project: those are counted as leftovers
local STANDIN_PORT = 8099

local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function standin_script()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return (src:match("^(.*)/[^/]+$") or ".") .. "/inet_standin.sh"
end

local function facts()
  local eng = assert(sandstack.engine {})
  local ver = assert(eng:call("GET", "/version"))
  local out = {}
  local function fact(k, v) out[#out + 1] = { k, tostring(v) }; io.write(("FACT %s %s\n"):format(k, tostring(v))) end
  fact("version", ver.Version)
  fact("api", ver.ApiVersion)
  local product = "Docker"
  for _, c in ipairs(ver.Components or {}) do
    if tostring(c.Name):lower():find("podman", 1, true) then product = "Podman" end
  end
  fact("product", product)

  local tag = "ssfacts-" .. core.random_hex(3)
  local labels = { [LABEL] = "engine-facts" }
  local made_nets, made_ctrs = {}, {}
  local third = 40 + tonumber(core.random_hex(1), 16) % 150

  -- net(suffix, internal, options) -> name or nil, err (the engine may refuse an option)
  local function net(suffix, internal, options)
    local name = tag .. "-" .. suffix
    third = third + 1
    local body = { Name = name, Internal = internal, Labels = labels, CheckDuplicate = true,
      Options = next(options) and options or nil,
      IPAM = { Config = { { Subnet = ("10.221.%d.0/24"):format(third) } } } } -- a range no spec's stacks use
    local ok, err = eng:call("POST", "/networks/create", body)
    if not ok then return nil, err end
    made_nets[#made_nets + 1] = name
    return name
  end
  local n = 0
  local function ctr(network)
    n = n + 1
    local name = tag .. "-c" .. n
    assert(eng:call("POST", "/containers/create", { Image = AGENT, Cmd = { "agent" }, Labels = labels,
      HostConfig = { NetworkMode = network } }, { query = { name = name } }))
    made_ctrs[#made_ctrs + 1] = name
    assert(eng:call("POST", "/containers/" .. name .. "/start", nil, { ok = { [304] = true } }))
    return name, conf.container_ip(eng, name, network)
  end
  local function gateway(network)
    local n1 = assert(eng:call("GET", "/networks/" .. network))
    local a, b, c = n1.IPAM.Config[1].Subnet:match("^(%d+)%.(%d+)%.(%d+)%.")
    return ("%s.%s.%s.1"):format(a, b, c)
  end
  -- a container on the network that does not hold the gateway address, and whether the first
  -- container on it was handed that address
  local function prober(network)
    local gw = gateway(network)
    local c, ip = ctr(network)
    local first_got_gw = ip == gw
    if first_got_gw then c, ip = ctr(network) end
    assert(ip ~= gw, "two containers cannot both hold " .. gw)
    return c, gw, first_got_gw
  end

  -- whether container c reaches host:p, in up to three tries: a machine under load can miss one
  -- connect's 1.5 s, which would read as a control that failed (a reachable address) or an
  -- isolation that holds (an unreachable one); more tries only make "unreachable" harder to earn
  local function reaches(c, host, p)
    for _ = 1, 3 do
      if #assert(conf.reached(eng, c, { { host, p } })) == 1 then return true end
    end
    return false
  end

  local srv, port = conf.host_listener()
  local standin = "ssfacts" .. core.random_hex(2)
  local sh = standin_script()
  local body_ok, body_err = pcall(function()
    -- plain internal network: default route, and the host listener on the gateway (the control
    -- for the inhibit/isolated facts)
    local plain = assert(net("plain", true, {}))
    local c, gw = prober(plain)
    local r = assert(eng:exec(c, { "ip", "route" }))
    fact("internal_default_route", r.stdout:find("default", 1, true) and "yes" or "no")
    local plain_reached = reaches(c, gw, port)
    fact("internal_gateway_reaches_host", plain_reached and "yes" or "no")

    local inh, ierr = net("inh", true, { ["com.docker.network.bridge.inhibit_ipv4"] = "true" })
    if not inh then fact("inhibit_ipv4_gateway_unreachable", "refused: " .. tostring(ierr)) else
      local ci, gwi, first = prober(inh)
      local reached = reaches(ci, gwi, port)
      fact("inhibit_ipv4_gateway_unreachable", (not plain_reached) and "n/a (control failed)" or (reached and "no" or "yes"))
      fact("inhibit_ipv4_first_container_gets_dot1", first and "yes" or "no")
    end

    local iso, serr = net("iso", true, { ["com.docker.network.bridge.gateway_mode_ipv4"] = "isolated" })
    if not iso then fact("isolated_on_internal_honoured", "refused (" .. tostring(serr.status or serr) .. ")") else
      local cs, gws = prober(iso)
      local reached = reaches(cs, gws, port)
      fact("isolated_on_internal_honoured", (not plain_reached) and "n/a (control failed)" or (reached and "no" or "yes"))
    end

    -- masquerade: the stand-in answers only traffic NATed to the host's end of its veth
    local up = io.popen(("bash %s up %s %d 2>&1"):format(sh_quote(sh), standin, STANDIN_PORT))
    local said = up:read("*a")
    up:close()
    assert(said:find("198.51.100.2", 1, true), "stand-in did not come up: " .. said)
    local nat = assert(net("nat", false, {}))
    local cn = ctr(nat)
    local control = reaches(cn, "198.51.100.2", STANDIN_PORT)
    local nomasq, merr = net("nomasq", false, { ["com.docker.network.bridge.enable_ip_masquerade"] = "false" })
    if not nomasq then fact("masquerade_false_honoured", "refused: " .. tostring(merr)) else
      local cm = ctr(nomasq)
      local reached = reaches(cm, "198.51.100.2", STANDIN_PORT)
      fact("masquerade_false_honoured", (not control) and "n/a (control failed)" or (reached and "no" or "yes"))
    end
  end)
  srv:close()
  os.execute(("bash %s down %s >/dev/null 2>&1"):format(sh_quote(sh), standin))
  for i = #made_ctrs, 1, -1 do
    eng:call("DELETE", "/containers/" .. made_ctrs[i], nil, { query = { force = "1" }, ok = { [404] = true } })
  end
  for _, name in ipairs(made_nets) do eng:call("DELETE", "/networks/" .. name, nil, { ok = { [404] = true } }) end
  if not body_ok then
    io.stderr:write("engine_matrix facts: " .. tostring(body_err) .. "\n")
    return 1
  end
  return 0
end

-- The start an engine that cannot isolate must refuse (API.md: kind engine,
-- reason isolation_unsupported). Anything else is reported, and a stack that did start is
-- destroyed again.
local function refusal()
  local name = "sstest-stack-refuse-" .. core.random_hex(3)
  local stack, err = sandstack.docker.start(name, { project_name = name, agent_port = 8080,
    forwarder_image = "sandstack-test/socat:local", subnet_pool = "10.213.0.0/16", pull = "never",
    services = { { name = "sandbox", image = AGENT, command = { "agent" } } } })
  if stack then
    stack:destroy()
    io.write("start succeeded: the engine was not refused\n")
    return 1
  end
  sandstack.docker.down(name)
  io.write(("start failed: kind=%s reason=%s message=%s\n"):format(tostring(err and err.kind),
    tostring(err and err.reason), tostring(err and err.message or err)))
  if err and err.kind == "engine" and err.reason == "isolation_unsupported" then return 0 end
  return 1
end

local cmd = arg[1]
if cmd == "facts" then os.exit(facts())
elseif cmd == "refusal" then os.exit(refusal())
else io.stderr:write("usage: engine_matrix.lua facts|refusal\n"); os.exit(2) end
