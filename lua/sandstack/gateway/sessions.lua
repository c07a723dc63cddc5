-- sandstack.gateway.sessions: the session table in the shared dict (all nginx workers see one).
--   s:<key>     JSON {state = "starting"|"ready"|"stopping", tenant, digest, created, record}
--               digest: SHA-256 of the session secret; the secret itself is never stored
--   seen:<key>  when the last proxied request for the session ended (or began)
--   open:<key>  proxied requests in flight (streams, WebSockets): a session with one is not idle
--   port:<n>    the session whose forwarder was last seen on host port n (the port-reuse guard)
--   adopted     set once the stacks on the engine were adopted after nginx (re)started; a
--               reload keeps the dict, and with it this mark, so it adopts only after a restart
-- Writes use safe_set/safe_add: when the dict is full they fail instead of evicting another
-- session's entry (which would orphan a stack).
local core = require "sandstack.core"

local M = {}

-- "starting"/"stopping" marks expire, so that a worker that dies mid-call does not hold the key.
M.MARK_TTL = 900

function M.get(dict, key)
  local text = dict:get("s:" .. key)
  return text and core.json_decode(text) or nil
end

-- claim(dict, key, entry) -> true | nil, "exists" | err: atomic across workers.
function M.claim(dict, key, entry)
  entry.state = "starting"
  return dict:safe_add("s:" .. key, core.json_encode(entry), M.MARK_TTL)
end

function M.mark(dict, key, entry, state)
  entry.state = state
  return dict:safe_set("s:" .. key, core.json_encode(entry), M.MARK_TTL)
end

-- ready(dict, key, entry) -> true | nil, err: the live record, and its port claimed.
function M.ready(dict, key, entry)
  entry.state = "ready"
  local ok, err = dict:safe_set("s:" .. key, core.json_encode(entry))
  if not ok then return nil, err end
  if entry.record and entry.record.port then dict:safe_set("port:" .. entry.record.port, key) end
  if not dict:get("seen:" .. key) then dict:safe_set("seen:" .. key, ngx.now()) end
  return true
end

function M.remove(dict, key, entry)
  dict:delete("s:" .. key)
  dict:delete("seen:" .. key)
  dict:delete("open:" .. key)
  local port = entry and entry.record and entry.record.port
  if port and dict:get("port:" .. port) == key then dict:delete("port:" .. port) end
end

-- Activity: a proxied request begins (open + 1) and ends (open - 1); both count as seen.
function M.opened(dict, key)
  dict:incr("open:" .. key, 1, 0)
  dict:set("seen:" .. key, ngx.now())
end

function M.closed(dict, key)
  local n = dict:incr("open:" .. key, -1, 0)
  if n and n <= 0 then dict:delete("open:" .. key) end
  if dict:get("s:" .. key) then dict:set("seen:" .. key, ngx.now()) end
end

-- keys(dict) -> every session key in the table.
function M.keys(dict)
  local out = {}
  for _, k in ipairs(dict:get_keys(0)) do
    local key = k:match("^s:(.*)$")
    if key then out[#out + 1] = key end
  end
  return out
end

-- states(dict) -> {starting =, ready =, stopping =}
function M.states(dict)
  local n = { starting = 0, ready = 0, stopping = 0 }
  for _, key in ipairs(M.keys(dict)) do
    local e = M.get(dict, key)
    if e and n[e.state] then n[e.state] = n[e.state] + 1 end
  end
  return n
end

-- What the client sees of a session: never the record (the operator's configuration).
function M.view(key, entry)
  return { key = key, state = entry.state, tenant = entry.tenant, created = entry.created,
    endpoint_path = "/sessions/" .. key .. "/" }
end

return M
