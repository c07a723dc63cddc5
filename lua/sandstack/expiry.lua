-- When a session expires, whatever holds it (internal to sandstack: docker/expiry.lua keeps the
-- mark in a volume's labels, swarm/expiry.lua in its sandbox service's labels). This file is
-- what both share: the options' checks, the mark as labels, the answer of h:expires(), the
-- idle measure and the reap pass. A mark:
--   io.sandstack.expires       epoch seconds, or "" (no ttl)
--   io.sandstack.idle_timeout  seconds, or "" (no idle limit)
--   io.sandstack.on_expiry     "destroy" | "hibernate"
--   io.sandstack.expiry_set    when this mark was written (epoch, fractional)
--   io.sandstack.idle_seen     when traffic was last seen, io.sandstack.idle_bytes at that time
-- Idle is measured from traffic: the bytes the forwarder and the proxy have sent (the engine's
-- network counters of the two containers, one stats sample each; every answer the host gets
-- and every request the sandbox's agent gets passes the forwarder, every egress the proxy). A
-- pass that finds the sum grown by more than NOISE bytes since the mark's idle_bytes writes a
-- new mark (idle_seen = now); one that finds it unchanged for idle_timeout seconds since
-- idle_seen acts. So idle is known to the resolution of the passes.
local core = require "sandstack.core"
local batch = require "sandstack.stack.batch"

local M = {}
local R = core.session_requests

-- What an interface sends by itself in a pass (IPv6 neighbour and router solicitations, about
-- 40 to 90 bytes each, mostly in a container's first seconds) is not traffic; one HTTP exchange
-- through the forwarder sends more than twice this.
M.NOISE = 256

local PROJECT = "io.sandstack.project"
local ROLE = "io.sandstack.role"
M.ON_EXPIRY = { destroy = true, hibernate = true }
M.SET = "io.sandstack.expiry_set" -- present on whatever carries a mark

function M.now() return os.time() end

-- A number of seconds above 0: true, or nil, err (compose/invalid_option); a wrong type raises
-- at the caller (docs/api/README.md, "Conventions"). name: an option's, or "argument 'x'".
function M.check_seconds(v, what, name)
  local E = require "sandstack.error"
  E.want(v, "number", what, name, "a number of seconds")
  if v ~= nil and (v ~= v or v <= 0 or v == math.huge) then
    return E.refuse(what, name, "must be a number of seconds above 0", "compose")
  end
  return true
end

-- Checks ttl, idle_timeout and on_expiry as M.check_seconds does: true, or nil, err.
function M.check(ttl, idle, on_expiry, what)
  local E = require "sandstack.error"
  local ok, err = M.check_seconds(ttl, what, "ttl")
  if ok then ok, err = M.check_seconds(idle, what, "idle_timeout") end
  if not ok then return nil, err end
  E.want(on_expiry, "string", what, "on_expiry", '"destroy" or "hibernate"')
  if on_expiry ~= nil and not M.ON_EXPIRY[on_expiry] then
    return E.refuse(what, "on_expiry", 'must be "destroy" or "hibernate"', "compose")
  end
  return true
end

local function label_value(v) return v and ("%.0f"):format(v) or "" end

-- The labels of mark m written at time t (its own fields; project, role and the rest are the
-- holder's).
function M.labels(m, t)
  return { ["io.sandstack.expires"] = label_value(m.expires), ["io.sandstack.idle_timeout"] = label_value(m.idle_timeout),
    ["io.sandstack.on_expiry"] = m.on_expiry or "destroy", [M.SET] = ("%.3f"):format(t),
    ["io.sandstack.idle_seen"] = label_value(m.idle_seen), ["io.sandstack.idle_bytes"] = label_value(m.idle_bytes) }
end

-- The mark read back from labels l (nil when l carries none, unless any: a mark's holder).
function M.parse(l, any)
  if type(l) ~= "table" or (l[M.SET] == nil and not any) then return nil end
  return { project = l[PROJECT], expires = tonumber(l["io.sandstack.expires"]),
    idle_timeout = tonumber(l["io.sandstack.idle_timeout"]), on_expiry = l["io.sandstack.on_expiry"] or "destroy",
    set = tonumber(l[M.SET]) or 0, idle_seen = tonumber(l["io.sandstack.idle_seen"]),
    idle_bytes = tonumber(l["io.sandstack.idle_bytes"]), session = l["io.sandstack.session"], pool = l["io.sandstack.pool"] }
end

-- The first mark of a start (ttl and/or idle_timeout given).
function M.first(ttl, idle, on_expiry, t)
  return { expires = ttl and t + ttl, idle_timeout = idle, on_expiry = on_expiry, idle_seen = idle and t }
end

-- h:set_timeout(seconds) on mark prev (nil: none yet): the session expires seconds from t (nil
-- or false: never, by ttl); idle_timeout and on_expiry stay (seconds checked by the caller).
function M.timeout(prev, seconds, t)
  prev = prev or {}
  return { session = prev.session, on_expiry = prev.on_expiry, idle_timeout = prev.idle_timeout,
    idle_seen = prev.idle_seen, idle_bytes = prev.idle_bytes, pool = prev.pool, expires = seconds and t + seconds or nil }
end

-- h:expires() of mark m: { at =, remaining =, idle_timeout =, idle_since =, on_expiry = } (all
-- nil without a mark).
function M.view(m, t)
  if not m then return {} end
  return { at = m.expires, remaining = m.expires and math.max(0, m.expires - t), idle_timeout = m.idle_timeout,
    idle_since = m.idle_seen, on_expiry = m.on_expiry }
end

-- The traffic of project's forwarder and proxy on one engine (a swarm node's own, where both
-- run): their sent bytes summed, and whether the forwarder runs; nil when neither runs.
function M.traffic(eng, project)
  local r = batch.run(eng, R("list_containers", nil, { label = PROJECT .. "=" .. project }), 60)[1]
  if not r.ok then return nil, nil, r.err end
  local names, running = {}, false
  for _, c in ipairs(type(r.body) == "table" and r.body or {}) do
    local l = type(c.Labels) == "table" and c.Labels or {}
    local role = l[ROLE]
    if role == "forwarder" or l["io.sandstack.service"] == "proxy" then
      if c.State == "running" then
        names[#names + 1] = ((c.Names or {})[1] or c.Id):gsub("^/", "")
        if role == "forwarder" then running = true end
      end
    end
  end
  if #names == 0 then return nil, false end
  local sum = 0
  for _, s in ipairs(batch.run(eng, R("stats", names), 60)) do
    local nets = s.ok and type(s.body) == "table" and s.body.networks or {}
    for _, n in pairs(type(nets) == "table" and nets or {}) do sum = sum + (n.tx_bytes or 0) end
  end
  return sum, running
end

-- Whether m is due at t: "ttl" | "idle" | nil. traffic() -> bytes, running (the forwarder's and
-- the proxy's, M.traffic); an idle check that saw traffic calls rewrite(m) with m's idle fields
-- moved on.
function M.due(m, t, traffic, rewrite)
  if m.expires and t >= m.expires then return "ttl" end
  if not m.idle_timeout then return nil end
  local bytes, running = traffic()
  if not running then return nil end -- hibernated (or broken): no traffic to measure
  if not m.idle_bytes or bytes - m.idle_bytes > M.NOISE or bytes < m.idle_bytes then -- a restart resets the counters
    m.idle_bytes, m.idle_seen = bytes, t
    rewrite(m)
    return nil
  end
  if t - (m.idle_seen or t) >= m.idle_timeout then return "idle" end
end

-- The reap pass over marks (by: { [project] = mark }) with the filters of reap{expired = true}
-- (prefix, pool), in project order. b: { due = function(m, t) -> reason, hibernate = function(m)
-- -> true | nil, err, destroy = function(m) -> true | nil, err, rewrite = function(m) }, and
-- where several passes may meet one session (a swarm's gateways), claim = function(m) -> true |
-- false (another pass holds it, or the mark moved since it was read) | nil, err, with
-- release = function(m) after a failed action, so that a later pass may try again. A
-- hibernation acts once: the ttl is dropped from the mark (a set_timeout after the wake sets
-- one). Returns { {project =, reason =, action =} }, or nil, err (err.done: what was done).
function M.pass(by, opts, b)
  local done, first = {}, nil
  local t = M.now()
  local projects = {}
  for p in pairs(by) do projects[#projects + 1] = p end
  table.sort(projects)
  for _, p in ipairs(projects) do
    local m = by[p]
    local take = (not opts.prefix or p:sub(1, #opts.prefix) == opts.prefix) and (not opts.pool or m.pool == opts.pool)
    local reason = take and b.due(m, t)
    if reason and b.claim then
      local got, e = b.claim(m)
      if not got then
        reason = nil
        if got == nil then first = first or e end
      end
    end
    if reason then
      local ok, e
      if m.on_expiry == "hibernate" then
        ok, e = b.hibernate(m)
        if ok then
          m.expires = nil
          b.rewrite(m)
        end
      else
        ok, e = b.destroy(m)
      end
      if ok then done[#done + 1] = { project = p, reason = reason, action = m.on_expiry }
      else
        first = first or e
        if b.release then b.release(m) end
      end
    end
  end
  if first then first.done = done; return nil, first end
  return done
end

-- A backend's start with the options of a session over time: opts without keys go to plain,
-- then after(stack, clean) keeps what the backend keeps (the mark); a failure there removes
-- the stack again. The stack, or nil, err.
function M.start(session_key, opts, keys, plain, after)
  local clean = {}
  for k, v in pairs(opts) do if not keys[k] then clean[k] = v end end
  local stack, err = plain(session_key, clean)
  if not stack then return nil, err end
  local done, ok
  done, ok, err = pcall(after, stack, clean)
  if not done then -- a raise (Ctrl-C, most likely): the stack goes, then the raise goes on
    local left = select(2, stack:destroy())
    stack:close()
    local E = require "sandstack.error"
    if E.interrupted(ok) then error(require("sandstack.stack.steps").interrupted(stack.project, left), 0) end
    error(ok, 0)
  end
  if not ok then
    stack:destroy()
    stack:close()
    return nil, err
  end
  return stack
end

-- A backend's reap: reap{expired = true, ...} is pass(opts) (its keys checked), any other
-- plain(opts) (expired = false taken off).
function M.route(opts, keys, what, pass, plain)
  if type(opts) == "table" and opts.expired then
    return pass(require("sandstack.error").check_keys(opts, keys, what))
  end
  if type(opts) == "table" and opts.expired == false then
    local o = {}
    for k, v in pairs(opts) do if k ~= "expired" then o[k] = v end end
    opts = o
  end
  return plain(opts)
end

return M
