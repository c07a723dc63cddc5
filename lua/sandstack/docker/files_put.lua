-- The file methods of a stack handle that put files into a container (docker/handle_files.lua
-- has the rest): write and upload, over the Engine's archive API (PUT /containers/{id}/archive).
-- Copies follow docker cp: onto a directory they go into it, and nothing replaces a directory
-- (the engine's noOverwriteDirNonDir). A write beneath a mount the archive cannot reach (/proc,
-- a tmpfs) is refused rather than landing where nothing in the container sees it.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local target = require "sandstack.docker.target"
local A = require "sandstack.docker.files_archive"

local M = {}

local MODE = { "number", min = 0, max = 4095, whole = true, says = "a permission number such as 420 (0644)",
  wanted = "a permission number such as 420 (0644)" }
local WRITE_KEYS = E.described {
  { "mode", MODE, type = "number", default = "0644",
    refused = "not in 0..07777" },
  { "service", "string", type = "string", default = "the sandbox",
    refused = "names no service" },
}
-- upload's: the same checks, but a file keeps the host file's permission bits
local UPLOAD_KEYS = E.described {
  { "mode", MODE, type = "number", default = "the host file's",
    refused = "not in 0..07777" },
  { "service", "string", type = "string", default = "the sandbox",
    refused = "names no service" },
}

local function tar_tail(size) return (512 - size % 512) % 512 + 1024 end

-- The mounts of a container that the engine's archive never reaches: the kernel's file systems
-- every container has, and its tmpfs mounts. The engine writes beneath them, into the root's own
-- directory that the mount hides, so a file put there lands where nothing in the container sees
-- it. Asked once per container of the handle.
local function hidden_mounts(self, eng, c)
  self._hidden_mounts = self._hidden_mounts or {}
  local m = self._hidden_mounts[c]
  if m then return m end
  local info, err = ops.call(eng, "inspect_container", c)
  if not info then return nil, err end
  m = { "/proc", "/sys", "/dev" }
  for dest in pairs((info.HostConfig or {}).Tmpfs or {}) do m[#m + 1] = dest end
  for _, mt in ipairs(info.Mounts or {}) do
    if mt.Type == "tmpfs" then m[#m + 1] = mt.Destination end
  end
  self._hidden_mounts[c] = m
  return m
end

-- The directory dir as the container sees it, every link on the way resolved: the engine's stat
-- of a link names its target resolved in the container's root. A component that is not there
-- ends the walk (the write then fails there).
local function real_dir(eng, c, dir)
  local real = ""
  for comp in dir:gmatch("[^/]+") do
    local st = A.path_stat(eng, c, real .. "/" .. comp)
    if not st then return nil end
    real = st.linkTarget and st.linkTarget ~= "" and st.linkTarget:gsub("/+$", "") or real .. "/" .. comp
  end
  return real == "" and "/" or real
end

-- true when a file put into dir lands where the container sees it, else nil, err (invalid/mount).
local function reachable(self, eng, c, dir, what)
  local mounts, err = hidden_mounts(self, eng, c)
  if not mounts then return A.fail(err, dir) end
  local real = real_dir(eng, c, dir) or dir
  for _, m in ipairs(mounts) do
    if real == m or real:sub(1, #m + 1) == m .. "/" then
      return E.fail("invalid", "mount", ("%s: %s is on %s, a mount of the container that the engine's archive cannot "
        .. "reach (the file would land beneath it, where nothing in the container sees it)"):format(what, dir, m),
        { path = dir, mount = m })
    end
  end
  return true
end

-- The PUT into dir as C makes it: a directory is never replaced by a file, nor a file by a directory.
local function put_into(c, dir) return ops.request("put_archive", c, { path = dir, no_overwrite = true }) end

-- h:write(path, data, {mode = 420, service}) -> true. The directory must exist; a file there is
-- replaced whole, a directory is an error (io/EISDIR).
function M.write(self, path, data, opts)
  if type(data) ~= "string" then E.raise("write: argument 'data' must be a string, got " .. type(data)) end
  local err
  opts, err = A.args(path, opts, WRITE_KEYS, "write")
  if not opts then return nil, err end
  local dir, base = A.split(path)
  if not base then return E.fail("invalid", "path", "write: " .. path .. " names no file", { path = path }) end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local ok; ok, err = reachable(self, eng, c, dir, "write " .. path)
  if not ok then return nil, err end
  -- the tar's header, then data sent in place (no copy of it is made), then the padding and end
  local put = put_into(c, dir)
  ok, err = eng:upload(put.path, core.tar_header(base, #data, opts.mode or 420, os.time()), nil,
    { data = data, zeros = tar_tail(#data), query = put.query, content_type = "application/x-tar",
      timeout = math.max(eng.timeout, #data / (16 * 1024 * 1024)) })
  if ok == nil then return A.fail(err, path) end
  return true
end

-- Where a copy to path goes, as docker cp decides: into path when it is a directory there (under
-- `name`), else at path itself. -> dir, base | nil, err
local function destination(eng, c, path, name, is_tree, what)
  local st, err = A.path_stat(eng, c, path)
  if st and A.stat_of(st).type == "directory" then return path, name end
  if not st and err.reason ~= "ENOENT" then return nil, err end
  if not st and path:find("/$") then
    return E.fail("io", "ENOENT", what .. ": " .. path .. " is not a directory there", { path = path })
  end
  if st and is_tree then
    return E.fail("io", "ENOTDIR", what .. ": " .. path .. " is not a directory: a directory never replaces a file",
      { path = path })
  end
  local dir, base = A.split(path)
  if not base then return E.fail("invalid", "path", what .. ": " .. path .. " names no file or directory", { path = path }) end
  return dir, base
end

-- h:upload(local_path, path, {mode, service}) -> true: the host file or directory streamed into
-- the container, into path when it is a directory (permission bits kept; mode sets a file's).
function M.upload(self, local_path, path, opts)
  local eng, c
  opts, eng, c = A.copy_args(self, local_path, path, opts, UPLOAD_KEYS, "upload")
  if not opts then return nil, eng end
  local st, serr = core.file_stat(local_path)
  if not st then return nil, serr end
  local tree = st.type == "directory"
  if not tree and st.type ~= "file" then
    return E.fail("invalid", "not_regular", "upload: " .. local_path .. " is not a regular file or a directory",
      { path = local_path })
  end
  local name = A.basename(local_path)
  if name == "" or name == "." or name == ".." then
    return E.fail("invalid", "name", "upload: " .. local_path .. " has no name of its own to copy it under; name it "
      .. "by its path (e.g. ../dir)", { path = local_path })
  end
  local dir, base = destination(eng, c, path, name, tree, "upload")
  if not dir then return A.fail(base, path) end
  local ok, err = reachable(self, eng, c, dir, "upload " .. path)
  if not ok then return nil, err end
  local put = put_into(c, dir)
  if tree then
    ok, err = eng:upload(put.path, "", nil, { tree = local_path, top = base, query = put.query,
      content_type = "application/x-tar", timeout = math.max(eng.timeout, 600) })
  else
    local size = st.size
    local head = core.tar_header(base, size, opts.mode or (st.mode and st.mode % 4096) or 420, os.time())
    ok, err = eng:upload(put.path, head, local_path, { query = put.query, length = size,
      zeros = tar_tail(size), content_type = "application/x-tar", timeout = math.max(eng.timeout, size / (16 * 1024 * 1024)) })
  end
  if not ok then return A.fail(err, path) end
  return true
end

return M
