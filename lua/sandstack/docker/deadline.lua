-- The sandbox's PID 1 and its deadline (internal to sandstack.docker; docs/lifecycle.md, "What
-- holds the deadline"). Every sandbox runs under sandstack-init (csrc/init, a static program
-- core.so carries): the plan wraps the command the engine would have run from the image
-- (csrc/stack/init_wrap.h), and the init ends every process of the sandbox at its deadline, so a
-- ttl holds with no process of sandstack alive. The program and its deadline file live in the
-- stack's volume <project>-sandstack_init, read-only in the sandbox; this file writes them
-- through the volume's holder, a container of the stack that mounts it read-write and never
-- runs (the engine's archive API), before every start of the sandbox and when set_timeout moves
-- the deadline, and then has the engine signal the sandbox's PID 1 to read it again.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"

local M = {}
local R = core.session_requests
local D = core.DEADLINE
M.VOLUME_KEY = "sandstack_init" -- the volume's and the holder's <project>-<key> (init_wrap.h)

local function holder_of(project) return project .. "-" .. M.VOLUME_KEY end

local function member(name, data, mode)
  return core.tar_header(name, #data, mode, os.time()) .. data .. string.rep("\0", (512 - #data % 512) % 512)
end

local program -- the program's member, made once per process
local function volume_tar(deadline, with_program)
  if with_program then program = program or member("init", core.init_program(), 493) end
  return (with_program and program or "") .. member(D.file, core.deadline_file(deadline), 420) .. string.rep("\0", 1024)
end

-- Writes the deadline file (and with_program, the program) into project's init volume. true,
-- or nil, err (err.status 404: the stack has no init, one started by an older sandstack).
local function write(eng, project, deadline, with_program)
  local ok, err = ops.send(eng, "put_archive", holder_of(project), { path = D.dir }, volume_tar(deadline or 0, with_program),
    { content_type = "application/x-tar", timeout = 60 })
  if not ok and err then return nil, err end
  return true
end

-- A start's step once its images are there: the sandbox image's Config (from the preflight's
-- read, or read again when this start pulled it) as run.init, for the plan, which wraps the
-- sandbox's command; the start then plans again (docker/start.lua). true, or nil, err.
function M.prepare(run)
  local plan = run.plan
  local image
  for _, c in ipairs(plan.containers) do if c.service == plan.sandbox then image = c.image end end
  local body
  for i, img in ipairs(plan.images) do
    local r = run.found_images and run.found_images[i]
    if img == image and r and r.ok and r.status ~= 404 and plan.pull ~= "always" then body = r.body end
  end
  if type(body) ~= "table" then
    local r = batch.run(run.eng, R("inspect_image", { image }), 60)[1]
    if not r.ok then return nil, r.err end
    body = r.body
  end
  local cfg = type(body) == "table" and type(body.Config) == "table" and body.Config or {}
  run.init = { image = { Entrypoint = cfg.Entrypoint, Cmd = cfg.Cmd } }
  return true
end

-- A start's write once the volume's holder is made (sent with the containers' connects:
-- docker/apply.lua): the program and a deadline file saying none (a ttl counts from the end of
-- the start: docker/expiry.lua's arm moves it then). The plan's write with its body.
function M.install_request(plan)
  local w = plan.init.write
  return { method = w.method, path = w.path, query = w.query, body_json = volume_tar(0, true), timeout = 60 }
end

-- Before any later start of the sandbox (a wake, a restart, start()): the program and the
-- deadline `at` (epoch seconds, nil: none; the stack's newest expiry mark's, which
-- docker/expiry.lua's boot reads) written again. A stack whose ttl has passed is not started
-- (invalid/expired: set_timeout first); one without the init is started as it is. true, or
-- nil, err.
function M.boot(eng, project, at)
  if at and at <= os.time() then
    return E.fail("invalid", "expired", ("stack %s: its ttl passed at %s (%d s ago): give it more time with "
      .. "set_timeout(seconds) first, or destroy it"):format(project, os.date("!%Y-%m-%dT%H:%M:%SZ", at),
      os.time() - at), { project = project, at = at })
  end
  local ok, err = write(eng, project, at, true)
  if not ok and err.status == 404 then return true end
  return ok, err
end

-- h:set_timeout's second half, once the mark is written: the sandbox's deadline moved to `at`
-- (epoch seconds; nil: none) and its PID 1 told to read it again. A sandbox that is not running
-- reads it at its next start. true, or nil, err.
function M.move(eng, project, sandbox, at)
  local ok, err = write(eng, project, at, false)
  if not ok then
    if err.status == 404 then return true end
    return nil, err
  end
  local r = batch.run(eng, R("signal", { sandbox }, { signal = D.signal }), 60)[1]
  if not r.ok then return nil, r.err end
  return true
end

return M
