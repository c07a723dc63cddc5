-- The session interface (sandstack.session) on an sbx box (internal to sandstack.sbx): the
-- driver of the one session class, the names every backend's handle shares mapped onto the
-- box's own exec and file plane. What sbx cannot do the class answers kind = "unsupported".
local core = require "sandstack.core"
local E = require "sandstack.error"
local session = require "sandstack.session"
local files = require "sandstack.sbx.box_files"

local M = {}

local function seconds_since(t0) return core.engine_clock() - t0 end

-- The session's exec keys on top of the box's own: max_bytes (the box's max_output_bytes),
-- stdin and service (a row without a check here is the box's own: options.exec).
local SESSION_KEYS = E.described {
  { "timeout", type = "seconds", default = "the backend's `exec_timeout`",
    refused = "not above 0" },
  { "cwd", type = "string, a guest path", default = "the work directory",
    refused = "empty, or holds a NUL" },
  { "env", type = "table, name to string", default = "none",
    refused = "not a table" },
  { "max_output_bytes", type = "bytes", default = "the backend's",
    refused = "raises in `exec`: use `exec_bounded`" },
  { "user", type = "string", default = "the sandbox's",
    refused = "empty, or holds a NUL" },
  { "max_bytes", E.BYTES, type = "bytes", default = "the backend's",
    refused = "past it: `output_limit` with `killed` (the session form of `max_output_bytes`)" },
  { "service", "string", type = "string", default = "the sandbox",
    refused = "any other name: `unsupported` (a box has no sidecars)" },
  { "stdin", "string", type = "string", default = "none",
    refused = "`unsupported` (the exec wrapper's input carries the environment)" },
}

-- The stat of a plane's attributes, in the shape every backend gives.
local function stat_of(name, a)
  return { name = name, type = a.mode == "directory" and "directory" or a.mode == "file" and "file"
    or a.mode == "link" and "link" or "other", size = a.size, mtime = a.modification,
    mode = tonumber((a.permissions:gsub("[^-]", "1"):gsub("-", "0")), 2) }
end

local function basename(path) return (path:gsub("/+$", ""):match("([^/]*)$")) end

-- Why sbx has no such method (the class's unsupported error says it).
local OVER_TIME = "the sbx CLI offers no pause, snapshot, fork, diff or expiry of a sandbox (its own idle stop "
  .. "keeps the files); hibernate and wake are offered"
-- sbx decides network approvals in its own daemon, with no hook a program can answer
local NO_ASK = "sbx's own network approvals are not reachable from its CLI; use an allowlist"
local WHY = { egress_asks = NO_ASK, answer = NO_ASK, serve = NO_ASK }
for _, m in ipairs { "pause", "resume", "snapshot", "fork", "changes", "set_timeout", "expires" } do WHY[m] = OVER_TIME end

-- Makes Box the session class's (sandstack.session): the box's own exec, read, write, remove
-- and hibernate (box.lua) move into the driver's operations, beside those below.
function M.install(Box)
  local box_exec, box_bounded = Box.exec, Box.exec_bounded
  local ops = { read = Box.read, remove = Box.remove, hibernate = Box.hibernate }
  local plane_write = Box.write
  for _, m in ipairs { "exec", "read", "write", "remove", "hibernate" } do Box[m] = nil end

  -- exec as every backend has it: the box's exec plus code, killed and seconds; max_bytes is
  -- the box's max_output_bytes. A timeout or a budget passed is nil, err with killed (the
  -- box's wrapper kills the command's process group).
  function ops:exec(cmd, opts)
    cmd = session.command_argv(cmd)
    local oerr
    opts, oerr = E.options(opts, SESSION_KEYS, "exec")
    if not opts then return nil, oerr end
    if opts.service ~= nil and opts.service ~= "sandbox" then
      return nil, session.unsupported("sbx", "exec", "an sbx sandbox has no sidecars (service " .. tostring(opts.service) .. ")")
    end
    if opts.stdin ~= nil then
      return nil, session.unsupported("sbx", "exec", "stdin: the exec wrapper's input carries the environment")
    end
    local budget = opts.max_bytes or opts.max_output_bytes
    local o = { timeout = opts.timeout, cwd = opts.cwd, env = opts.env, user = opts.user, max_output_bytes = budget }
    local t0 = core.engine_clock()
    local r, err
    if budget then r, err = box_bounded(self, cmd, o) else r, err = box_exec(self, cmd, o) end
    if not r then
      if err and err.killed ~= nil then err.seconds = seconds_since(t0) end
      return nil, err
    end
    r.code, r.killed, r.seconds = r.exit_code, false, seconds_since(t0)
    return r
  end

  -- list(path) -> { {name =, type =, size =, mode =, mtime =}, ... } sorted by name.
  function ops:list(path, opts)
    local out = {}
    for name in self:dir(path, opts) do
      if name ~= "." and name ~= ".." then
        local a, err = self:attributes(path .. "/" .. name, opts)
        if not a then return nil, err end
        out[#out + 1] = stat_of(name, a)
      end
    end
    table.sort(out, function(a, b) return a.name < b.name end)
    return out
  end

  function ops:stat(path, opts)
    local a, err = self:attributes(path, opts)
    if not a then return nil, err end
    return stat_of(basename(path), a)
  end

  -- write(path, data, {mode =}): the plane's atomic write, then the mode set in the guest.
  function ops:write(path, data, opts)
    opts = E.options(opts, { mode = "number", cwd = "string" }, "write")
    if type(data) ~= "string" then E.raise("write: argument 'data' must be a string, got " .. type(data)) end
    local ok, err = plane_write(self, path, data, { cwd = opts.cwd })
    if not ok or not opts.mode then return ok, err end
    local guest; guest, err = self._plane:check(path, { cwd = opts.cwd })
    if not guest then return nil, err end
    local r; r, err = box_exec(self, { "chmod", ("%o"):format(opts.mode), "--", guest })
    if not r then return nil, err end
    if r.exit_code ~= 0 then return E.fail("io", "chmod", "write " .. path .. ": chmod: " .. r.stderr) end
    return true
  end

  -- upload and download copy files and trees between the host and the workspace (box_files.lua).
  function ops:upload(local_path, path, opts) return files.upload(self, local_path, path, opts) end
  function ops:download(path, local_path, opts) return files.download(self, path, local_path, opts) end

  -- an sbx box never closes: its close releases the file plane only (box.lua)
  session.class({ backend = "sbx", ops = ops, why = WHY, path = "a path in the workspace" }, Box)
end

return M
