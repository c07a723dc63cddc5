-- sandstack.docker.stacks: every function of sandstack.docker but the warm pool: start, wake,
-- open, reconnect, plan, list, down, reap, the snapshots. docker.lua is these plus pool{...};
-- the pool (docker/pool.lua) uses them from here, so that it never requires docker.lua, which
-- requires it.
local E = require "sandstack.error"
local S = require "sandstack.docker.start"
local handle = require "sandstack.docker.handle"
local inventory = require "sandstack.docker.inventory"
-- ttl, idle_timeout, on_expiry and from_snapshot, and the stack's record and reopening
local session = require "sandstack.docker.session_methods"

local M = {}

-- sandstack.docker.start(session_key, opts) -> stack | nil, err
function M.start(session_key, opts) return session.start_stack(session_key, opts) end

-- sandstack.docker.wake(record, opts): a hibernated stack started again, by its record.
function M.wake(record, opts) return session.wake(handle.reconnect, record, opts) end

-- sandstack.docker.open(project, opts): a handle by project name, from the record kept on the engine.
function M.open(project, opts) return session.open(handle.reconnect, project, opts) end

-- sandstack.docker.snapshots{source =} and remove_snapshot(s) (docker/snapshot.lua).
function M.snapshots(opts) return require("sandstack.docker.snapshot").list(opts) end
function M.remove_snapshot(s, opts) return require("sandstack.docker.snapshot").remove(s, opts) end

-- The plan a start would apply, without an engine (docker/start.lua).
M.plan = S.plan

-- a handle's fork starts its child, and a restore plans, with these (docker/starter.lua)
require("sandstack.docker.starter").set { start = M.start, plan = S.plan }

-- Rebuilds a handle from stack:record() and re-reads the forwarder's port.
M.reconnect = handle.reconnect

-- A stack of a warm pool that no session holds and whose filler has not marked it ready is
-- "starting" for this long after its creation, then "failed" (its filler died mid-start).
M.POOL_STARTING_GRACE = inventory.POOL_STARTING_GRACE

M.list = inventory.list
-- reap{expired = true} acts on the stacks whose ttl or idle timeout is due (docker/expiry.lua)
function M.reap(opts) return session.reap(opts, inventory.reap) end

-- sandstack.docker.down(project, opts): removes one project by name, without a handle.
local DOWN_KEYS = E.described {
  { "docker_host", "string", type = "string", default = "the default",
    refused = "not a string" },
  { "timeout", E.SECONDS, type = "seconds", default = "30",
    refused = "not above 0" },
}
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

return M
