-- When an sbx Box stops being usable: its retirement (here and in its record, so that other
-- processes replace it too), the check before each use, and the drift of the host's egress
-- state that retires it. Internal to sandstack.sbx (box.lua, create.lua).
local E = require "sandstack.error"
local cli, host = require "sandstack.sbx.cli", require "sandstack.sbx.host"
local records, egress = require "sandstack.sbx.records", require "sandstack.sbx.egress"

local M = {}

-- Marks the sandbox unusable, here and in its record, so other processes replace it too.
-- Returns true, or nil, err when the mark could not be recorded: then only this process knows,
-- and the caller must say so (another process would go on using the sandbox).
function M.retire(box, reason)
  box.retired = reason
  local b = box.backend
  local rec = records.read(b, box.name)
  if rec and rec.id == box.id then
    rec.retired = reason
    local ok, err = records.write(b, box.name, rec)
    if not ok then
      err.retired = reason
      err.message = "the sandbox " .. box.name .. " is retired (" .. reason .. ") in this process, but its record"
        .. " could not be written, so other processes may still use it: " .. err.message
      return nil, err
    end
  end
  return true
end

-- true, or nil, err (kind "retired") when this handle must not be used any more.
function M.usable(box)
  cli.live(box.backend)
  if box.disposed then return E.fail("retired", "disposed", "the sandbox was disposed") end
  if not box.retired then
    local rec = records.read(box.backend, box.name)
    if not rec or rec.id ~= box.id then
      box.retired = "replaced"
    elseif rec.retired then
      box.retired = rec.retired
    end
  end
  if box.retired then
    return E.fail("retired", box.retired, "the sandbox " .. box.name .. " was retired (" .. box.retired
      .. "); acquire again for a fresh one")
  end
  return true
end

-- true, or nil, err: the host's egress state still means what it meant at create; otherwise
-- the sandbox is retired.
function M.check_drift(box)
  if box.egress ~= "allowlist" then return true end
  local st, err = host.egress_state(box.backend, box.name, box.probe_host)
  if not st then return nil, err end
  local reason, detail = egress.drift(box.allow, st, box.name, box.fingerprint)
  if reason then
    local rok, rerr = M.retire(box, "drift:" .. reason)
    if not rok then return nil, rerr end
    return E.fail("retired", "drift", "the host's egress state changed (" .. reason .. "): " .. detail
      .. "; the sandbox is retired and the next acquire replaces it", { drift = reason })
  end
  return true
end

return M
