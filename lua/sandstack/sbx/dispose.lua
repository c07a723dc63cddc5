-- Disposal: sandboxes removed by name prefix (a key, a conversation), and their host-side
-- workspaces deleted only once sbx has confirmed the sandbox is gone (spec 001 "Disposal").
-- Internal to sandstack.sbx: b is the backend.
local core = require "sandstack.core"
local cli = require "sandstack.sbx.cli"

local M = {}

-- `sbx rm --force name`, confirmed: true when sbx removed it or says it does not exist. A daemon
-- that lost its engine lists no sandboxes, so "not listed" proves nothing; only rm's own answer
-- does, and a fault is reported as unreachable, never as gone.
function M.rm_confirmed(b, name)
  local ok, err = cli.run(b, { "rm", "--force", name }, { timeout = b.create_timeout })
  if ok or err.reason == "not_found" then return true end
  if err.kind == "daemon_fault" then
    err.reason = "unreachable"
    err.message = "cannot reach the sandboxes (" .. err.message .. "); " .. name .. " was not removed"
  end
  return nil, err
end

-- Deletes a host-side workspace tree (core.rmtree: no link followed, no mount crossed); a
-- tree it cannot remove is reported (kind "io").
function M.remove_tree(path)
  return core.rmtree(path)
end

local function entries(b, name) return core.listdir(b.workspace_root .. "/" .. name) or {} end

-- Snapshot of the host side: name -> { entries under workspace_root/name }, for every name with
-- the prefix.
local function host_entries(b, prefix)
  local out = {}
  for _, n in ipairs(core.listdir(b.workspace_root) or {}) do
    if n:sub(1, #prefix) == prefix then out[n] = entries(b, n) end
  end
  return out
end

-- rm --force each name (when ids[name] is given, only while sbx still lists that instance),
-- then delete only the host entries that existed before the removal.
function M.remove_names(b, names, ids, before)
  before = before or {}
  for _, n in ipairs(names) do
    if not before[n] then before[n] = entries(b, n) end
  end
  local gone = {}
  for _, n in ipairs(names) do
    local replaced = false
    if ids and ids[n] then
      -- rm takes only a name: check the id first, so a replacement made meanwhile is not touched
      local list, err = cli.list(b)
      if not list then return nil, err end
      replaced = list[n] ~= nil and list[n].id ~= ids[n]
    end
    if not replaced then
      local ok, err = M.rm_confirmed(b, n)
      if not ok then return nil, err end
      for _, entry in ipairs(before[n]) do
        ok, err = M.remove_tree(b.workspace_root .. "/" .. n .. "/" .. entry)
        if not ok then return nil, err end
      end
      gone[#gone + 1] = n
      os.remove(b.workspace_root .. "/" .. n) -- only when nothing new appeared
    end
  end
  return gone
end

-- Every sandbox whose name starts with prefix, listed by sbx or present on the host.
function M.prefix(b, prefix)
  local before = host_entries(b, prefix) -- first: what is on the host before the removal
  local list, err = cli.list(b)
  if not list then
    if err.kind == "daemon_fault" then err.reason = "unreachable" end
    return nil, err
  end
  local names, seen = {}, {}
  for n in pairs(list) do
    if n:sub(1, #prefix) == prefix then names[#names + 1] = n; seen[n] = true end
  end
  for n in pairs(before) do
    if not seen[n] then names[#names + 1] = n end
  end
  table.sort(names)
  local gone, rerr = M.remove_names(b, names, nil, before)
  if not gone then return nil, rerr end
  return { removed = gone }
end

return M
