-- The services' tasks during a start of sandstack.swarm (internal to swarm/start.lua): read from
-- the manager, each service's current one found, waited for until running (and ready), and a
-- task's end told as a typed error.
local E = require "sandstack.error"
local run_ctx = require "sandstack.stack.run"
local readiness = require "sandstack.stack.readiness"
local cluster = require "sandstack.swarm.cluster"

local M = {}
local now, pause, emit = run_ctx.now, run_ctx.pause, run_ctx.emit

-- A task's end, as a typed error.
function M.task_error(c, t)
  local st = t.Status or {}
  local msg = st.Err or st.Message or st.State
  local cs = st.ContainerStatus or {}
  if tostring(msg):find("No such image", 1, true) then
    return E.new("engine", "image_missing", ("image %s is not on node %s and could not be pulled: load it on "
      .. "every node (docker save | docker load) or make its registry reachable"):format(
        tostring(c.image), tostring(t.NodeID)),
      { image = c.image, service = c.service, node_id = t.NodeID })
  end
  if (st.State == "failed" or st.State == "complete") and cs.ExitCode then
    return E.new("exited", nil, ("service %s exited with code %s (%s)"):format(c.service, tostring(cs.ExitCode),
      tostring(msg)), { service = c.service, exit_code = cs.ExitCode })
  end
  return E.new("engine", "task_failed", ("the task of %s is %s: %s"):format(c.service, tostring(st.State), tostring(msg)),
    { service = c.service, state = st.State })
end

M.ENDED = { failed = true, rejected = true, complete = true, shutdown = true, orphaned = true, remove = true }

local function newest_first(a, b) return tostring(a.CreatedAt) > tostring(b.CreatedAt) end

-- The answers to the services' own task reads (each service's `tasks` request, from position
-- `from` of res): {service -> its current task or nil}, and when they were in; or nil, err.
function M.settle(wave, res, from)
  local out = {}
  for i, c in ipairs(wave) do
    local r = res[(from or 0) + i]
    if not r.ok then return nil, r.err end
    if type(r.body) ~= "table" then return E.fail("engine", "bad_answer", "the manager's task list is malformed") end
    table.sort(r.body, newest_first)
    out[c.service] = cluster.current_task(r.body, c.id)
  end
  return out, res.at or now()
end

-- The tasks of the services of wave, in one batch.
function M.read(run, wave)
  local reqs = {}
  for i, c in ipairs(wave) do reqs[i] = c.tasks end
  return M.settle(wave, run.mgr:perform(reqs, 60))
end

-- Waits until each of the services `wave` is started: its task running (Swarm reports a task with
-- a healthcheck running once healthy), or its ready test passing by exec on the node; then its
-- ready log and port (stack/readiness.lua, on the node; the port from the forwarder, so not
-- before it runs: without_waits skips them). tasks, at: a read already made (with the creates),
-- looked at before any other.
function M.wait_wave(run, wave, tasks, at, without_waits)
  local placed_at, started = {}, {}
  local left = #wave
  local t0 = at
  local delay = 0.05
  while left > 0 do
    if not tasks then
      local todo = {}
      for _, c in ipairs(wave) do if not started[c.service] then todo[#todo + 1] = c end end
      local got, x = M.read(run, todo)
      if not got then return nil, x end
      tasks, at = got, x
    end
    t0 = t0 or at
    for _, c in ipairs(wave) do
      if not started[c.service] then
        local t = tasks[c.service]
        local st = t and t.Status or {}
        if t and t.NodeID and t.NodeID ~= "" and not placed_at[c.service] then
          placed_at[c.service] = at
          c.node_id = t.NodeID
          emit(run, "placed", c.service, { node_id = t.NodeID })
        end
        if t and M.ENDED[st.State] then return nil, M.task_error(c, t) end
        if not placed_at[c.service] then
          if at - t0 > run.placement_timeout then
            return nil, E.new("engine", "no_suitable_node", ("Swarm placed no task of %s within %gs: %s"):format(
              c.service, run.placement_timeout, tostring(st.Err or st.Message or "pending")),
              { service = c.service, detail = st.Err })
          end
        else
          local cid = st.ContainerStatus and st.ContainerStatus.ContainerID
          local done = st.State == "running"
          if not done and c.check and cid and cid ~= "" and st.State == "starting" and run.node_eng then
            local res = run.node_eng:exec(cid, c.check, { timeout = c.check_timeout or 5, max_bytes = 65536 })
            done = res ~= nil and res.exit_code == 0
            if done then emit(run, "healthy", c.service, { by = "probe" }) end
          end
          local waits = done and not without_waits and (c.ready_log or c.ready_port)
          if waits then
            c.got = c.got or {}
            local met, werr = readiness.waits_met(run.node_eng, c, cid, run.forwarder_running, c.got)
            if met == nil then return nil, werr end
            done = met
            if met then emit(run, "healthy", c.service, { by = c.ready_port and "port" or "log" }) end
          end
          if done then
            started[c.service] = true
            left = left - 1
            emit(run, "task_running", c.service, { node_id = t.NodeID, container = cid })
          elseif waits and at - placed_at[c.service] > run.health_timeout then
            return nil, readiness.waits_timeout(c, c.got, run.health_timeout)
          elseif st.State == "starting" and c.healthcheck and at - placed_at[c.service] > run.health_timeout then
            return nil, E.new("timeout", nil, ("service %s was not healthy within %gs"):format(c.service, run.health_timeout),
              { phase = "health", service = c.service })
          elseif at - placed_at[c.service] > run.task_timeout then
            return nil, E.new("timeout", nil, ("the task of %s did not start within %gs (state %s)"):format(c.service,
              run.task_timeout, tostring(st.State)), { phase = "task", service = c.service, state = st.State })
          end
        end
      end
    end
    tasks = nil
    if left > 0 then pause(delay); delay = math.min(delay * 1.5, 0.25) end
  end
  return true
end

-- Every service's task still where it should be (for the readiness wait).
function M.alive(run)
  local tasks, err = M.read(run, run.shape.services)
  if not tasks then return nil, err end
  for _, c in ipairs(run.shape.services) do
    local t = tasks[c.service]
    if not t or M.ENDED[(t.Status or {}).State] then
      return nil, t and M.task_error(c, t) or E.new("engine", "task_failed", "service " .. c.service .. " has no task")
    end
  end
  return true
end

return M
