-- The context a start runs in, for both backends' executors: the core's monotonic clock and
-- sleep, the hook calls, and the cooperative waits of a warm pool's fill.
local core = require "sandstack.core"

local M = {}

-- The core's monotonic clock and sleep: no LuaSocket needed, no whole-second os.time deadlines,
-- and no `sleep` child process (one would inherit a gateway's descriptors).
local now, sleep = core.engine_clock, core.sleep
M.now, M.sleep = now, sleep

-- A start driven by a warm pool's fill runs in a coroutine that the pool resumes: its waits
-- (health, the forwarder's port, readiness) yield the seconds they would sleep instead, so
-- several stacks wait at once. Any other caller sleeps as before.
local cooperative = setmetatable({}, { __mode = "k" })
function M.cooperate(co) cooperative[co] = true end
local function cooperating()
  local co = coroutine.running()
  return co ~= nil and cooperative[co] == true
end
M.cooperating = cooperating
function M.pause(seconds)
  if cooperating() then coroutine.yield(seconds) else sleep(seconds) end
end

function M.emit(run, phase, service, extra)
  if not run.on_event then return end
  local ev = { phase = phase, service = service, project = run.plan.project,
    elapsed = now() - run.t0 } -- the clock is read only for a start that has a hook
  for k, v in pairs(extra or {}) do ev[k] = v end
  -- a failing callback must not leave half a stack behind: report it, carry on
  local ok, err = pcall(run.on_event, ev)
  if not ok and require("sandstack.error").interrupted(err) then error(err, 0) end -- Ctrl-C: the start stops
  if not ok then io.stderr:write("sandstack: on_event failed: ", tostring(err), "\n") end
end

return M
