-- Test support: a scripted stand-in for the engine client. A spec writes only
-- request(method, path, body, opts) -> status, body | nil, err (its script); with(e) gives it the
-- perform() that sandstack.docker.batch calls, answering the batch one request at a time in
-- order and settling each answer as the client's perform does (a status in the request's `ok`
-- table, or 2xx, is success; any other carries the client's engine error). Test-only: the
-- library's batch runner knows only the real client.
local engine_error = require("sandstack.engine").engine_error

local M = {}

local function perform(eng, reqs)
  local out = {}
  for i, q in ipairs(reqs) do
    local status, body = eng:request(q[1], q[2], q[3], q[4])
    if not status then
      out[i] = { ok = false, err = body }
    else
      local ok = status < 300 or (q.ok ~= nil and q.ok[status] == true)
      out[i] = { ok = ok, status = status, body = body,
        err = not ok and engine_error(status, q[1]:upper(), q[2], body) or nil }
    end
  end
  return out
end

-- e (a table with request) with perform added; returns e.
function M.with(e)
  e.perform = perform
  return e
end

return M
