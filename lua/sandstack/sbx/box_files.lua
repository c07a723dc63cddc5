-- Copies between the host and a box's workspace (internal to sandstack.sbx): the session's
-- h:upload and h:download with docker cp's rules, as on docker (docs/session.md): onto a
-- directory a copy goes into it, a directory copies as a tree with its permission bits, nothing
-- replaces a directory, and a download is put in place by a rename, whole or not at all. The
-- workspace side goes through the file plane (no link followed on the way, atomic writes); on
-- the host, nothing below what the caller named is followed. Each file passes through memory
-- once, within max_bytes for the whole download. Links, devices and FIFOs are not copied.
local core = require "sandstack.core"
local E = require "sandstack.error"

local M = {}

M.DEFAULT_DOWNLOAD_MAX = 64 * 1024 * 1024

local function basename(p) return (p:gsub("/+$", ""):match("([^/]*)$")) end
local function join(dir, name) return (dir:gsub("/+$", "")) .. "/" .. name end
local function host_dir(p) return p:match("^(.*)/[^/]*$") or "." end

-- Permission bits from the plane's "rwxr-x---" form.
local function bits(permissions) return tonumber((permissions:gsub("[^-]", "1"):gsub("-", "0")), 2) end

local function has(m, b) return math.floor(m / b) % 2 == 1 end
-- The bits a host copy keeps, as the capture does: no group or other write (020, 02), and the
-- owner may always read and write (0400, 0200) and enter a directory (0100). Arithmetic: LuaJIT
-- has no `&`.
local function host_mode(m, is_dir)
  m = m % 512
  for _, b in ipairs { 16, 2 } do if has(m, b) then m = m - b end end
  for _, b in ipairs(is_dir and { 256, 128, 64 } or { 256, 128 }) do if not has(m, b) then m = m + b end end
  return m
end

local function read_host(path)
  local f, err = io.open(path, "rb")
  if not f then return E.fail("io", "open", "upload: " .. tostring(err), { path = path }) end
  local data = f:read("*a")
  f:close()
  if not data then return E.fail("io", "read", "upload: cannot read " .. path, { path = path }) end
  return data
end

-- chmod in the guest, one exec per mode (the plane writes as the host's user: the guest's own
-- chmod sets what the guest sees), for { [guest path] = mode }.
local function set_modes(box, modes)
  local by_mode = {}
  for guest, mode in pairs(modes) do
    local list = by_mode[mode] or {}
    by_mode[mode] = list
    list[#list + 1] = guest
  end
  for mode, list in pairs(by_mode) do
    table.sort(list)
    for i = 1, #list, 200 do
      local argv = { "chmod", ("%o"):format(mode), "--" }
      for j = i, math.min(i + 199, #list) do argv[#argv + 1] = list[j] end
      local r, err = box:exec(argv)
      if not r then return nil, err end
      if r.exit_code ~= 0 then return E.fail("io", "chmod", "upload: chmod: " .. r.stderr:gsub("\n$", "")) end
    end
  end
  return true
end

-- The host directory src copied as the workspace directory dest (made, or merged into when it is
-- a directory already), its files and directories and their modes.
local function upload_tree(box, src, dest, cwd, modes)
  local a = box:attributes(dest, { cwd = cwd })
  if not a then
    local ok, err = box:mkdir(dest, { cwd = cwd })
    if not ok then return nil, err end
  elseif a.mode ~= "directory" then
    return E.fail("io", "ENOTDIR", "upload: " .. dest .. " is not a directory: a directory never replaces a file",
      { path = dest })
  end
  local st = assert(core.file_stat(src))
  modes[assert(box._plane:check(dest, { cwd = cwd }))] = st.mode
  local names, err = core.listdir(src)
  if not names then return nil, err end
  for _, name in ipairs(names) do
    local from, to = src .. "/" .. name, join(dest, name)
    local cst; cst, err = core.file_stat(from, true)
    if not cst then return nil, err end
    if cst.type == "directory" then
      local ok; ok, err = upload_tree(box, from, to, cwd, modes)
      if not ok then return nil, err end
    elseif cst.type == "file" then
      local data; data, err = read_host(from)
      if not data then return nil, err end
      local ok; ok, err = box:write(to, data, { cwd = cwd })
      if not ok then return nil, err end
      modes[assert(box._plane:check(to, { cwd = cwd }))] = cst.mode
    end
  end
  return true
end

local UPLOAD_KEYS = { mode = "number", cwd = "string" }

-- upload(local_path, path, {mode, cwd}) -> true
function M.upload(box, local_path, path, opts)
  if type(local_path) ~= "string" or local_path == "" then E.raise("upload: argument 'local_path' must be a path on the host") end
  opts = E.options(opts, UPLOAD_KEYS, "upload")
  local st, err = core.file_stat(local_path)
  if not st then return nil, err end
  if st.type ~= "file" and st.type ~= "directory" then
    return E.fail("invalid", "not_regular", "upload: " .. local_path .. " is not a regular file or a directory",
      { path = local_path })
  end
  local name = basename(local_path)
  if name == "" or name == "." or name == ".." then
    return E.fail("invalid", "name", "upload: " .. local_path .. " has no name of its own to copy it under",
      { path = local_path })
  end
  local dest = path
  local a = box:attributes(path, { cwd = opts.cwd })
  if a and a.mode == "directory" then dest = join(path, name) end
  if st.type == "file" then
    local data; data, err = read_host(local_path)
    if not data then return nil, err end
    return box:write(dest, data, { mode = opts.mode or st.mode, cwd = opts.cwd })
  end
  local modes = {}
  local ok; ok, err = upload_tree(box, local_path, dest, opts.cwd, modes)
  if not ok then return nil, err end
  return set_modes(box, modes)
end

-- The workspace path src (its attributes a) copied to the new host path dst, within budget
-- (a table: { left = bytes }). Modes as the capture keeps them: no set-id, sticky, group or
-- other write; the owner may always read and write.
local function fetch(box, src, dst, a, budget, cwd)
  local mode = bits(a.permissions)
  if a.mode == "file" then
    local data, err = box:read(src, { cwd = cwd, max_bytes = math.max(budget.left, 1) })
    if not data or #data > budget.left then return nil, err or E.new("output_limit", nil, "over the budget") end
    budget.left = budget.left - #data
    budget.bytes = budget.bytes + #data
    return core.write_new_file(dst, data, host_mode(mode, false))
  end
  local ok, err = core.mkdir(dst, host_mode(mode, true))
  if not ok then return nil, err end
  local names = {}
  local listed, lerr = pcall(function() for n in box:dir(src, { cwd = cwd }) do names[#names + 1] = n end end)
  if not listed then return nil, lerr end
  for _, n in ipairs(names) do
    if n ~= "." and n ~= ".." then
      local child = join(src, n)
      local ca; ca, err = box:attributes(child, { cwd = cwd })
      if not ca then return nil, err end
      if ca.mode == "file" or ca.mode == "directory" then
        ok, err = fetch(box, child, dst .. "/" .. n, ca, budget, cwd)
        if not ok then return nil, err end
      end
    end
  end
  return true
end

local DOWNLOAD_KEYS = { max_bytes = E.BYTES, cwd = "string" }

-- download(path, local_path, {max_bytes, cwd}) -> bytes written
function M.download(box, path, local_path, opts)
  if type(local_path) ~= "string" or local_path == "" then E.raise("download: argument 'local_path' must be a path on the host") end
  local err
  opts, err = E.options(opts, DOWNLOAD_KEYS, "download")
  if not opts then return nil, err end
  local max = opts.max_bytes or M.DEFAULT_DOWNLOAD_MAX
  local a, err = box:attributes(path, { cwd = opts.cwd })
  if not a then return nil, err end
  if a.mode == "link" then
    return E.fail("invalid", "symlink", "download " .. path .. ": a symbolic link; it is not followed", { path = path })
  elseif a.mode ~= "file" and a.mode ~= "directory" then
    return E.fail("invalid", "not_regular", "download " .. path .. ": not a regular file or a directory", { path = path })
  end
  local here = core.file_stat(local_path, true)
  local parent, name = host_dir(local_path), basename(local_path)
  if here and here.type == "directory" then parent, name = local_path, basename(path) end
  local tmp = parent .. "/.sandstack-download-" .. core.random_hex(8)
  local ok; ok, err = core.mkdir(tmp, 448) -- 0700
  if not ok then return nil, err end
  local budget = { left = max, bytes = 0 }
  ok, err = fetch(box, path, tmp .. "/" .. name, a, budget, opts.cwd)
  if ok then ok, err = core.rename(tmp .. "/" .. name, join(parent, name), a.mode == "directory") end
  core.rmtree(tmp)
  if not ok then
    if E.is(err) and err.kind == "output_limit" then
      return E.fail("output_limit", nil, ("download %s: over the budget of %d bytes of files; pass a larger "
        .. "max_bytes to take it"):format(path, max), { limit = max, path = path })
    end
    return nil, err
  end
  return budget.bytes
end

return M
