-- When a stack expires (internal to sandstack.docker: start's ttl, idle_timeout and on_expiry,
-- the handle's set_timeout and expires, reap{expired = true}). The expiry lives on the engine,
-- so it is enforced with the starting process gone: a volume <project>-expiry-<hex> that
-- carries it in its labels (labels are fixed at create, so a change is a new mark, and the
-- older marks are removed after it; the newest set wins). It carries the project label, so the
-- stack's destroy removes it with the rest.
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
-- idle_seen acts. So idle is known to the resolution of the passes (reap's caller,
-- pool:serve's interval, the gateway's timer).
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.docker.batch"

local M = {}
local R = core.session_requests

-- What an interface sends by itself in a pass (IPv6 neighbour and router solicitations, about
-- 40 to 90 bytes each, mostly in a container's first seconds) is not traffic; one HTTP exchange
-- through the forwarder sends more than twice this.
M.NOISE = 256

local PROJECT = "io.sandstack.project"
local ROLE = "io.sandstack.role"
M.ON_EXPIRY = { destroy = true, hibernate = true }

local function engine(opts)
  local sandstack = require "sandstack"
  return sandstack.engine { host = opts.docker_host, timeout = opts.timeout, api_version = opts.api_version }
end

local failed = batch.first_error

local function now() return os.time() end

-- Checks ttl, idle_timeout and on_expiry (raises at the caller's caller on a wrong type or value).
function M.check(ttl, idle, on_expiry, what)
  local function secs(v, k)
    if v ~= nil and (type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge) then
      error(what .. ": option '" .. k .. "' must be a number of seconds > 0", 4)
    end
  end
  secs(ttl, "ttl")
  secs(idle, "idle_timeout")
  if on_expiry ~= nil and not M.ON_EXPIRY[on_expiry] then
    error(what .. ": option 'on_expiry' must be \"destroy\" or \"hibernate\"", 4)
  end
end

-- The marks of a project (or of every project when project is nil): { [project] = newest mark
-- { name =, expires =, idle_timeout =, on_expiry =, set =, idle_seen =, idle_bytes =, session =,
-- pool =, older = {names} } }.
local function marks(eng, project)
  local r = batch.run(eng, R("list_volumes", nil, { label = ROLE .. "=expiry" }), 60)[1]
  if not r.ok then return nil, r.err end
  local vols = type(r.body) == "table" and r.body.Volumes or {}
  local by = {}
  for _, v in ipairs(type(vols) == "table" and vols or {}) do
    local l = type(v.Labels) == "table" and v.Labels or {}
    local p = l[PROJECT]
    if type(p) == "string" and (project == nil or p == project) then
      local m = { name = v.Name, project = p, expires = tonumber(l["io.sandstack.expires"]),
        idle_timeout = tonumber(l["io.sandstack.idle_timeout"]), on_expiry = l["io.sandstack.on_expiry"] or "destroy",
        set = tonumber(l["io.sandstack.expiry_set"]) or 0, idle_seen = tonumber(l["io.sandstack.idle_seen"]),
        idle_bytes = tonumber(l["io.sandstack.idle_bytes"]), session = l["io.sandstack.session"],
        pool = l["io.sandstack.pool"], older = {} }
      local cur = by[p]
      if not cur or m.set > cur.set or (m.set == cur.set and m.name > cur.name) then
        if cur then m.older = cur.older; m.older[#m.older + 1] = cur.name end
        by[p] = m
      else
        cur.older[#cur.older + 1] = m.name
      end
    end
  end
  return by
end

local function label_value(v) return v and ("%.0f"):format(v) or "" end

-- Writes a new mark for project from m (its fields), then removes the older marks.
local function write(eng, project, m, prev)
  -- later than the mark it replaces even within one second: the newest set wins
  local t = math.max(os.time(), prev and (prev.set or 0) + 0.001 or 0)
  local name = project .. "-expiry-" .. core.random_hex(4)
  local labels = { [PROJECT] = project, [ROLE] = "expiry", ["io.sandstack.session"] = m.session or "",
    ["io.sandstack.expires"] = label_value(m.expires), ["io.sandstack.idle_timeout"] = label_value(m.idle_timeout),
    ["io.sandstack.on_expiry"] = m.on_expiry or "destroy", ["io.sandstack.expiry_set"] = ("%.3f"):format(t),
    ["io.sandstack.idle_seen"] = label_value(m.idle_seen), ["io.sandstack.idle_bytes"] = label_value(m.idle_bytes),
    ["io.sandstack.version"] = core.VERSION }
  if m.pool then labels["io.sandstack.pool"] = m.pool end
  local err = failed(batch.run(eng, R("create_volume", { name }, { labels = labels }), 60))
  if err then return nil, err end
  local old = {}
  if prev then
    old[1] = prev.name
    for _, n in ipairs(prev.older) do old[#old + 1] = n end
  end
  if #old > 0 then batch.run(eng, R("remove_volume", old), 60) end
  return true
end

-- At a start: the first mark (ttl and/or idle_timeout given).
function M.arm(stack, ttl, idle, on_expiry)
  local t = now()
  return write(stack.eng, stack.project, { expires = ttl and t + ttl, idle_timeout = idle, on_expiry = on_expiry,
    idle_seen = idle and t, session = stack.session_key, pool = stack.pool })
end

-- h:set_timeout(seconds): the stack expires seconds from now (nil or false: never, by ttl);
-- idle_timeout and on_expiry stay. true, or nil, err.
function M.set_timeout(stack, seconds)
  if not stack.eng then error("the stack handle is closed", 2) end
  if seconds ~= nil and seconds ~= false then M.check(seconds, nil, nil, "set_timeout") end
  local by, err = marks(stack.eng, stack.project)
  if not by then return nil, err end
  local prev = by[stack.project]
  local m = { session = stack.session_key, on_expiry = prev and prev.on_expiry, idle_timeout = prev and prev.idle_timeout,
    idle_seen = prev and prev.idle_seen, idle_bytes = prev and prev.idle_bytes, pool = prev and prev.pool or stack.pool }
  if seconds then m.expires = now() + seconds end
  return write(stack.eng, stack.project, m, prev)
end

-- h:expires() -> { at = epoch | nil, remaining = seconds | nil, idle_timeout =, idle_since =,
-- on_expiry = } (all nil without an expiry), or nil, err.
function M.expires(stack)
  if not stack.eng then error("the stack handle is closed", 2) end
  local by, err = marks(stack.eng, stack.project)
  if not by then return nil, err end
  local m = by[stack.project]
  if not m then return {} end
  return { at = m.expires, remaining = m.expires and math.max(0, m.expires - now()), idle_timeout = m.idle_timeout,
    idle_since = m.idle_seen, on_expiry = m.on_expiry }
end

-- The traffic of the forwarder and the proxy (their received and sent bytes, summed), and
-- whether the forwarder runs; nil when neither container can be read.
local function traffic(eng, project)
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

-- Whether m is due now: "ttl" | "idle" | nil; an idle check that saw traffic writes a new mark.
local function due(eng, m, t)
  if m.expires and t >= m.expires then return "ttl" end
  if not m.idle_timeout then return nil end
  local bytes, running = traffic(eng, m.project)
  if not running then return nil end -- hibernated (or broken): no traffic to measure
  if not m.idle_bytes or bytes - m.idle_bytes > M.NOISE or bytes < m.idle_bytes then -- a restart resets the counters
    m.idle_bytes, m.idle_seen = bytes, t
    write(eng, m.project, m, m)
    return nil
  end
  if t - (m.idle_seen or t) >= m.idle_timeout then return "idle" end
end

-- Stops every container of project but its proxy (service "proxy": the one sandstack adds
-- has that name), as the handle's hibernate does, for a stack known by its labels only.
local function hibernate_by_labels(eng, project)
  local r = batch.run(eng, R("list_containers", nil, { label = PROJECT .. "=" .. project }), 60)[1]
  if not r.ok then return nil, r.err end
  local names = {}
  for _, c in ipairs(type(r.body) == "table" and r.body or {}) do
    local l = type(c.Labels) == "table" and c.Labels or {}
    if c.State ~= "exited" and c.State ~= "created" and l["io.sandstack.service"] ~= "proxy"
      and l[ROLE] ~= "claim" and l[ROLE] ~= "ready" then
      names[#names + 1] = ((c.Names or {})[1] or c.Id):gsub("^/", "")
    end
  end
  local err = failed(batch.run(eng, R("unpause", names), 60)) -- a paused one fails: ignored
  err = failed(batch.run(eng, R("stop", names, { t = 5 }), 90))
  if err then return nil, err end
  return true
end

-- reap{expired = true, prefix =, project =, pool =}: acts on every stack whose expiry is due.
-- Returns { {project =, reason = "ttl"|"idle", action = "destroy"|"hibernate"}, ... }, or nil,
-- err (err.done: what was done before).
function M.reap(opts)
  local eng, err = engine(opts)
  if not eng then return nil, err end
  local by; by, err = marks(eng, opts.project)
  if not by then eng:close(); return nil, err end
  local done, first = {}, nil
  local t = now()
  local projects = {}
  for p in pairs(by) do projects[#projects + 1] = p end
  table.sort(projects)
  for _, p in ipairs(projects) do
    local m = by[p]
    local take = (not opts.prefix or p:sub(1, #opts.prefix) == opts.prefix) and (not opts.pool or m.pool == opts.pool)
    local reason = take and due(eng, m, t)
    if reason then
      local ok, e
      if m.on_expiry == "hibernate" then
        ok, e = hibernate_by_labels(eng, p)
        if ok then -- acted once: the next pass finds no ttl (set_timeout after a wake sets one)
          m.expires = nil
          write(eng, p, m, m)
        end
      else
        ok, e = require("sandstack.docker.inventory").remove_project(eng, p)
      end
      if ok then done[#done + 1] = { project = p, reason = reason, action = m.on_expiry }
      else first = first or e end
    end
  end
  eng:close()
  if first then first.done = done; return nil, first end
  return done
end

return M
