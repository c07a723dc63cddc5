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
local core = require "sandstack.core"
local E = require "sandstack.error"
local target = require "sandstack.docker.target"
local list_helper = require "sandstack.docker.list_helper"

local M = {}

M.DEFAULT_READ_MAX = 64 * 1024 * 1024             -- h:read's budget
M.DEFAULT_DOWNLOAD_MAX = 1024 * 1024 * 1024       -- h:download's budget of file bytes
M.LIST_ARCHIVE_MAX = 4 * 1024 * 1024              -- the archive h:list reads before it lists by names
M.DEFAULT_LIST_ENTRIES = 100000                   -- h:list's max_entries
local ARCHIVE_SLACK = 256 * 1024 * 1024           -- a download's archive beyond its files: headers

local function archive_path(container) return "/containers/" .. core.urlencode(container) .. "/archive" end
M.archive_path = archive_path -- where a container's files are read and written (capture too)

-- A path in the container: not a string raises at the caller; not absolute is invalid/path.
local function check_path(path, what)
  E.want(path, "string", what, "argument 'path'", "an absolute path in the container")
  if path == nil then E.raise(what .. ": argument 'path' must be an absolute path in the container, got nil") end
  if path:sub(1, 1) ~= "/" or path:find("%z") then
    return E.fail("invalid", "path", what .. ": " .. ("%q"):format(path) .. " is not an absolute path in the container "
      .. "(it must start with /)", { path = path })
  end
  return true
end

-- dir and base of an absolute path: "/a/b" -> "/a", "b"; "/b" -> "/", "b".
local function split(path)
  local p = path:gsub("/+$", "")
  local dir, base = p:match("^(.*)/([^/]+)$")
  if not base then return nil end
  return dir == "" and "/" or dir, base
end

-- The place on the engine's host of one of a container's files, as the engine names it in some
-- messages ("lstat /var/lib/docker/overlay2/<id>/merged/work/x: not a directory"): where the
-- engine keeps its data says nothing the caller can use, so the prefix goes and the
-- container's own path stays (a volume's is named by the volume).
local DRIVER_DIRS = { "/vfs/dir/", "/btrfs/subvolumes/", "/zfs/graph/", "/aufs/mnt/" }
local function container_path(p)
  for _, form in ipairs { "^/.-/(%x+)/merged(.*)$", "^/.-/(%x+)%-init/merged(.*)$" } do
    local id, rest = p:match(form)
    if id and #id >= 32 then return rest == "" and "/" or rest end
  end
  local vol, vrest = p:match("^/.-/volumes/([^/]+)/_data(.*)$")
  if vol then return "(volume " .. vol .. ")" .. vrest end
  for _, d in ipairs(DRIVER_DIRS) do
    local i = p:find(d, 1, true)
    local rest = i and p:sub(i + #d):match("^[^/]+(.*)$")
    if rest then return rest == "" and "/" or rest end
  end
  return p
end
local function scrub(text) return (tostring(text):gsub("/[^%s\"'`:,;]+", container_path)) end
M.scrub = scrub

-- What the engine's messages about a path say, as an errno name (status 404 is ENOENT).
local ERRNO_TEXT = {
  { "cannot overwrite directory", "EISDIR", "is a directory: a file never replaces a directory" },
  { "cannot overwrite non-directory", "ENOTDIR", "is not a directory: a directory never replaces a file" },
  { "extraction point is not a directory", "ENOTDIR", "not a directory" },
  { "not a directory", "ENOTDIR" },
  { "read-only", "EROFS", "read-only file system" },
  { "no such file or directory", "ENOENT" },
}

-- An engine answer about a path, as the file plane of sbx says it: io with an errno name. Every
-- message is scrubbed of the engine's host paths.
local function file_error(err, path)
  if not E.is(err) then return err end
  if err.kind == "engine" then
    local text = tostring(err.message)
    local reason, plain = err.status == 404 and "ENOENT" or nil, nil
    for _, t in ipairs(ERRNO_TEXT) do
      if reason then break end
      if text:lower():find(t[1], 1, true) then reason, plain = t[2], t[3] end
    end
    if reason then
      local msg = plain or scrub(text)
      if reason == "ENOENT" and not msg:find("%a%a%a%a", 1) or msg:match("^HTTP %d+$") then
        msg = "no such file or directory"
      end
      return E.new("io", reason, path .. ": " .. msg, { path = path, status = err.status })
    end
  end
  err.message = scrub(err.message)
  err.path = err.path or path
  return err
end

local function fail(err, path) return nil, file_error(err, path) end

local function basename(p) return (p:gsub("/+$", ""):match("([^/]*)$")) end

-- A method's path and options checked -> opts | nil, err (docs/api/README.md, "Conventions").
local function args(path, opts, keys, what)
  local ok, err = check_path(path, what)
  if not ok then return nil, err end
  return E.options(opts, keys, what)
end

-- The stat the engine gives in X-Docker-Container-Path-Stat (a Go os.FileMode): the type bits
-- are Go's, the permission bits Unix's.
local GO_DIR, GO_LINK, GO_PIPE, GO_SOCKET, GO_DEVICE = 2 ^ 31, 2 ^ 27, 2 ^ 25, 2 ^ 24, 2 ^ 26
local function bit(v, b) return math.floor(v / b) % 2 == 1 end
local function stat_of(raw)
  local m = raw.mode or 0
  local t = bit(m, GO_DIR) and "directory" or bit(m, GO_LINK) and "link" or
    (bit(m, GO_PIPE) or bit(m, GO_SOCKET) or bit(m, GO_DEVICE)) and "other" or "file"
  local out = { name = raw.name, type = t, size = raw.size, mode = m % 512 }
  if raw.linkTarget and raw.linkTarget ~= "" then out.link = raw.linkTarget end
  local y, mo, d, h, mi, s = tostring(raw.mtime):match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)")
  if y then
    -- days from the civil date (UTC), so no local time zone enters
    local yy, mm = tonumber(y), tonumber(mo)
    if mm <= 2 then yy, mm = yy - 1, mm + 12 end
    local fl = math.floor
    local days = 365 * yy + fl(yy / 4) - fl(yy / 100) + fl(yy / 400) + fl((153 * (mm - 3) + 2) / 5) + tonumber(d) - 719469
    out.mtime = days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)
  end
  return out
end

local M_ = {}
M.methods = M_

local STAT_KEYS = { service = "string" }

-- The engine's stat of a path (HEAD: no file's bytes), as it sends it, or nil, err.
local function path_stat(eng, c, path)
  local status, body, headers = eng:request("HEAD", archive_path(c) .. "?path=" .. core.urlencode(path))
  if not status then return fail(body, path) end
  if status ~= 200 then return fail(core.engine_error(status, "HEAD", archive_path(c), body), path) end
  local raw = headers and headers["x-docker-container-path-stat"]
  local decoded = raw and core.base64_decode(raw)
  local st = decoded and core.json_decode(decoded)
  if type(st) ~= "table" then
    return E.fail("engine", "bad_answer", "stat " .. path .. ": the engine sent no readable path stat", { path = path })
  end
  return st
end

-- h:stat(path, {service}) -> { name, type = "file"|"directory"|"link"|"other", size, mode, mtime, link }
function M_.stat(self, path, opts)
  local err
  opts, err = args(path, opts, STAT_KEYS, "stat")
  if not opts then return nil, err end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local st; st, err = path_stat(eng, c, path)
  if not st then return nil, err end
  return stat_of(st)
end

local READ_KEYS = { max_bytes = E.BYTES, service = "string" }

-- h:read(path, {max_bytes, service}) -> the file's bytes
function M_.read(self, path, opts)
  local err
  opts, err = args(path, opts, READ_KEYS, "read")
  if not opts then return nil, err end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local max = opts.max_bytes or M.DEFAULT_READ_MAX
  -- the archive: the file, its header (a pax one too for a long name) and the end blocks
  local body; body, err = eng:call("GET", archive_path(c), nil, { query = { path = path }, raw = true,
    max_bytes = max + 4096 + #path })
  if not body then
    if err.kind == "output_limit" then
      return E.fail("output_limit", nil, ("read %s: the file is over the budget of %d bytes"):format(path, max),
        { limit = max, path = path })
    end
    return fail(err, path)
  end
  local f; f, err = core.archive_file({ data = body }, { max_bytes = max })
  if not f then return fail(err, path) end
  return f.data
end

local MODE = { "number", min = 0, max = 4095, whole = true, says = "a permission number such as 420 (0644)",
  wanted = "a permission number such as 420 (0644)" }
local WRITE_KEYS = { mode = MODE, service = "string" }

local function tar_tail(size) return (512 - size % 512) % 512 + 1024 end


-- The mounts of a container that the engine's archive never reaches: the kernel's file systems
-- every container has, and its tmpfs mounts. The engine writes beneath them, into the root's own
-- directory that the mount hides, so a file put there lands where nothing in the container sees
-- it. Asked once per container of the handle.
local function hidden_mounts(self, eng, c)
  self._hidden_mounts = self._hidden_mounts or {}
  local m = self._hidden_mounts[c]
  if m then return m end
  local info, err = eng:call("GET", "/containers/" .. core.urlencode(c) .. "/json")
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
    local st = path_stat(eng, c, real .. "/" .. comp)
    if not st then return nil end
    real = st.linkTarget and st.linkTarget ~= "" and st.linkTarget:gsub("/+$", "") or real .. "/" .. comp
  end
  return real == "" and "/" or real
end

-- true when a file put into dir lands where the container sees it, else nil, err (invalid/mount).
local function reachable(self, eng, c, dir, what)
  local mounts, err = hidden_mounts(self, eng, c)
  if not mounts then return fail(err, dir) end
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

-- The query of a PUT into dir: a directory is never replaced by a file, nor a file by a directory.
local function put_query(dir) return { path = dir, noOverwriteDirNonDir = "1" } end

-- h:write(path, data, {mode = 420, service}) -> true. The directory must exist; a file there is
-- replaced whole, a directory is an error (io/EISDIR).
function M_.write(self, path, data, opts)
  if type(data) ~= "string" then E.raise("write: argument 'data' must be a string, got " .. type(data)) end
  local err
  opts, err = args(path, opts, WRITE_KEYS, "write")
  if not opts then return nil, err end
  local dir, base = split(path)
  if not base then return E.fail("invalid", "path", "write: " .. path .. " names no file", { path = path }) end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local ok; ok, err = reachable(self, eng, c, dir, "write " .. path)
  if not ok then return nil, err end
  -- the tar's header, then data sent in place (no copy of it is made), then the padding and end
  ok, err = eng:upload(archive_path(c), core.tar_header(base, #data, opts.mode or 420, os.time()), nil,
    { data = data, zeros = tar_tail(#data), query = put_query(dir), content_type = "application/x-tar",
      timeout = math.max(eng.timeout, #data / (16 * 1024 * 1024)) })
  if ok == nil then return fail(err, path) end
  return true
end

-- Where a copy to path goes, as docker cp decides: into path when it is a directory there (under
-- `name`), else at path itself. -> dir, base | nil, err
local function destination(eng, c, path, name, is_tree, what)
  local st, err = path_stat(eng, c, path)
  if st and stat_of(st).type == "directory" then return path, name end
  if not st and err.reason ~= "ENOENT" then return nil, err end
  if not st and path:find("/$") then
    return E.fail("io", "ENOENT", what .. ": " .. path .. " is not a directory there", { path = path })
  end
  if st and is_tree then
    return E.fail("io", "ENOTDIR", what .. ": " .. path .. " is not a directory: a directory never replaces a file",
      { path = path })
  end
  local dir, base = split(path)
  if not base then return E.fail("invalid", "path", what .. ": " .. path .. " names no file or directory", { path = path }) end
  return dir, base
end

-- h:upload(local_path, path, {mode, service}) -> true: the host file or directory streamed into
-- the container, into path when it is a directory (permission bits kept; mode sets a file's).
function M_.upload(self, local_path, path, opts)
  E.want(local_path, "string", "upload", "argument 'local_path'")
  if local_path == nil or local_path == "" then E.raise("upload: argument 'local_path' must be a path on the host") end
  local aerr
  opts, aerr = args(path, opts, WRITE_KEYS, "upload")
  if not opts then return nil, aerr end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local st, serr = core.file_stat(local_path)
  if not st then return nil, serr end
  local tree = st.type == "directory"
  if not tree and st.type ~= "file" then
    return E.fail("invalid", "not_regular", "upload: " .. local_path .. " is not a regular file or a directory",
      { path = local_path })
  end
  local name = basename(local_path)
  if name == "" or name == "." or name == ".." then
    return E.fail("invalid", "name", "upload: " .. local_path .. " has no name of its own to copy it under; name it "
      .. "by its path (e.g. ../dir)", { path = local_path })
  end
  local dir, base = destination(eng, c, path, name, tree, "upload")
  if not dir then return fail(base, path) end
  local ok, err = reachable(self, eng, c, dir, "upload " .. path)
  if not ok then return nil, err end
  if tree then
    ok, err = eng:upload(archive_path(c), "", nil, { tree = local_path, top = base, query = put_query(dir),
      content_type = "application/x-tar", timeout = math.max(eng.timeout, 600) })
  else
    local size = st.size
    local head = core.tar_header(base, size, opts.mode or (st.mode and st.mode % 4096) or 420, os.time())
    ok, err = eng:upload(archive_path(c), head, local_path, { query = put_query(dir), length = size,
      zeros = tar_tail(size), content_type = "application/x-tar", timeout = math.max(eng.timeout, size / (16 * 1024 * 1024)) })
  end
  if not ok then return fail(err, path) end
  return true
end

local DOWNLOAD_KEYS = { max_bytes = E.BYTES, service = "string" }

local function host_dir(p) return p:match("^(.*)/[^/]*$") or "." end

-- h:download(path, local_path, {max_bytes, service}) -> bytes written: the file, or the directory
-- as a tree, unpacked as it streams into a hidden directory beside local_path and renamed into
-- place (into local_path when that is a directory). A file replaces a file or link there (never
-- followed); a directory goes only where nothing stands. max_bytes (default 1 GiB) bounds the
-- files' bytes: over it, nothing is left.
function M_.download(self, path, local_path, opts)
  E.want(local_path, "string", "download", "argument 'local_path'")
  if local_path == nil or local_path == "" then E.raise("download: argument 'local_path' must be a path on the host") end
  local err
  opts, err = args(path, opts, DOWNLOAD_KEYS, "download")
  if not opts then return nil, err end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local max = opts.max_bytes or M.DEFAULT_DOWNLOAD_MAX
  local st; st, err = path_stat(eng, c, path)
  if not st then return nil, err end
  local s = stat_of(st)
  if s.type == "link" then
    return E.fail("invalid", "symlink", ("download %s: a symbolic link (to %s); it is not followed"):format(path,
      tostring(s.link)), { path = path, target = s.link, type = "link" })
  elseif s.type == "other" then
    return E.fail("invalid", "not_regular", "download " .. path .. ": not a regular file or a directory",
      { path = path, type = s.type })
  end
  local here = core.file_stat(local_path, true)
  local parent, name = host_dir(local_path), basename(local_path)
  if here and here.type == "directory" then parent, name = local_path, basename(path) end
  if name == "" then
    return E.fail("invalid", "path", "download: " .. local_path .. " names no file or directory", { path = local_path })
  end
  local stream; stream, err = eng:stream(archive_path(c), { query = { path = path }, max_bytes = max + ARCHIVE_SLACK,
    timeout = math.max(eng.timeout, 600) })
  if not stream then return fail(err, path) end
  local res; res, err = core.archive_place(stream.h, stream.id, parent, name, { max_bytes = max })
  local terr = stream:close()
  if not res then
    if terr and err.kind == "engine" and err.reason == "bad_archive" then err = terr end
    if err.kind == "output_limit" then
      return E.fail("output_limit", nil, ("download %s: over the budget of %d bytes of files; pass a larger "
        .. "max_bytes to take it"):format(path, max), { limit = max, path = path })
    end
    return fail(err, path)
  end
  return res.bytes
end

local LIST_KEYS = { service = "string", max_entries = E.COUNT1 }

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
  local info, err = eng:call("GET", "/containers/" .. core.urlencode(c) .. "/json")
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
function M_.list(self, path, opts)
  local err
  opts, err = args(path, opts, LIST_KEYS, "list")
  if not opts then return nil, err end
  local max_entries = opts.max_entries or M.DEFAULT_LIST_ENTRIES
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local tar; tar, err = eng:call("GET", archive_path(c), nil, { query = { path = path }, raw = true,
    max_bytes = M.LIST_ARCHIVE_MAX })
  local out
  if tar then
    out, err = from_archive(tar, path, max_entries)
  elseif err.kind == "output_limit" then
    out, err = by_helper(eng, c, path, max_entries)
  end
  if not out then return fail(err, path) end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

local REMOVE_KEYS = { recursive = "boolean", service = "string" }

-- h:remove(path, {recursive, service}) -> true; a path that is not there is already removed.
-- The archive API cannot delete, so this runs rm in the container (its image must have one).
function M_.remove(self, path, opts)
  local err
  opts, err = args(path, opts, REMOVE_KEYS, "remove")
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
