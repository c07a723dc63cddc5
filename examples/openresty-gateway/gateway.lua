-- The gateway's request handlers: they run in the nginx event loop, so they never block.
-- Every Engine call goes to a thread pool through ngx.run_worker_thread (the functions are in
-- sandstack_gateway/worker.lua); this file only validates requests, keeps session records in
-- a lua_shared_dict and tells nginx's proxy where a session's stack listens.
--
-- Dict entries (shared by all nginx workers), all JSON:
--   <key>        {"state":"starting"} | {"state":"ready","record":{...}} | {"state":"stopping"}
--   port:<port>  the session key whose forwarder was last seen on that host port
local core = require "sandstack.core" -- JSON only: the C core's encoder/decoder never blocks

local M = {}

local WORKER = "sandstack_gateway.worker"
local KEY_PATTERN = "^[a-z0-9][a-z0-9_-]*$"
local KEY_MAX = 48
-- "starting"/"stopping" marks expire, so that a worker that dies mid-call does not hold the key
-- forever; longer than any start (ready_timeout plus the Engine calls) should take.
local MARK_TTL = 900

-- Set once by init() in the master process and inherited by every worker (read-only after).
local conf

-- init(path): reads the gateway's JSON configuration:
--   { "thread_pool": "sandstack", "dict": "sandstack_sessions",
--     "project_prefix": "gw-", "stack": { ...sandstack.docker.start options... } }
function M.init(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("a")
  f:close()
  local c = assert(core.json_decode(text))
  assert(type(c.stack) == "table", "gateway config: stack options required")
  c.thread_pool = c.thread_pool or "sandstack"
  c.dict = c.dict or "sandstack_sessions"
  c.project_prefix = c.project_prefix or "sandstack-"
  conf = c
end

local function dict()
  return ngx.shared[conf.dict]
end

local function reply(status, doc)
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  ngx.say(core.json_encode(doc))
  return ngx.exit(status)
end

local function fail(status, kind, message, extra)
  local e = { kind = kind, message = message }
  for k, v in pairs(extra or {}) do e[k] = v end
  return reply(status, { error = e })
end

-- run(fn, ...) -> true, value | false, err: one call of a worker function in the thread pool.
local function run(fn, ...)
  local ok, res, val = ngx.run_worker_thread(conf.thread_pool, WORKER, fn, ...)
  if not ok then
    -- The call did not run. "no available Lua vm": every VM of this worker's pool
    -- (lua_worker_thread_vm_pool_size) is taken by a running or queued call; retryable.
    if res == "no available Lua vm" then return false, { kind = "busy", message = res } end
    return false, { kind = "gateway", message = tostring(res) } -- unknown pool, a crash, ...
  end
  return res, val
end

-- The HTTP status for a failed worker call.
local function failure_status(err)
  if err.kind == "busy" then
    ngx.header["Retry-After"] = "1"
    return 503
  end
  if err.kind == "timeout" then return 504 end
  return 502
end

local function load_entry(key)
  local text = dict():get(key)
  if not text then return nil end
  return core.json_decode(text)
end

-- Stores a ready record and claims its port in the port index. safe_set never evicts other
-- sessions' entries when the dict is full (plain set would, silently losing a stack).
local function store_ready(key, record)
  if type(record) ~= "table" or type(record.port) ~= "number" then
    return nil, "the stack has no forwarder port"
  end
  local d = dict()
  local ok, err = d:safe_set(key, core.json_encode({ state = "ready", record = record }))
  if not ok then return nil, err end
  d:safe_set("port:" .. record.port, key)
  return true
end

local function valid_key(key)
  return type(key) == "string" and #key <= KEY_MAX and key:match(KEY_PATTERN) ~= nil
end

-- The session key of POST /sessions: ?key=, a JSON body {"key": ...} or a form body key=.
local function requested_key()
  local key = ngx.var.arg_key
  if key then return key end
  ngx.req.read_body()
  local body = ngx.req.get_body_data()
  if not body or body == "" then return nil end
  local doc = core.json_decode(body)
  if type(doc) == "table" then return doc.key end
  local args = ngx.decode_args(body)
  return args and args.key
end

-- Options for one session: the configured ones plus its own project name. The sandbox also
-- learns its session key (env SANDSTACK_SESSION) so operators can tell stacks apart.
local function stack_options(key)
  local opts = core.json_decode(core.json_encode(conf.stack)) -- a private deep copy
  opts.project_name = conf.project_prefix .. key
  local sandbox = opts.sandbox_service or "sandbox"
  for _, svc in ipairs(opts.services or {}) do
    if svc.name == sandbox then
      svc.env = svc.env or {}
      svc.env.SANDSTACK_SESSION = key
    end
  end
  return opts
end

-- What clients see of a session. The record itself stays in the dict: it holds the stack's
-- whole configuration (service env included), which is the operator's, not the client's.
local function public_view(key, state, record)
  record = record or {}
  return { session = key, state = state, project = record.project, port = record.port }
end

-- POST /sessions: starts a stack in the thread pool; the event loop keeps serving meanwhile.
function M.create()
  if ngx.req.get_method() ~= "POST" then
    ngx.header["Allow"] = "POST"
    return fail(405, "gateway", "use POST /sessions")
  end
  local key = requested_key()
  if not valid_key(key) then
    return fail(400, "invalid", "session key must match [a-z0-9][a-z0-9_-]* (at most 48)")
  end
  -- add() is atomic across workers: one of two concurrent POSTs for a key wins.
  local ok, err = dict():safe_add(key, core.json_encode({ state = "starting" }), MARK_TTL)
  if not ok then
    if err == "exists" then return fail(409, "conflict", "session exists", { session = key }) end
    return fail(503, "gateway", "session table: " .. tostring(err))
  end
  local started, res = run("start", key, stack_options(key))
  if not started then
    dict():delete(key)
    return fail(failure_status(res), res.kind or "gateway", res.message or "start failed",
      { reason = res.reason })
  end
  local stored, serr = store_ready(key, res)
  if not stored then
    run("destroy", res) -- nowhere to keep it: do not leak the stack
    dict():delete(key)
    return fail(503, "gateway", "cannot keep the session: " .. tostring(serr))
  end
  return reply(201, public_view(key, "ready", res))
end

-- GET /sessions/<key>: the stored record. DELETE /sessions/<key>: destroys the stack.
function M.session()
  local key = ngx.var.sandstack_key
  local method = ngx.req.get_method()
  local entry = load_entry(key)
  if not entry then return fail(404, "not_found", "no such session", { session = key }) end
  if method == "GET" then
    return reply(200, public_view(key, entry.state, entry.record))
  elseif method ~= "DELETE" then
    ngx.header["Allow"] = "GET, DELETE"
    return fail(405, "gateway", "use GET or DELETE")
  end
  if entry.state ~= "ready" then
    return fail(409, "conflict", "session is " .. tostring(entry.state), { session = key })
  end
  -- "stopping" keeps a new POST for the key out until the stack is gone.
  local stopping = core.json_encode({ state = "stopping", record = entry.record })
  local marked, merr = dict():safe_set(key, stopping, MARK_TTL)
  if not marked then return fail(503, "gateway", "session table: " .. tostring(merr)) end
  local ok, err = run("destroy", entry.record)
  if not ok then
    store_ready(key, entry.record)
    return fail(failure_status(err), err.kind or "gateway", err.message or "destroy failed",
      { reason = err.reason })
  end
  dict():delete(key)
  if dict():get("port:" .. entry.record.port) == key then
    dict():delete("port:" .. entry.record.port)
  end
  return reply(200, { session = key, destroyed = true })
end

-- The upstream URI: the normalised path after /sessions/<key>, re-escaped segment by segment
-- (so an encoded "?" or "%" in the client's path stays data), plus the query string.
local function upstream_uri()
  local path = ngx.var.sandstack_path
  local parts = {}
  for seg in (path .. "/"):gmatch("([^/]*)/") do
    parts[#parts + 1] = ngx.escape_uri(seg)
  end
  local uri = table.concat(parts, "/")
  local args = ngx.var.args
  if args and args ~= "" then uri = uri .. "?" .. args end
  return uri
end

-- Re-reads the forwarder's port (after a restart the stack listens elsewhere) and stores it,
-- unless the session was deleted meanwhile.
local function refresh(key, record)
  local ok, res = run("reconnect", record)
  if not ok then return nil, res end
  if type(res.port) ~= "number" then -- a stopped stack has no forwarder port
    return nil, { kind = "busy", message = "the session's stack is not running" }
  end
  local now = load_entry(key)
  if not now or now.state ~= "ready" or now.record.project ~= record.project then
    return nil, { kind = "gateway", message = "session went away" }
  end
  store_ready(key, res)
  return res
end

local function route_to(key, force_refresh)
  local entry = load_entry(key)
  if not entry then return fail(404, "not_found", "no such session", { session = key }) end
  if entry.state ~= "ready" then
    ngx.header["Retry-After"] = "1"
    return fail(503, "unavailable", "session is " .. tostring(entry.state), { session = key })
  end
  local record = entry.record
  -- A port is only ours while the port index says so: if another session's stack has since
  -- been seen on it, this record is stale and must be re-read before any byte goes there.
  if force_refresh or dict():get("port:" .. record.port) ~= key then
    local fresh, err = refresh(key, record)
    if not fresh then
      return fail(failure_status(err), err.kind or "gateway", err.message or "reconnect failed",
        { session = key })
    end
    record = fresh
  end
  ngx.var.sandstack_port = tostring(record.port)
  ngx.var.sandstack_uri = upstream_uri()
end

-- access_by_lua of /sessions/<key>/...: sets $sandstack_port and $sandstack_uri for proxy_pass.
function M.route()
  return route_to(ngx.var.sandstack_key, false)
end

-- access_by_lua of the named location nginx jumps to when the first connection failed (502):
-- re-reads the port once, then nginx proxies again (a second failure is final).
function M.reroute()
  return route_to(ngx.var.sandstack_key, true)
end

-- GET /health: sandstack's version and the Engine's API version, both as seen from a
-- thread-pool VM (the module loads there and reaches the Engine).
function M.health()
  local ok, res = run("health")
  if not ok then
    return fail(failure_status(res), res.kind or "gateway", res.message or "health check failed")
  end
  return reply(200, res)
end

return M
