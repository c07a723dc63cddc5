-- sandstack.gateway.limits: how many sessions a tenant, and the whole node, may hold. The
-- counts live in the shared dict ("count:<tenant>", "count:*") and move only by incr, which is
-- atomic across nginx workers: a claim adds one and gives it back when it went over the cap, so
-- two concurrent POSTs can never both take the last place. A session counts from the moment its
-- key is claimed (starting) until its stack is destroyed.
local M = {}

local GLOBAL = "count:*"

local function key_of(tenant) return "count:" .. tenant end

-- claim(dict, tenant, tenant_max, global_max) -> true | nil, which ("tenant" | "global"): the
-- tenant's own cap is checked first, so a tenant at its cap is told so whatever the node holds.
function M.claim(dict, tenant, tenant_max, global_max)
  local t = dict:incr(key_of(tenant), 1, 0)
  if not t or (tenant_max and t > tenant_max) then
    if t then dict:incr(key_of(tenant), -1, 0) end
    return nil, "tenant"
  end
  local n = dict:incr(GLOBAL, 1, 0)
  if not n or n > global_max then
    if n then dict:incr(GLOBAL, -1, 0) end
    dict:incr(key_of(tenant), -1, 0)
    return nil, "global"
  end
  return true
end

-- release(dict, tenant): the session is gone (or its start failed).
function M.release(dict, tenant)
  local n = dict:incr(GLOBAL, -1, 0)
  if n and n < 0 then dict:set(GLOBAL, 0) end
  local t = dict:incr(key_of(tenant), -1, 0)
  if t and t < 0 then dict:set(key_of(tenant), 0) end
end

function M.count(dict, tenant)
  return dict:get(tenant and key_of(tenant) or GLOBAL) or 0
end

return M
