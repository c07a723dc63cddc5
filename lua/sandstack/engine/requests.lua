-- Buffered requests of the engine client (internal to sandstack.engine): request, call, ping,
-- version, and the concurrent submit/poll/pending. The helpers (start, wait, sleep) are
-- shared with the exec and stream parts; none of them is a method of the client.
local core = require "sandstack.core"
local E = require "sandstack.error"
local O = require "sandstack.engine.options"
local X = require "sandstack.engine.errors"

local R = {}

local REQUEST_KEYS = { timeout = true, query = true, max_bytes = true, headers = true, raw = true,
  content_type = true }
local CALL_KEYS = { timeout = true, query = true, max_bytes = true, headers = true, raw = true,
  content_type = true, ok = true }

-- Using a closed client is a programming error; level as error()'s, seen from the caller.
function R.check_open(eng, level)
  if eng._closed then error("the engine client is closed", (level or 2) + 1) end
end

-- Starts a buffered request; returns the transport id or nil, err. opts went through
-- E.check_keys in the public method (its level 3 is that method's caller); the other argument
-- checks raise at `level` as seen from the caller of start.
-- The argument checks every buffered request shares; returns the target and the encoded body
-- (or nil, nil, nil, err for a body that cannot be encoded).
local function prepare(eng, method, path, body, opts, what, level)
  level = level + 1
  R.check_open(eng, level)
  if type(method) ~= "string" then error(what .. ": method must be a string", level) end
  O.check_number(opts.timeout, what, "timeout", level)
  O.check_number(opts.max_bytes, what, "max_bytes", level)
  if opts.ok ~= nil and type(opts.ok) ~= "table" then error(what .. ": option 'ok' must be a table", level) end
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
-- string as received (garbage is still an answer). Second value: it said JSON and did not parse.
local function decoded(r, raw)
  if type(r.body) ~= "string" then return r.body, false end -- decoded by the C core (perform)
  if r.bad_json then return r.body, true end
  if raw or r.body == "" or not is_json(r.content_type) then return r.body, false end
  local v = core.json_decode(r.body)
  if v == nil then return r.body, true end
  return v, false
end

-- opts.ok: {[304] = true}, or the list form {304, 404}.
local function accepts(ok, st)
  if type(ok) ~= "table" then return false end
  if ok[st] then return true end
  for _, v in ipairs(ok) do
    if v == st then return true end
  end
  return false
end

-- call() semantics over a finished result: the decoded body (true when empty) for a 2xx or an
-- accepted status, else an error object.
local function call_result(r, method, path, opts)
  if r.err then return nil, X.with_path(r.err, method, path) end
  local st = r.status or 0
  local accepted = (st >= 200 and st < 300) or accepts(opts.ok, st)
  if not accepted then return nil, X.engine_error(st, method, path, r.message) end
  if r.body == "" then return true end
  local v, bad = decoded(r, opts.raw)
  if bad then return nil, X.bad_json(method, path, method .. " " .. path .. ": the answer is not valid JSON", st) end
  return v
end

-- A finished buffered request the way call() answers it (exec and download build on this).
function R.result(eng, id, method, path, opts)
  return call_result(R.wait(eng, id), method, path, opts or {})
end

local M = {}
R.methods = M

-- A request without extra headers runs as a batch of one (one call into the C core, the answer
-- decoded there); with headers or a content type, through submit and wait.
local function simple(opts) return opts.headers == nil and opts.content_type == nil end

local function perform_one(eng, method, path, body, opts, what, level)
  local target, payload, _, err = prepare(eng, method, path, body, opts, what, level + 1)
  if err then return nil, err end
  return eng._h:perform({ { method:upper(), target, payload, raw = opts.raw } },
    { timeout = opts.timeout or eng.timeout, max_bytes = opts.max_bytes or eng.max_bytes })[1]
end

function M.request(eng, method, path, body, opts)
  opts = E.check_keys(opts, REQUEST_KEYS, "request")
  local r, err
  if simple(opts) then
    r, err = perform_one(eng, method, path, body, opts, "request", 2)
    if not r then return nil, err end
  else
    local id
    id, err = R.start(eng, method, path, body, opts, "request", 2)
    if not id then return nil, err end
    r = R.wait(eng, id)
  end
  if r.err then return nil, X.with_path(r.err, method:upper(), path) end
  return r.status, (decoded(r, opts.raw)), r.headers
end

-- call() without the options check, for the client's own paths (exec and its exit-code poll)
-- whose option tables are made here: a table is checked once, where a caller hands it in.
-- level: where argument errors are raised, as seen from R.call's caller.
function R.call(eng, method, path, body, opts, level)
  level = level + 1
  if simple(opts) then
    local r, err = perform_one(eng, method, path, body, opts, "call", level)
    if not r then return nil, err end
    return call_result(r, method:upper(), path, opts)
  end
  local id, err = R.start(eng, method, path, body, opts, "call", level)
  if not id then return nil, err end
  local v
  v, err = R.result(eng, id, method:upper(), path, opts)
  return v, err
end

function M.call(eng, method, path, body, opts)
  opts = E.check_keys(opts, CALL_KEYS, "call")
  local v, err = R.call(eng, method, path, body, opts, 2)
  return v, err
end

function M.ping(eng)
  R.check_open(eng, 2)
  local v, err = R.call(eng, "GET", "/_ping", nil, { raw = true }, 2)
  if v == nil then return nil, err end
  return true
end

function M.version(eng)
  R.check_open(eng, 2)
  local v, err = R.call(eng, "GET", "/version", nil, {}, 2)
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
  R.check_open(eng, 2)
  if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout < 0) then
    error("poll: timeout must be a number of seconds", 2)
  end
  local out = {}
  for i, f in ipairs(eng._failed) do out[i] = f end
  eng._failed = {}
  local h = eng._h
  if #out == 0 and h:finished() == 0 then h:run(0, timeout or 0) else h:run(0, 0) end
  while true do
    local r = h:take(0)
    if not r then break end
    local s = eng._subs[r.id]
    if s then -- results of blocking calls never wait here; anything else is stale
      eng._subs[r.id] = nil
      local v, err = call_result(r, s.method, s.path, s.opts)
      out[#out + 1] = { id = s.id, ok = v ~= nil, status = r.status, body = v, err = err }
    end
  end
  eng._pending = eng._pending - #out
  return out
end

function M.pending(eng)
  return eng._pending
end

-- perform(requests[, deadline]) -> results: a batch in one call into the C core. Each request is
-- {method, path, body, opts, ok = {[status] = true}} (body: JSON text as sent, a table to
-- encode, or nil; opts: query, timeout, max_bytes, raw); all run together, each with its own
-- deadline (opts.timeout, else `deadline`, else the client's). Results come in request order
-- as poll() gives them: {ok =, status =, body =, err =}, body decoded unless raw.
local PERFORM_KEYS = { timeout = true, query = true, max_bytes = true, raw = true }
function M.perform(eng, reqs, deadline)
  R.check_open(eng, 2)
  if type(reqs) ~= "table" then error("perform: requests must be a list", 2) end
  O.check_number(deadline, "perform", "deadline", 2)
  local entries = {}
  for i, q in ipairs(reqs) do
    if type(q) ~= "table" or type(q[1]) ~= "string" then error("perform: request " .. i .. " needs a method", 2) end
    local opts = E.check_keys(q[4], PERFORM_KEYS, "perform")
    local body, _, err = O.encode_body(q[3], nil, "perform", 2)
    if err then return nil, err end
    entries[i] = { q[1]:upper(), O.target(eng.api_version, q[2], opts.query, "perform", 2), body,
      timeout = opts.timeout, max_bytes = opts.max_bytes, raw = opts.raw }
  end
  local raw = eng._h:perform(entries, { timeout = deadline or eng.timeout, max_bytes = eng.max_bytes })
  local out = {}
  for i, r in ipairs(raw) do
    local q = reqs[i]
    local opts = { ok = q.ok, raw = q[4] and q[4].raw }
    local v, err = call_result(r, entries[i][1], q[2], opts)
    out[i] = { ok = v ~= nil, status = r.status, body = v ~= nil and v or r.body, err = err }
  end
  return out
end

return R
