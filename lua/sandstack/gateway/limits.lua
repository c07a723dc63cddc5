-- sandstack.gateway.limits: how many sessions a tenant, and the whole node, may hold, and how many
-- console and ask streams a tenant and a session may hold open. The counts live in the shared
-- dict ("count:<tenant>", "count:*", "streams:<tenant>", "streams@<sid>") and move only by
-- incr, which is atomic across nginx workers: a claim adds one and gives it back when it went
-- over the cap, so two concurrent requests can never both take the last place. A session counts
-- from the moment its key is claimed (starting) until its stack is destroyed; a stream from its
-- first byte to its end (gateway/streams.lua).
local M = {}

local GLOBAL = "count:*"

local function key_of(tenant) return "count:" .. tenant end

-- take(dict, key, max) -> true | nil: one place under max (no max: no cap).
local function take(dict, key, max)
  local n = dict:incr(key, 1, 0)
  if not n or (max and n > max) then
    if n then dict:incr(key, -1, 0) end
    return nil
  end
  return true
end

local function give(dict, key)
  local n = dict:incr(key, -1, 0)
  if n and n < 0 then dict:set(key, 0) end
end

-- claim(dict, tenant, tenant_max, global_max) -> true | nil, which ("tenant" | "global"): the
-- tenant's own cap is checked first, so a tenant at its cap is told so whatever the node holds.
function M.claim(dict, tenant, tenant_max, global_max)
  if not take(dict, key_of(tenant), tenant_max) then return nil, "tenant" end
  if not take(dict, GLOBAL, global_max) then
    give(dict, key_of(tenant))
    return nil, "global"
  end
  return true
end

-- release(dict, tenant): the session is gone (or its start failed).
function M.release(dict, tenant)
  give(dict, GLOBAL)
  give(dict, key_of(tenant))
end

function M.count(dict, tenant)
  return dict:get(tenant and key_of(tenant) or GLOBAL) or 0
end

M.STREAMS_OF_SESSION = "streams@" -- .. sid: gateway/sessions.lua drops it with the session

-- open_stream(dict, tenant, sid, tenant_max, session_max) -> true | nil, which ("tenant" |
-- "session"): a stream's places, the tenant's checked first.
function M.open_stream(dict, tenant, sid, tenant_max, session_max)
  if not take(dict, "streams:" .. tenant, tenant_max) then return nil, "tenant" end
  if not take(dict, M.STREAMS_OF_SESSION .. sid, session_max) then
    give(dict, "streams:" .. tenant)
    return nil, "session"
  end
  return true
end

-- close_stream(dict, tenant, sid): the stream ended.
function M.close_stream(dict, tenant, sid)
  give(dict, "streams:" .. tenant)
  give(dict, M.STREAMS_OF_SESSION .. sid)
end

return M
