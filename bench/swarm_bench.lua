-- A start on a swarm against a start on one engine, in the same run: the anchor stack
-- (bench/anchor.lua: a sandbox with a volume, a sidecar with a 0.5 s healthcheck it depends on,
-- an egress sidecar, the forwarder) brought up to ready and torn down, REPS times each way,
-- interleaved, on a three-node swarm of nested Docker engines (spec/support/swarm-cluster.sh):
--   docker   sandstack.docker.start on one node's own engine (node 2, a worker), as a caller
--            on that node runs it;
--   swarm    sandstack.swarm.start through the manager: Swarm places it on any node.
-- Both run in one process inside node 2's network namespace (so docker.start's readiness probe
-- reaches that node's loopback); each has paid its once-per-process checks (the engine's
-- isolation check, each node's probe) in a warm-up that is not counted. Prints medians and the
-- ratio swarm/docker; the absolute times depend on the machine, the ratio is the result.
--   lua5.4 bench/swarm_bench.lua [REPS]     (root, from the repository root; default 5)
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath
local sandstack = require "sandstack"
local core = sandstack.core

local function anchor(extra)
  local o = dofile("bench/anchor.lua")(extra)
  o.pull = nil -- a swarm node's agent pulls what is absent itself: only the default is kept
  return o
end

local function median(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local n = #t
  if n == 0 then return 0 end
  return n % 2 == 1 and t[(n + 1) / 2] or (t[n / 2] + t[n / 2 + 1]) / 2
end

if arg[1] == "--child" then
  local reps, manager, node = tonumber(arg[2]), arg[3], arg[4]
  local function docker_once(key)
    local t0 = core.engine_clock()
    local s = assert(sandstack.docker.start(key, anchor { docker_host = node, project_name = key,
      subnet_pool = "10.217.0.0/16" }))
    local t1 = core.engine_clock()
    assert(s:destroy())
    s:close()
    return t1 - t0, core.engine_clock() - t1
  end
  local function swarm_once(key)
    local t0 = core.engine_clock()
    local s = assert(sandstack.swarm.start(key, anchor { docker_host = manager, project_name = key }))
    local t1 = core.engine_clock()
    local where = s.node
    assert(s:destroy())
    s:close()
    return t1 - t0, core.engine_clock() - t1, where
  end
  -- warm-up: the engine's isolation check; a session held on each node, so that Swarm spreads
  -- them and every node's probe is paid
  docker_once("bench-warm-d")
  local held = {}
  for i = 1, 3 do held[i] = assert(sandstack.swarm.start("bench-warm-s" .. i, anchor { docker_host = manager,
    project_name = "bench-warm-s" .. i })) end
  for _, s in ipairs(held) do assert(s:destroy()); s:close() end
  for i = 1, reps do
    local du, dd = docker_once("bench-d" .. i)
    local su, sd, where = swarm_once("bench-s" .. i)
    io.write(("rep %d docker %.3f %.3f swarm %.3f %.3f %s\n"):format(i, du, dd, su, sd, where))
    io.flush()
  end
  os.exit(0)
end

-- the parent: what it prints from here is the run, written to docs/results/swarm.md
package.path = "./bench/?.lua;" .. package.path
local run = require("results").begin("swarm", {
  title = "# Results: a start on a swarm against one engine (bench/swarm_bench.lua)", argv = arg })

local reps = tonumber(arg[1]) or 5
local prefix = "sandstack-swarm-bench-"
local function sh(cmd)
  local f = assert(io.popen(cmd .. " 2>&1"))
  local out = f:read("*a")
  local ok = f:close()
  return out, ok
end
local t0 = core.engine_clock()
local out, ok = sh("bash spec/support/swarm-cluster.sh up " .. prefix)
if not ok then io.stderr:write(out); os.exit(1) end
local up = core.engine_clock() - t0
local env = {}
for k, v in out:gmatch("([%w_]+)=([^\n]*)") do env[k] = v end
io.write(("cluster of 3 nested engines up in %.1f s\n"):format(up))
local cmd = ("nsenter -t %s -n -- lua5.4 bench/swarm_bench.lua --child %d unix://%s unix://%s"):format(env.NODE2_PID, reps,
  env.MANAGER_SOCK, env.NODE2_SOCK)
local f = assert(io.popen(cmd .. " 2>&1"))
local d_up, d_down, s_up, s_down = {}, {}, {}, {}
for line in f:lines() do
  io.write(line, "\n")
  io.flush()
  local a, b, c, d = line:match("^rep %d+ docker ([%d.]+) ([%d.]+) swarm ([%d.]+) ([%d.]+)")
  if a then
    d_up[#d_up + 1], d_down[#d_down + 1] = tonumber(a), tonumber(b)
    s_up[#s_up + 1], s_down[#s_down + 1] = tonumber(c), tonumber(d)
  end
end
local child_ok = f:close()
sh("bash spec/support/swarm-cluster.sh down " .. prefix)
if not child_ok or #d_up == 0 then io.stderr:write("the measuring child failed\n"); os.exit(1) end
io.write(("\n%d reps, medians      up-to-ready   teardown\n"):format(#d_up))
io.write(("docker (one engine)   %8.2f s   %8.2f s\n"):format(median(d_up), median(d_down)))
io.write(("swarm (3 nodes)       %8.2f s   %8.2f s\n"):format(median(s_up), median(s_down)))
io.write(("ratio swarm/docker    %8.2fx    %8.2fx\n"):format(median(s_up) / median(d_up), median(s_down) / median(d_down)))
run:finish()
