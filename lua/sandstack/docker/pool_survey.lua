-- The pool as the engine shows it (internal to sandstack.docker.pool, whose Pool:_survey and
-- Pool:_remove_dead these are): one container list read as idle, dead, stale, claimed and
-- starting stacks, and the dead ones taken down. It requires no module that requires
-- sandstack.docker.pool: what goes through sandstack.docker (down) is the pool's own method.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local batch = require "sandstack.stack.batch"
local emit = require("sandstack.pool_kit").emit

local M = {}

local function inventory() return require "sandstack.docker.inventory" end
local function store() return require "sandstack.docker.pool_store" end

-- The pool as one container list shows it: the list and the re-check in one answer. The list
-- carries each container's state, labels, name and published ports, so a stack is idle and
-- healthy when its ready mark is unclaimed, every service of the plan is running and the
-- forwarder publishes the agent's port: the checks the old inspects made, without them.
-- Returns { idle = {{project =, port =}}, dead = {project}, stale = {project}, claimed =,
-- starting = } or nil, err.
function M.survey(self, eng)
  local r = batch.run(eng, { ops.request("list_containers", nil, { label = "io.sandstack.pool=" .. self.name }) }, 60)[1]
  if not r.ok then return nil, r.err end
  if not inventory().is_array(r.body) then return nil, inventory().bad_answer("container list") end
  local by = {}
  for _, c in ipairs(r.body) do
    local l = type(c) == "table" and type(c.Labels) == "table" and c.Labels or {}
    local p = l["io.sandstack.project"]
    if type(p) == "string" then
      local e = by[p] or { services = {} }
      by[p] = e
      e.created = e.created or tonumber(l["io.sandstack.created"]) -- the marks carry none
      local role = inventory().mark_role(c)
      if role == "claim" then e.claimed = true
      elseif role == "ready" then e.marked = true
      else
        local svc = l["io.sandstack.service"]
        if svc then e.services[svc] = c.State end
        if svc == self.shape.forwarder and type(c.Ports) == "table" then
          for _, b in ipairs(c.Ports) do
            if type(b) == "table" and b.PrivatePort == self.shape.agent_port and b.Type == "tcp" and tonumber(b.PublicPort) then
              e.port = e.port or tonumber(b.PublicPort)
            end
          end
        end
      end
    end
  end
  local view, now = { idle = {}, dead = {}, stale = {}, claimed = 0, starting = 0 }, os.time()
  for p, e in pairs(by) do
    local here = e.marked and not e.claimed and store().claimed_here(p)
    if e.claimed or here == "claiming" then -- claiming: answered to a session here, its rename in flight
      view.claimed = view.claimed + 1
      view.in_use = view.in_use or {}
      view.in_use[#view.in_use + 1] = p
    elseif here then -- its claimant died before the rename: it may hold that session's secrets,
      view.dead[#view.dead + 1] = p -- so it is taken down, never handed out
    elseif e.marked then
      local healthy = e.port ~= nil
      for _, svc in ipairs(self.shape.services) do if e.services[svc] ~= "running" then healthy = false end end
      if healthy then view.idle[#view.idle + 1] = { project = p, port = e.port }
      else view.dead[#view.dead + 1] = p end
    elseif e.created and now - e.created < self.grace then view.starting = view.starting + 1
    else view.stale[#view.stale + 1] = p end
  end
  -- tried in random order, so that processes acquiring at once rarely collide
  local idle = view.idle
  for i = #idle, 2, -1 do
    local j = tonumber(core.random_hex(2), 16) % i + 1
    idle[i], idle[j] = idle[j], idle[i]
  end
  return view
end

-- Stacks failing their re-check (a ready mark, a service not running or no published port) are
-- claimed, so no acquire can take them meanwhile, and removed, each with a pool_dead event.
-- Returns the number removed.
function M.remove_dead(self, eng, dead)
  local n = 0
  for _, project in ipairs(dead) do
    local r = batch.run(eng, { inventory().claim_request(project) }, 30)[1]
    if r.ok then
      emit(self, "pool_dead", { project = project, reason = "a service is not running or publishes no port" })
      if self:_down(project) then n = n + 1 end
    end
  end
  return n
end

return M
