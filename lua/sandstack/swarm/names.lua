-- The stack's names on its overlays (internal to sandstack.swarm). A service whose task has a
-- healthcheck is given its names (the service's and its aliases, in each node's embedded DNS)
-- only once Swarm's executor has seen the task healthy: it activates the task's service binding
-- at that moment, and reports the task running at the same one. sandstack learns health sooner,
-- by running the ready test itself (exec on the node), so the services that depend on such a one
-- start, and readiness can pass, before its name resolves: the added proxy with TLS inspection
-- (its health check's first run is one interval, 10 s, after its start) was unresolvable in the
-- sandbox for seconds after start() returned. wait() runs after readiness, so the time it
-- waits overlaps the rest of the start: one task list on the manager per round.
local E = require "sandstack.error"
local cluster = require "sandstack.swarm.cluster"
local run_ctx = require "sandstack.stack.run"

local M = {}
local now, pause, emit = run_ctx.now, run_ctx.pause, run_ctx.emit

-- The services of a shape whose names wait for their health check (those with one).
function M.pending(shape)
  local out = {}
  for _, c in ipairs(shape.services) do
    if c.healthcheck then out[#out + 1] = c end -- C plans it: the service carries a HealthCheck
  end
  return out
end

-- run: { mgr =, shape = (services with their ids), health_timeout = } -> true | nil, err
-- Until the manager reports every such task running: its names then resolve on the overlays.
function M.wait(run)
  local left = M.pending(run.shape)
  local deadline = now() + (run.health_timeout or 60)
  local delay = 0.05
  while #left > 0 do
    local ids = {}
    for i, c in ipairs(left) do ids[i] = c.id end
    local tasks, err = cluster.tasks(run.mgr, ids)
    if not tasks then return nil, err end
    local still = {}
    for _, c in ipairs(left) do
      local t = cluster.current_task(tasks, c.id)
      local st = t and t.Status and t.Status.State
      if st == "running" then
        emit(run, "named", c.service, { by = "health" })
      elseif st == "starting" or st == "assigned" or st == "accepted" or st == "preparing" or st == "ready" then
        still[#still + 1] = c
      else
        return nil, E.new("engine", "task_failed", ("the task of %s is %s before its name was given"):format(
          c.service, tostring(st)), { service = c.service, state = st })
      end
    end
    left = still
    if #left > 0 then
      if now() >= deadline then
        return nil, E.new("timeout", nil, ("Swarm did not report %s healthy within %gs: its name does not resolve "
          .. "on the overlay before"):format(left[1].service, run.health_timeout or 60),
          { phase = "names", service = left[1].service })
      end
      pause(delay)
      delay = math.min(delay * 1.5, 0.25)
    end
  end
  return true
end

return M
