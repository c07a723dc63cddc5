-- sandstack.docker: per-session stacks (spec 000). Validation and planning are the C core's
-- (core.stack_model: pure data); the start pipeline (docker/start.lua) runs its plan against an
-- engine, the handle (docker/handle.lua) drives a running stack, and the inventory
-- (docker/inventory.lua) reads and removes what sandstack owns on an engine by label.
local S = require "sandstack.docker.start"
local handle = require "sandstack.docker.handle"
local inventory = require "sandstack.docker.inventory"
local E = require "sandstack.error"

local M = {}

-- sandstack.docker.start(session_key, opts) -> stack | nil, err
-- ttl, idle_timeout, on_expiry and from_snapshot: docker/session_methods.lua
local session = require "sandstack.docker.session_methods"
local function plain_start(session_key, opts) return S.start(session_key, opts, nil) end
function M.start(session_key, opts)
  return session.start(session_key, opts, plain_start)
end

-- sandstack.docker.wake(record, opts): a hibernated stack started again, by its record.
function M.wake(record, opts) return session.wake(handle.reconnect, record, opts) end

-- sandstack.docker.open(project, opts): a handle by project name, from the record kept on the engine.
function M.open(project, opts) return session.open(handle.reconnect, project, opts) end

-- sandstack.docker.snapshots{source =} and remove_snapshot(s) (docker/snapshot.lua).
function M.snapshots(opts) return require("sandstack.docker.snapshot").list(opts) end
function M.remove_snapshot(s, opts) return require("sandstack.docker.snapshot").remove(s, opts) end

-- The plan a start would apply, without an engine (docker/start.lua).
M.plan = S.plan

-- Rebuilds a handle from stack:record() and re-reads the forwarder's port.
M.reconnect = handle.reconnect

-- A stack of a warm pool that no session holds and whose filler has not marked it ready is
-- "starting" for this long after its creation, then "failed" (its filler died mid-start).
M.POOL_STARTING_GRACE = inventory.POOL_STARTING_GRACE

M.list = inventory.list
-- reap{expired = true} acts on the stacks whose ttl or idle timeout is due (docker/expiry.lua)
function M.reap(opts) return session.reap(opts, inventory.reap) end

-- sandstack.docker.down(project, opts): removes one project by name, without a handle.
local DOWN_KEYS = { docker_host = "string", timeout = E.SECONDS }
function M.down(project, opts)
  E.want(project, "string", "sandstack.docker.down", "argument 'project'")
  if project == nil then E.raise("sandstack.docker.down: argument 'project' must be a string, got nil") end
  local err
  opts, err = E.options(opts, DOWN_KEYS, "sandstack.docker.down")
  if not opts then return nil, err end
  return inventory.down(project, opts)
end

-- sandstack.docker.build_images{...}: the default proxy and forwarder images, built locally (docker/images.lua).
function M.build_images(opts) return require("sandstack.docker.images").build(opts) end

-- sandstack.docker.pool{...}: a warm pool of ready stacks (lua/sandstack/docker/pool.lua).
function M.pool(opts)
  return require("sandstack.docker.pool").new(opts)
end

return M
