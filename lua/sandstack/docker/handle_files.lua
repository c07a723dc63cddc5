-- The file methods of a stack handle (sandstack.session; docs/session.md): read, write, list,
-- stat, remove, upload and download, over the Engine's archive API (GET, PUT and HEAD
-- /containers/{id}/archive). What comes back is a tar the sandbox made, so it is read by the
-- capture's streaming tar reader (csrc/capture, through core.archive_file and
-- core.archive_list): only a regular file is ever taken, a link is refused and never followed,
-- set-id, sticky and group/other write bits are not kept on the host, and every read has a
-- byte budget. Paths are absolute paths in the container; the engine resolves them inside the
-- container's root, so no link reaches the host. upload and download stream, never holding a
-- file in memory: upload sends the host file (or a tar of a host directory made as it is sent),
-- download unpacks the engine's archive as it arrives into a hidden directory beside the
-- destination and renames its member into place, so its bytes are written once.
--
-- The engine's archive inflates: a sparse file comes whole, a guest's free `truncate -s 16G` as
-- 16 GiB. So a listing reads the archive only while it stays small (list_helper.lua lists by
-- names past that), a stat reads the engine's path stat header alone, and a download has a
-- budget the caller raises on purpose. Copies follow docker cp: onto a directory they go into
-- it, and nothing replaces a directory (the engine's noOverwriteDirNonDir).
--
-- This file holds stat, read, download and remove; write and upload are docker/files_put.lua,
-- list docker/files_list.lua, and what they share (paths, errors, the stat header)
-- docker/files_archive.lua. The handle mixes in this file's `methods`, all seven.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local target = require "sandstack.docker.target"
local A = require "sandstack.docker.files_archive"
local put = require "sandstack.docker.files_put"
local listing = require "sandstack.docker.files_list"

local M = {}

M.DEFAULT_READ_MAX = 64 * 1024 * 1024             -- h:read's budget
M.DEFAULT_DOWNLOAD_MAX = 1024 * 1024 * 1024       -- h:download's budget of file bytes
local ARCHIVE_SLACK = 256 * 1024 * 1024           -- a download's archive beyond its files: headers

local M_ = { write = put.write, upload = put.upload, list = listing.list }
M.methods = M_

local STAT_KEYS = require("sandstack.docker.method_options").stat

-- h:stat(path, {service}) -> { name, type = "file"|"directory"|"link"|"other", size, mode, mtime, link }
function M_.stat(self, path, opts)
  local err
  opts, err = A.args(path, opts, STAT_KEYS, "stat")
  if not opts then return nil, err end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local st; st, err = A.path_stat(eng, c, path)
  if not st then return nil, err end
  return A.stat_of(st)
end

local READ_KEYS = require("sandstack.docker.method_options").read

-- h:read(path, {max_bytes, service}) -> the file's bytes
function M_.read(self, path, opts)
  local err
  opts, err = A.args(path, opts, READ_KEYS, "read")
  if not opts then return nil, err end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local max = opts.max_bytes or M.DEFAULT_READ_MAX
  -- the archive: the file, its header (a pax one too for a long name) and the end blocks
  local body; body, err = ops.send(eng, "get_archive", c, { path = path }, nil, { raw = true,
    max_bytes = max + 4096 + #path })
  if not body then
    if err.kind == "output_limit" then
      return E.fail("output_limit", nil, ("read %s: the file is over the budget of %d bytes"):format(path, max),
        { limit = max, path = path })
    end
    return A.fail(err, path)
  end
  local f; f, err = core.archive_file({ data = body }, { max_bytes = max })
  if not f then return A.fail(err, path) end
  return f.data
end

local DOWNLOAD_KEYS = require("sandstack.docker.method_options").download

local function host_dir(p) return p:match("^(.*)/[^/]*$") or "." end

-- h:download(path, local_path, {max_bytes, service}) -> bytes written: the file, or the directory
-- as a tree, unpacked as it streams into a hidden directory beside local_path and renamed into
-- place (into local_path when that is a directory). A file replaces a file or link there (never
-- followed); a directory goes only where nothing stands. max_bytes (default 1 GiB) bounds the
-- files' bytes: over it, nothing is left.
function M_.download(self, path, local_path, opts)
  local eng, c, err
  opts, eng, c = A.copy_args(self, local_path, path, opts, DOWNLOAD_KEYS, "download")
  if not opts then return nil, eng end
  local max = opts.max_bytes or M.DEFAULT_DOWNLOAD_MAX
  local st; st, err = A.path_stat(eng, c, path)
  if not st then return nil, err end
  local s = A.stat_of(st)
  if s.type == "link" then
    return E.fail("invalid", "symlink", ("download %s: a symbolic link (to %s); it is not followed"):format(path,
      tostring(s.link)), { path = path, target = s.link, type = "link" })
  elseif s.type == "other" then
    return E.fail("invalid", "not_regular", "download " .. path .. ": not a regular file or a directory",
      { path = path, type = s.type })
  end
  local here = core.file_stat(local_path, true)
  local parent, name = host_dir(local_path), A.basename(local_path)
  if here and here.type == "directory" then parent, name = local_path, A.basename(path) end
  if name == "" then
    return E.fail("invalid", "path", "download: " .. local_path .. " names no file or directory", { path = local_path })
  end
  local get = ops.request("get_archive", c, { path = path })
  local stream; stream, err = eng:stream(get.path, { query = get.query, max_bytes = max + ARCHIVE_SLACK,
    timeout = math.max(eng.timeout, 600) })
  if not stream then return A.fail(err, path) end
  local res; res, err = core.archive_place(stream.h, stream.id, parent, name, { max_bytes = max })
  local terr = stream:close()
  if not res then
    if terr and err.kind == "engine" and err.reason == "bad_archive" then err = terr end
    if err.kind == "output_limit" then
      return E.fail("output_limit", nil, ("download %s: over the budget of %d bytes of files; pass a larger "
        .. "max_bytes to take it"):format(path, max), { limit = max, path = path })
    end
    return A.fail(err, path)
  end
  return res.bytes
end

local REMOVE_KEYS = require("sandstack.docker.method_options").remove

-- h:remove(path, {recursive, service}) -> true; a path that is not there is already removed.
-- The archive API cannot delete, so this runs rm in the container (its image must have one).
function M_.remove(self, path, opts)
  local err
  opts, err = A.args(path, opts, REMOVE_KEYS, "remove")
  if not opts then return nil, err end
  if path:gsub("/+", "/") == "/" then return E.fail("invalid", "path", "remove: refusing to remove /", { path = path }) end
  local r; r, err = self:exec({ "rm", opts.recursive and "-rf" or "-f", "--", path }, { service = opts.service, timeout = 60 })
  if not r then return nil, err end
  if r.code ~= 0 then
    return E.fail("io", "remove", "remove " .. path .. ": " .. (r.stderr:match("[^\n]+") or ("rm exited " .. r.code)),
      { path = path, exit_code = r.code })
  end
  return true
end

return M
