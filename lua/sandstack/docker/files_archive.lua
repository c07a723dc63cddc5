-- What the file methods of a stack handle (docker/handle_files.lua) share over the Engine's
-- archive API: a path checked, the engine's answers about a path as file errors (io with an
-- errno name, the engine's host paths scrubbed), and a path's stat.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local target = require "sandstack.docker.target"

local M = {}

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
function M.split(path)
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

-- nil and the engine answer err about path as a file error, for a method to return.
function M.fail(err, path) return nil, file_error(err, path) end

function M.basename(p) return (p:gsub("/+$", ""):match("([^/]*)$")) end

-- A method's path and options checked -> opts | nil, err (docs/api/README.md, "Conventions").
function M.args(path, opts, keys, what)
  local ok, err = check_path(path, what)
  if not ok then return nil, err end
  return E.options(opts, keys, what)
end

-- The arguments of a copy between the host and the container (upload, download) checked, and
-- the engine and container of the call: opts, eng, c | nil, err. Call it from the method itself.
function M.copy_args(self, local_path, path, opts, keys, what)
  E.want(local_path, "string", what, "argument 'local_path'")
  if local_path == nil or local_path == "" then E.raise(what .. ": argument 'local_path' must be a path on the host") end
  local err
  opts, err = M.args(path, opts, keys, what)
  if not opts then return nil, err end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  return opts, eng, c
end

-- The stat the engine gives in X-Docker-Container-Path-Stat (a Go os.FileMode): the type bits
-- are Go's, the permission bits Unix's.
local GO_DIR, GO_LINK, GO_PIPE, GO_SOCKET, GO_DEVICE = 2 ^ 31, 2 ^ 27, 2 ^ 25, 2 ^ 24, 2 ^ 26
local function bit(v, b) return math.floor(v / b) % 2 == 1 end
function M.stat_of(raw)
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

-- The engine's stat of a path (HEAD: no file's bytes), as it sends it, or nil, err.
function M.path_stat(eng, c, path)
  local r = ops.request("stat_archive", c, { path = path })
  local status, body, headers = eng:request(r.method, r.path, nil, { query = r.query })
  if not status then return M.fail(body, path) end
  if status ~= 200 then return M.fail(core.engine_error(status, r.method, r.path, body), path) end
  local raw = headers and headers["x-docker-container-path-stat"]
  local decoded = raw and core.base64_decode(raw)
  local st = decoded and core.json_decode(decoded)
  if type(st) ~= "table" then
    return E.fail("engine", "bad_answer", "stat " .. path .. ": the engine sent no readable path stat", { path = path })
  end
  return st
end

return M
