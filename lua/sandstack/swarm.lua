-- sandstack.swarm: per-session stacks on a Docker Swarm cluster (docs/scale-out.md).
-- The same options as sandstack.docker.start, validated and planned by the same C core; Swarm's
-- scheduler places each session (sandstack counts nothing and spreads nothing), all of a
-- session's containers stay on the node Swarm chose, and the manager's labels are the only
-- state: list, reap and reconnect work from any process that reaches the manager.
--   swarm/spec.lua       the Swarm plan, made by the C core (csrc/stack/swarm_plan.c)
--   swarm/cluster.lua    the manager (services, tasks, nodes) and each node's own Engine API
--   swarm/start.lua      the start pipeline
--   swarm/verify.lua     the promises a node must keep, checked on the node
--   swarm/ready.lua      readiness through the forwarder, by exec on the node
--   swarm/names.lua      the wait for the names a health check holds back on the overlays
--   swarm/handle.lua     the handle: status, exec, capture, destroy, record, reconnect
--   swarm/inventory.lua  removal, list and reap by label
--   swarm/pool.lua       warm pools, a claim the manager arbitrates (swarm/pool_marks.lua)

--   swarm/lifecycle.lua  pause, resume, hibernate and wake; swarm/expiry.lua the expiry
local S = require "sandstack.swarm.start"
local handle = require "sandstack.swarm.handle"
local inventory = require "sandstack.swarm.inventory"

local M = {}

-- sandstack.swarm.start(session_key, opts) -> stack | nil, err
-- opts: every key of sandstack.docker.start (docker_host is the manager's Engine API), and
-- constraints (the operator's placement constraints, on every service), placement_timeout
-- (seconds Swarm may take to place the session, default 30), task_timeout (seconds a placed
-- task may take to start, image pull included, default 120).
-- ttl, idle_timeout and on_expiry: swarm/expiry.lua (the mark on the sandbox service's labels).
local expiry = require "sandstack.swarm.expiry"
function M.start(session_key, opts)
  return expiry.start(session_key, opts, S.start)
end

-- The Swarm bodies a start would send, without a cluster.
M.plan = S.plan

-- Rebuilds a handle from stack:record(), from any process that reaches the manager.
M.reconnect = handle.reconnect

-- sandstack.swarm.wake(record, opts): a hibernated session started again, by its record.
function M.wake(record, opts)
  return require("sandstack.docker.session_methods").wake(handle.reconnect, record, opts)
end

M.list = inventory.list
-- reap{expired = true} acts on the sessions whose ttl or idle timeout is due (swarm/expiry.lua)
function M.reap(opts) return expiry.reap_entry(opts, inventory.reap) end

-- Warm pools on the swarm: the same calls as sandstack.docker.pool (swarm/pool.lua).
M.pool = require("sandstack.swarm.pool").new

return M
