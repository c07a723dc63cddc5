-- When a session on a swarm expires (internal to sandstack.swarm: start's ttl, idle_timeout and
-- on_expiry, the handle's set_timeout and expires, reap{expired = true}). The mark
-- (lua/sandstack/expiry.lua, shared with sandstack.docker) is carried in the labels of the
-- session's sandbox service on the manager, so any process that reaches the manager enforces it:
-- a change is a service update at the version read (only Spec.Labels change, so the manager
-- starts no task), read again and retried when another writer came in between. Idle is the
-- docker backend's measure, on the session's node: the sent bytes of its forwarder and its proxy
-- task, read from that node's own engine (a node that does not answer is not measured).
local E = require "sandstack.error"
local X = require "sandstack.expiry"
local cluster = require "sandstack.swarm.cluster"

local M = {}

local PROJECT = "io.sandstack.project"

-- The service that carries project's mark, or the sandbox's (service = its plan name) when none
-- does yet: its inspect (ID, Version, Spec), or nil, err.
local function holder(mgr, project, service)
  local list, err = cluster.services(mgr, PROJECT .. "=" .. project)
  if not list then return nil, err end
  local pick
  for _, s in ipairs(list) do
    local l = s.Spec and s.Spec.Labels or {}
    if l[X.SET] then return s end
    if l["io.sandstack.service"] == service then pick = s end
  end
  if not pick then
    return E.fail("engine", "not_found", "stack " .. project .. " has no service " .. tostring(service) .. " on the swarm",
      { project = project })
  end
  return pick
end

-- The claim of a pass on a due mark: "<the mark's expiry_set> <epoch> <who>". It holds while
-- the mark it names is the service's and for CLAIM_LEASE seconds (a pass that died mid-action
-- leaves it; a later pass takes the session again after the lease).
local CLAIM = "io.sandstack.expiry_claim"
M.CLAIM, M.CLAIM_LEASE = CLAIM, 300

-- Writes mark m on project's holder service (a label update at its version); a new mark ends
-- any claim on the old one. true, or nil, err.
local function write(mgr, project, service, m)
  local s, err = holder(mgr, project, service)
  if not s then return nil, err end
  return require("sandstack.swarm.service_update").update(mgr, s.ID, function(spec)
    local prev = X.parse(spec.Labels)
    spec.Labels = spec.Labels or {}
    for k, v in pairs(X.labels(m, math.max(os.time(), prev and prev.set + 0.001 or 0))) do spec.Labels[k] = v end
    spec.Labels[CLAIM] = nil
    return true
  end)
end
M.write = write

-- Whether labels l carry a claim that holds at time t.
local function claimed(l, t)
  local set, at = tostring(l[CLAIM] or ""):match("^(%S+) (%d+) ")
  return set ~= nil and set == l[X.SET] and t - tonumber(at) < M.CLAIM_LEASE
end

-- Claims due mark m (as this pass read it) for this pass alone. Every gateway of a cluster runs
-- the pass over the same sessions, and without a claim each of them destroyed (and counted) the
-- same one. The claim is a label update at the version read, so of passes that read the same
-- version one is written and the others are refused "out of sequence", read the service again
-- and find the claim. true (this pass acts), false (another pass holds it, or the mark moved
-- since m was read: the next pass decides), or nil, err.
function M.claim(mgr, project, service, m, who, t)
  local s, err = holder(mgr, project, service)
  if not s then return nil, err end
  local taken = false
  local ok; ok, err = require("sandstack.swarm.service_update").update(mgr, s.ID, function(spec)
    local l = spec.Labels or {}
    local cur = X.parse(l)
    if not cur or cur.set ~= m.set or claimed(l, t) then
      taken = true
      return nil, E.new("engine", "claimed", "the expiry of " .. project .. " is another pass's")
    end
    l[CLAIM] = ("%s %d %s"):format(l[X.SET], t, who)
    spec.Labels = l
    return true
  end)
  if ok then return true end
  if taken then return false end
  return nil, err
end

-- Gives back this pass's claim on m after its action failed (best effort: a claim left behind
-- ends with its lease).
function M.release(mgr, project, service, m, who)
  local s = holder(mgr, project, service)
  if not s then return end
  require("sandstack.swarm.service_update").update(mgr, s.ID, function(spec)
    local l = spec.Labels or {}
    local mine = tostring(l[CLAIM] or ""):match(" (%S+)$") == who
    if not mine or tonumber(l[X.SET]) ~= m.set then return nil, E.new("engine", "claimed", "not this pass's claim") end
    l[CLAIM] = nil
    return true
  end)
end

-- The mark of project (nil when none), or nil, err.
local function read(mgr, project, service)
  local s, err = holder(mgr, project, service)
  if not s then return nil, err end
  return X.parse(s.Spec.Labels) or false
end

local function check_open(stack)
  if not stack.mgr then require("sandstack.session").closed("sandstack.swarm.reconnect") end
end

-- At a start: the first mark. true, or nil, err.
function M.arm(stack, ttl, idle, on_expiry)
  return write(stack.mgr, stack.project, stack.plan.sandbox, X.first(ttl, idle, on_expiry, X.now()))
end

-- h:set_timeout(seconds): the session expires seconds from now (nil or false: never, by ttl);
-- idle_timeout and on_expiry stay. true, or nil, err.
function M.set_timeout(stack, seconds)
  check_open(stack)
  if seconds ~= false then
    local ok, err = X.check_seconds(seconds, "set_timeout", "argument 'seconds'")
    if not ok then return nil, err end
  end
  local prev, err = read(stack.mgr, stack.project, stack.plan.sandbox)
  if prev == nil then return nil, err end
  return write(stack.mgr, stack.project, stack.plan.sandbox, X.timeout(prev or nil, seconds, X.now()))
end

-- h:expires() -> X.view's table, or nil, err.
function M.expires(stack)
  check_open(stack)
  local m, err = read(stack.mgr, stack.project, stack.plan.sandbox)
  if m == nil then return nil, err end
  return X.view(m or nil, X.now())
end

-- reap{expired = true, prefix =, project =, pool =}: acts on every session whose mark is due, as its
-- on_expiry says (lifecycle.hibernate_project or the inventory's removal). Returns X.pass's.
function M.reap(opts)
  local mgr, err = cluster.manager(opts)
  if not mgr then return nil, err end
  local list; list, err = cluster.services(mgr, opts.project and (PROJECT .. "=" .. opts.project) or X.SET)
  if not list then mgr:close(); return nil, err end
  local by, svc = {}, {}
  for _, s in ipairs(list) do
    local l = s.Spec and s.Spec.Labels or {}
    local m = X.parse(l)
    if m and m.project then by[m.project], svc[m.project] = m, l["io.sandstack.service"] end
  end
  local engines = {}
  local who = require("sandstack.core").random_hex(8) -- this pass, in the claims it writes
  -- the session's node and its engine (false when the node does not answer)
  local function where(project)
    if engines[project] == nil then
      local inventory = require "sandstack.swarm.inventory"
      local s = (inventory.list_with(mgr, project) or {})[1]
      local node = s and s.node_id and cluster.node(mgr, s.node_id)
      local eng = node and node.state == "ready" and cluster.node_engine(node, { timeout = opts.timeout, project = project })
      engines[project] = { node = node or nil, eng = eng or false }
    end
    return engines[project]
  end
  local done; done, err = X.pass(by, opts, {
    due = function(m, t)
      return X.due(m, t, function()
        local w = where(m.project)
        if not w.eng then return nil, false end
        return X.traffic(w.eng, m.project)
      end, function(x) write(mgr, x.project, svc[x.project], x) end)
    end,
    rewrite = function(m) write(mgr, m.project, svc[m.project], m) end,
    claim = function(m) return M.claim(mgr, m.project, svc[m.project], m, who, X.now()) end,
    release = function(m) M.release(mgr, m.project, svc[m.project], m, who) end,
    hibernate = function(m)
      local w = where(m.project)
      if not w.eng then return nil, cluster.node_down(w.node or { state = "gone" }, m.project) end
      return require("sandstack.swarm.lifecycle").hibernate_project(mgr, w.eng, m.project, w.node.id, {})
    end,
    destroy = function(m)
      local w = where(m.project)
      local ok, e = require("sandstack.swarm.inventory").remove(mgr, w.eng or nil, PROJECT .. "=" .. m.project, nil,
        { node_lost = not w.eng })
      if not ok then return nil, e end
      return true
    end,
  })
  for _, w in pairs(engines) do if w.eng then w.eng:close() end end
  mgr:close()
  return done, err
end

-- The start options of this file, taken off before the start pipeline sees the options.
local START_KEYS = { ttl = true, idle_timeout = true, on_expiry = true }

-- sandstack.swarm.start with ttl, idle_timeout or on_expiry: plain is the start pipeline; the
-- mark is written before the stack is handed out (a failure to write it removes the stack).
function M.start(session_key, opts, plain)
  if type(opts) ~= "table" or (opts.ttl == nil and opts.idle_timeout == nil and opts.on_expiry == nil) then
    return plain(session_key, opts)
  end
  local ttl, idle, on_expiry = opts.ttl, opts.idle_timeout, opts.on_expiry
  local ok, err = X.check(ttl, idle, on_expiry, "sandstack.swarm.start")
  if not ok then return nil, err end
  return X.start(session_key, opts, START_KEYS, plain, function(stack) return M.arm(stack, ttl, idle, on_expiry) end)
end

local REAP_EXPIRED = { docker_host = true, timeout = true, project = true, prefix = true, pool = true, expired = true }

-- sandstack.swarm.reap: reap{expired = true, ...} is this file's pass; any other is plain's
-- (the inventory's).
function M.reap_entry(opts, plain)
  return X.route(opts, REAP_EXPIRED, "sandstack.swarm.reap", M.reap, plain)
end

return M
