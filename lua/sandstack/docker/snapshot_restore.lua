-- Restores and forks (internal to docker/snapshot.lua): a new session started from a snapshot,
-- its volumes filled from the snapshot's copies as the start makes them, and h:fork, a snapshot
-- and a start from it.
local core = require "sandstack.core"
local E = require "sandstack.error"
local H = require "sandstack.docker.snapshot_helper"
local inv = require "sandstack.docker.snapshot_inventory"
local options = require "sandstack.docker.snapshot_options"
local take = require "sandstack.docker.snapshot_take"

local M = {}

-- sandstack.docker.start(key, {from_snapshot = snap, ...}): a new session from snap. The start
-- makes its volumes as any start does; each is filled from the snapshot's copy as soon as the
-- start reports it made (its volume_created event, before any container starts), so the
-- sandbox's first process finds its files. A copy that fails (or a volume never reported) makes
-- the started stack be removed again and the copy's error returned. starter: { start = the plain
-- start (with the expiry options), plan = the start's plan } (docker/starter.lua).
function M.start_from(session_key, opts, starter)
  local snap = opts.from_snapshot
  local ok, cerr = options.check(snap, "sandstack.docker.start", "from_snapshot")
  if not ok then return nil, cerr end
  local o = options.restore_opts(snap, opts)
  local po = {} -- the plan's options: the expiry's are the start's own (docker/session_methods.lua)
  for k, v in pairs(o) do
    if k ~= "ttl" and k ~= "idle_timeout" and k ~= "on_expiry" then po[k] = v end
  end
  local plan, err = starter.plan(session_key, po)
  if not plan then return nil, err end
  local pending = {}
  for _, v in ipairs(plan.volumes) do
    local src = snap.volumes and snap.volumes[v.key]
    if src then pending[v.name] = src end
  end
  local eng; eng, err = inv.engine { docker_host = o.docker_host, timeout = o.timeout }
  if not eng then return nil, err end
  local helper
  if next(pending) then
    helper, err = H.image(eng)
    if not helper then eng:close(); return nil, err end
  end
  local user_event, copy_err = o.on_event, nil
  o.on_event = function(ev)
    local src = ev.phase == "volume_created" and pending[ev.volume]
    if src then
      pending[ev.volume] = nil
      if not copy_err then
        local ok, cerr = H.run(eng, { { mode = "copy", from = src, to = ev.volume } }, { image = helper,
          runtime = plan.runtime, project = plan.project, deadline = core.engine_clock() + H.COPY_SECONDS,
          seconds = H.COPY_SECONDS, what = "from_snapshot" })
        if not ok then copy_err = cerr end
      end
    end
    if user_event then return user_event(ev) end
  end
  local stack; stack, err = starter.start(session_key, o)
  eng:close()
  if not stack then return nil, err end
  local missing = next(pending)
  if copy_err or missing then
    stack:destroy()
    stack:close()
    return nil, copy_err or E.new("engine", "restore_incomplete", "from_snapshot: the start did not report volume "
      .. tostring(missing) .. " made, so it was not filled from the snapshot; the stack was removed again")
  end
  return stack
end

-- h:fork(new_key, opts) -> child, snapshot | nil, err: a snapshot of this stack and a start from
-- it under new_key. The child is a new session (its own token, placeholders, inspection CA and
-- subnet, all minted by its own start); opts give what a snapshot never keeps (api_key,
-- credentials' secrets) and any other option to change. The snapshot stays (the child's
-- sandbox runs its image): remove it with remove_snapshot once the child is destroyed.
function M.fork(self, new_key, opts, starter)
  E.want(new_key, "string", "fork", "argument 'new_key'")
  if new_key == nil then E.raise("fork: argument 'new_key' must be a string, got nil") end
  E.want(opts, "table", "fork", "argument 'opts'", "an options table")
  local snap, err = take.snapshot(self, { name = "fork of " .. tostring(self.project) })
  if not snap then return nil, err end
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.from_snapshot = snap
  local child; child, err = M.start_from(new_key, o, starter)
  if not child then
    inv.remove({ snap }, { docker_host = self.plan.docker_host })
    return nil, err
  end
  return child, snap
end

return M
