-- Disposal: sandboxes removed by name prefix (a key, a conversation), and their host-side
-- workspaces deleted only once sbx has confirmed the sandbox is gone (spec 001 "Disposal").
-- Internal to sandstack.sbx: b is the backend.
local core = require "sandstack.core"
local E = require "sandstack.error"
local cli = require "sandstack.sbx.cli"

local M = {}

-- A daemon fault met while disposing: the sandboxes cannot be reached, which is never "gone".
local function unreachable(err)
  if err.kind == "daemon_fault" then err.reason = "unreachable" end
  return nil, err
end

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

-- What the daemon answers for a name its listing omits (spec 001: a daemon that lost its engine
-- lists nothing, and a listing can miss a sandbox that runs): "answers" when a command reaches
-- the sandbox (it exists, unlisted), "gone" when sbx says there is no such sandbox, or nil, err
-- (a daemon fault, kind "daemon_fault", naming `sbx daemon restart`; any other failure). The
-- probe prints a nonce, so that only the guest's own answer counts as "answers"; it may start
-- a stopped sandbox, which keeps its files.
function M.probe(b, name)
  local nonce = "sandstack-probe-" .. core.random_hex(8)
  local res, err = cli.run_raw(b, { "exec", name, "sh", "-c", "echo " .. nonce })
  if not res then return nil, err end
  if res.exit_code == 0 and res.stdout:find(nonce, 1, true) then return "answers" end
  local e = cli.classify(res, "sbx exec " .. name)
  if e.reason == "not_found" and (res.stderr or ""):find(name, 1, true) then return "gone" end
  if e.reason == "not_found" then e.reason = "failed" end -- not sbx's answer about this sandbox
  return nil, e
end

-- Removes one instance (spec 001: "disposing of one instance checks its id in sbx ls first,
-- then removes by name"): "removed", "replaced" (sbx lists another instance under the name:
-- not ours, untouched) or "gone"; or nil, err. A name the listing omits is decided by the
-- daemon's own answer (M.probe): a sandbox that answers, or a daemon that cannot say, is
-- unreachable (kind "daemon_fault", reason "unreachable"), never removed, since its id cannot
-- be checked; the caller keeps its record and workspace.
function M.instance(b, name, id)
  local list, err = cli.list(b)
  if not list then return unreachable(err) end
  local sb = list[name]
  if sb then
    if sb.id ~= id then return "replaced" end
    local ok, rerr = M.rm_confirmed(b, name)
    if not ok then return nil, rerr end
    return "removed"
  end
  local state, perr = M.probe(b, name)
  if not state then
    if perr.kind == "daemon_fault" then
      perr.message = "cannot reach the sandboxes (" .. perr.message .. "); " .. name .. " was not removed"
    end
    return unreachable(perr)
  end
  if state == "answers" then
    return E.fail("daemon_fault", "unreachable", "sbx does not list " .. name .. ", but it answers: its id"
      .. " cannot be checked, so it was not removed and its workspace is kept (the daemon's listing is"
      .. " failing); run `sbx daemon restart` and dispose again")
  end
  return "gone"
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

-- rm --force each name (when ids[name] is given, through M.instance: only that instance, and an
-- unlisted name only once sbx says it is gone), then delete only the host entries that existed
-- before the removal.
function M.remove_names(b, names, ids, before)
  before = before or {}
  for _, n in ipairs(names) do
    if not before[n] then before[n] = entries(b, n) end
  end
  local gone = {}
  for _, n in ipairs(names) do
    local replaced, ok, err = false, nil, nil
    if ids and ids[n] then
      -- rm takes only a name: check the id first, so a replacement made meanwhile is not touched
      local state
      state, err = M.instance(b, n, ids[n])
      if not state then return nil, err end
      replaced = state == "replaced"
    else
      ok, err = M.rm_confirmed(b, n)
      if not ok then return nil, err end
    end
    if not replaced then
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
  if not list then return unreachable(err) end
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
