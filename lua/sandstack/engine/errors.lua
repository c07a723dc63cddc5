-- The error objects of the engine client (internal to sandstack.engine; the constructor is
-- public as sandstack.engine.engine_error, so that every layer over the client, the batch
-- runner included, fails in one shape).
local E = require "sandstack.error"

local X = {}

local core = require "sandstack.core"

-- The daemon's message from what an answer carried: the message the C core extracted (a
-- string), or a body request() decoded ({message = ...}) or left as text. The ends are
-- trimmed and control bytes become '?', as the C core does (a no-op on its own output).
local function message_of(answer)
  if type(answer) == "table" then answer = answer.message end
  if type(answer) ~= "string" then return nil end
  answer = answer:match("^[%z\1- ]*(.-)[%z\1- ]*$")
  return (answer:gsub("[%z\1-\8\11-\31\127]", "?"))
end

-- An HTTP answer outside what the caller accepts: kind "engine", reason named after the status
-- (else "http_<status>"), the daemon's message (else "HTTP <status>"), and status, method, path
-- (as the caller gave them: no version prefix, no query).
function X.engine_error(status, method, path, answer)
  return core.engine_error(status, method, path, message_of(answer)) -- the reasons' one table is C's
end

-- A transport error from the C core names the versioned target; callers see their own path.
function X.with_path(err, method, path)
  if err and err.path ~= nil then
    err.path = path
    err.method = method
  end
  return err
end

function X.bad_json(method, path, what, status)
  return E.new("engine", "bad_json", what, { status = status, method = method, path = path })
end

-- The two ends of a stream read, as transport errors with the engine's reasons: "timeout"
-- (nothing came within the read's deadline: read again) and "closed" (the stream is over:
-- the daemon ended it, or the caller closed it). A dropped connection, which the C core
-- reports as transport "closed" too, ends the stream the same way.
function X.stream_timeout(path, seconds)
  return E.new("transport", "timeout", ("GET %s: nothing within %gs"):format(path, seconds),
    { method = "GET", path = path, timeout = seconds })
end

function X.stream_closed(path, why)
  return E.new("transport", "closed", "GET " .. path .. ": " .. why, { method = "GET", path = path })
end

return X
