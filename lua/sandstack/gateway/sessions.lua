-- sandstack.gateway.sessions: the session table in the shared dict (all nginx workers see one).
-- Every tenant has its own key space: a session is named by its sid, "<key>.<tenant>" (a key
-- holds no "."), so two tenants' sessions of one key are two sessions, and nothing a tenant
-- does with a key ever looks at another tenant's.
--   s:<sid>     JSON {state = "starting"|"ready"|"paused"|"hibernated"|"stopping", tenant, key, digest,
--               created, record}
--               digest: SHA-256 of the session secret; the secret itself is never stored
--   d:<digest>  the sid whose secret has this digest: the proxied routes find a session by the
--               secret they are given, never by trying the key in other tenants' spaces
--   seen:<sid>  when the last proxied request for the session ended (or began)
--   open:<sid>  proxied requests in flight (streams, WebSockets): a session with one is not idle
--   streams@<sid>  its console and ask streams open (gateway/limits.lua)
--   port:<n>    the session whose forwarder was last seen on host port n (the port-reuse guard)
--   adopted     set once the stacks on the engine were adopted after nginx (re)started; a
--               reload keeps the dict, and with it this mark, so it adopts only after a restart
-- Writes use safe_set/safe_add: when the dict is full they fail instead of evicting another
-- session's entry (which would orphan a stack).
local core = require "sandstack.core"

local M = {}

-- "starting"/"stopping" marks expire, so that a worker that dies mid-call does not hold the key.
M.MARK_TTL = 900

-- The session name of a tenant's key: the tenant's own key space.
function M.sid(tenant, key) return key .. "." .. tenant end

function M.get(dict, key)
  local text = dict:get("s:" .. key)
  return text and core.json_decode(text) or nil
end

-- find(dict, digest) -> sid, entry | nil: the session whose secret has this digest.
function M.find(dict, digest)
  local sid = dict:get("d:" .. digest)
  if not sid then return nil end
  local entry = M.get(dict, sid)
  if not entry or entry.digest ~= digest then return nil end
  return sid, entry
end

-- claim(dict, sid, entry) -> true | nil, "exists" | err: atomic across workers.
function M.claim(dict, key, entry)
  entry.state = "starting"
  local ok, err = dict:safe_add("s:" .. key, core.json_encode(entry), M.MARK_TTL)
  if not ok then return nil, err end
  ok, err = dict:safe_set("d:" .. entry.digest, key, M.MARK_TTL)
  if not ok then dict:delete("s:" .. key); return nil, err end
  return true
end

function M.mark(dict, key, entry, state)
  entry.state = state
  return dict:safe_set("s:" .. key, core.json_encode(entry), M.MARK_TTL)
end

-- keep(dict, key, entry, state) -> true | nil, err: a lasting state other than ready
-- ("hibernated": the stack is stopped, its record kept), without mark's expiry.
function M.keep(dict, key, entry, state)
  entry.state = state
  return dict:safe_set("s:" .. key, core.json_encode(entry))
end

-- ready(dict, key, entry) -> true | nil, err: the live record, and its port claimed.
function M.ready(dict, key, entry)
  entry.state = "ready"
  local ok, err = dict:safe_set("s:" .. key, core.json_encode(entry))
  if not ok then return nil, err end
  ok, err = dict:safe_set("d:" .. entry.digest, key)
  if not ok then return nil, err end
  if entry.record and entry.record.port then dict:safe_set("port:" .. entry.record.port, key) end
  if not dict:get("seen:" .. key) then dict:safe_set("seen:" .. key, ngx.now()) end
  return true
end

function M.remove(dict, key, entry)
  dict:delete("s:" .. key)
  dict:delete("seen:" .. key)
  dict:delete("open:" .. key)
  dict:delete(require("sandstack.gateway.limits").STREAMS_OF_SESSION .. key)
  if entry and entry.digest and dict:get("d:" .. entry.digest) == key then dict:delete("d:" .. entry.digest) end
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

-- states(dict) -> {starting =, ready =, paused =, hibernated =, stopping =}
function M.states(dict)
  local n = { starting = 0, ready = 0, paused = 0, hibernated = 0, stopping = 0 }
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
