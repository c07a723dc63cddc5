-- The containers that copy and compare a snapshot's volumes (internal to docker/snapshot.lua).
-- Nothing of the guest's runs for them: each runs sandstack-tree (csrc/tree, carried by
-- core.so) from sandstack/tree:<hash>, an image holding that program alone, which is loaded from
-- core.so's bytes on first use (no registry, no file on the host). Each helper is confined as
-- csrc/stack/tree_helper.c writes it (no network, capabilities dropped but what its mode needs,
-- no-new-privileges, pid and memory limits, read-only root, the stack's runtime), carries the
-- project's label and io.sandstack.role = snapshot-copy | snapshot-diff (so a destroy or a reap
-- takes one a crash left), and is removed once done, or at its deadline, whatever it did.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"

local M = {}
local R = core.session_requests

M.ROLE = "io.sandstack.role"
M.DIFF_MAX_BYTES = 8 * 1024 * 1024 -- a comparison's answer: about 100000 changed files
M.COPY_SECONDS = 600 -- a restore's copies and changes' comparisons (nothing is paused for them)

-- The sandbox container's image (its id) and runtime, which its helpers run under (the engine's
-- answer, not the plan: a handle made from a record keeps no runtime); or nil, err.
function M.sandbox_facts(eng, sandbox)
  local r = batch.run(eng, R("inspect", { sandbox }), 60)[1]
  if not r.ok then return nil, r.err end
  local info = type(r.body) == "table" and r.body or {}
  if type(info.Image) ~= "string" then
    return E.fail("engine", "bad_answer", "snapshot: the sandbox's inspect names no image")
  end
  local rt = type(info.HostConfig) == "table" and info.HostConfig.Runtime
  return { image = info.Image, runtime = type(rt) == "string" and rt ~= "" and rt or nil }
end

local function load_answer_ok(status, body)
  local text = type(body) == "string" and body or ""
  local streamed = text:match('"error"%s*:%s*"([^"]*)"')
  if status == 200 and not streamed then return true end
  return nil, streamed or text:sub(1, 300)
end

-- Loads an image archive (POST /images/load); true, or nil, err naming what.
function M.load(eng, archive, what, timeout)
  local load = ops.request("load_image")
  local status, body = eng:request(load.method, load.path, archive,
    { query = load.query, content_type = "application/x-tar", timeout = timeout or 120, raw = true })
  if not status then return nil, body end
  local ok, why = load_answer_ok(status, body)
  if ok then return true end
  return E.fail("engine", "image_load", ("loading %s failed (HTTP %s): %s"):format(what, tostring(status), why),
    { status = status })
end

-- The helper image's name, loaded first when the engine lacks it; or nil, err.
function M.image(eng)
  local archive, tag = core.tree_image()
  local r = batch.run(eng, R("inspect_image", { tag }), 30)[1]
  if not r.ok then return nil, r.err end
  if r.status ~= 404 then return tag end
  local ok, err = M.load(eng, archive, tag)
  if not ok then return nil, err end
  return tag
end

-- Whether helpers under `runtime` (nil: the engine's default) run under gVisor, whose file
-- system keeps the FIFOs and sockets made in it in its own memory: they would never reach the
-- volume, so a copy there refuses them (csrc/tree/copy.c, "special_file").
local function gvisor(eng, runtime)
  local r = eng:perform({ core.engine_reads.info }, 30)[1]
  local info = r.ok and type(r.body) == "table" and r.body or {}
  local name = runtime or info.DefaultRuntime
  local rt = type(info.Runtimes) == "table" and info.Runtimes[name] or nil
  return name == "runsc" or (type(rt) == "table" and tostring(rt.path):match("runsc$") ~= nil)
end

local function remaining(deadline) return deadline - core.engine_clock() end

-- The error of a step that did not end by its deadline. opts: what, seconds, advice (below).
function M.deadline_error(opts, step)
  return E.new("timeout", "deadline", ("%s: the %s did not end within its %gs; what it made was removed%s")
    :format(opts.what, step, opts.seconds, opts.advice or ""), { step = step, seconds = opts.seconds })
end

-- The error of a helper that ended with `code`; stderr: its one line.
local function exit_error(opts, job, code, stderr)
  local reason, message = (stderr or ""):match("^(%S+) ([^\n]*)")
  local volume = job.from or job.new
  if code == 3 then
    return E.new("invalid", reason or "refused", ("%s: volume %s cannot be copied: %s"):format(opts.what, volume,
      (message or ""):sub(1, 400)), { volume = volume })
  elseif code == 4 then
    return E.new("invalid", "too_many_changes", ("%s: volume %s has more changed files than an answer holds "
      .. "(%d bytes)"):format(opts.what, volume, M.DIFF_MAX_BYTES), { volume = volume })
  end
  return E.new("engine", "copy_failed", ("%s: the helper for volume %s exited %s: %s"):format(opts.what, volume,
    tostring(code), (message and (reason .. " " .. message) or "no message"):sub(1, 400)), { volume = volume, exit_code = code })
end

-- Makes one helper per job, not started: {mode = "copy", from =, to =} or {mode = "diff", old =,
-- new =}. opts: image (M.image's), runtime, project (their label and names' prefix). The creates
-- get their own time (not a deadline's): a create a client gives up on the engine still
-- finishes, so one cut would make a helper after its removal, holding its volumes. Returns the
-- helpers for M.start (or M.remove), or nil, err with none left.
function M.create(eng, jobs, opts)
  local labels = { ["io.sandstack.project"] = opts.project, ["io.sandstack.version"] = core.VERSION }
  local names, creates = {}, {}
  local no_special = jobs[1] ~= nil and jobs[1].mode == "copy" and gvisor(eng, opts.runtime)
  for i, job in ipairs(jobs) do
    names[i] = opts.project .. "-snapshot-" .. job.mode .. "-" .. core.random_hex(4)
    labels[M.ROLE] = "snapshot-" .. job.mode
    creates[i] = core.tree_helper_create(names[i], { mode = job.mode, image = opts.image, from = job.from, to = job.to,
      old = job.old, new = job.new, max_bytes = M.DIFF_MAX_BYTES, runtime = opts.runtime, labels = labels,
      no_special = no_special })
  end
  local helpers = { jobs = jobs, names = names }
  local err = batch.first_error(batch.run(eng, creates, 60))
  if err then M.remove(eng, helpers); return nil, err end
  return helpers
end

-- Removes helpers (force: one running is killed).
function M.remove(eng, helpers)
  if #helpers.names > 0 then batch.run(eng, R("remove_container", helpers.names), 60) end
end

-- Starts the helpers M.create made and waits for them. opts: deadline (the engine clock's time
-- by which all must have ended; a start or wait cut by it is safe, the engine orders a start and
-- a removal), seconds (for the message), what (the operation, for messages), advice (appended to
-- the deadline's message). Returns the diff jobs' answers (stdout) in job order, or nil, err; the
-- helpers are gone either way.
function M.start(eng, helpers, opts)
  local jobs, names = helpers.jobs, helpers.names
  if #jobs == 0 then return {} end
  local function step(reqs, what)
    local left = remaining(opts.deadline)
    if left <= 0 then return M.deadline_error(opts, what) end
    local results = batch.run(eng, reqs, left)
    local err = batch.first_error(results)
    if err and remaining(opts.deadline) <= 0.05 then err = M.deadline_error(opts, what) end
    return err, results
  end
  local err = step(R("start", names), "copy")
  local waited
  if not err then
    local left = math.max(remaining(opts.deadline), 0.01)
    err, waited = step(R("wait", names, { timeout = left }), jobs[1].mode == "diff" and "comparison" or "copy")
  end
  local answers = {}
  for i, job in ipairs(jobs) do
    if err then break end
    local code = type(waited[i].body) == "table" and waited[i].body.StatusCode
    local need_log = code ~= 0 or job.mode == "diff"
    local log
    if need_log then
      local get = ops.request("logs", names[i])
      log, err = eng:demux(get.path, { query = get.query,
        max_bytes = M.DIFF_MAX_BYTES + 65536, timeout = 60 })
    end
    if not err and code ~= 0 then err = exit_error(opts, job, code, log.stderr) end
    if not err and job.mode == "diff" then answers[i] = log.stdout end
  end
  M.remove(eng, helpers) -- a helper past its deadline is killed here
  if err then return nil, err end
  return answers
end

-- M.create and M.start in one: opts are both's (the creates' own time counts toward the deadline).
function M.run(eng, jobs, opts)
  if #jobs == 0 then return {} end
  local helpers, err = M.create(eng, jobs, opts)
  if not helpers then return nil, err end
  return M.start(eng, helpers, opts)
end

local KINDS = { A = "added", C = "changed", D = "deleted" }

-- A diff helper's answer as a list of {path =, kind =} sorted by path; or nil, err when it is
-- not whole (no "end" line).
function M.parse_diff(text, volume)
  local out, ended = {}, false
  for line in text:gmatch("[^\n]+") do
    local k, hex = line:match("^([ACD]) (%x+)$")
    if k then
      out[#out + 1] = { path = hex:gsub("%x%x", function(b) return string.char(tonumber(b, 16)) end), kind = KINDS[k] }
    elseif line == "end" then
      ended = true
    end
  end
  if not ended then
    return E.fail("engine", "bad_answer", "changes: the comparison of volume " .. volume .. " gave no complete answer")
  end
  table.sort(out, function(x, y) return x.path < y.path end)
  return out
end

return M
