-- A stack over time (internal to sandstack.docker; mixed into the handle): pause and resume
-- (the engine's pause, the cgroup freezer: memory kept), hibernate and wake (containers
-- stopped, networks, volumes and record kept). Snapshots, forks and changes are
-- docker/snapshot.lua's, expiry docker/expiry.lua's. Every request comes from the C core
-- (core.session_requests); this file orders them.
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.docker.batch"

local M = {}
local R = core.session_requests

local function check_open(self)
  if not self.eng then error("the stack handle is closed", 3) end
end

-- Container names of the stack, in dependency order; skip: a service name left out.
local function names(self, skip)
  local out = {}
  for _, c in ipairs(self.plan.containers) do
    if c.service ~= skip then out[#out + 1] = c.name end
  end
  return out
end
M.names = names

-- The proxy sandstack added: it holds the live policy and credentials in memory only.
local function added_proxy(self)
  local px = self.plan.proxy
  return type(px) == "table" and px.added and px.service or nil
end

local function all_ok(results, what)
  for _, r in ipairs(results) do
    if not r.ok then
      local e = r.err or E.new("engine", nil, what .. " failed")
      e.message = what .. ": " .. tostring(e.message)
      return nil, e
    end
  end
  return true
end

-- Each container's state: { [name] = {status =, paused =, running =} } (a missing one: nil).
function M.states(self)
  local list = names(self)
  local r = batch.run(self.eng, R("inspect", list), 60)
  local out = {}
  for i, n in ipairs(list) do
    if not r[i].ok then return nil, r[i].err end
    local st = r[i].status ~= 404 and type(r[i].body) == "table" and r[i].body.State
    if st then out[n] = { status = st.Status, paused = st.Paused == true, running = st.Running == true } end
  end
  return out
end

-- The engine's 409 for a container already in the state asked for ("is already paused", "is
-- not paused") is that state reached; its 409 for one that does not run is the caller's.
local function settle(results, list, what)
  for i, r in ipairs(results) do
    if not r.ok then
      local msg = tostring(r.err and r.err.message or "")
      if r.status == 409 and (msg:find("already paused", 1, true) or msg:find("not paused", 1, true)) then
        -- the state asked for
      elseif r.status == 409 and msg:find("not running", 1, true) then
        return E.fail("invalid", "not_running", what .. ": " .. list[i] .. " is not running: only a running stack "
          .. "can be paused (wake a hibernated one first)", { container = list[i] })
      elseif r.status == 404 then
        return E.fail("engine", "not_found", what .. ": container " .. list[i] .. " is missing: the stack is broken "
          .. "or gone", { container = list[i], status = 404 })
      else
        local e = r.err or E.new("engine", nil, what .. " failed")
        e.message = what .. ": " .. tostring(e.message)
        return nil, e
      end
    end
  end
  return true
end

-- Freezes every container of the stack at once, in one round: processes keep their memory and
-- open connections; the forwarder's port stays published (a client's connect waits until
-- resume). A stack already paused is left as it is. true, or nil, err.
function M.pause(self)
  check_open(self)
  local list = names(self)
  local results = batch.run(self.eng, R("pause", list), 60)
  local ok, err = settle(results, list, "pause")
  if ok then return true end
  local undo = {} -- only what this call froze is thawed again
  for i, r in ipairs(results) do if r.ok then undo[#undo + 1] = list[i] end end
  batch.run(self.eng, R("unpause", undo), 60)
  return nil, err
end

-- Thaws every container at once, in one round. A running stack is left as it is. true, or
-- nil, err.
function M.resume(self)
  check_open(self)
  local list = names(self)
  return settle(batch.run(self.eng, R("unpause", list), 60), list, "resume")
end

-- hibernate{memory = true}: a checkpoint of the processes needs an experimental daemon (and
-- runc needs CRIU on the host); sandstack does not drive checkpoints yet, so it is refused on
-- every engine, saying which of the two stands in the way. Always nil, err.
local function checkpoint_refused(eng)
  local r = batch.run(eng, R("info"), 30)[1]
  if not r.ok then return nil, r.err end
  local info = type(r.body) == "table" and r.body or {}
  local why = info.ExperimentalBuild ~= true and "this engine's daemon is not in experimental mode, which checkpoints need"
    or "sandstack does not drive the engine's checkpoints yet"
  return E.fail("engine", "checkpoint_unsupported", "hibernate{memory = true}: " .. why
    .. "; hibernate without memory (files kept), or pause to keep the processes", { engine = info.ServerVersion })
end

local HIBERNATE_KEYS = { memory = true, timeout = true }

-- Stops every container but the proxy sandstack added, which holds the live egress policy and
-- credentials in memory only (no record may hold a secret) and the inspection CA's key: the
-- sandbox's and the services' memory is freed, the networks, volumes and record stay. A paused
-- stack is resumed first (a frozen process cannot take its stop signal). The forwarder's port
-- is released; wake publishes a new one. true, or nil, err.
function M.hibernate(self, opts)
  check_open(self)
  opts = E.check_keys(opts, HIBERNATE_KEYS, "hibernate")
  local t = opts.timeout or 5
  if type(t) ~= "number" or t < 0 then error("hibernate: option 'timeout' must be a number >= 0", 2) end
  if opts.memory then return checkpoint_refused(self.eng) end
  local st, err = M.states(self)
  if not st then return nil, err end
  local paused = {}
  for n, s in pairs(st) do if s.paused then paused[#paused + 1] = n end end
  table.sort(paused)
  local ok; ok, err = all_ok(batch.run(self.eng, R("unpause", paused), 60), "hibernate")
  if not ok then return nil, err end
  local keep = added_proxy(self)
  local reqs = R("stop", names(self, keep), { t = t })
  -- dependents first, as a stop in reverse dependency order: one round (the engine stops each
  -- within its grace period; the order matters to no process that is being stopped anyway)
  ok, err = all_ok(batch.run(self.eng, reqs, t + 60), "hibernate")
  require("sandstack.docker.handle").set_port(self, nil)
  if not ok then return nil, err end
  return true
end

-- Starts a hibernated stack again in dependency order with its health and readiness waits (the
-- handle's start): a new forwarder port, the same placeholders (the proxy kept them), the live
-- policy and credentials that were in force (the proxy kept running). true, or nil, err.
function M.wake(self)
  check_open(self)
  local ok, err = self:start()
  if not ok then return nil, err end
  return true
end

return M
