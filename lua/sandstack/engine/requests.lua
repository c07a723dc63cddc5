-- Buffered requests of the engine client (internal to sandstack.engine): request, call, ping,
-- version, and the concurrent submit/poll/pending. The helpers (start, wait, sleep) are
-- shared with the exec and stream parts; none of them is a method of the client.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local O = require "sandstack.engine.options"
local X = require "sandstack.engine.errors"

local R = {}

local REQUEST_KEYS = E.described {
  { "timeout", type = "seconds", default = "the client's",
    refused = "not above 0" },
  { "query", type = "table", default = "none",
    refused = "values other than strings, numbers, booleans or tables (JSON-encoded)" },
  { "max_bytes", type = "bytes", default = "the client's",
    refused = "not above 0" },
  { "headers", type = "table, name to string", default = "none",
    refused = "a name or value with a line break" },
  { "raw", type = "boolean", default = "`false`",
    refused = "`true`: the body as received, never decoded" },
  { "content_type", type = "string", default = "`application/json` for a table body",
    refused = "not a string" },
}
local CALL_KEYS = E.described {
  { "timeout", type = "seconds", default = "the client's",
    refused = "not above 0" },
  { "query", type = "table", default = "none",
    refused = "as for `request`" },
  { "max_bytes", type = "bytes", default = "the client's",
    refused = "not above 0" },
  { "headers", type = "table", default = "none",
    refused = "as for `request`" },
  { "raw", type = "boolean", default = "`false`",
    refused = "—" },
  { "content_type", type = "string", default = "as for `request`",
    refused = "—" },
  { "ok", type = "set of statuses, `{ [304] = true }` or `{ 304 }`", default = "none",
    refused = "extra statuses counted as success" },
}

-- Using a closed client is a programming error, raised at the caller.
function R.check_open(eng)
  if eng._closed then E.raise("the engine client is closed") end
end

-- Starts a buffered request; returns the transport id or nil, err. opts went through
-- E.check_keys in the public method (its level 3 is that method's caller); the other argument
-- checks raise at `level` as seen from the caller of start.
-- The argument checks every buffered request shares; returns the target and the encoded body
-- (or nil, nil, nil, err for a body that cannot be encoded).
local function prepare(eng, method, path, body, opts, what, level)
  level = level + 1
  R.check_open(eng)
  E.want(method, "string", what, "argument 'method'")
  if method == nil then E.raise(what .. ": argument 'method' must be a string, got nil") end
  E.want(opts.ok, "table", what, "ok")
  E.want(opts.raw, "boolean", what, "raw")
  E.want(opts.content_type, "string", what, "content_type")
  for _, k in ipairs { "timeout", "max_bytes" } do
    local ok, err = O.check_number(opts[k], what, k)
    if not ok then return nil, nil, nil, err end
  end
  local target = O.target(eng.api_version, path, opts.query, what, level)
  local payload, ctype, err = O.encode_body(body, opts.content_type, what, level)
  return target, payload, ctype, err
end

function R.start(eng, method, path, body, opts, what, level)
  level = level + 1
  local target, payload, ctype, err = prepare(eng, method, path, body, opts, what, level)
  if err then return nil, err end
  local id
  id, err = eng._h:submit(method:upper(), target, payload, {
    content_type = ctype,
    headers = O.header_lines(opts.headers, what, level),
    timeout = opts.timeout or eng.timeout,
    max_bytes = opts.max_bytes or eng.max_bytes,
  })
  return id, err
end

-- Blocks until transfer id is finished (every transfer has its own deadline) and takes it.
function R.wait(eng, id)
  eng._h:run(id)
  local r = eng._h:take(id)
  if r then return r end
  eng._h:cancel(id)
  return { id = id, err = E.new("transport", "protocol", "the transfer could not be driven to its end") }
end

-- Sleeps while keeping submitted transfers moving.
function R.sleep(eng, seconds)
  eng._h:run(-1, seconds)
end

local function is_json(ctype)
  return ctype ~= nil and ctype:lower():find("json", 1, true) ~= nil
end

-- The body as request() returns it: decoded JSON when the answer says JSON and parses, else the
-- string as received (garbage is still an answer). request() is the raw call (its status is not
-- settled), so this is the one decoding in Lua.
local function decoded(r, raw)
  if raw or r.body == "" or not is_json(r.content_type) then return r.body end
  local v = core.json_decode(r.body)
  if v == nil then return r.body end
  return v
end

-- A submitted request's answer, settled in C as perform's are (h:take with the request as its
-- caller wrote it): {ok =, status =, body =, err =, id =}. Blocks until it is finished.
function R.settled(eng, id, method, path, opts)
  eng._h:run(id)
  local r = eng._h:take(id, { [id] = { method = method, path = path, opts = opts } })
  if r then return r end
  eng._h:cancel(id)
  return { id = id, ok = false, err = E.new("transport", "protocol", "the transfer could not be driven to its end") }
end

-- A finished buffered request the way call() answers it (exec and download build on this).
function R.result(eng, id, method, path, opts)
  local r = R.settled(eng, id, method, path, opts)
  if r.ok then return r.body end
  return nil, r.err
end

local M = {}
R.methods = M

-- A request without extra headers or a content type runs as a batch of one: one call into the C
-- core, which reads the options (and checks their keys), sends it and settles the answer
-- (csrc/lua/engine_settle.c). Anything else goes through submit and wait.
local function simple(opts) return type(opts) ~= "table" or (opts.headers == nil and opts.content_type == nil) end

-- level: where argument errors are raised, as error() counts it from perform_one.
local function perform_one(eng, method, path, body, opts, level)
  R.check_open(eng)
  local r = eng._h:perform({ { method, path, body, opts } }, { timeout = eng.timeout, max_bytes = eng.max_bytes,
    api_version = eng.api_version, what = "call", level = level })
  return r[1]
end

function M.request(eng, method, path, body, opts)
  opts = E.check_keys(opts, REQUEST_KEYS, "request")
  local id, err = R.start(eng, method, path, body, opts, "request", 2)
  if not id then return nil, err end
  local r = R.wait(eng, id)
  if r.err then return nil, X.with_path(r.err, method:upper(), path) end
  return r.status, (decoded(r, opts.raw)), r.headers
end

-- call() for the client's own paths (exec and its exit-code poll) as for the public method: a
-- table is checked once, in C, where the batch of one reads it (a table with headers, which
-- takes the submit path, is checked by the public method).
-- level: where argument errors are raised, as seen from R.call's caller.
function R.call(eng, method, path, body, opts, level)
  level = level + 1
  if simple(opts) then
    local r = perform_one(eng, method, path, body, opts, level + 1)
    if r.ok then return r.body end
    return nil, r.err
  end
  local id, err = R.start(eng, method, path, body, opts, "call", level)
  if not id then return nil, err end
  local v
  v, err = R.result(eng, id, method:upper(), path, opts)
  return v, err
end

function M.call(eng, method, path, body, opts)
  if not simple(opts) then opts = E.check_keys(opts, CALL_KEYS, "call") end
  local v, err = R.call(eng, method, path, body, opts, 2)
  return v, err
end

function M.ping(eng)
  R.check_open(eng)
  local method, path = ops.target("ping")
  local v, err = R.call(eng, method, path, nil, { raw = true }, 2)
  if v == nil then return nil, err end
  return true
end

function M.version(eng)
  R.check_open(eng)
  local method, path = ops.target("version")
  local v, err = R.call(eng, method, path, nil, {}, 2)
  return v, err
end

-- Concurrency: submit() starts a request and returns an id; poll() hands back finished ones.
-- Blocking calls made meanwhile drive the same transfers, so mixing them is safe.
function M.submit(eng, method, path, body, opts)
  opts = E.check_keys(opts, CALL_KEYS, "submit")
  local tid, err = R.start(eng, method, path, body, opts, "submit", 2)
  eng._next_id = eng._next_id + 1
  local id = eng._next_id
  eng._pending = eng._pending + 1
  if not tid then
    eng._failed[#eng._failed + 1] = { id = id, ok = false, err = err }
  else
    eng._subs[tid] = { id = id, method = method:upper(), path = path, opts = opts }
  end
  return id
end

function M.poll(eng, timeout)
  R.check_open(eng)
  E.want(timeout, "number", "poll", "argument 'timeout'", "a number of seconds")
  if timeout ~= nil and not (timeout >= 0) then return E.refuse("poll", "argument 'timeout'", "must be a number of seconds >= 0") end
  local out = {}
  for i, f in ipairs(eng._failed) do out[i] = f end
  eng._failed = {}
  local h = eng._h
  if #out == 0 and h:finished() == 0 then h:run(0, timeout or 0) else h:run(0, 0) end
  while true do
    local r = h:take(0, eng._subs) -- settled in C when it is one of ours
    if not r then break end
    local s = eng._subs[r.id]
    if s then -- results of blocking calls never wait here; anything else is stale
      eng._subs[r.id] = nil
      out[#out + 1] = { id = s.id, ok = r.ok, status = r.status, body = r.ok and r.body or nil, err = r.err }
    end
  end
  eng._pending = eng._pending - #out
  return out
end

function M.pending(eng)
  return eng._pending
end

-- perform(requests[, deadline[, wave, ...]]) -> results[, results of each wave]: a batch in one
-- call into the C core. Each request is {method, path, body, opts, ok = {[status] = true}}
-- (body: JSON text as sent, a table to encode, or nil; opts: query, timeout, max_bytes, raw,
-- their keys checked in C); all run together, each with its own deadline (opts.timeout, else
-- `deadline`, else the client's). Results come in request order, settled in C: {ok =, status =,
-- body =, err =}, body decoded unless raw; each list carries `at`, the monotonic clock when its
-- answers were in. A wave is a further list sent in the same call when every request of the
-- one before is ok (a step of several rounds: networks, containers, connects); the results
-- stop at the first list with a failure.
function M.perform(eng, reqs, deadline, ...)
  R.check_open(eng)
  if type(reqs) ~= "table" then E.raise("perform: argument 'requests' must be a list") end
  local ok, err = O.check_number(deadline, "perform", "argument 'deadline'")
  if not ok then return nil, err end
  for i = 1, select("#", ...) do
    local w = select(i, ...)
    if w ~= nil and type(w) ~= "table" then E.raise("perform: a wave must be a list") end
  end
  -- not a tail call: the C core raises a misuse at this function's caller (level 2)
  local r1, r2, r3, r4, r5, r6, r7, r8 = eng._h:perform(reqs, { timeout = deadline or eng.timeout,
    max_bytes = eng.max_bytes, api_version = eng.api_version }, ...)
  return r1, r2, r3, r4, r5, r6, r7, r8
end

return R
