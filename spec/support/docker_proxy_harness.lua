-- What the specs of the proxy sandstack adds share: the planner specs (docker_proxy_plan_spec,
-- docker_inspect_plan_spec) plan a stack without an engine; the stack specs (docker_proxy_spec,
-- docker_inspect_spec) start a real one whose "outside" is a network namespace of the test,
-- joined to the host by a veth on a /28 of 203.0.113.0/24.
--
--   local dh = require "docker_proxy_harness"
--   local plan = dh.planner(TOKEN)               -- plan(opts[, ctx]) -> plan with decoded bodies
--   local S = dh.stack("h6", "sh6", base)         -- names, images, TOKEN, KEY, missing(), ...
--   local work = S.workdir(); S.outside_up { 2 }; S.start_standin(work); S.wait_ready(work, { "standin.ready" })
--   stack, err = docker.start(S.PROJECT, S.options { services = S.trusting(ca), egress_policy = ... })
--   local r = S.client("raw", "proxy", "3128", text)   -- spec/support/proxy_client.py in the sandbox
local h = require "helpers"
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker

local M = {}

-- test certificates in a directory (see spec/support/proxy_harness.lua)
M.make_certs = require("proxy_harness").make_certs

-- plan(o, ctx) -> the plan of project "unit" with every container's and volume's body decoded
function M.planner(token)
  return function(o, ctx)
    local p, err = docker.plan("unit", o, ctx or { token = token, now = 1, run = "r1" })
    if not p then return nil, err end
    for _, c in ipairs(p.containers) do c.body = assert(core.json_decode(c.body_json)) end
    for _, v in ipairs(p.volumes or {}) do v.body = assert(core.json_decode(v.body_json)) end
    return p
  end
end

-- opts for an agent stack with the given egress allow list, with the fields of extra set
function M.options(key, allow, extra)
  local o = { agent_port = 8080, image = "agent:1", api_key = key, egress_policy = { allow = allow } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

function M.by_service(p, name)
  for _, c in ipairs(p.containers) do if c.service == name then return c end end
end

-- a container's environment: value by name, and how many times each name appears
function M.env_map(c)
  local m, n = {}, {}
  for _, e in ipairs(c.body.Env) do
    local k, v = e:match("^([^=]+)=(.*)$")
    m[k] = v
    n[k] = (n[k] or 0) + 1
  end
  return m, n
end

-- the planner refuses o with a compose error of the given reason (default invalid_option)
-- naming option (when given)
function M.refused(plan, o, option, reason)
  local check = require "luassert" -- a support module does not see busted's global assert
  local p, err = plan(o)
  check.is_nil(p, option)
  check.equal("compose", err.kind, tostring(err))
  check.equal(reason or "invalid_option", err.reason, tostring(err))
  if option then check.equal(option, err.option, tostring(err)) end
  return err
end

-- the planner raises for o, a value of the wrong type (a programming error, docs/api/README.md):
-- one line naming option; returns the message
function M.mistyped(plan, o, option)
  local check = require "luassert"
  local ok, err = pcall(plan, o)
  check.is_false(ok, option)
  check.is_string(err, option)
  check.is_truthy(err:find("option '" .. option .. "' must be ", 1, true), err)
  check.is_falsy(err:find("\n"), err)
  return err
end

-- The /28s of 203.0.113.0/24 to try for the outside, best first: base(r), base(r + 1), ... (the
-- spec's own share, without repeats), then every other one.
local function candidates(base, r)
  local list, seen = {}, {}
  local function add(first)
    if not seen[first] then seen[first] = true; list[#list + 1] = first end
  end
  for k = 0, 15 do add(base(r + k)) end
  for first = 0, 240, 16 do add(first) end
  return list
end

-- The live stack of spec "sstest-<id>": project and namespace names, the veth pair (interface
-- names from ifname), addresses addr(n) in a /28 of 203.0.113.0/24 (or of the /24 that net, e.g.
-- "10.250.77.", names) that no other interface routes (the spec's base(r) when free; see
-- S.outside_up), the images built from this mode's proxy binary under test names, a token and a key.
function M.stack(id, ifname, base, net)
  net = net or "203.0.113."
  local build = package.cpath:match("^%.?/?([^;]-)/%?%.so") or "build"
  local tag = core.random_hex(3)
  -- the image tag names the build directory and the tree it is in (two work trees of one
  -- repository on one engine must not swap each other's proxy mid-run)
  local top = (h.must("pwd"):gsub("%s+$", ""))
  local image_tag = build:gsub("[^%w.-]", "-") .. "-" .. core.sha256_hex(top):sub(1, 8)
  local S = {
    PROXY_BIN = build .. "/sandstack-proxy",
    PROXY_IMAGE = "sandstack-test/proxy:" .. image_tag,
    FORWARDER_IMAGE = "sandstack-test/forwarder:" .. image_tag,
    CLIENT = "sandstack-test/client:local",
    PROJECT = "sstest-" .. id .. "-" .. tag,
    NS = "sstest-" .. id .. "-" .. tag,
    HOST_IF = ifname .. tag .. "h", NS_IF = ifname .. tag .. "n",
    TOKEN = "tok-" .. core.random_hex(30),
    KEY = "sk-real-" .. core.random_hex(16),
    top = top,
  }
  local r = tonumber(tag, 16)
  local first = base(r) -- until outside_up claims one

  function S.addr(n) return ("%s%d"):format(net, first + n) end

  function S.missing()
    if h.must("id -u"):gsub("%s", "") ~= "0" then return "needs root (a network namespace)" end
    for _, tool in ipairs { "ip", "openssl", "python3", "docker" } do
      if not select(2, h.sh("command -v " .. tool)) then return "needs " .. tool end
    end
    if not select(2, h.sh("test -x " .. h.q(S.PROXY_BIN))) then
      return "no " .. S.PROXY_BIN .. " (build the sandstack-proxy target)"
    end
    if not select(2, h.sh("docker info >/dev/null 2>&1")) then return "no Docker engine" end
    return nil
  end

  function S.sandbox() return S.PROJECT .. "-sandbox" end
  function S.in_sandbox(cmd) return h.sh(("docker exec %s sh -c %s"):format(S.sandbox(), h.q(cmd))) end

  -- a fresh directory for the spec's certificates and logs
  function S.workdir() return (h.must("mktemp -d /tmp/sstest-" .. id .. ".XXXXXX"):gsub("%s+$", "")) end

  -- the shell command running spec/support/proxy_client.py COMMAND ARGS... with the sandbox's
  -- python3 (as `python3 -`: the script goes in on stdin)
  function S.client_command(cmd, args)
    local words = {}
    for i, a in ipairs(args) do words[i] = h.q(a) end
    return ("docker exec -i %s python3 - %s %s < %s"):format(S.sandbox(), cmd, table.concat(words, " "),
      h.q(S.top .. "/spec/support/proxy_client.py"))
  end

  -- proxy_client.py COMMAND ARGS... in the sandbox -> its last line decoded (raises when it is not
  -- JSON), and its whole output
  function S.client(cmd, ...)
    local out = h.must(S.client_command(cmd, { ... }))
    local v = core.json_decode(out:match("([^\n]+)%s*$") or "")
    assert(v ~= nil, "the client printed no JSON: " .. out)
    return v, out
  end

  -- A stack's start options: the agent on 8080, the images built from this mode's proxy binary
  -- (never pulled), the spec's key and session token; the fields of extra set over them (a false
  -- value removes one)
  function S.options(extra)
    local o = { project_name = S.PROJECT, agent_port = 8080, pull = "never", forwarder_image = S.FORWARDER_IMAGE,
      proxy_image = S.PROXY_IMAGE, api_key = S.KEY, session_token = S.TOKEN }
    for k, v in pairs(extra) do o[k] = v or nil end
    return o
  end

  -- the services of a stack whose one sandbox (the client image) trusts the PEM text ca, as
  -- SSL_CERT_FILE and CURL_CA_BUNDLE
  function S.trusting(ca)
    return { { name = "sandbox", image = S.CLIENT, command = 'printf "%s" "$TEST_CA_PEM" > /tmp/ca.pem && exec agent',
      env = { TEST_CA_PEM = ca, SSL_CERT_FILE = "/tmp/ca.pem", CURL_CA_BUNDLE = "/tmp/ca.pem" } } }
  end

  -- the added proxy's audit lines (those with a decision), from its container log
  function S.audit()
    local lines = {}
    for line in h.sh("docker logs " .. S.PROJECT .. "-proxy 2>/dev/null"):gmatch("[^\n]+") do
      local v = core.json_decode(line)
      if type(v) == "table" and v.decision then lines[#lines + 1] = v end
    end
    return lines
  end

  -- The host end claims a /28 for itself: its address without the kernel's prefix route, then
  -- the route, which the kernel refuses (File exists) while any other interface routes that /28
  -- (a concurrent spec, or the namespace a killed run left behind, whose stand-ins would answer
  -- with another run's certificates). The claim is the route itself, so two runs never share.
  local function claim()
    local held = {}
    for _, f in ipairs(candidates(base, r)) do
      local a1, cidr = ("%s%d"):format(net, f + 1), ("%s%d/28"):format(net, f)
      h.must(("ip addr add %s/28 dev %s noprefixroute"):format(a1, S.HOST_IF))
      if select(2, h.sh(("ip route add %s dev %s src %s"):format(cidr, S.HOST_IF, a1))) then
        first = f
        return
      end
      held[#held + 1] = (h.sh("ip -o route show " .. cidr):gsub("%s+$", ""))
      h.must(("ip addr del %s/28 dev %s"):format(a1, S.HOST_IF))
    end
    error("no /28 of " .. net .. "0/24 is free for the outside namespace; held: " .. table.concat(held, "; "), 3)
  end

  -- the outside namespace: the host end gets addr(1) of a /28 it claims, the namespace end each
  -- addr(n) of ns
  function S.outside_up(ns)
    h.must(("ip netns add %s && ip link add %s type veth peer name %s && ip link set %s netns %s"
      .. " && ip link set %s up"):format(S.NS, S.HOST_IF, S.NS_IF, S.NS_IF, S.NS, S.HOST_IF))
    claim()
    for _, n in ipairs(ns) do h.must(("ip netns exec %s ip addr add %s/28 dev %s"):format(S.NS, S.addr(n), S.NS_IF)) end
    h.must(("ip netns exec %s ip link set %s up && ip netns exec %s ip link set lo up"):format(S.NS, S.NS_IF, S.NS))
  end

  -- python3 script args... (a path, or a name under spec/support) in the outside namespace, its
  -- output in log
  function S.start_peer(script, args, log)
    local words = {}
    for i, a in ipairs(args) do words[i] = h.q(a) end
    local path = script:find("/", 1, true) and script or S.top .. "/spec/support/" .. script
    h.must(("ip netns exec %s setsid python3 %s %s </dev/null >%s 2>&1 &"):format(S.NS, h.q(path),
      table.concat(words, " "), h.q(log)))
  end

  -- spec/support/proxy_standin.py in the outside, serving srv.pem/srv.key of work
  function S.start_standin(work)
    S.start_peer("proxy_standin.py", { work .. "/srv.pem", work .. "/srv.key", work }, work .. "/standin.log")
  end

  -- waits until each of the files (names in work) exists: the peers' marks that they serve (a
  -- fixture's start: 30 s at most, python3 behind pyenv's shims starts slowly on a loaded machine)
  function S.wait_ready(work, files)
    for _, f in ipairs(files) do
      h.wait_for(f, function() return h.read_file(work .. "/" .. f) end, 30)
    end
  end

  -- the sandbox's client image and the proxy and forwarder images, under test names
  function S.build_images()
    h.must("bash " .. h.q(S.top .. "/spec/support/client-image.sh"))
    assert(docker.build_images { proxy_binary = S.PROXY_BIN, proxy_image = S.PROXY_IMAGE,
      forwarder_image = S.FORWARDER_IMAGE })
  end

  -- the outside namespace gone: its processes, the veth (and with it the claimed route)
  function S.outside_down()
    h.sh(("ip netns pids %s | xargs -r kill"):format(S.NS))
    h.sh(("ip link del %s; ip netns del %s"):format(S.HOST_IF, S.NS))
  end

  -- everything the stack spec made: the stack, the namespace's processes and veth, work
  function S.teardown(stack, work)
    if stack then stack:destroy(); stack:close() end
    docker.down(S.PROJECT)
    S.outside_down()
    if work then h.sh("rm -rf " .. h.q(work)) end
  end

  -- at the start of a test: false (the test marked pending with busted's `pending`, which only
  -- the spec file's own environment holds, so the spec passes it) when skip says why the spec
  -- cannot run here; an error when the stack did not start; else true. Without `pending` a skip
  -- is an error: a test that cannot run must never read as passed.
  function S.ready(skip, stack, start_err, pending)
    if skip then
      if not pending then error("cannot run here: " .. skip, 2) end
      pending(skip)
      return false
    end
    assert(stack, "the stack did not start: " .. tostring(start_err))
    return true
  end

  return S
end

return M
