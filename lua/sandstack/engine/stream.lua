-- The streaming transfers of the engine client (internal to sandstack.engine): download (a body
-- written to a file by the C core), upload (a body read from a file by the C core) and events
-- (a line stream on its own connection).
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local O = require "sandstack.engine.options"
local R = require "sandstack.engine.requests"
local X = require "sandstack.engine.errors"

local DOWNLOAD_KEYS = E.described {
  { "max_bytes", type = "bytes", default = "1 GiB",
    refused = "not above 0" },
  { "timeout", type = "seconds", default = "the client's",
    refused = "not above 0" },
  { "query", type = "table", default = "none",
    refused = "as for `request`" },
  { "headers", type = "table", default = "none",
    refused = "as for `request`" },
}
local EVENTS_KEYS = E.described {
  { "filters", type = "table", default = "none",
    refused = "not a table (sent JSON-encoded)" },
  { "since", type = "unix seconds or string", default = "now",
    refused = "—" },
  { "until", type = "unix seconds or string", default = "none",
    refused = "—" },
  { "max_bytes", type = "bytes", default = "1 MiB",
    refused = "not above 0: event bytes held unread" },
  { "timeout", type = "seconds", default = "the client's",
    refused = "not above 0: the wait for the answer's headers" },
}
local EVENTS = ops.request("events").path

local now = core.engine_clock

local M = {}

-- The positive numbers among opts' keys: true, or nil, err (O.check_number).
local function numbers(opts, what, a, b)
  local ok, err = O.check_number(opts[a], what, a)
  if ok and b then ok, err = O.check_number(opts[b], what, b) end
  return ok, err
end

-- download: a GET whose 2xx body streams to a file (mode 0600), bounded by max_bytes. On any
-- failure the partial file is removed.
function M.download(eng, path, filename, opts)
  R.check_open(eng)
  if type(filename) ~= "string" or filename == "" then E.raise("download: argument 'filename' must be a path") end
  opts = E.check_keys(opts, DOWNLOAD_KEYS, "download")
  local ok, nerr = numbers(opts, "download", "timeout", "max_bytes")
  if not ok then return nil, nerr end
  local target = O.target(eng.api_version, path, opts.query, "download", 2)
  local tid, err = eng._h:submit("GET", target, nil, {
    headers = O.header_lines(opts.headers, "download", 2), timeout = opts.timeout or eng.timeout,
    mode = "file", file = filename, max_bytes = opts.max_bytes or O.DEFAULTS.DEFAULT_DOWNLOAD_MAX_BYTES,
  })
  if not tid then return nil, err end
  local r = R.wait(eng, tid)
  if r.err or r.status < 200 or r.status >= 300 then
    os.remove(filename)
    if r.err then return nil, X.with_path(r.err, "GET", path) end
    return nil, X.engine_error(r.status, "GET", path, r.message)
  end
  return true, r.file_bytes
end

local STREAM_KEYS = { max_bytes = true, timeout = true, query = true }

local Stream = {}
local stream_mt = { __index = Stream, __name = "sandstack.engine.stream" }

-- stream: a GET whose 2xx body is read as it arrives by a reader of the C core's
-- (core.archive_place(s.h, s.id, ...)), through a window of a megabyte: nothing is written
-- anywhere but where that reader puts it. max_bytes bounds the whole body. Returns the stream
-- once the answer's status came and is a 2xx one, else nil, err (the engine's error).
function M.stream(eng, path, opts)
  R.check_open(eng)
  opts = E.check_keys(opts, STREAM_KEYS, "stream")
  local ok, nerr = numbers(opts, "stream", "timeout", "max_bytes")
  if not ok then return nil, nerr end
  local target = O.target(eng.api_version, path, opts.query, "stream", 2)
  local timeout = opts.timeout or eng.timeout
  local tid, err = eng._h:submit("GET", target, nil, { timeout = timeout, mode = "stream",
    max_bytes = opts.max_bytes or O.DEFAULTS.DEFAULT_DOWNLOAD_MAX_BYTES })
  if not tid then return nil, err end
  eng._h:await_headers(tid, timeout)
  local _, status = eng._h:state(tid)
  if status and status >= 200 and status < 300 then
    return setmetatable({ h = eng._h, id = tid, path = path }, stream_mt)
  end
  local r = R.wait(eng, tid)
  if r.err then return nil, X.with_path(r.err, "GET", path) end
  return nil, X.engine_error(r.status, "GET", path, r.message)
end

-- Ends the transfer (a reader may stop before the body's end) and returns the error it had,
-- if it ended with one: a timeout, the budget, a dropped connection. Idempotent.
function Stream:close()
  if self.closed then return nil end
  self.closed = true
  if self.h:state(self.id) == "done" then
    local r = self.h:take(self.id)
    if r and r.err then return X.with_path(r.err, "GET", self.path) end
    return nil
  end
  self.h:cancel(self.id)
  return nil
end

local UPLOAD_KEYS = { query = true, timeout = true, length = true, zeros = true, content_type = true, data = true,
  tree = true, top = true }

-- upload: a PUT whose body is `head`, then `length` bytes of the host file `filename` (or the
-- string opts.data, with filename nil), then `zeros` zero bytes, streamed from the file or sent
-- from the string in place (never copied whole). Or, with opts.tree (a host directory) and
-- opts.top (a plain name) and head "", a tar of that directory made as it is sent, its members
-- named top/... (links sent as links, never followed). -> true | nil, err
function M.upload(eng, path, head, filename, opts)
  R.check_open(eng)
  opts = E.check_keys(opts, UPLOAD_KEYS, "upload")
  local data = opts.data -- kept alive here until the transfer is done
  if data ~= nil and (type(data) ~= "string" or filename ~= nil) then
    E.raise("upload: give a filename or opts.data (a string), not both")
  end
  if opts.tree ~= nil and (type(opts.tree) ~= "string" or type(opts.top) ~= "string" or filename or data or head ~= "") then
    E.raise("upload: opts.tree needs opts.top, an empty head and no file or data")
  end
  if data == nil and opts.tree == nil and (type(filename) ~= "string" or filename == "") then
    E.raise("upload: argument 'filename' must be a path")
  end
  if type(head) ~= "string" then E.raise("upload: argument 'head' must be a string") end
  local ok, nerr = numbers(opts, "upload", "timeout")
  if not ok then return nil, nerr end
  local target = O.target(eng.api_version, path, opts.query, "upload", 2)
  local tid, err = eng._h:submit("PUT", target, head, {
    timeout = opts.timeout or eng.timeout, content_type = opts.content_type, max_bytes = eng.max_bytes,
    upload_file = filename, upload_data = data, upload_len = data and #data or opts.length or 0,
    upload_zeros = opts.zeros or 0, upload_tree = opts.tree, upload_top = opts.top,
  })
  if not tid then return nil, err end
  local r = R.wait(eng, tid)
  if data and #data < 0 then return nil end -- data stays referenced until here
  if r.err then return nil, X.with_path(r.err, "PUT", path) end
  if r.status < 200 or r.status >= 300 then return nil, X.engine_error(r.status, "PUT", path, r.message) end
  return true
end

local DEMUX_KEYS = { query = true, timeout = true, max_bytes = true }

-- demux: a GET whose 2xx body is a framed stdout/stderr stream (container logs), buffered and
-- split under max_bytes (stdout and stderr together). -> {stdout =, stderr =} | nil, err
function M.demux(eng, path, opts)
  R.check_open(eng)
  opts = E.check_keys(opts, DEMUX_KEYS, "demux")
  local ok, nerr = numbers(opts, "demux", "timeout", "max_bytes")
  if not ok then return nil, nerr end
  local target = O.target(eng.api_version, path, opts.query, "demux", 2)
  local tid, err = eng._h:submit("GET", target, nil, { timeout = opts.timeout or eng.timeout, mode = "demux",
    max_bytes = opts.max_bytes or O.DEFAULTS.DEFAULT_EXEC_MAX_BYTES })
  if not tid then return nil, err end
  local r = R.wait(eng, tid)
  if r.err then return nil, X.with_path(r.err, "GET", path) end
  if r.status < 200 or r.status >= 300 then return nil, X.engine_error(r.status, "GET", path, r.message) end
  return { stdout = r.stdout or "", stderr = r.stderr or "" }
end

local Events = {}
local events_mt = { __index = Events, __name = "sandstack.engine.events" }

-- events: a stream on its own connection (a second transport handle), read line by line.
function M.events(eng, opts)
  R.check_open(eng)
  opts = E.check_keys(opts, EVENTS_KEYS, "events")
  local ok, nerr = numbers(opts, "events", "max_bytes", "timeout")
  if not ok then return nil, nerr end
  E.want(opts.filters, "table", "events", "filters")
  E.want(opts.since, "number|string", "events", "since", "unix seconds or a string")
  E.want(opts["until"], "number|string", "events", "until", "unix seconds or a string")
  local q = { filters = opts.filters, since = opts.since, ["until"] = opts["until"] }
  local target = O.target(eng.api_version, EVENTS, q, "events", 2)
  local h, err = core.engine_client(eng._cfg)
  if not h then return nil, err end
  local max = math.max(opts.max_bytes or O.DEFAULTS.DEFAULT_EVENTS_MAX_BYTES, O.DEFAULTS.MIN_EVENTS_MAX_BYTES)
  local tid
  tid, err = h:submit("GET", target, nil, {
    timeout = 0, connect_timeout = eng.timeout, mode = "lines", max_bytes = max,
  })
  if not tid then h:close() return nil, err end
  -- The request only goes out while transfers are driven: wait for the answer's headers so the
  -- daemon has subscribed before events() returns (events after that are not missed).
  if not h:await_headers(tid, eng.timeout) then
    h:close()
    return nil, E.new("transport", "timeout", "GET /events: no answer in time", { method = "GET", path = EVENTS })
  end
  return setmetatable({ _h = h, _id = tid, timeout = opts.timeout or eng.timeout }, events_mt)
end

-- The stream's transfer is done: its error, or the daemon's refusal, or the plain end.
local function ended(self)
  local r = self._h:take(self._id)
  self:close()
  if r.err then return X.with_path(r.err, "GET", EVENTS) end
  if r.status < 200 or r.status >= 300 then return X.engine_error(r.status, "GET", EVENTS, r.message) end
  return X.stream_closed(EVENTS, "the daemon ended the stream")
end

-- s:read(timeout) -> event | nil, err. err.reason "timeout": nothing came in time (read again);
-- "closed": the stream is over (ended by the daemon, e.g. `until` passed, or closed here).
function Events:read(timeout)
  if self._closed then return nil, X.stream_closed(EVENTS, "the stream is closed") end
  E.want(timeout, "number", "read", "argument 'timeout'", "a number of seconds")
  if timeout ~= nil and not (timeout >= 0) then return E.refuse("read", "argument 'timeout'", "must be a number of seconds >= 0") end
  local h, id = self._h, self._id
  local wait = timeout or self.timeout
  local deadline = now() + wait
  local drove = false
  while true do
    local line = h:line(id)
    if line then
      if line:find("%S") then
        local ev = core.json_decode(line)
        if type(ev) ~= "table" then
          return nil, X.bad_json("GET", EVENTS, "events: a line is not a JSON object")
        end
        return ev
      end
    elseif h:state(id) == "done" then
      return nil, ended(self)
    else
      local left = deadline - now()
      if left <= 0 and drove then return nil, X.stream_timeout(EVENTS, wait) end
      h:run(id, math.max(left, 0)) -- read(0) still collects what already arrived
      drove = true
    end
  end
end

-- Idempotent. The transport handle is a userdata with its own __gc, so a stream dropped
-- without close (a plain table has no __gc in LuaJIT) still releases its connection.
function Events:close()
  if self._closed then return end
  self._closed = true
  self._h:close()
end

events_mt.__close = Events.close
events_mt.__gc = Events.close

return { methods = M }
