-- The Box: one sbx sandbox as acquire hands it out. Commands run through the exec wrapper
-- (csrc/sbx/wrapper.c), files through the file plane on the host side of the workspace mount.
-- The public methods are API.md's; retirement and drift are sandstack.sbx.retirement's, the
-- kill a local function. Internal to sandstack.sbx (M.new).
local core = require "sandstack.core"
local E = require "sandstack.error"
local cli = require "sandstack.sbx.cli"
local records, dispose = require "sandstack.sbx.records", require "sandstack.sbx.dispose"
local options, retirement = require "sandstack.sbx.options", require "sandstack.sbx.retirement"
local session = require "sandstack.session"

local M = {}
local retire, usable = retirement.retire, retirement.usable

local Box = {}
Box.__index = Box

M.EXEC_DIR = "/tmp/.sandstack-exec" -- guest: pgid and cancel files, made 1777 at create

-- fields: backend, name, id, workspace, mount, work_dir, egress, allow (a compiled policy or
-- nil), allow_canon, image, fingerprint, probe_host
function M.new(fields) return setmetatable(fields, Box) end

-- Kills a command's process group with a second exec, as the sandbox's user; retires the
-- sandbox unless the kill script saw the group gone (it exits non-zero when the kill failed,
-- e.g. EPERM for a command run with user = "root", or a member outlived it: csrc/sbx/wrapper.c).
-- Returns killed, and the error of a retirement that could not be recorded.
local function kill(box, token)
  local b = box.backend
  local res = cli.run_raw(b, { "exec", box.name, "sh", "-c", core.sbx_kill_script, "sandstack-sbx", M.EXEC_DIR, token },
    { timeout = b.exec_cleanup_timeout, max_output = 64 * 1024 })
  if not res or res.exit_code ~= 0 then
    local ok, err = retire(box, "kill_failed")
    return false, not ok and err or nil
  end
  return true
end

-- The env entries of a command, "K=V" sorted by name; the wrapper's stdin carries them
-- (csrc/sbx/wrapper.c builds it), never sbx's command line, which every local user can read in
-- /proc.
local function env_entries(env)
  if env == nil then return {} end
  local keys = {}
  for k in pairs(env) do keys[#keys + 1] = k end
  for _, k in ipairs(keys) do
    if type(k) ~= "string" or not k:match("^[A-Za-z_][A-Za-z0-9_]*$") then
      return E.fail("invalid", "env", "exec: bad environment variable name " .. tostring(k))
    end
  end
  table.sort(keys)
  local out = {}
  for i, k in ipairs(keys) do out[i] = k .. "=" .. tostring(env[k]) end
  return out
end

local exec_keys = { timeout = true, cwd = true, env = true, max_output_bytes = true, user = true }

-- The argv of a command: a list of strings, or one shell-command string, which /bin/sh -c runs
-- inside the wrapper (as the original's exec does); the list form stays the default.
local function command_argv(cmd) return session.command_argv(cmd) end

local plane -- defined with the file methods below

-- The guest directory a command runs in: work_dir by default; a relative cwd is resolved by
-- the file plane against work_dir and may not climb above it; an absolute one is the guest's
-- own business (the command runs at the guest's authority).
local function command_cwd(box, cwd)
  if cwd == nil then return box.work_dir end
  if cwd:sub(1, 1) == "/" then return cwd end
  local p, err = plane(box)
  if not p then return nil, err end
  return p:resolve(cwd)
end

local function run_command(self, argv, opts)
  local ok, err = options.exec(opts)
  if not ok then return nil, err end
  ok, err = usable(self)
  if not ok then return nil, err end
  ok, err = retirement.check_drift(self)
  if not ok then return nil, err end
  local b = self.backend
  local budget = opts.max_output_bytes or b.max_output_bytes
  local cwd, cerr = command_cwd(self, opts.cwd)
  if not cwd then return nil, cerr end
  local env, eerr = env_entries(opts.env)
  if not env then return nil, eerr end
  local timeout = opts.timeout or b.exec_timeout
  -- one call into C: the wrapper's input, the sbx CLI, the split of its stderr at the nonce
  local res, rerr = cli.exec(b, self.name, opts.user, { workspace = self.workspace, mount = self.mount,
    cwd = cwd, env = env, argv = argv, dir = M.EXEC_DIR, timeout = timeout, max_output = budget })
  if not res then return nil, rerr end
  if res.timed_out or res.over_limit then
    local killed, kerr = kill(self, res.token)
    if kerr then return nil, kerr end -- the retirement could not be recorded: that comes first
    local extra = killed and "" or "; the kill failed, so the sandbox is retired"
    if res.timed_out then
      return E.fail("timeout", "exec", ("the command ran past %gs and its process group was killed%s"):format(timeout, extra),
        { killed = killed })
    end
    return E.fail("output_limit", nil, ("the command's output passed %d bytes and its process group was killed%s")
      :format(budget, extra), { limit = budget, killed = killed })
  end
  if not res.ran then
    -- the wrapper never ran: this is sbx's failure, never the command's exit status
    local e = cli.classify(res, "sbx exec")
    if e.reason == "not_found" then
      local rok, retire_err = retire(self, "missing")
      if not rok then return nil, retire_err end
    end
    return nil, e
  end
  return { stdout = res.stdout, stderr = res.stderr, exit_code = res.exit_code or (128 + (res.signal or 0)) }
end

function Box:exec_bounded(cmd, opts)
  local argv = command_argv(cmd)
  return run_command(self, argv, E.check_keys(opts, exec_keys, "exec"))
end

function Box:exec(cmd, opts)
  local argv = command_argv(cmd)
  opts = E.check_keys(opts, exec_keys, "exec")
  if opts.max_output_bytes then E.raise("exec: option 'max_output_bytes' is exec_bounded's: use that") end
  return run_command(self, argv, opts)
end

-- The file plane of the workspace, opened on first use.
plane = function(box)
  if box._plane then return box._plane end
  local p, err = core.fileplane_open{ root = box.workspace, guest_root = box.mount, cwd = box.work_dir,
    max_read = box.backend.max_output_bytes }
  if not p then return nil, err end
  box._plane = p
  return p
end

-- The plane of a box that may be used now, or nil, err.
local function usable_plane(box)
  local ok, err = usable(box)
  if not ok then return nil, err end
  return plane(box)
end

-- The file methods take the plane's options: { cwd = } for a per-call working directory
-- (relative paths resolve against it and never climb above it), read's { max_bytes = n }
-- (output_limit past n), attributes' optional field name before them.
for _, m in ipairs({ "attributes", "read", "write", "mkdir" }) do
  Box[m] = function(self, ...)
    local p, err = usable_plane(self)
    if not p then return nil, err end
    return p[m](p, ...)
  end
end

-- An iterator, as lfs.dir: a path (or a box) that cannot be listed raises the error object.
function Box:dir(path, opts)
  local p, err = usable_plane(self)
  if not p then error(err, 2) end
  return p:dir(path, opts)
end

local function exec_result(res, err, what)
  if not res then return nil, err end
  if res.exit_code ~= 0 then
    return E.fail("invalid", "refused", what .. ": " .. (res.stderr:match("[^\n]+") or ("exit " .. res.exit_code)),
      { exit_code = res.exit_code, stderr = res.stderr })
  end
  return true
end

-- The host-side check before a removal in the guest (csrc/fileplane: no link or mount on the
-- way, every name listed verbatim, never the workspace root, the working directory or what
-- holds it): the guest path to remove, false when there is nothing to remove, or nil, err.
local function checked_guest_path(box, path, check_opts)
  local p, perr = usable_plane(box)
  if not p then return nil, perr end
  return p:check(path, check_opts)
end

local remove_keys = E.described {
  { "recursive", "boolean", type = "boolean", default = "`false`",
    refused = "not a boolean" },
  { "cwd", "string", type = "string", default = "the work directory",
    refused = "outside it" },
}

-- remove and reclaim act in the guest, at the guest's own authority (spec 001 "Files"). A
-- path that is not there is already removed: true, without an exec.
function Box:remove(path, opts)
  opts = E.options(opts, remove_keys, "remove")
  local guest, err = checked_guest_path(self, path, { cwd = opts.cwd })
  if guest == false then return true end
  if not guest then return nil, err end
  local res, rerr = self:exec({ "rm", opts.recursive and "-rf" or "-f", "--", guest })
  return exec_result(res, rerr, "remove " .. path)
end

-- timeout: options.seconds
local reclaim_keys = E.described {
  { "cwd", "string", type = "string", default = "the work directory",
    refused = "outside it" },
  { "timeout", type = "seconds", default = "the backend's `command_timeout`",
    refused = "not above 0" },
}

-- reclaim(target, {cwd =, timeout =}): a relative target names a child of the working
-- directory, an absolute one anything strictly inside the workspace but the working directory
-- and what holds it; then rm -rf in the guest, within timeout (the backend's exec_timeout).
function Box:reclaim(target, opts)
  if type(target) ~= "string" or target == "" then E.raise("reclaim: argument 'target' must be a path") end
  opts = E.options(opts, reclaim_keys, "reclaim")
  if opts.timeout ~= nil then
    local ok, err = options.seconds(opts.timeout, "timeout", "reclaim")
    if not ok then return nil, err end
  end
  local guest, gerr = checked_guest_path(self, target, { cwd = opts.cwd, child = true })
  if guest == false then return true end
  if not guest then return nil, gerr end
  local res, rerr = self:exec({ "rm", "-rf", "--", guest }, { timeout = opts.timeout })
  return exec_result(res, rerr, "reclaim " .. target)
end

-- Releases the handle's host resources (its file plane); the sandbox stays. Idempotent. The
-- plane is userdata with its own __gc, so nothing here relies on __gc of a table (LuaJIT has
-- none).
function Box:close()
  if self._plane then self._plane:close(); self._plane = nil end
end

Box.__close = Box.close

-- Hibernation is sbx's stop: the microVM stops and the sandbox keeps its files; the next
-- command starts it again (wake runs `true` in it). What else of a session over time sbx
-- cannot do is a typed unsupported (sandstack.session; the reason is box_session.lua's).
function Box:hibernate()
  if self.disposed then E.raise("the sandbox handle is disposed: acquire again") end
  local ok, err = cli.run(self.backend, { "stop", self.name })
  if not ok then return nil, err end
  return true
end

function Box:wake()
  if self.disposed then E.raise("the sandbox handle is disposed: acquire again") end
  local r, err = self:exec({ "true" }, { timeout = 120 })
  if not r then return nil, err end
  return true
end

-- Removes this sandbox: only the instance this handle made (its id is checked in sbx ls first;
-- a replacement made by another process is not ours). The workspace is deleted only once sbx
-- has confirmed the sandbox is gone: a sandbox the listing omits but that still answers, or a
-- daemon that cannot say, is unreachable (daemon_fault), and the sandbox, its record and its
-- workspace are kept (sandstack.sbx.dispose.instance).
function Box:dispose()
  if self.disposed then return true end
  local b = self.backend
  local state, err = dispose.instance(b, self.name, self.id)
  if not state then return nil, err end
  local rec = records.read(b, self.name)
  if rec and rec.id == self.id then records.remove(b, self.name) end
  local ok, rerr = dispose.remove_tree(self.workspace)
  if not ok then return nil, rerr end
  os.remove(b.workspace_root .. "/" .. self.name) -- only when empty
  self:close()
  self.disposed = true
  return true
end

-- The session interface every backend's handle shares (sandstack.session), on top of the above:
-- the box's exec, read, write, remove and hibernate become the driver's operations there.
require("sandstack.sbx.box_session").install(Box)

return M
