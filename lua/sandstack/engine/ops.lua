-- Named Engine operations: the C core makes each request (core.session_requests over
-- csrc/stack/session_requests.c, where every Engine path is written); a Lua file names the
-- operation and the object, never a path.
local core = require "sandstack.core"

local M = {}

-- The one request of action on name (nil for an action that names no object), as C makes it:
-- {method =, path =, query? =, ok? =, timeout? =, body_json? =}, the keyed form eng:perform sends.
function M.request(action, name, args)
  return core.session_requests(action, name and { name } or nil, args)[1]
end

-- The method and path of action on name, for a call site that gives its own query, statuses
-- and body (eng:call, eng:request, eng:submit, a batch entry) or a helper that takes a path (a
-- demux, an attach, a stream).
function M.target(action, name, args)
  local r = M.request(action, name, args)
  return r.method, r.path
end

-- Sends the operation as C made it through eng:call (so anything with eng:call's contract
-- serves: a process's io, a test's stand-in): the body, or nil, err. A body C encoded from
-- args.body goes as that table; one C made itself (a volume's, a commit's) as C wrote it.
function M.call(eng, action, name, args)
  local r = M.request(action, name, args)
  local body = r.body_json and (args.body or core.json_decode(r.body_json)) or nil
  return eng:call(r.method, r.path, body, { query = r.query, ok = r.ok, timeout = r.timeout })
end

-- Sends the operation with C's method, path, query and statuses, and the caller's own body (a
-- tar, or a table) and its call options (timeout, content_type): the body, or nil, err.
function M.send(eng, action, name, args, body, opts)
  local r = M.request(action, name, args)
  local o = { query = r.query, ok = r.ok, timeout = r.timeout }
  for k, v in pairs(opts or {}) do o[k] = v end
  return eng:call(r.method, r.path, body, o)
end

return M
