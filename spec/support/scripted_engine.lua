-- Test support: a scripted stand-in for the engine client. A spec writes only
-- request(method, path, body, opts) -> status, body | nil, err (its script); with(e) gives it the
-- perform() that sandstack.stack.batch calls, answering the batch one request at a time in
-- order and settling each answer as the client's perform does (a status in the request's `ok`
-- table, or 2xx, is success; any other carries the client's engine error). Test-only: the
-- library's batch runner knows only the real client.
local engine_error = require("sandstack.engine").engine_error

local M = {}

-- A request in either form the client reads: positional {method, path, body, opts}, or the
-- plan's keyed {method =, path =, body_json =, query =, ...}.
local function fields(q)
  if q[1] ~= nil then return q[1], q[2], q[3], q[4] end
  return q.method, q.path, q.body_json, { query = q.query, timeout = q.timeout, max_bytes = q.max_bytes }
end

-- The ok table as a set ({[404] = true}) or a list ({404}).
local function accepts(ok, status)
  if ok == nil then return false end
  if ok[status] == true then return true end
  for _, s in ipairs(ok) do if s == status then return true end end
  return false
end

local function perform(eng, reqs)
  local out = {}
  for i, q in ipairs(reqs) do
    local method, path, body, opts = fields(q)
    local status, answer = eng:request(method, path, body, opts)
    if not status then
      out[i] = { ok = false, err = answer }
    else
      local ok = status < 300 or accepts(q.ok, status)
      out[i] = { ok = ok, status = status, body = answer,
        err = not ok and engine_error(status, method:upper(), path, answer) or nil }
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
