-- A stack over time (internal to sandstack.docker; mixed into the handle): pause and resume
-- (the engine's pause, the cgroup freezer: memory kept), hibernate and wake (containers
-- stopped, networks, volumes and record kept). Snapshots, forks and changes are
-- docker/snapshot.lua's, expiry docker/expiry.lua's. Every request comes from the C core
-- (core.session_requests); this file orders them.
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"
local stack_run = require "sandstack.docker.stack_run"

local M = {}
local R = core.session_requests
local CHECKPOINT = "sandstack-hibernate" -- the name the C core gives the checkpoint (csrc/stack/session_requests.c)

local function check_open(self)
  if not self.eng then require("sandstack.session").closed("sandstack.docker.reconnect or open") end
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

-- The stack's services (the sandbox and its sidecars): what a pause freezes and a hibernation
-- with memory keeps. Not the proxy sandstack added nor the forwarder: they hold nothing of the
-- session's work (the proxy's live policy and credentials are in its memory either way, the
-- forwarder is a relay whose port changes at every wake), so a pause leaves them running. A
-- resume then thaws only the services, one Engine request fewer per container left out, and the
-- host's control calls (set_egress, asks) still answer while the stack is paused.
local function service_names(self)
  local fw = self.plan.forwarder and (self.plan.project .. "-" .. self.plan.forwarder)
  local px = added_proxy(self)
  local out = {}
  for _, c in ipairs(self.plan.containers) do
    if c.service ~= px and c.name ~= fw and c.role ~= "forwarder" then out[#out + 1] = c.name end
  end
  return out
end
M.service_names = service_names

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
      local cause = r.err and r.err.cause
      if r.status == 409 and (cause == "already_paused" or cause == "not_paused") then
        -- the state asked for
      elseif r.status == 409 and cause == "not_running" then
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

-- Freezes every service of the stack at once, in one round: processes keep their memory and
-- open connections. The forwarder keeps running: a client's connection is relayed to the frozen
-- sandbox, whose kernel queues it until resume. A stack already paused is left as it is. true,
-- or nil, err.
-- runc gives up freezing a cgroup whose tasks do not stop in time (a busy host: "unable to
-- freeze") and thaws it again; such a container is asked again, a few times (the delays before
-- each new try, in seconds).
local FREEZE_RETRIES = { 0.05, 0.2, 0.5 }
local function unable_to_freeze(r)
  return not r.ok and r.status == 500 and tostring(r.err and r.err.message or ""):find("unable to freeze", 1, true)
end

-- The engine's pause of each container of list, in one round (and the retries): the results.
function M.freeze(eng, list)
  local results = batch.run(eng, R("pause", list), 60)
  for _, delay in ipairs(FREEZE_RETRIES) do
    local again, idx = {}, {}
    for i, r in ipairs(results) do
      if unable_to_freeze(r) then again[#again + 1], idx[#idx + 1] = list[i], i end
    end
    if #again == 0 then break end
    core.sleep(delay)
    for k, r in ipairs(batch.run(eng, R("pause", again), 60)) do results[idx[k]] = r end
  end
  return results
end

function M.pause(self)
  check_open(self)
  local list = service_names(self)
  local results = M.freeze(self.eng, list)
  local ok, err = settle(results, list, "pause")
  if ok then return true end
  local undo = {} -- only what this call froze is thawed again
  for i, r in ipairs(results) do if r.ok then undo[#undo + 1] = list[i] end end
  batch.run(self.eng, R("unpause", undo), 60)
  return nil, err
end

-- Thaws every service at once, in one round. A running stack is left as it is. true, or
-- nil, err.
function M.resume(self)
  check_open(self)
  local list = service_names(self)
  return settle(batch.run(self.eng, R("unpause", list), 60), list, "resume")
end

-- hibernate{memory = true} checkpoints the processes (POST /containers/{id}/checkpoints): the
-- daemon must be in experimental mode, and runc needs CRIU on the engine's host. A daemon that
-- is not experimental is refused before anything is touched; a CRIU that is missing or that
-- cannot dump the process tree answers in the checkpoint call, and is reported with the
-- engine's words.
local function engine_info(eng)
  local r = batch.run(eng, R("info"), 30)[1]
  if not r.ok then return nil, r.err end
  return type(r.body) == "table" and r.body or {}
end

local function checkpoint_error(info, what, detail, cause)
  local msg = tostring(detail or "")
  local missing = cause == "criu_missing"
  return E.new("engine", missing and "checkpoint_unsupported" or "checkpoint_failed", what .. ": " .. msg
    .. (missing and "; install CRIU on the engine's host, or hibernate without memory (files kept)"
      or "; hibernate without memory (files kept), or pause to keep the processes"),
    { engine = info.ServerVersion })
end

local function checkpoint_refused(info)
  return E.fail("engine", "checkpoint_unsupported", "hibernate{memory = true}: this engine's daemon is not in "
    .. "experimental mode, which checkpoints need (and runc needs CRIU); hibernate without memory (files kept), "
    .. "or pause to keep the processes", { engine = info.ServerVersion })
end

-- Checkpoints every memory container at once (each stops when its dump is written). On a
-- failure the ones that were dumped are restored from their dumps and the dumps removed, so
-- the stack runs as before. true, or nil, err.
local function checkpoint(self, info)
  local list = service_names(self)
  local results = batch.run(self.eng, R("checkpoint", list, { timeout = 300 }), 360)
  local done, first = {}, nil
  for i, r in ipairs(results) do
    if r.ok then
      done[#done + 1] = list[i]
    elseif not first then
      local body = type(r.body) == "table" and r.body.message or r.err and r.err.message
      first = checkpoint_error(info, "hibernate{memory = true}: checkpoint of " .. list[i], body, r.err and r.err.cause)
    end
  end
  if not first then return true end
  batch.run(self.eng, R("restore", done, { timeout = 300 }), 360)
  batch.run(self.eng, R("remove_checkpoint", done), 60)
  return nil, first
end

local HIBERNATE_KEYS = E.described {
  { "memory", "boolean", type = "boolean", default = "false",
    refused = "not a boolean; an engine that cannot checkpoint: `engine`/`checkpoint_unsupported`" },
  { "timeout", E.SECONDS0, type = "seconds", default = "5",
    refused = "below 0" },
}

-- Stops every container but the proxy sandstack added, which holds the live egress policy and
-- credentials in memory only (no record may hold a secret) and the inspection CA's key: the
-- sandbox's and the services' memory is freed, the networks, volumes and record stay. A paused
-- stack is resumed first (a frozen process cannot take its stop signal). The forwarder's port
-- is released; wake publishes a new one. true, or nil, err.
function M.hibernate(self, opts)
  check_open(self)
  local err
  opts, err = E.options(opts, HIBERNATE_KEYS, "hibernate")
  if not opts then return nil, err end
  local t = opts.timeout or 5
  local info
  if opts.memory then
    local ierr
    info, ierr = engine_info(self.eng)
    if not info then return nil, ierr end
    if info.ExperimentalBuild ~= true then return checkpoint_refused(info) end
  end
  local st; st, err = M.states(self)
  if not st then return nil, err end
  local paused = {}
  for n, s in pairs(st) do if s.paused then paused[#paused + 1] = n end end
  table.sort(paused)
  local ok; ok, err = all_ok(batch.run(self.eng, R("unpause", paused), 60), "hibernate")
  if not ok then return nil, err end
  local keep = added_proxy(self)
  local to_stop = names(self, keep)
  if opts.memory then
    ok, err = checkpoint(self, info)
    if not ok then return nil, err end
    local dumped = {}
    for _, n in ipairs(service_names(self)) do dumped[n] = true end
    local rest = {}
    for _, n in ipairs(to_stop) do if not dumped[n] then rest[#rest + 1] = n end end
    to_stop = rest
  end
  local reqs = R("stop", to_stop, { t = t })
  -- dependents first, as a stop in reverse dependency order: one round (the engine stops each
  -- within its grace period; the order matters to no process that is being stopped anyway)
  ok, err = all_ok(batch.run(self.eng, reqs, t + 60), "hibernate")
  stack_run.set_port(self, nil)
  if not ok then return nil, err end
  return true
end

-- Starts a hibernated stack again in dependency order with its health and readiness waits (the
-- handle's start): a new forwarder port, the same placeholders (the proxy kept them), the live
-- policy and credentials that were in force (the proxy kept running). true, or nil, err.
--
-- A container hibernated with memory (a checkpoint named by the C core is on it: the engine
-- lists it, so a wake in any process finds it) is started from its checkpoint: the same
-- processes, with their memory, go on. The checkpoint is removed once the stack is ready; a
-- restore that fails keeps it and says so.
local function checkpointed(self)
  local list = service_names(self)
  local results = batch.run(self.eng, R("list_checkpoints", list), 60)
  local out = {}
  for i, r in ipairs(results) do
    if r.ok and type(r.body) == "table" then
      for _, c in ipairs(r.body) do
        if type(c) == "table" and c.Name == CHECKPOINT then out[list[i]] = true end
      end
    end
  end
  return out
end

-- A start from a checkpoint that the engine answers "failed to upload checkpoint to containerd:
-- commit failed: content sha256:...: already exists": the engine copies the checkpoint into
-- containerd's content store before it starts the task, and soon after a checkpoint that copy
-- can meet the same bytes already there and fail (the engine's tracker has it as occasional, for
-- a start right after a checkpoint; seen in CI on Docker 26 on a first wake, a second after its
-- checkpoint). Nothing was started and the checkpoint is intact, so the start is tried again
-- after RESTORE_DELAYS; any other failure is the wake's to report at once.
local RESTORE_DELAYS = { 0.5, 1, 2 }
M.RESTORE_ATTEMPTS = #RESTORE_DELAYS + 1

local function restore_race(err)
  return err ~= nil and err.kind == "engine" and err.cause == "checkpoint_exists"
end

-- start_from_checkpoint(try, sleep) -> what try() returned: try again while it fails with the race.
function M.start_from_checkpoint(try, sleep)
  local ok, err = try()
  for _, delay in ipairs(RESTORE_DELAYS) do
    if ok or not restore_race(err) then break end
    sleep(delay)
    ok, err = try()
  end
  return ok, err
end

function M.wake(self)
  check_open(self)
  local from = checkpointed(self)
  if next(from) == nil then
    local ok, err = self:start()
    if not ok then return nil, err end
    return true
  end
  local containers, restored = {}, {}
  for i, c in ipairs(self.plan.containers) do
    if from[c.name] then
      local copy = {}
      for k, v in pairs(c) do copy[k] = v end
      copy.start = R("restore", { c.name }, { timeout = 300 })[1]
      copy.ready_log = nil -- its processes come back past that line: it is not written again
      containers[i], restored[#restored + 1] = copy, c.name
    else
      containers[i] = c
    end
  end
  local ok, err = M.start_from_checkpoint(function() return stack_run.start(self, containers) end, core.sleep)
  if not ok then
    if err and err.kind == "engine" and (err.cause == "checkpoint" or err.cause == "checkpoint_exists"
      or err.cause == "criu_missing") then
      return nil, E.new("engine", "checkpoint_failed", "wake: the restore from the checkpoint failed: "
        .. tostring(err.message) .. "; the checkpoint is kept (destroy the stack to drop it)", { engine = err.engine })
    end
    return nil, err
  end
  batch.run(self.eng, R("remove_checkpoint", restored), 60)
  return true
end

return M
