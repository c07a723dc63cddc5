-- sandstack.sbx: the Docker sbx backend (spec 001). See docs/sbx.md.
--   local backend = sandstack.sbx.backend{ sbx_path =, workspace_root =, name_prefix = }
--   local box, err = backend:acquire{ conversation =, key =, kind =, egress = "closed" }
--   box:exec({ "echo", "hi" }) -> { stdout =, stderr =, exit_code = }
-- The CLI is driven through core.sbx_run (a clone-based runner with a deadline and capped
-- streams, csrc/sbx/runner.c); the exec wrapper and its stderr nonce parser are in
-- csrc/sbx/wrapper.c; the egress rules logic in sandstack.sbx.egress.
local core = require "sandstack.core"
local E = require "sandstack.error"
local egress = require "sandstack.sbx.egress"

local unpack = table.unpack or unpack

local M = {}

local MiB = 1024 * 1024
local EXEC_DIR = "/tmp/.sandstack-exec" -- guest: pgid and cancel files, made 1777 at create
local AGENT_SOCKET = "/run/ssh-agent.sock"

M.defaults = {
  name_prefix = "sandstack-",
  storage_base = "/sandstack/work",
  exec_cleanup_timeout = 10,
  max_output_bytes = 8 * MiB,
  command_timeout = 60, -- every sbx call but create and the command itself
  create_timeout = 600,
  exec_timeout = 60, -- a command's own default timeout
  cpus = 2,
  memory = "2g",
}

local function default_workspace_root()
  local base = os.getenv("XDG_STATE_HOME")
  if not base or base == "" then base = (os.getenv("HOME") or "/root") .. "/.local/state" end
  return base .. "/sandstack-sbx/workspaces"
end

local function mkdir_p(path)
  local acc = ""
  for part in path:gmatch("[^/]+") do
    acc = acc .. "/" .. part
    local ok, err = core.sbx_mkdir(acc, 448) -- 0700
    if not ok and err.reason ~= "exists" then return nil, err end
  end
  return true
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- The record carries the retirement mark that other processes rely on: it is replaced only by
-- a complete, fsynced file (csrc/util/durable.c), and a write that fails is reported.
local function write_file_atomic(path, data)
  return core.write_file_durable(path, data, "sbx")
end

local function dirname(p) return p:match("^(.*)/[^/]*$") end

------------------------------------------------------------------------------ the CLI

local Backend = {}
Backend.__index = Backend

-- Turns a failed sbx call into a typed error, by the v0.45.1 texts (docs/sbx.md).
local function classify(res, what)
  local se = res.stderr or ""
  local low = se:lower()
  if low:find("backend unavailable", 1, true) then
    return E.new("daemon_fault", "backend_unavailable",
      "the sbx daemon has lost its engine; run `sbx daemon restart` (" .. what .. ")", { stderr = se })
  end
  for _, pat in ipairs({ "sbx login", "not logged in", "log in", "unauthorized", "unauthenticated",
    "not authenticated" }) do
    if low:find(pat, 1, true) then
      return E.new("login_required", nil, "sbx is not signed in; run `sbx login` (" .. what .. ")", { stderr = se })
    end
  end
  local reason = "failed"
  if res.timed_out then reason = "timeout"
  elseif low:find("not found", 1, true) then reason = "not_found"
  elseif low:find("already exists", 1, true) then reason = "conflict"
  elseif low:find("kit startup exited with code 127", 1, true) then reason = "missing_bash" end
  local msg = se:match("error: ([^\n]*)") or se:match("([^\n]+)") or "no output"
  return E.new("sbx", reason, what .. ": " .. msg, { stderr = se, exit_code = res.exit_code })
end

-- Runs `sbx args...` (opts: timeout, max_output, stdin); returns the result table (any exit
-- code) or nil, err when it could not run.
function Backend:run_raw(args, opts)
  opts = opts or {}
  local argv = { self.sbx_path }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return core.sbx_run(argv, { timeout = opts.timeout or self.command_timeout,
    max_output = opts.max_output or 4 * MiB, stdin = opts.stdin })
end

-- Runs `sbx args...` and requires exit 0 (or an allowed exit code).
function Backend:run(args, opts)
  local res, err = self:run_raw(args, opts)
  if not res then return nil, err end
  if res.exit_code == 0 or (opts and opts.ok_codes and opts.ok_codes[res.exit_code]) then return res end
  return nil, classify(res, "sbx " .. table.concat(args, " ", 1, math.min(#args, 3)))
end

function Backend:json(args, opts)
  local res, err = self:run(args, opts)
  if not res then return nil, err end
  local text = core.sbx_json_start(res.stdout)
  if not text then return E.fail("sbx", "bad_json", "sbx " .. args[1] .. ": no JSON in the output") end
  local v, jerr = core.json_decode(text)
  if not v then return E.fail("sbx", "bad_json", "sbx " .. args[1] .. ": " .. jerr.message) end
  return v
end

function Backend:list()
  local v, err = self:json({ "ls", "--json" })
  if not v then return nil, err end
  local out = {}
  for _, sb in ipairs(v.sandboxes or {}) do out[sb.name] = sb end
  return out
end

------------------------------------------------------------------------------ host checks

-- The host-wide checks of every acquire: read, never written.
function Backend:host_checks()
  local res, err = self:run({ "settings", "get", "ssh.agentForwardingEnabled" })
  if not res then return nil, err end
  local v = res.stdout:match("^%s*(.-)%s*$")
  if v ~= "false" then
    return E.fail("host_not_confined", "ssh_agent_forwarding",
      "SSH agent forwarding is on: run `sbx settings set ssh.agentForwardingEnabled false`"
      .. " and then `sbx daemon restart`")
  end
  local mcp, merr = self:json({ "mcp", "ls", "--json" })
  if not mcp then return nil, merr end
  if type(mcp.servers) ~= "table" or #mcp.servers > 0 then
    local names = {}
    for _, s in ipairs(mcp.servers or {}) do names[#names + 1] = tostring(s.name) end
    return E.fail("host_not_confined", "mcp_server",
      "an MCP server is registered (" .. table.concat(names, ", ") .. "); the MCP gateway answers a"
      .. " sandbox even under a deny-all rule: remove it with `sbx mcp rm`")
  end
  return true
end

-- Reads the egress state of the host (and of sandbox `name` when given).
function Backend:egress_state(name, probe_host)
  local pol, err = self:json(name and { "policy", "ls", name, "--json" } or { "policy", "ls", "--json" })
  if not pol then return nil, err end
  local sargs = { "secret", "ls", "--json" }
  if name then sargs = { "secret", "ls", name, "--json" } end
  local sec, serr = self:json(sargs)
  if not sec then return nil, serr end
  -- exit 1 means "denied" here, with the JSON on stdout
  local chk, cerr = self:json({ "policy", "check", "network", "--json", probe_host }, { ok_codes = { [1] = true } })
  if not chk then return nil, cerr end
  return { rules = pol.rules or {}, secrets = sec, governance = type(chk.governance) == "table" and chk.governance.active == true }
end

------------------------------------------------------------------------------ naming and records

local function digest(s, n) return core.sbx_digest(s, n) end

function Backend:name_for(conversation, key, kind)
  return self.name_prefix .. digest(conversation, 6) .. "-" .. digest(conversation .. "\0" .. key, 6)
    .. "-" .. digest(kind, 4)
end

function Backend:scope_prefix(conversation) return self.name_prefix .. digest(conversation, 6) .. "-" end

function Backend:key_prefix(conversation, key)
  return self:scope_prefix(conversation) .. digest(conversation .. "\0" .. key, 6) .. "-"
end

function Backend:record_path(name) return self.workspace_root .. "/" .. name .. "/record.json" end

function Backend:read_record(name)
  local s = read_file(self:record_path(name))
  if not s then return nil end
  return core.json_decode(s)
end

function Backend:write_record(name, rec)
  local s, err = core.json_encode(rec)
  if not s then return nil, err end
  return write_file_atomic(self:record_path(name), s)
end

------------------------------------------------------------------------------ boxes

local Box = {}
Box.__index = Box

local function x(s) return "x" .. core.sbx_base64(s) end

-- Marks the sandbox unusable, here and in its record, so other processes replace it too.
-- Returns true, or nil, err when the mark could not be recorded: then only this process knows,
-- and the caller must say so (another process would go on using the sandbox).
function Box:retire(reason)
  self.retired = reason
  local rec = self.backend:read_record(self.name)
  if rec and rec.id == self.id then
    rec.retired = reason
    local ok, err = self.backend:write_record(self.name, rec)
    if not ok then
      err.retired = reason
      err.message = "the sandbox " .. self.name .. " is retired (" .. reason .. ") in this process, but its record"
        .. " could not be written, so other processes may still use it: " .. err.message
      return nil, err
    end
  end
  return true
end

function Box:usable()
  if self.disposed then return E.fail("retired", "disposed", "the sandbox was disposed") end
  if not self.retired then
    local rec = self.backend:read_record(self.name)
    if not rec or rec.id ~= self.id then
      self.retired = "replaced"
    elseif rec.retired then
      self.retired = rec.retired
    end
  end
  if self.retired then
    return E.fail("retired", self.retired, "the sandbox " .. self.name .. " was retired (" .. self.retired
      .. "); acquire again for a fresh one")
  end
  return true
end

function Box:check_drift()
  if self.egress ~= "allowlist" then return true end
  local st, err = self.backend:egress_state(self.name, self.probe_host)
  if not st then return nil, err end
  local reason, detail = egress.drift(self.allow, st, self.name, self.fingerprint)
  if reason then
    local rok, rerr = self:retire("drift:" .. reason)
    if not rok then return nil, rerr end
    return E.fail("retired", "drift", "the host's egress state changed (" .. reason .. "): " .. detail
      .. "; the sandbox is retired and the next acquire replaces it", { drift = reason })
  end
  return true
end

-- Kills a command's process group with a second exec, as the sandbox's user; retires the
-- sandbox unless the kill script saw the group gone (it exits non-zero when the kill failed,
-- e.g. EPERM for a command run with user = "root", or a member outlived it: csrc/sbx/wrapper.c).
function Box:kill(token)
  local b = self.backend
  local res = b:run_raw({ "exec", self.name, "sh", "-c", core.sbx_kill_script, "sandstack-sbx", EXEC_DIR, token },
    { timeout = b.exec_cleanup_timeout, max_output = 64 * 1024 })
  if not res or res.exit_code ~= 0 then
    local ok, err = self:retire("kill_failed")
    return false, not ok and err or nil
  end
  return true
end

local exec_keys = { timeout = true, cwd = true, env = true, max_output_bytes = true, user = true }

function Box:exec_bounded(argv, opts)
  opts = opts or {}
  if type(argv) ~= "table" or #argv == 0 then error("exec: argv must be a non-empty list of strings", 2) end
  for k in pairs(opts) do
    if not exec_keys[k] then error("exec: unknown option '" .. tostring(k) .. "'", 2) end
  end
  local ok, err = self:usable()
  if not ok then return nil, err end
  ok, err = self:check_drift()
  if not ok then return nil, err end
  local b = self.backend
  local budget = opts.max_output_bytes or b.max_output_bytes
  local cwd = opts.cwd or self.work_dir
  if cwd:sub(1, 1) ~= "/" then cwd = self.work_dir .. "/" .. cwd end
  local nonce, token = "sandstack-" .. core.random_hex(16), core.random_hex(12)
  -- env and argv go to the wrapper on stdin (`sbx exec -i`), never on sbx's command line,
  -- which every local user can read in /proc: only the wrapper text, the sandbox name, the
  -- nonce and the token stay visible there (the input format: csrc/sbx/wrapper.h)
  local args = { "exec", "-i" }
  if opts.user then args[#args + 1] = "-u"; args[#args + 1] = opts.user end
  for _, a in ipairs({ self.name, "sh", "-c", core.sbx_wrapper_script, "sandstack-sbx", nonce, EXEC_DIR, token }) do
    args[#args + 1] = a
  end
  local input = { x(self.workspace), x(self.mount), x(cwd) }
  if opts.env then
    local keys = {}
    for k in pairs(opts.env) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      if type(k) ~= "string" or not k:match("^[A-Za-z_][A-Za-z0-9_]*$") then
        return E.fail("invalid", "env", "exec: bad environment variable name " .. tostring(k))
      end
      input[#input + 1] = x(k .. "=" .. tostring(opts.env[k]))
    end
  end
  input[#input + 1] = "--"
  for i, a in ipairs(argv) do
    if type(a) ~= "string" then error("exec: argv[" .. i .. "] is not a string", 2) end
    input[#input + 1] = x(a)
  end
  input[#input + 1] = ".\n"
  local timeout = opts.timeout or b.exec_timeout
  local res, rerr = b:run_raw(args, { timeout = timeout, max_output = budget, stdin = table.concat(input, "\n") })
  if not res then return nil, rerr end
  if res.timed_out or res.over_limit then
    local killed, kerr = self:kill(token)
    if kerr then return nil, kerr end -- the retirement could not be recorded: that comes first
    local extra = killed and "" or "; the kill failed, so the sandbox is retired"
    if res.timed_out then
      return E.fail("timeout", "exec", ("the command ran past %gs and its process group was killed%s"):format(timeout, extra),
        { killed = killed })
    end
    return E.fail("output_limit", nil, ("the command's output passed %d bytes and its process group was killed%s")
      :format(budget, extra), { limit = budget, killed = killed })
  end
  local chatter, own = core.sbx_split_stderr(res.stderr, nonce)
  if not chatter then
    -- the wrapper never ran: this is sbx's failure, never the command's exit status
    local e = classify(res, "sbx exec")
    if e.reason == "not_found" then
      local rok, rerr = self:retire("missing")
      if not rok then return nil, rerr end
    end
    return nil, e
  end
  return { stdout = res.stdout, stderr = own, exit_code = res.exit_code or (128 + (res.signal or 0)) }
end

function Box:exec(argv, opts)
  if opts and opts.max_output_bytes then error("exec: use exec_bounded for max_output_bytes", 2) end
  return self:exec_bounded(argv, opts)
end

-- The file plane (another part's C object), created on first use.
function Box:plane()
  if self._plane then return self._plane end
  if not core.fileplane_open then
    return E.fail("invalid", "not_available", "the workspace file plane is not available in this build")
  end
  local p, err = core.fileplane_open{ root = self.workspace, guest_root = self.mount, cwd = self.work_dir,
    max_read = self.backend.max_output_bytes }
  if not p then return nil, err end
  self._plane = p
  return p
end

for _, m in ipairs({ "attributes", "dir", "read", "write", "mkdir" }) do
  Box[m] = function(self, ...)
    local ok, err = self:usable()
    if not ok then return nil, err end
    local p, perr = self:plane()
    if not p then return nil, perr end
    return p[m](p, ...)
  end
end

local function exec_result(res, err, what)
  if not res then return nil, err end
  if res.exit_code ~= 0 then
    return E.fail("invalid", "refused", what .. ": " .. (res.stderr:match("[^\n]+") or ("exit " .. res.exit_code)),
      { exit_code = res.exit_code, stderr = res.stderr })
  end
  return true
end

-- remove and reclaim act in the guest, at the guest's own authority (spec 001 "Files").
function Box:remove(path, opts)
  local ok, err = self:usable()
  if not ok then return nil, err end
  local p, perr = self:plane()
  if not p then return nil, perr end
  ok, err = p:check(path)
  if not ok then return nil, err end
  local guest, gerr = p:resolve(path)
  if not guest then return nil, gerr end
  local recursive = opts and opts.recursive
  return exec_result(self:exec({ "rm", recursive and "-rf" or "-f", "--", guest }), nil, "remove " .. path)
end

function Box:reclaim(target)
  if type(target) ~= "string" or target == "" then error("reclaim: target must be a path", 2) end
  local ok, err = self:usable()
  if not ok then return nil, err end
  if target:sub(1, 1) == "/" then
    if target:sub(1, #self.mount + 1) ~= self.mount .. "/" or #target <= #self.mount + 1
      or target:find("/%.%.?/") or target:find("/%.%.?$") then
      return E.fail("invalid", "placement", "reclaim: an absolute target must be strictly inside " .. self.mount)
    end
  elseif target:find("/", 1, true) or target == "." or target == ".." then
    return E.fail("invalid", "placement", "reclaim: a relative target must name a child of the working directory")
  end
  local p, perr = self:plane()
  if not p then return nil, perr end
  ok, err = p:check(target)
  if not ok then return nil, err end
  local guest, gerr = p:resolve(target)
  if not guest then return nil, gerr end
  return exec_result(self:exec({ "rm", "-rf", "--", guest }), nil, "reclaim " .. target)
end

-- `sbx rm --force name`, confirmed: true when sbx removed it or says it does not exist. A daemon
-- that lost its engine lists no sandboxes, so "not listed" proves nothing; only rm's own answer
-- does, and a fault is reported as unreachable (spec 001 "Disposal"), never as gone.
function Backend:rm_confirmed(name)
  local ok, err = self:run({ "rm", "--force", name }, { timeout = self.create_timeout })
  if ok or err.reason == "not_found" then return true end
  if err.kind == "daemon_fault" then
    err.reason = "unreachable"
    err.message = "cannot reach the sandboxes (" .. err.message .. "); " .. name .. " was not removed"
  end
  return nil, err
end

-- Deletes a host-side workspace tree; a failure (a tree it cannot remove) is reported.
local function remove_tree(path)
  local ok, err = core.sbx_rmtree(path)
  if ok then return true end
  return nil, err or E.new("sbx", "io", "cannot remove " .. path)
end

-- Removes this sandbox: only the instance this handle made (its id is checked first). The
-- workspace is deleted only once sbx has confirmed the sandbox is gone.
function Box:dispose()
  if self.disposed then return true end
  local b = self.backend
  local list, err = b:list()
  if not list then return nil, err end
  local sb = list[self.name]
  if not (sb and sb.id ~= self.id) then -- a replacement made by another process is not ours
    local ok, rerr = b:rm_confirmed(self.name)
    if not ok then return nil, rerr end
  end
  local rec = b:read_record(self.name)
  if rec and rec.id == self.id then os.remove(b:record_path(self.name)) end
  local ok, rerr = remove_tree(self.workspace)
  if not ok then return nil, rerr end
  os.remove(b.workspace_root .. "/" .. self.name) -- only when empty
  if self._plane then self._plane:close(); self._plane = nil end
  self.disposed = true
  return true
end

function Box:close()
  if self._plane then self._plane:close(); self._plane = nil end
end

Box.__close = Box.close
Box.__gc = Box.close

------------------------------------------------------------------------------ acquire

local acquire_keys = { conversation = true, key = true, kind = true, image = true, image_id = true, egress = true,
  egress_allow = true, work_dir = true }

-- Normalised allowlist entries (host = the apex for a wildcard) and a canonical string of them.
local function compile_allow(allow)
  local policy = require "sandstack.policy"
  local pol, err = policy.compile({ allow = allow })
  if not pol then return nil, err end
  local list, canon = {}, {}
  for _, r in ipairs(pol:rules()) do
    local host = r.apex or (r.host:gsub("^%*%.", ""))
    local e = { host = host:lower(), wildcard = r.wildcard and true or false, port = r.port,
      methods = r.methods, paths = r.paths }
    list[#list + 1] = e
    canon[#canon + 1] = (e.wildcard and "*." or "") .. e.host .. ":" .. tostring(e.port or 0) .. " "
      .. table.concat(e.methods or {}, ",") .. " " .. table.concat(e.paths or {}, ",")
  end
  table.sort(canon)
  return list, table.concat(canon, ";")
end

local function validate_work_dir(w)
  if type(w) ~= "string" or w:sub(1, 1) ~= "/" or w:find("//", 1, true) or w:find("/%.%.?/") or w:find("/%.%.?$")
    or w:find("[%z\n]") or w:sub(-1) == "/" then
    return E.fail("invalid", "work_dir", "work_dir must be a normal absolute path: " .. tostring(w))
  end
  local parent = dirname(w)
  if parent == "" or parent == nil then
    return E.fail("invalid", "work_dir", "work_dir must have a parent other than /: " .. w)
  end
  return parent
end

local SETUP = [[
m=$1 s=$2
[ ! -e "$s" ] && [ ! -L "$s" ] || exit 11
for t in sh base64 setsid mount unshare mkdir cat rm sleep id; do
  command -v "$t" >/dev/null 2>&1 || { echo "missing tool: $t" >&2; exit 10; }
done
u=/usr/bin/unshare; [ -x "$u" ] || u=unshare
h=$("$u" --help 2>&1)
case $h in *--map-user*) ;; *) echo "unshare lacks --map-user" >&2; exit 10 ;; esac
z=/usr/bin/setsid; [ -x "$z" ] || z=setsid
"$z" -w true || { echo "setsid lacks -w" >&2; exit 10; }
[ ! -e "$m" ] || { echo "$m already exists in the image" >&2; exit 12; }
mkdir -p "$m" && mkdir -p "$3" && chmod 1777 "$3" || exit 13
]]

function Backend:create(name, spec)
  local wsdir = self.workspace_root .. "/" .. name
  local ok, err = mkdir_p(wsdir)
  if not ok then return nil, err end
  local ws = wsdir .. "/ws-" .. core.random_hex(8)
  ok, err = core.sbx_mkdir(ws, 493) -- 0755: the guest's user reaches it through the mount
  if not ok then return nil, err end
  local args = { "create", "shell", "--name", name, "--cpus", tostring(self.cpus), "--memory", tostring(self.memory),
    "--skills", "off", "--deny-network", "**", "--quiet" }
  local image = spec.image_id or spec.image
  if image then args[#args + 1] = "--template"; args[#args + 1] = image end
  args[#args + 1] = ws
  local res
  -- Undoes a create: the workspace goes only after sbx confirms the sandbox is gone (a create
  -- that timed out may still have made it, over ws); otherwise it stays, and the error says so.
  local function undo(e)
    local gone, rerr = self:rm_confirmed(name)
    if gone then gone, rerr = remove_tree(ws) end
    if not gone then
      e.cleanup_error = rerr
      e.message = e.message .. "; and the rollback did not finish (" .. rerr.message .. "): dispose this key later"
    end
    return nil, e
  end
  res, err = self:run(args, { timeout = self.create_timeout })
  if not res then
    if err.reason == "conflict" then -- the name is another process's; ws was never mounted
      remove_tree(ws)
      err.message = "another process created " .. name .. " at the same time: " .. err.message
      return nil, err
    end
    return undo(err)
  end
  local box = setmetatable({ backend = self, name = name, workspace = ws, mount = spec.mount, work_dir = spec.work_dir,
    egress = spec.egress, allow = spec.allow, allow_canon = spec.allow_canon, image = image,
    probe_host = spec.probe_host }, Box)
  local list, lerr = self:list()
  if not list then return undo(lerr) end
  local sb = list[name]
  if not sb then -- a daemon that lost its engine lists nothing: the sandbox may be there, on ws
    return undo(E.new("sbx", "missing", "sbx did not list " .. name .. " right after creating it"))
  end
  local mine = false
  for _, w in ipairs(sb.workspaces or {}) do mine = mine or w == ws end
  if not mine then -- another process's sandbox took the name; ours was never made
    remove_tree(ws)
    return E.fail("sbx", "conflict", "the sandbox " .. name .. " was replaced by another process during create")
  end
  box.id = sb.id
  -- root makes the empty mount point and the wrapper's control directory; the same sh checks
  -- the tools and that no forwarded SSH agent socket exists (a daemon not restarted)
  local setup
  setup, err = self:run_raw({ "exec", "-u", "root", name, "sh", "-c", SETUP, "sandstack-sbx", spec.mount, AGENT_SOCKET, EXEC_DIR })
  if not setup then return undo(err) end
  if setup.exit_code == 11 then
    return undo(E.new("host_not_confined", "ssh_agent_socket", "the new sandbox has a forwarded SSH agent socket ("
      .. AGENT_SOCKET .. "): the daemon was not restarted after `sbx settings set ssh.agentForwardingEnabled false`;"
      .. " run `sbx daemon restart`"))
  elseif setup.exit_code == 10 then
    return undo(E.new("invalid", "image", "the image cannot run the exec wrapper: " .. setup.stderr:gsub("%s+$", "")))
  elseif setup.exit_code == 12 then
    return undo(E.new("invalid", "work_dir", "work_dir's parent " .. spec.mount .. " already exists in the image"))
  elseif setup.exit_code ~= 0 then
    return undo(classify(setup, "sandbox setup"))
  end
  -- egress: created closed; the rules go in, and only then does the ** deny go
  if spec.egress == "allowlist" then
    local st
    st, err = self:egress_state(nil, spec.probe_host)
    if not st then return undo(err) end
    local plan, reason, detail = egress.assess(spec.allow, st, name)
    if not plan then return undo(E.new("host_not_confined", reason, detail)) end
    if #plan.deny > 0 then
      res, err = self:run({ "policy", "deny", "network", "--sandbox", name, "--protocol", "tcp,udp", table.concat(plan.deny, ",") })
      if not res then return undo(err) end
    end
    for _, c in ipairs(egress.commands(spec.allow, name)) do
      res, err = self:run({ "policy", unpack(c) })
      if not res then return undo(err) end
    end
    res, err = self:run({ "policy", "rm", "network", "--sandbox", name, "--resource", "**", "--force" })
    if not res then return undo(err) end
  end
  local pol
  pol, err = self:json({ "policy", "ls", name, "--json" })
  if not pol then return undo(err) end
  box.fingerprint = egress.fingerprint(pol.rules, name)
  local rec = { name = name, id = box.id, workspace = ws, mount = spec.mount, work_dir = spec.work_dir,
    egress = spec.egress, allow = spec.allow_canon, image = image or "", fingerprint = box.fingerprint,
    created_at = os.time() }
  ok, err = self:write_record(name, rec)
  if not ok then return undo(err) end
  -- the probe: the wrapper works end to end, and it makes the working directory as the user
  res, err = box:exec({ "mkdir", "-p", spec.work_dir }, { cwd = spec.mount })
  if not res then return undo(err) end
  if res.exit_code ~= 0 then
    return undo(E.new("invalid", "image", "the exec wrapper's probe failed: " .. res.stderr:gsub("%s+$", "")))
  end
  return box
end

function Backend:acquire(opts)
  if type(opts) ~= "table" then error("acquire: options table required", 2) end
  for k in pairs(opts) do
    if not acquire_keys[k] then error("acquire: unknown option '" .. tostring(k) .. "'", 2) end
  end
  local conv, key, kind = opts.conversation, opts.key, opts.kind or "default"
  if type(conv) ~= "string" or conv == "" or type(key) ~= "string" or key == "" or type(kind) ~= "string" then
    return E.fail("invalid", "key", "acquire needs conversation and key strings (and kind, a string)")
  end
  local eg = opts.egress or "closed"
  if eg ~= "closed" and eg ~= "allowlist" then
    return E.fail("invalid", "egress", "egress must be \"closed\" or \"allowlist\"")
  end
  local spec = { egress = eg, image = opts.image, image_id = opts.image_id, work_dir = opts.work_dir or self.storage_base,
    allow_canon = "" }
  local mount, merr = validate_work_dir(spec.work_dir)
  if not mount then return nil, merr end
  spec.mount = mount
  if eg == "allowlist" then
    if type(opts.egress_allow) ~= "table" or #opts.egress_allow == 0 then
      return E.fail("invalid", "egress_allow", "egress = \"allowlist\" needs a non-empty egress_allow")
    end
    for _, r in ipairs(opts.egress_allow) do
      if type(r) == "table" and r.authority ~= nil then
        return E.fail("invalid", "authority", "authority rules are not supported by the sbx backend")
      end
    end
    local list, canon = compile_allow(opts.egress_allow)
    if not list then return nil, canon end
    spec.allow, spec.allow_canon = list, canon
    local e1 = list[1]
    spec.probe_host = e1.wildcard and ("sandstack-probe." .. e1.host) or e1.host
  elseif opts.egress_allow ~= nil and #opts.egress_allow > 0 then
    return E.fail("invalid", "egress_allow", "egress_allow needs egress = \"allowlist\"")
  end
  local name = self:name_for(conv, key, kind)
  local ok, err = self:host_checks()
  if not ok then return nil, err end
  if eg == "allowlist" then -- refuse early, before anything is created
    local st
    st, err = self:egress_state(nil, spec.probe_host)
    if not st then return nil, err end
    local plan, reason, detail = egress.assess(spec.allow, st, name)
    if not plan then return E.fail("host_not_confined", reason, detail) end
  end
  local list
  list, err = self:list()
  if not list then return nil, err end
  local sb = list[name]
  if sb then
    local rec = self:read_record(name)
    if not rec then
      -- a create in progress writes its record last; replacing the sandbox now would break it
      return E.fail("sbx", "conflict", "the sandbox " .. name .. " has no record yet: another process is creating it"
        .. " (or one crashed while creating it: dispose the key to clear it)")
    end
    local has_ws = false
    for _, w in ipairs(sb.workspaces or {}) do has_ws = has_ws or (rec and w == rec.workspace) end
    if rec and rec.id == sb.id and has_ws and not rec.retired then
      if rec.egress ~= eg or rec.allow ~= spec.allow_canon then
        return E.fail("invalid", "egress_changed", "the sandbox for this key was made with different egress;"
          .. " dispose it first")
      end
      if (rec.image or "") ~= (spec.image_id or spec.image or "") then
        return E.fail("invalid", "image_changed", "the sandbox for this key was made from another image; dispose it first")
      end
      if rec.work_dir ~= spec.work_dir then
        return E.fail("invalid", "work_dir_changed", "the sandbox for this key has another work_dir; dispose it first")
      end
      local box = setmetatable({ backend = self, name = name, id = rec.id, workspace = rec.workspace, mount = rec.mount,
        work_dir = rec.work_dir, egress = eg, allow = spec.allow, allow_canon = spec.allow_canon, image = rec.image,
        fingerprint = rec.fingerprint, probe_host = spec.probe_host }, Box)
      local dok, derr = box:check_drift()
      if dok then return box end
      if derr.kind ~= "retired" then return nil, derr end
    end
    -- retired, replaced or unknown to us: replace it
    local removed, rerr = self:remove_names({ name }, { [name] = sb.id })
    if not removed then return nil, rerr end
  end
  return self:create(name, spec)
end

------------------------------------------------------------------------------ disposal

-- Snapshot of the host-side record: name -> { entries under workspace_root/name }.
function Backend:host_entries(prefix)
  local out = {}
  local names = core.sbx_listdir(self.workspace_root) or {}
  for _, n in ipairs(names) do
    if n:sub(1, #prefix) == prefix then out[n] = core.sbx_listdir(self.workspace_root .. "/" .. n) or {} end
  end
  return out
end

-- rm --force each name, then delete only the host entries that existed before the removal.
function Backend:remove_names(names, ids, before)
  before = before or {}
  for _, n in ipairs(names) do
    if not before[n] then before[n] = core.sbx_listdir(self.workspace_root .. "/" .. n) or {} end
  end
  local gone = {}
  for _, n in ipairs(names) do
    if ids and ids[n] then
      -- rm takes only a name: check the id first, so a replacement made meanwhile is not touched
      local list, err = self:list()
      if not list then return nil, err end
      if list[n] and list[n].id ~= ids[n] then goto continue end
    end
    do
      local ok, err = self:rm_confirmed(n)
      if not ok then return nil, err end
      for _, entry in ipairs(before[n]) do
        ok, err = remove_tree(self.workspace_root .. "/" .. n .. "/" .. entry)
        if not ok then return nil, err end
      end
      gone[#gone + 1] = n
      os.remove(self.workspace_root .. "/" .. n) -- only when nothing new appeared
    end
    ::continue::
  end
  return gone
end

function Backend:dispose_prefix(prefix)
  local before = self:host_entries(prefix) -- first: what is on the host before the removal
  local list, err = self:list()
  if not list then
    if err.kind == "daemon_fault" then err.reason = "unreachable" end
    return nil, err
  end
  local names, seen = {}, {}
  for n in pairs(list) do
    if n:sub(1, #prefix) == prefix then names[#names + 1] = n; seen[n] = true end
  end
  for n in pairs(before) do
    if not seen[n] then names[#names + 1] = n end
  end
  table.sort(names)
  local gone, rerr = self:remove_names(names, nil, before)
  if not gone then return nil, rerr end
  return { removed = gone }
end

-- dispose{conversation =, key =}: every kind of one key. dispose_scope(conversation): all of it.
function Backend:dispose(key)
  if type(key) ~= "table" or type(key.conversation) ~= "string" or type(key.key) ~= "string" then
    error("dispose: expects { conversation = , key = }", 2)
  end
  return self:dispose_prefix(self:key_prefix(key.conversation, key.key))
end

function Backend:dispose_scope(conversation)
  if type(conversation) ~= "string" or conversation == "" then error("dispose_scope: conversation string required", 2) end
  return self:dispose_prefix(self:scope_prefix(conversation))
end

------------------------------------------------------------------------------ constructor

local backend_keys = { sbx_path = true, workspace_root = true, name_prefix = true, storage_base = true,
  exec_cleanup_timeout = true, max_output_bytes = true, command_timeout = true, create_timeout = true,
  exec_timeout = true, cpus = true, memory = true }

function M.backend(opts)
  opts = opts or {}
  for k in pairs(opts) do
    if not backend_keys[k] then error("sbx.backend: unknown option '" .. tostring(k) .. "'", 2) end
  end
  local self = setmetatable({}, Backend)
  for k, v in pairs(M.defaults) do self[k] = v end
  for k, v in pairs(opts) do self[k] = v end
  self.sbx_path = opts.sbx_path or os.getenv("SANDSTACK_SBX_PATH") or "sbx"
  self.workspace_root = opts.workspace_root or default_workspace_root()
  if not self.name_prefix:match("^[A-Za-z0-9][A-Za-z0-9.+-]*$") then
    error("sbx.backend: name_prefix may hold letters, numbers, '-', '.' and '+' only", 2)
  end
  local ok, err = mkdir_p(self.workspace_root)
  if not ok then return nil, err end
  return self
end

M.egress = egress
return M
