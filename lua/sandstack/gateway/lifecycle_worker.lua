-- sandstack.gateway.lifecycle_worker: the blocking half of the gateway's session-over-time calls
-- (gateway/lifecycle.lua), run in the thread pool like gateway/worker.lua, with its contract:
-- plain data in, `true, value` or `false, plain error` out, no state kept.
local guarded = require("sandstack.gateway.worker_result").guarded

local M = {}

local function docker() return require("sandstack").docker end
-- the backend of a record: a swarm session's says so (kind), a docker stack's is docker's
local function backend(record)
  return type(record) == "table" and record.kind == "sandstack.swarm" and require("sandstack").swarm or docker()
end

-- call(record, verb, arg) -> true, {record = fresh record, snapshot = {id =, name =} | nil,
-- expires = {...} | nil}. verb: pause, resume, hibernate, wake, snapshot, set_timeout (and on a
-- swarm fork, which answers unsupported).
function M.call(record, verb, arg)
  return guarded(function()
    local stack, err = backend(record).reconnect(record)
    if not stack then return nil, err end
    local out = {}
    local ok
    if verb == "hibernate" then ok, err = stack:hibernate { timeout = arg }
    elseif verb == "snapshot" then
      ok, err = stack:snapshot { name = arg }
      if ok then out.snapshot = { id = ok.id, name = ok.name, created = ok.created } end
    elseif verb == "set_timeout" then
      ok, err = stack:set_timeout(arg)
      if ok then out.expires = stack:expires() end
    else
      ok, err = stack[verb](stack)
    end
    if not ok then stack:close(); return nil, err end
    out.record = stack:record()
    stack:close()
    return out
  end)
end

-- reap(prefix, docker_host, backend, timeout) -> true, { {project =, reason =, action =}, ... }:
-- the expiry pass over this gateway's stacks, by the backend's reap{expired = true} (backend
-- "swarm": sandstack.swarm's, docker_host the manager's; else sandstack.docker's).
function M.reap(prefix, docker_host, backend, timeout)
  return guarded(function()
    local b = backend == "swarm" and require("sandstack").swarm or docker()
    return b.reap { expired = true, prefix = prefix, docker_host = docker_host, timeout = timeout }
  end)
end

return M
