-- The promises a node must keep, checked on the node before a session there is handed out
-- (internal to sandstack.swarm; the overlay counterpart of sandstack.docker's isolation check).
-- A probe container, made on the node's own engine from the forwarder's image with no security
-- option of its own, joins the session's sandbox overlay and reads two files:
--   /proc/net/route    an internal overlay must give it no default route (nothing out);
--   /proc/self/status  NoNewPrivs must be 1 when the manager dropped the service's
--                      no-new-privileges (API < 1.44 has no such field): then only the node's
--                      daemon ("no-new-privileges": true) can give it.
-- A pass is cached per node and Lua state; a failure is not, so a node that is fixed is checked
-- again. The refusal: { kind = "engine", reason = "isolation_unsupported", node =, missing = }.
local E = require "sandstack.error"
local isolation = require "sandstack.docker.isolation"
local batch = require "sandstack.stack.batch"

local M = {}

local verified = {} -- "node id|what" -> true

local function refuse(node, missing, advice)
  return E.fail("engine", "isolation_unsupported", ("node %s cannot keep a session's promises: %s. %s"):format(
    tostring(node.hostname), missing, advice), { node = node.hostname, node_id = node.id, missing = missing })
end

local function wants(run)
  local want_route = run.plan.internal ~= false
  local want_nnp = run.nnp_from_node
  return want_route, want_nnp, run.node.id .. "|" .. (want_route and "r" or "") .. (want_nnp and "n" or "")
end

-- The probe container's requests (planned by C: the Swarm plan's node_check), or nil when this
-- node passed the same check before. They are sent together with the forwarder's own requests
-- (swarm/start.lua), so that its network attachment and start overlap theirs.
-- run: { node =, plan =, shape =, nnp_from_node = }
function M.probe_request(run)
  local _, _, key = wants(run)
  if verified[key] then return nil end
  local nc = run.shape.node_check
  return { name = nc.name, create = nc.create, start = nc.start, remove = nc.remove }
end

-- Reads the two files in the started probe, removes it, and answers. run as above, with
-- node_eng; probe: what probe_request returned.
function M.check(run, probe)
  local want_route, want_nnp, key = wants(run)
  local eng, name = run.node_eng, probe.name
  local function cleanup()
    batch.remove_requests(eng, { probe.remove })
  end
  local function read(path)
    local res, e = eng:exec(name, { "socat", "-u", "OPEN:" .. path, "STDOUT" }, { timeout = 20, max_bytes = 65536 })
    if not res then return nil, e end
    if res.exit_code ~= 0 then
      return nil, E.new("engine", "probe_failed", ("the node probe could not read %s (exit %s): %s"):format(path,
        tostring(res.exit_code), tostring(res.stderr)), { node = run.node.hostname })
    end
    return res.stdout
  end
  local err
  if want_route then
    local route; route, err = read("/proc/net/route")
    if not route then cleanup(); return nil, err end
    local gws = isolation.default_gateways(route)
    if #gws > 0 then
      cleanup()
      return refuse(run.node, "a container on the internal overlay has a default route via " .. gws[1],
        "Use an engine whose internal overlay networks have no gateway (Docker 20.10 or later)")
    end
  end
  if want_nnp then
    local status; status, err = read("/proc/self/status")
    if not status then cleanup(); return nil, err end
    if not status:match("\nNoNewPrivs:%s*1") then
      cleanup()
      return refuse(run.node, "no-new-privileges is not set on its containers (the manager's API "
        .. tostring(run.api_version) .. " has no per-service field for it)",
        'Set "no-new-privileges": true in the daemon.json of every node (docs/scale-out.md), or type out '
          .. "security_opt = {} to start without it")
    end
  end
  cleanup()
  verified[key] = true
  require("sandstack.stack.run").emit(run, "node_verified", nil, { node = run.node.hostname,
    route = want_route, no_new_privileges = want_nnp and "node" or "service" })
  return true
end

return M
