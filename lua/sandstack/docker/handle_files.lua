-- The file methods of a stack handle (sandstack.session; docs/session.md): read, write, list,
-- stat, remove, upload and download, over the Engine's archive API (GET, PUT and HEAD
-- /containers/{id}/archive). What comes back is a tar the sandbox made, so it is read by the
-- capture's streaming tar reader (csrc/capture, through core.archive_file and
-- core.archive_list): only a regular file is ever taken, a link is refused and never followed,
-- set-id, sticky and group/other write bits are not kept on the host, and every read has a
-- byte budget. Paths are absolute paths in the container; the engine resolves them inside the
-- container's root, so no link reaches the host. upload and download stream through a file
-- (the engine client's upload and download), never holding the file in memory.
local core = require "sandstack.core"
local E = require "sandstack.error"
local target = require "sandstack.docker.target"

local M = {}

M.DEFAULT_READ_MAX = 64 * 1024 * 1024          -- h:read's budget
M.DEFAULT_TRANSFER_MAX = 16 * 1024 * 1024 * 1024 -- h:download's and h:list's archive budget

local function archive_path(container) return "/containers/" .. core.urlencode(container) .. "/archive" end
M.archive_path = archive_path -- where a container's files are read and written (capture too)

local function check_path(path, what)
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" or path:find("%z") then
    error(what .. ": path must be an absolute path in the container (a string starting with /)", 4)
  end
end

-- dir and base of an absolute path: "/a/b" -> "/a", "b"; "/b" -> "/", "b".
local function split(path)
  local p = path:gsub("/+$", "")
  local dir, base = p:match("^(.*)/([^/]+)$")
  if not base then return nil end
  return dir == "" and "/" or dir, base
end

-- An engine answer about a path, as the file plane of sbx says it: io with an errno name.
local function file_error(err, path)
  if E.is(err) and err.kind == "engine" then
    -- the engine says these in its message, with status 404 or 500
    local text = tostring(err.message)
    local reason = err.status == 404 and "ENOENT" or text:find("read-only", 1, true) and "EROFS"
      or text:find("not a directory", 1, true) and "ENOTDIR" or nil
    if reason then
      local msg = tostring(err.message)
      if reason == "ENOENT" and not msg:find("%a%a%a%a", 1) or msg:match("^HTTP %d+$") then
        msg = reason == "ENOENT" and "no such file or directory" or "read-only file system"
      end
      return E.new("io", reason, path .. ": " .. msg, { path = path, status = err.status })
    end
  end
  if E.is(err) then err.path = err.path or path end
  return err
end

local function fail(err, path) return nil, file_error(err, path) end

local function opts_of(opts, keys, what)
  opts = E.check_keys(opts, keys, what)
  if opts.max_bytes ~= nil and (type(opts.max_bytes) ~= "number" or opts.max_bytes < 1 or opts.max_bytes ~= math.floor(opts.max_bytes)) then
    error(what .. ": option 'max_bytes' must be a positive whole number", 3)
  end
  return opts
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

local STAT_KEYS = { service = true }

-- h:stat(path, {service}) -> { name, type = "file"|"directory"|"link"|"other", size, mode, mtime, link }
function M_.stat(self, path, opts)
  check_path(path, "stat")
  opts = opts_of(opts, STAT_KEYS, "stat")
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local status, body, headers = eng:request("HEAD", archive_path(c) .. "?path=" .. core.urlencode(path))
  if not status then return fail(body, path) end
  if status ~= 200 then return fail(core.engine_error(status, "HEAD", archive_path(c), body), path) end
  local raw = headers and headers["x-docker-container-path-stat"]
  local decoded = raw and core.base64_decode(raw)
  local st = decoded and core.json_decode(decoded)
  if type(st) ~= "table" then
    return E.fail("engine", "bad_answer", "stat " .. path .. ": the engine sent no readable path stat", { path = path })
  end
  return stat_of(st)
end

local READ_KEYS = { max_bytes = true, service = true }

-- h:read(path, {max_bytes, service}) -> the file's bytes
function M_.read(self, path, opts)
  check_path(path, "read")
  opts = opts_of(opts, READ_KEYS, "read")
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local max = opts.max_bytes or M.DEFAULT_READ_MAX
  -- the archive: the file, its header (a pax one too for a long name) and the end blocks
  local body, err = eng:call("GET", archive_path(c), nil, { query = { path = path }, raw = true,
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

local WRITE_KEYS = { mode = true, service = true }

local function tar_tail(size) return (512 - size % 512) % 512 + 1024 end

local function check_mode(mode, what)
  if mode ~= nil and (type(mode) ~= "number" or mode < 0 or mode > 4095 or mode ~= math.floor(mode)) then
    error(what .. ": option 'mode' must be a permission number such as 420 (0644)", 4)
  end
end

-- h:write(path, data, {mode = 420, service}) -> true. The directory must exist; the file is
-- replaced whole.
function M_.write(self, path, data, opts)
  check_path(path, "write")
  if type(data) ~= "string" then error("write: data must be a string", 2) end
  opts = opts_of(opts, WRITE_KEYS, "write")
  check_mode(opts.mode, "write")
  local dir, base = split(path)
  if not base then error("write: path must name a file", 2) end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  -- the tar's header, then data sent in place (no copy of it is made), then the padding and end
  local ok, err = eng:upload(archive_path(c), core.tar_header(base, #data, opts.mode or 420, os.time()), nil,
    { data = data, zeros = tar_tail(#data), query = { path = dir }, content_type = "application/x-tar",
      timeout = math.max(eng.timeout, #data / (16 * 1024 * 1024)) })
  if ok == nil then return fail(err, path) end
  return true
end

-- h:upload(local_path, path, {mode, service}) -> true: the host file streamed into the
-- container (its permission bits kept unless mode is given).
function M_.upload(self, local_path, path, opts)
  if type(local_path) ~= "string" or local_path == "" then error("upload: local_path must be a string", 2) end
  check_path(path, "upload")
  opts = opts_of(opts, WRITE_KEYS, "upload")
  check_mode(opts.mode, "upload")
  local dir, base = split(path)
  if not base then error("upload: path must name a file", 2) end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local st, serr = core.file_stat(local_path)
  if not st then return nil, serr end
  if st.type ~= "file" then return E.fail("invalid", "not_regular", "upload: " .. local_path .. " is not a regular file",
    { path = local_path }) end
  local size, mode = st.size, st.mode
  local head = core.tar_header(base, size, opts.mode or (mode and mode % 4096) or 420, os.time())
  local ok, err = eng:upload(archive_path(c), head, local_path, { query = { path = dir }, length = size,
    zeros = tar_tail(size), content_type = "application/x-tar", timeout = math.max(eng.timeout, size / (16 * 1024 * 1024)) })
  if not ok then return fail(err, path) end
  return true
end

local DOWNLOAD_KEYS = { max_bytes = true, service = true }

-- h:download(path, local_path, {max_bytes, service}) -> size: the file streamed to the host;
-- local_path is replaced (never followed when it is a link), mode 0600 until it is complete.
function M_.download(self, path, local_path, opts)
  check_path(path, "download")
  if type(local_path) ~= "string" or local_path == "" then error("download: local_path must be a string", 2) end
  opts = opts_of(opts, DOWNLOAD_KEYS, "download")
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local max = opts.max_bytes or M.DEFAULT_TRANSFER_MAX
  local tmp = (local_path:match("^(.*)/[^/]*$") or ".") .. "/.sandstack-download-" .. core.random_hex(6) .. ".tar"
  local ok, err = eng:download(archive_path(c), tmp, { query = { path = path }, max_bytes = max + 4096 + #path,
    timeout = math.max(eng.timeout, 600) })
  if not ok then
    if err.kind == "output_limit" then
      return E.fail("output_limit", nil, ("download %s: the file is over the budget of %d bytes"):format(path, max),
        { limit = max, path = path })
    end
    return fail(err, path)
  end
  local f; f, err = core.archive_file({ path = tmp }, { to = local_path, max_bytes = max })
  os.remove(tmp)
  if not f then return fail(err, path) end
  return f.size
end

local LIST_KEYS = { service = true, max_entries = true }

-- h:list(path, {service, max_entries}) -> { {name, type, size, mode, mtime, link}, ... } of
-- the directory's entries (not recursive), sorted by name. The engine sends the whole tree as
-- a tar: it goes to a temporary file and only its headers are read.
function M_.list(self, path, opts)
  check_path(path, "list")
  opts = E.check_keys(opts, LIST_KEYS, "list")
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  local tmp = os.tmpname()
  local ok, err = eng:download(archive_path(c), tmp, { query = { path = path }, max_bytes = M.DEFAULT_TRANSFER_MAX,
    timeout = math.max(eng.timeout, 600) })
  if not ok then os.remove(tmp); return fail(err, path) end
  local members; members, err = core.archive_list({ path = tmp }, { max_entries = opts.max_entries })
  os.remove(tmp)
  if not members then return fail(err, path) end
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
    end
  end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

local REMOVE_KEYS = { recursive = true, service = true }

-- h:remove(path, {recursive, service}) -> true; a path that is not there is already removed.
-- The archive API cannot delete, so this runs rm in the container (its image must have one).
function M_.remove(self, path, opts)
  check_path(path, "remove")
  opts = E.check_keys(opts, REMOVE_KEYS, "remove")
  if path:gsub("/+", "/") == "/" then error("remove: refusing to remove /", 2) end
  local r, err = self:exec({ "rm", opts.recursive and "-rf" or "-f", "--", path }, { service = opts.service, timeout = 60 })
  if not r then return nil, err end
  if r.code ~= 0 then
    return E.fail("io", "remove", "remove " .. path .. ": " .. (r.stderr:match("[^\n]+") or ("rm exited " .. r.code)),
      { path = path, exit_code = r.code })
  end
  return true
end

return M
