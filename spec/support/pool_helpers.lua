-- What the warm-pool specs share (spec/docker_pool_spec.lua, spec/docker_pool_claim_spec.lua):
-- the stack options of a pool, what is left on the engine under a pool's label, and its cleanup.
local sandstack = require "sandstack"
local conformance = require "sandstack.conformance"
local http = require "sandstack.docker.http"

local P = {}

-- The conformance stack's options on the spec's own address pool, without a project name (the
-- pool names its projects).
function P.stack_opts(subnets)
  local o = conformance.stack_opts { subnet_pool = subnets }
  o.project_name = nil
  return o
end

-- Everything on the engine labelled with the pool: the count of containers, networks and
-- volumes, then the container and volume lists.
function P.pool_objects(name)
  local eng = assert(sandstack.engine {})
  local f = { label = { "io.sandstack.pool=" .. name } }
  local cs = assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } }))
  local ns = assert(eng:call("GET", "/networks", nil, { query = { filters = f } }))
  local vs = assert(eng:call("GET", "/volumes", nil, { query = { filters = f } }))
  eng:close()
  return #cs + #ns + #(vs.Volumes or {}), cs, vs.Volumes or {}
end

function P.answers(stack)
  local res = http.request { method = "GET", url = stack.endpoint .. "/health", timeout = 5 }
  return res and res.status == 200
end

-- Removes the pool's idle stacks and the ones sessions hold, and asserts nothing is left.
function P.clean(name)
  assert(sandstack.docker.reap { pool = name })
  for _, s in ipairs(assert(sandstack.docker.list { pool = name })) do assert(sandstack.docker.down(s.project)) end
  assert(P.pool_objects(name) == 0, "objects of pool " .. name .. " are left")
end

return P
