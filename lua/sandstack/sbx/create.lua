-- Acquire and create: the sandbox for a key is reused while its record, its workspace and the
-- host's egress state still match; otherwise it is replaced by a new one, made closed, set up,
-- given its egress rules, recorded, and probed. Any failure rolls the create back. Internal to
-- sandstack.sbx: b is the backend.
local core = require "sandstack.core"
local E = require "sandstack.error"
local policy = require "sandstack.policy"
local cli, host = require "sandstack.sbx.cli", require "sandstack.sbx.host"
local records, dispose = require "sandstack.sbx.records", require "sandstack.sbx.dispose"
local egress, boxes = require "sandstack.sbx.egress", require "sandstack.sbx.box"
local retirement = require "sandstack.sbx.retirement"

local unpack = table.unpack or unpack

local M = {}

local AGENT_SOCKET = "/run/ssh-agent.sock"

local function dirname(p) return p:match("^(.*)/[^/]*$") end

-- The parent of a work_dir (the mount point), or nil, err: an absolute, normal path whose
-- parent is not /.
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

-- Root's set-up in a new sandbox: the tools the wrapper needs, no forwarded SSH agent socket,
-- the empty mount point and the wrapper's control directory.
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
M.validate_work_dir = validate_work_dir

-- Runs SETUP as root; nil when it passed, else the error to roll back with.
local function setup_guest(b, name, spec)
  local setup, err = cli.run_raw(b, { "exec", "-u", "root", name, "sh", "-c", SETUP, "sandstack-sbx", spec.mount,
    AGENT_SOCKET, boxes.EXEC_DIR })
  if not setup then return err end
  if setup.exit_code == 11 then
    return E.new("host_not_confined", "ssh_agent_socket", "the new sandbox has a forwarded SSH agent socket ("
      .. AGENT_SOCKET .. "): the daemon was not restarted after `sbx settings set ssh.agentForwardingEnabled false`;"
      .. " run `sbx daemon restart`")
  elseif setup.exit_code == 10 then
    return E.new("invalid", "image", "the image cannot run the exec wrapper: " .. setup.stderr:gsub("%s+$", ""))
  elseif setup.exit_code == 12 then
    return E.new("invalid", "work_dir", "work_dir's parent " .. spec.mount .. " already exists in the image")
  elseif setup.exit_code ~= 0 then
    return cli.classify(setup, "sandbox setup")
  end
end

-- Egress: the sandbox was created closed; the rules go in, and only then does the ** deny go.
-- nil when done, else the error to roll back with.
local function open_egress(b, name, spec)
  local st, err = host.egress_state(b, nil, spec.probe_host)
  if not st then return err end
  local plan, reason, detail = egress.assess(spec.allow, st, name)
  if not plan then return E.new("host_not_confined", reason, detail) end
  local res
  if #plan.deny > 0 then
    res, err = cli.run(b, { "policy", "deny", "network", "--sandbox", name, "--protocol", "tcp,udp",
      table.concat(plan.deny, ",") })
    if not res then return err end
  end
  for _, c in ipairs(egress.commands(spec.allow, name)) do
    res, err = cli.run(b, { "policy", unpack(c) })
    if not res then return err end
  end
  res, err = cli.run(b, { "policy", "rm", "network", "--sandbox", name, "--resource", "**", "--force" })
  if not res then return err end
end

-- Creates sandbox `name` for spec (egress, allow, allow_canon, image, image_id, mount, work_dir,
-- probe_host) and returns its Box, or nil, err with everything it made removed (or, when sbx
-- cannot confirm the removal, err.cleanup_error saying what is left).
function M.create(b, name, spec)
  local wsdir = b.workspace_root .. "/" .. name
  local ok, err = records.mkdir_p(wsdir)
  if not ok then return nil, err end
  local ws = wsdir .. "/ws-" .. core.random_hex(8)
  -- Drops what this create made on the host when sbx never mounted ws: the workspace, and the
  -- name's directory when nothing else is in it (os.remove removes only an empty directory).
  local function discard()
    dispose.remove_tree(ws)
    os.remove(wsdir)
  end
  ok, err = core.mkdir(ws, 493) -- 0755: the guest's user reaches it through the mount
  if not ok then
    os.remove(wsdir)
    return nil, err
  end
  local args = { "create", "shell", "--name", name, "--cpus", tostring(b.cpus), "--memory", tostring(b.memory),
    "--skills", "off", "--deny-network", "**", "--quiet" }
  local image = spec.image_id or spec.image
  if image then args[#args + 1] = "--template"; args[#args + 1] = image end
  args[#args + 1] = ws
  -- Undoes a create: the workspace goes only after sbx confirms the sandbox is gone (a create
  -- that timed out may still have made it, over ws); otherwise it stays, and the error says so.
  local function undo(e)
    local gone, rerr = dispose.rm_confirmed(b, name)
    if gone then
      gone, rerr = dispose.remove_tree(ws)
      os.remove(wsdir)
    end
    if not gone then
      e.cleanup_error = rerr
      e.message = e.message .. "; and the rollback did not finish (" .. rerr.message .. "): dispose this key later"
    end
    return nil, e
  end
  local res
  res, err = cli.run(b, args, { timeout = b.create_timeout })
  if not res then
    if err.reason == "conflict" then -- sbx has the name; ws was never mounted
      discard()
      -- acquire saw no such sandbox: if sbx still lists none, its listing is what is wrong
      local list = cli.list(b)
      if list and not list[name] then
        return E.fail("daemon_fault", "not_listed", "sbx says " .. name .. " already exists but does not list it"
          .. " (the daemon lost its engine or its listing failed); run `sbx daemon restart`", { stderr = err.stderr })
      end
      err.message = "another process created " .. name .. " at the same time: " .. err.message
      return nil, err
    end
    if err.kind == "daemon_fault" or err.kind == "login_required" then -- refused before anything was made
      discard()
      return nil, err
    end
    return undo(err)
  end
  local box = boxes.new{ backend = b, name = name, workspace = ws, mount = spec.mount, work_dir = spec.work_dir,
    egress = spec.egress, allow = spec.allow, allow_canon = spec.allow_canon, image = image,
    probe_host = spec.probe_host }
  local list, lerr = cli.list(b)
  if not list then return undo(lerr) end
  local sb = list[name]
  if not sb then -- a daemon that lost its engine lists nothing: the sandbox may be there, on ws
    return undo(E.new("daemon_fault", "not_listed", "sbx did not list " .. name .. " right after creating it;"
      .. " run `sbx daemon restart`"))
  end
  local mine = false
  for _, w in ipairs(sb.workspaces or {}) do mine = mine or w == ws end
  if not mine then -- another process's sandbox took the name; ours was never made
    discard()
    return E.fail("sbx", "conflict", "the sandbox " .. name .. " was replaced by another process during create")
  end
  box.id = sb.id
  err = setup_guest(b, name, spec)
  if err then return undo(err) end
  if spec.egress == "allowlist" then
    err = open_egress(b, name, spec)
    if err then return undo(err) end
  end
  local pol
  pol, err = cli.json(b, { "policy", "ls", name, "--json" })
  if not pol then return undo(err) end
  box.fingerprint = egress.fingerprint(pol.rules, name)
  local rec = { name = name, id = box.id, workspace = ws, mount = spec.mount, work_dir = spec.work_dir,
    egress = spec.egress, allow = spec.allow_canon, image = image or "", fingerprint = box.fingerprint,
    created_at = os.time() }
  ok, err = records.write(b, name, rec)
  if not ok then return undo(err) end
  -- the probe: the wrapper works end to end, and it makes the working directory as the user
  res, err = box:exec({ "mkdir", "-p", spec.work_dir }, { cwd = spec.mount })
  if not res then return undo(err) end
  if res.exit_code ~= 0 then
    return undo(E.new("invalid", "image", "the exec wrapper's probe failed: " .. res.stderr:gsub("%s+$", "")))
  end
  return box
end

-- The spec of an acquire (options already checked for unknown keys), or nil, err.
local function acquire_spec(b, opts)
  local eg = opts.egress or "closed"
  if eg ~= "closed" and eg ~= "allowlist" then
    return E.fail("invalid", "egress", "egress must be \"closed\" or \"allowlist\"")
  end
  local spec = { egress = eg, image = opts.image, image_id = opts.image_id, work_dir = opts.work_dir or b.storage_base,
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
    local allow, err = policy.compile({ allow = opts.egress_allow })
    if not allow then return nil, err end
    -- the rendered policy is its canonical form: the record keeps it to notice a changed allowlist
    spec.allow, spec.allow_canon = allow, allow:render()
    local first = allow:rules()[1]
    spec.probe_host = first.wildcard and ("sandstack-probe." .. first.host) or first.host
  elseif opts.egress_allow ~= nil and #opts.egress_allow > 0 then
    return E.fail("invalid", "egress_allow", "egress_allow needs egress = \"allowlist\"")
  end
  return spec
end

-- The record's sandbox for this key as a Box when it can be reused; nil, err when the caller
-- must stop; nil when it must be replaced.
local function reuse(b, name, sb, rec, spec)
  local has_ws = false
  for _, w in ipairs(sb.workspaces or {}) do has_ws = has_ws or w == rec.workspace end
  if not (rec.id == sb.id and has_ws and not rec.retired) then return nil end
  if rec.egress ~= spec.egress or rec.allow ~= spec.allow_canon then
    return E.fail("invalid", "egress_changed", "the sandbox for this key was made with different egress;"
      .. " dispose it first")
  end
  if (rec.image or "") ~= (spec.image_id or spec.image or "") then
    return E.fail("invalid", "image_changed", "the sandbox for this key was made from another image; dispose it first")
  end
  if rec.work_dir ~= spec.work_dir then
    return E.fail("invalid", "work_dir_changed", "the sandbox for this key has another work_dir; dispose it first")
  end
  local box = boxes.new{ backend = b, name = name, id = rec.id, workspace = rec.workspace, mount = rec.mount,
    work_dir = rec.work_dir, egress = spec.egress, allow = spec.allow, allow_canon = spec.allow_canon,
    image = rec.image, fingerprint = rec.fingerprint, probe_host = spec.probe_host }
  local ok, err = retirement.check_drift(box)
  if ok then return box end
  if err.kind ~= "retired" then return nil, err end
  return nil -- drifted: retired, so replaced
end

-- backend:acquire{...} after the option keys were checked.
function M.acquire(b, opts)
  local conv, key, kind = opts.conversation, opts.key, opts.kind or "default"
  if conv == nil or key == nil then E.raise("acquire: options 'conversation' and 'key' are required strings") end
  if conv == "" or key == "" then
    return E.fail("invalid", "key", "acquire needs conversation and key strings (and kind, a string)")
  end
  local spec, serr = acquire_spec(b, opts)
  if not spec then return nil, serr end
  local name = records.name_for(b, conv, key, kind)
  local ok, err = host.checks(b)
  if not ok then return nil, err end
  if spec.egress == "allowlist" then -- refuse early, before anything is created
    local st
    st, err = host.egress_state(b, nil, spec.probe_host)
    if not st then return nil, err end
    local plan, reason, detail = egress.assess(spec.allow, st, name)
    if not plan then return E.fail("host_not_confined", reason, detail) end
  end
  local list
  list, err = cli.list(b)
  if not list then return nil, err end
  local sb = list[name]
  if sb then
    local rec = records.read(b, name)
    if not rec then
      -- a create in progress writes its record last; replacing the sandbox now would break it
      return E.fail("sbx", "conflict", "the sandbox " .. name .. " has no record yet: another process is creating it"
        .. " (or one crashed while creating it: dispose the key to clear it)")
    end
    local box, rerr = reuse(b, name, sb, rec, spec)
    if box or rerr then return box, rerr end
    -- retired, replaced or unknown to us: replace it
    local removed
    removed, err = dispose.remove_names(b, { name }, { [name] = sb.id })
    if not removed then return nil, err end
  elseif records.read(b, name) or next(core.listdir(b.workspace_root .. "/" .. name) or {}) then
    -- The host says this name was made, and sbx does not list it. A daemon that lost its engine
    -- lists nothing, and one whose listing fails omits a sandbox that runs: creating now could
    -- put a second sandbox on a fresh workspace and orphan the first one's. Only sbx's own
    -- "no such sandbox" lets the create go on; the record and the workspace are left as they are.
    local state, perr = dispose.probe(b, name)
    if not state then return nil, perr end -- a daemon fault names `sbx daemon restart`
    if state == "answers" then
      return E.fail("daemon_fault", "not_listed", "sbx does not list " .. name .. ", but it answers (the daemon's"
        .. " listing is failing); nothing was created and its workspace is kept: run `sbx daemon restart`")
    end
  end
  return M.create(b, name, spec)
end

return M
