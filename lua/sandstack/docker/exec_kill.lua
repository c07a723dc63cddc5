-- Ending an exec (internal to sandstack.docker and sandstack.swarm). The Engine API has no
-- exec kill: closing the attach leaves the process running, and the Pid /exec/{id}/json gives
-- is a host pid, of no use against a remote engine. So every session exec carries
-- SANDSTACK_EXEC=<token> in its environment, and ending it runs sandstack-reap (csrc/reap, a
-- static program core.so carries) in a helper container that shares the sandbox's PID
-- namespace: created from the sandbox's own image (present on that engine; only its root is
-- lent, the program is uploaded into the helper before it starts), no network, every
-- capability dropped but KILL, SYS_PTRACE and DAC_READ_SEARCH (reading another user's
-- /proc/PID/environ), no-new-privileges. Nothing is written into the sandbox, so an image with
-- no shell, a read-only root and CapDrop ALL change nothing. The helper is removed at once; it
-- carries the sandbox's project label, so a crash meanwhile leaves it to destroy and reap.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"

local M = {}

M.ENV = "SANDSTACK_EXEC"
M.PROGRAM = "/sandstack-reap"
local PROJECT_LABEL = "io.sandstack.project"
-- Runtimes whose containers' PID namespaces a helper can share. gVisor's runsc keeps the guest's
-- processes inside its own kernel: a runc helper given "container:<runsc container>" lands in
-- the host's PID namespace instead (PID 1 is the host's init), with KILL and SYS_PTRACE there,
-- and never sees the exec. So no helper is made for another runtime.
M.SHARABLE = { runc = true, ["io.containerd.runc.v2"] = true, ["io.containerd.runtime.v1.linux"] = true }

-- nil when a helper can share `info`'s (an inspect) processes, else a typed refusal
function M.unshared(info)
  local runtime = (info.HostConfig or {}).Runtime
  -- an answer without the field (an engine double, an engine too old to name it) is runc's
  if runtime == nil or runtime == "" or M.SHARABLE[runtime] then return nil end
  return E.new("unsupported", "runtime", ("an exec in %s cannot be ended: it runs under %s, whose processes no helper "
    .. "container can reach; it goes on until it exits or the stack stops (use runc for execs that must be "
    .. "cut short)"):format(((info.Name or "?"):gsub("^/", "")), tostring(runtime)), { runtime = runtime })
end

function M.token() return core.random_hex(16) end


-- The tar of a static program (its bytes `bin`) at the absolute `path`, mode 0755, to upload
-- into a helper at "/" (list_helper.lua's too).
function M.program_tar(path, bin)
  return core.tar_header(path:sub(2), #bin, 493, 0) .. bin .. string.rep("\0", (512 - #bin % 512) % 512)
    .. string.rep("\0", 1024)
end

-- The tar of the program, made once per process.
local archive
local function program_tar()
  archive = archive or M.program_tar(M.PROGRAM, core.reap_program())
  return archive
end

local function helper_body(info, token, signal)
  local labels = { ["io.sandstack.role"] = "exec-kill" }
  local project = ((info.Config or {}).Labels or {})[PROJECT_LABEL]
  if project then labels[PROJECT_LABEL] = project end
  return {
    Image = info.Image, Entrypoint = { M.PROGRAM }, Cmd = { token, signal and tostring(signal) or nil }, User = "0", WorkingDir = "/",
    Labels = labels, NetworkDisabled = true, Healthcheck = { Test = { "NONE" } }, AttachStdout = false,
    HostConfig = { PidMode = "container:" .. info.Id, NetworkMode = "none", CapDrop = { "ALL" },
      CapAdd = { "KILL", "SYS_PTRACE", "DAC_READ_SEARCH" }, SecurityOpt = { "no-new-privileges" },
      LogConfig = { Type = "none" }, Memory = 64 * 1024 * 1024, PidsLimit = 16 },
  }
end

-- Ends every process of the exec tagged `token` in `container` on `eng`. Returns true when the
-- reaper saw nothing of it left, or nil, err (kind "exec_kill" with reason "helper" when the
-- helper could not run, "survived" when something outlived it; kind "unsupported", reason
-- "runtime" under a runtime whose processes no helper can share, before anything is made). With `signal` (a number: a
-- spawned process's p:kill) the holders of the token get that signal instead (9: the reap
-- above), and a process that already ended is nil, err kind "exited", reason "not_running".
-- `eng` needs only eng:call's contract, so a cosocket io serves too.
function M.kill(eng, container, token, timeout, signal)
  timeout = timeout or 20
  local method, path = ops.target("inspect_container", container)
  local info, err = eng:call(method, path)
  if not info then return nil, err end
  local refused = M.unshared(info)
  if refused then return nil, refused end
  local name = (info.Name or ""):gsub("^/", "") .. "-exec-kill-" .. core.random_hex(4)
  local created
  local body = helper_body(info, token, signal)
  created, err = ops.send(eng, "create_container", name, { body = body }, body, { timeout = timeout })
  if not created then
    return E.fail("exec_kill", "helper", "the kill helper could not be created: " .. tostring(err), { cause = err })
  end
  local id = created.Id
  local function fail(reason, msg, cause)
    ops.call(eng, "remove_container", id, { volumes = true })
    return E.fail("exec_kill", reason, msg, { cause = cause })
  end
  local ok
  ok, err = ops.send(eng, "put_archive", id, { path = "/" }, program_tar(), { content_type = "application/x-tar",
    timeout = timeout })
  if not ok and err then return fail("helper", "the kill program could not be uploaded: " .. tostring(err), err) end
  ok, err = eng:call("POST", ops.request("start", id).path, nil, { timeout = timeout })
  if not ok and err then return fail("helper", "the kill helper could not start: " .. tostring(err), err) end
  local waited
  waited, err = eng:call("POST", ops.request("wait", id).path, nil, { timeout = timeout })
  if not waited then return fail("helper", "the kill helper did not end: " .. tostring(err), err) end
  ops.call(eng, "remove_container", id, { volumes = true })
  if signal and waited.StatusCode == 3 then
    return E.fail("exited", "not_running", "no process of this spawn is running")
  end
  if waited.StatusCode ~= 0 then
    return E.fail("exec_kill", waited.StatusCode == 1 and "survived" or "helper",
      ("the kill helper exited %s"):format(tostring(waited.StatusCode)), { exit_code = waited.StatusCode })
  end
  return true
end

return M
