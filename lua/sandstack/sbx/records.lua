-- Names and records of the sbx backend. A sandbox's name carries its owner (prefix,
-- conversation, whole key, kind, as digests); its record (workspace_root/NAME/record.json)
-- carries what sbx does not keep: the workspace, the egress it was made with, and the
-- retirement mark that other processes trust. Internal to sandstack.sbx: b is the backend.
local core = require "sandstack.core"
local cli = require "sandstack.sbx.cli"

local M = {}

local RECORD_MAX = 1024 * 1024
-- The records plane sees workspace_root under this name; it never reaches a guest.
local RECORDS_ROOT = "/records"

local function digest(s, n) return core.sha256_hex(s, n) end

function M.name_for(b, conversation, key, kind)
  return b.name_prefix .. digest(conversation, 6) .. "-" .. digest(conversation .. "\0" .. key, 6)
    .. "-" .. digest(kind, 4)
end

function M.scope_prefix(b, conversation) return b.name_prefix .. digest(conversation, 6) .. "-" end

function M.key_prefix(b, conversation, key)
  return M.scope_prefix(b, conversation) .. digest(conversation .. "\0" .. key, 6) .. "-"
end

function M.default_workspace_root()
  local base = os.getenv("XDG_STATE_HOME")
  if not base or base == "" then base = (os.getenv("HOME") or "/root") .. "/.local/state" end
  return base .. "/sandstack-sbx/workspaces"
end

-- Makes path and its missing parents (0700); an existing directory is fine.
function M.mkdir_p(path)
  local acc = ""
  for part in path:gmatch("[^/]+") do
    acc = acc .. "/" .. part
    local ok, err = core.mkdir(acc, 448) -- 0700
    if not ok and err.reason ~= "exists" then return nil, err end
  end
  return true
end

-- Opens the records plane: the file plane (csrc/fileplane) anchored at workspace_root, with
-- sync on. A record is replaced only by a complete file (temp + rename) that is fsynced, and
-- its directory after the rename, so a write that returns true is on disk; one that fails is
-- reported (kind "io"). No link under workspace_root is ever followed.
function M.open(b)
  return core.fileplane_open { root = b.workspace_root, guest_root = RECORDS_ROOT, cwd = RECORDS_ROOT,
    max_read = RECORD_MAX, sync = true }
end

local function rel(name) return name .. "/record.json" end

function M.path(b, name) return b.workspace_root .. "/" .. rel(name) end

-- The record of sandbox `name`, or nil when there is none (or it cannot be read).
function M.read(b, name)
  local s = cli.live(b).records:read(rel(name))
  if not s then return nil end
  return core.json_decode(s)
end

function M.write(b, name, rec)
  local s, err = core.json_encode(rec)
  if not s then return nil, err end
  return cli.live(b).records:write(rel(name), s)
end

function M.remove(b, name) os.remove(M.path(b, name)) end

return M
