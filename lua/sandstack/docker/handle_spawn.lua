-- The spawn part of the docker stack handle (mixed in by docker/handle.lua): h:spawn(argv,
-- opts) starts a process in the container of opts.service (default the sandbox) on the
-- handle's engine; the process is docker/process.lua's.
local process = require "sandstack.docker.process"
local target = require "sandstack.docker.target"

local M = { methods = {} }

function M.methods.spawn(self, argv, opts)
  target.check_open(self)
  argv, opts = process.check(argv, opts)
  local name, err = target.container(self, opts.service)
  if not name then return nil, err end
  return process.spawn(process.engine_io(self.eng), name, argv, opts)
end

return M
