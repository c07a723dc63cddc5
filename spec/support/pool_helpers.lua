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

-- Stack options whose db is healthy at its fifth check only, so every start waits (a start that
-- never waits has nothing to overlap with).
function P.slow_ready_opts(subnets)
  local o = P.stack_opts(subnets)
  o.ready = { db = { test = { "sh", "-c", "n=$(cat /tmp/n 2>/dev/null || echo 0); echo $((n + 1)) > /tmp/n; [ $n -ge 4 ]" },
    interval = 0.5 } }
  o.services[1].depends_on = { "db" }
  return o
end

-- Counts the starts under way at once from a pool's events: m.on_event for the pool, m.most (the
-- most at once), m.overlapped (two at once, ever), m.reset(); m.paused = true ignores events.
function P.overlap_meter()
  local m = { most = 0, overlapped = false, active = {} }
  local function count() local n = 0; for _ in pairs(m.active) do n = n + 1 end; return n end
  function m.reset() m.most, m.overlapped, m.active = 0, false, {} end
  function m.on_event(ev)
    if m.paused or not ev.project or ev.phase:match("^pool_") then return end
    if ev.phase == "ready" or ev.phase == "rolled_back" then
      m.active[ev.project] = nil
    elseif not m.active[ev.project] then
      m.active[ev.project] = true
      if count() > 1 then m.overlapped = true end
      m.most = math.max(m.most, count())
    end
  end
  return m
end

return P
