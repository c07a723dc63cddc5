-- The spawn part of the docker stack handle (mixed in by docker/handle.lua): h:spawn(argv,
-- opts) starts a process in the container of opts.service (default the sandbox) on the
-- handle's engine; h:processes() lists the live ones and h:attach(id) gives one back by its id.
-- The process is docker/process.lua's; the swarm handle shares these through M.spawn_on.
local process = require "sandstack.docker.process"
local target = require "sandstack.docker.target"

local M = { methods = {} }

-- The processes this handle spawned and still holds open: id -> process (h:attach's first look).
local function live(self)
  self.live_procs = self.live_procs or {}
  return self.live_procs
end

-- A spawn on eng in container, entered on the engine under the handle's project (so any
-- process lists and attaches it); a spawn that cannot be entered is killed again.
function M.spawn_on(self, eng, container, argv, opts)
  local p, err = process.spawn(process.engine_io(eng), container, argv, opts)
  if not p then return nil, err end
  local ok; ok, err = process.register(p, self.project, opts.service or self.plan.sandbox)
  if not ok then
    p:kill("KILL")
    p:close()
    return nil, err
  end
  p.live = live(self)
  p.live[p.id] = p
  return p
end

function M.methods.spawn(self, argv, opts)
  target.check_open(self)
  local err
  argv, opts = process.check(argv, opts)
  if not argv then return nil, opts end
  local name; name, err = target.container(self, opts.service)
  if not name then return nil, err end
  return M.spawn_on(self, self.eng, name, argv, opts)
end

function M.methods.processes(self)
  target.check_open(self)
  return process.list(process.engine_io(self.eng), self.project)
end

function M.methods.attach(self, id)
  target.check_open(self)
  return process.attach(process.engine_io(self.eng), self.project, id, live(self))
end

M.live = live
return M
