-- When a stack expires (internal to sandstack.docker: start's ttl, idle_timeout and on_expiry,
-- the handle's set_timeout and expires, reap{expired = true}). The expiry lives on the engine,
-- so it is enforced with the starting process gone: the sandbox's PID 1 ends it at its ttl
-- (docker/deadline.lua), and the next reap pass acts on it by a volume <project>-expiry-<hex> that
-- carries the mark in its labels (lua/sandstack/expiry.lua: the mark, the idle measure and the
-- pass, shared with sandstack.swarm). Labels are fixed at create, so a change is a new mark,
-- and the older marks are removed after it; the newest set wins. It carries the project label,
-- so the stack's destroy removes it with the rest.
local core = require "sandstack.core"
local batch = require "sandstack.stack.batch"

local M = {}
local R = core.session_requests

local X = require "sandstack.expiry"
local PROJECT = "io.sandstack.project"
local ROLE = "io.sandstack.role"
M.NOISE, M.ON_EXPIRY, M.check = X.NOISE, X.ON_EXPIRY, X.check

local function engine(opts)
  local sandstack = require "sandstack"
  return sandstack.engine { host = opts.docker_host, timeout = opts.timeout, api_version = opts.api_version }
end

local failed = batch.first_error
local now = X.now

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
      local m = X.parse(l, true)
      m.name, m.project, m.older = v.Name, p, {}
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

-- Writes a new mark for project from m (its fields), then removes the older marks.
local function write(eng, project, m, prev)
  -- later than the mark it replaces even within one second: the newest set wins
  local t = math.max(os.time(), prev and (prev.set or 0) + 0.001 or 0)
  local name = project .. "-expiry-" .. core.random_hex(4)
  local labels = X.labels(m, t)
  labels[PROJECT], labels[ROLE], labels["io.sandstack.session"] = project, "expiry", m.session or ""
  labels["io.sandstack.version"] = core.VERSION
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

-- The newest mark of project, or nil without one (nil, nil, err when the list failed).
function M.newest(eng, project)
  local by, err = marks(eng, project)
  if not by then return nil, err end
  return by[project]
end

-- Before any later start of the sandbox: its init's program and the deadline of the newest
-- mark written again (docker/deadline.lua's boot). true, or nil, err.
function M.boot(eng, project)
  local m, err = M.newest(eng, project)
  if err then return nil, err end
  return require("sandstack.docker.deadline").boot(eng, project, m and m.expires)
end

-- The sandbox's own deadline moved to the mark m's (docker/deadline.lua).
local function hold(stack, m)
  return require("sandstack.docker.deadline").move(stack.eng, stack.project, stack.project .. "-" .. stack.plan.sandbox,
    m.expires)
end

-- At the end of a start: the first mark (ttl and/or idle_timeout given), and the ttl's deadline
-- in the sandbox, which holds with no process of sandstack alive.
function M.arm(stack, ttl, idle, on_expiry)
  local m = X.first(ttl, idle, on_expiry, now())
  m.session, m.pool = stack.session_key, stack.pool
  local ok, err = write(stack.eng, stack.project, m)
  if ok and m.expires then ok, err = hold(stack, m) end
  return ok, err
end

-- h:set_timeout(seconds): the stack expires seconds from now (nil or false: never, by ttl);
-- idle_timeout and on_expiry stay. true, or nil, err.
function M.set_timeout(stack, seconds)
  if not stack.eng then require("sandstack.session").closed("sandstack.docker.reconnect or open") end
  if seconds ~= false then
    local ok, err = X.check_seconds(seconds, "set_timeout", "argument 'seconds'")
    if not ok then return nil, err end
  end
  local by, err = marks(stack.eng, stack.project)
  if not by then return nil, err end
  local prev = by[stack.project]
  local m = X.timeout(prev, seconds, now())
  m.session, m.pool = stack.session_key, m.pool or stack.pool
  local ok; ok, err = write(stack.eng, stack.project, m, prev)
  if not ok then return nil, err end
  return hold(stack, m)
end

-- h:expires() -> { at = epoch | nil, remaining = seconds | nil, idle_timeout =, idle_since =,
-- on_expiry = } (all nil without an expiry), or nil, err.
function M.expires(stack)
  if not stack.eng then require("sandstack.session").closed("sandstack.docker.reconnect or open") end
  local by, err = marks(stack.eng, stack.project)
  if not by then return nil, err end
  return X.view(by[stack.project], now())
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
  local done; done, err = X.pass(by, opts, {
    due = function(m, t)
      return X.due(m, t, function() return X.traffic(eng, m.project) end, function(x) write(eng, x.project, x, x) end)
    end,
    rewrite = function(m) write(eng, m.project, m, m) end,
    hibernate = function(m) return hibernate_by_labels(eng, m.project) end,
    destroy = function(m) return require("sandstack.docker.inventory").remove_project(eng, m.project) end,
  })
  eng:close()
  return done, err
end

return M
