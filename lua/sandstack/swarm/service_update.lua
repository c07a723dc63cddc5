-- A change of one Swarm service's spec (internal to sandstack.swarm: hibernate's replicas and
-- pin, the expiry's labels): read, changed, and sent back at the version read, so that a writer
-- in between is never overwritten; the manager refuses the update ("update out of sequence")
-- and it is read and made again, up to three times.
local cluster = require "sandstack.swarm.cluster"

local M = {}

-- change(spec, service) edits the inspected spec in place (service: the whole inspect), or
-- returns nil, err to stop. true, or nil, err.
function M.update(mgr, id, change)
  local last
  for _ = 1, 3 do
    local s, err = cluster.op(mgr, "inspect_service", id)
    if not s then return nil, err end
    local ok, cerr = change(s.Spec, s)
    if ok == nil and cerr then return nil, cerr end
    local _
    _, err = cluster.op(mgr, "update_service", s.ID, { body = s.Spec, version = s.Version.Index })
    if not err then return true end
    last = err
    if err.cause ~= "out_of_sequence" then break end
  end
  return nil, last
end

return M
