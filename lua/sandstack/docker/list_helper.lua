-- A directory listed by names alone (internal to sandstack.docker and sandstack.swarm). The
-- engine's archive of a directory carries every file under it, so h:list reads it only while it
-- stays small; past that, this lists the directory with sandstack-list (csrc/list, a static
-- program core.so carries) in a helper container that shares the sandbox's PID namespace and
-- reads its files through /proc/1/root, as exec_kill.lua's reaper does: created from the
-- sandbox's own image (only its root is lent: the program is uploaded into the helper before it
-- starts), under the sandbox's runtime, no network, every capability dropped but SYS_PTRACE and
-- DAC_READ_SEARCH, no-new-privileges, 64 MiB and 16 pids. Nothing runs in the sandbox and
-- nothing is written there. The listing comes back as a small file of the helper's own, read
-- through the archive, and the helper is removed at once; it carries the sandbox's project
-- label, so a crash meanwhile leaves it to destroy and reap.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local exec_kill = require "sandstack.docker.exec_kill"

local M = {}

M.PROGRAM = "/sandstack-list"
M.OUTPUT_MAX = 64 * 1024 * 1024 + 4096 -- what the program writes at most (csrc/list/format.h), and its tar
local PROJECT_LABEL = "io.sandstack.project"
-- Runtimes whose containers' PID namespaces the helper can share: exec_kill.lua's.
local SHARABLE = exec_kill.SHARABLE


local archive -- the program's tar, made once per process
local function program_tar()
  archive = archive or exec_kill.program_tar(M.PROGRAM, core.list_program())
  return archive
end

local function helper_body(info, dir, out, max_entries)
  local labels = { ["io.sandstack.role"] = "file-list" }
  local project = ((info.Config or {}).Labels or {})[PROJECT_LABEL]
  if project then labels[PROJECT_LABEL] = project end
  return {
    Image = info.Image, Entrypoint = { M.PROGRAM }, Cmd = { dir, out, tostring(max_entries) }, User = "0",
    WorkingDir = "/", Labels = labels, NetworkDisabled = true, Healthcheck = { Test = { "NONE" } },
    -- the image's environment stays (the engine merges it in), but glibc's tunables, the one
    -- part of it a static program reads, are emptied
    Env = { "GLIBC_TUNABLES=" }, AttachStdout = false,
    HostConfig = { PidMode = "container:" .. info.Id, NetworkMode = "none", CapDrop = { "ALL" },
      CapAdd = { "SYS_PTRACE", "DAC_READ_SEARCH" }, SecurityOpt = { "no-new-privileges" },
      LogConfig = { Type = "none" }, Memory = 64 * 1024 * 1024, PidsLimit = 16,
      Runtime = info.HostConfig.Runtime },
  }
end

-- Why the helper cannot list `container` (its inspect `info`), or nil when it can.
function M.unavailable(info)
  local state, runtime = info.State or {}, (info.HostConfig or {}).Runtime
  if not state.Running then return "the container is not running" end
  if not SHARABLE[runtime] then return ("the container runs under %s"):format(tostring(runtime)) end
  return nil
end

-- The entries of the directory `dir` of `container` on `eng`, unsorted, as core.list_parse gives
-- them, or nil, err: "io" with the errno name the program met (ENOENT, ENOTDIR, EACCES),
-- "output_limit" past max_entries, "engine"/"list_helper" when the helper could not run (with `cause`).
-- `info` is the container's inspect (the caller has it: M.unavailable said yes).
function M.list(eng, info, dir, max_entries, timeout)
  timeout = timeout or 60
  local out = "/sandstack-list-" .. core.random_hex(8) .. ".out"
  local name = (info.Name or ""):gsub("^/", "") .. "-list-" .. core.random_hex(4)
  local body = helper_body(info, dir, out, max_entries)
  local created, err = ops.send(eng, "create_container", name, { body = body }, body, { timeout = timeout })
  if not created then
    return E.fail("engine", "list_helper", "the list helper could not be created: " .. tostring(err), { cause = err })
  end
  local id = created.Id
  local function done(...)
    ops.call(eng, "remove_container", id, { volumes = true })
    return ...
  end
  local function fail(msg, cause)
    return done(E.fail("engine", "list_helper", msg .. (cause and (": " .. tostring(cause)) or ""), { cause = cause }))
  end
  local ok
  ok, err = ops.send(eng, "put_archive", id, { path = "/" }, program_tar(), { content_type = "application/x-tar",
    timeout = timeout })
  if not ok and err then return fail("the list program could not be uploaded", err) end
  ok, err = eng:call("POST", ops.request("start", id).path, nil, { timeout = timeout })
  if not ok and err then return fail("the list helper could not start", err) end
  local waited
  waited, err = eng:call("POST", ops.request("wait", id).path, nil, { timeout = timeout })
  if not waited then return fail("the list helper did not end", err) end
  if waited.StatusCode ~= 0 then return fail(("the list helper exited %s"):format(tostring(waited.StatusCode))) end
  local tar
  tar, err = ops.send(eng, "get_archive", id, { path = out }, nil, { raw = true, max_bytes = M.OUTPUT_MAX })
  if not tar then return fail("the listing could not be read", err) end
  local f
  f, err = core.archive_file({ data = tar }, { max_bytes = M.OUTPUT_MAX })
  if not f then return fail("the listing could not be read", err) end
  return done(core.list_parse(f.data, max_entries))
end

return M
