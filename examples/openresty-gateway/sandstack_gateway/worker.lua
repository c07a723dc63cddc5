-- The gateway's blocking half: every function here runs inside ngx.run_worker_thread, in a
-- Lua VM of the thread pool, never in the nginx event loop.
--
-- What crosses the thread boundary is deep-copied by lua-nginx-module and must be plain data
-- (nil, booleans, numbers, strings, nested tables of those): arguments are the session key, the
-- stack options and records; results are `true, value` or `false, err` where err is a plain
-- {kind, reason, message} table. The first value the caller sees from run_worker_thread only
-- says whether the call itself ran, so success is reported in the second one.
--
-- A thread VM is reused for later tasks, so module-level state here would persist from one
-- request to the next and differ from VM to VM: this module keeps none.
local M = {}

-- An error object (or anything else raised) as a plain table that can cross the boundary.
local function plain_error(err)
  if type(err) ~= "table" then
    return { kind = "gateway", message = tostring(err) }
  end
  local out = {}
  for k, v in pairs(err) do
    local t = type(v)
    if type(k) == "string" and (t == "string" or t == "number" or t == "boolean") then
      out[k] = v
    end
  end
  out.kind = out.kind or "gateway"
  out.message = out.message or tostring(err)
  return out
end

-- Runs fn(...) and turns a raised error into `false, err` so that a bug in a provider reaches
-- the client as an error document instead of an nginx 500 with the trace only in the log.
local function guarded(fn, ...)
  local ok, a, b = pcall(fn, ...)
  if not ok then return false, plain_error(a) end
  if a == nil then return false, plain_error(b) end
  return true, a
end

-- health() -> true, {sandstack =, engine_api =}: loads the module in this VM and asks the
-- Engine for its version (the plumbing check: the C core's HTTP client in a thread VM).
function M.health()
  return guarded(function()
    local sandstack = require "sandstack"
    local engine, err = sandstack.engine()
    if not engine then return nil, err end
    local v, verr = engine:version()
    engine:close()
    if not v then return nil, verr end
    return { sandstack = sandstack.VERSION, engine_api = v.ApiVersion }
  end)
end

-- start(session_key, opts) -> true, record | false, err
function M.start(session_key, opts)
  return guarded(function()
    local stack, err = require("sandstack").docker.start(session_key, opts)
    if not stack then return nil, err end
    local record = stack:record()
    stack:close() -- the handle's Engine connection; the stack itself keeps running
    return record
  end)
end

-- reconnect(record) -> true, record: the same stack with its forwarder port re-read.
function M.reconnect(record)
  return guarded(function()
    local stack, err = require("sandstack").docker.reconnect(record)
    if not stack then return nil, err end
    local fresh = stack:record()
    stack:close()
    return fresh
  end)
end

-- destroy(record) -> true, true | false, err. A stack that cannot be reconnected (partly
-- removed already, say) is still removed: by its project label.
function M.destroy(record)
  return guarded(function()
    local docker = require("sandstack").docker
    local stack = docker.reconnect(record)
    local ok, err
    if stack then
      ok, err = stack:destroy()
      stack:close()
    else
      ok, err = docker.down(record.project)
    end
    if not ok then return nil, err end
    return true
  end)
end

return M
