-- h:list, a file method of a stack handle (docker/handle_files.lua has the others): a
-- directory's entries from the Engine's archive of it while that stays small (the archive
-- carries every file's bytes, and a sparse file comes whole), else by names alone through the
-- list helper (docker/list_helper.lua).
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local target = require "sandstack.docker.target"
local list_helper = require "sandstack.docker.list_helper"
local A = require "sandstack.docker.files_archive"

local M = {}

M.LIST_ARCHIVE_MAX = 4 * 1024 * 1024              -- the archive h:list reads before it lists by names
M.DEFAULT_LIST_ENTRIES = 100000                   -- h:list's max_entries

local LIST_KEYS = E.described {
  { "service", "string", type = "string", default = "the sandbox",
    refused = "names no service" },
  { "max_entries", E.COUNT1, type = "whole number", default = "100000",
    refused = "not above 0; past it `output_limit`" },
}

-- A listing from the engine's archive of the directory (its headers only are read).
local function from_archive(tar, path, max_entries)
  local members, err = core.archive_list({ data = tar })
  if not members then return nil, err end
  local top = members[1]
  if not top or top.type ~= "directory" then
    return E.fail("io", "ENOTDIR", "list " .. path .. ": not a directory", { path = path })
  end
  local prefix = top.name:gsub("/*$", "/")
  local out = {}
  for i = 2, #members do
    local m = members[i]
    local rest = m.name:sub(1, #prefix) == prefix and m.name:sub(#prefix + 1):gsub("/$", "")
    if rest and rest ~= "" and not rest:find("/", 1, true) then
      m.name = rest
      out[#out + 1] = m
      if #out > max_entries then
        return E.fail("output_limit", nil, ("list %s: more than %d entries"):format(path, max_entries),
          { limit = max_entries })
      end
    end
  end
  return out
end

-- A listing by names alone, when the archive is too large to read (list_helper.lua).
local function by_helper(eng, c, path, max_entries)
  local info, err = ops.call(eng, "inspect_container", c)
  if not info then return nil, err end
  local why = list_helper.unavailable(info)
  if why then
    return E.fail("output_limit", "archive", ("list %s: the engine's archive of it is over %d bytes (it carries "
      .. "every file's bytes) and %s, so it cannot be listed by names alone; list a smaller directory"):format(
      path, M.LIST_ARCHIVE_MAX, why), { limit = M.LIST_ARCHIVE_MAX, path = path })
  end
  local out; out, err = list_helper.list(eng, info, path, max_entries, math.max(eng.timeout, 60))
  if not out then
    if err.kind == "io" then
      return E.fail("io", err.reason, ("list %s: %s"):format(path, err.reason == "ENOENT" and "no such file or directory"
        or err.reason == "ENOTDIR" and "not a directory" or err.reason), { path = path })
    end
    return nil, err
  end
  return out
end

-- h:list(path, {service, max_entries}) -> { {name, type, size, mode, mtime, link}, ... } of
-- the directory's entries (not recursive), sorted by name. The engine's archive of the
-- directory is read while it stays under LIST_ARCHIVE_MAX bytes, in memory (it carries every
-- file's bytes, so a large or sparse file makes it large); past that the list helper lists it
-- by names alone. Nothing is written on the host.
function M.list(self, path, opts)
  local err
  opts, err = A.args(path, opts, LIST_KEYS, "list")
  if not opts then return nil, err end
  local max_entries = opts.max_entries or M.DEFAULT_LIST_ENTRIES
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local tar; tar, err = ops.send(eng, "get_archive", c, { path = path }, nil, { raw = true,
    max_bytes = M.LIST_ARCHIVE_MAX })
  local out
  if tar then
    out, err = from_archive(tar, path, max_entries)
  elseif err.kind == "output_limit" then
    out, err = by_helper(eng, c, path, max_entries)
  end
  if not out then return A.fail(err, path) end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

return M
