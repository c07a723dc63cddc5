-- Up-to-ready and teardown of one reference stack (sandbox with agent, forwarder, a sidecar
-- with a 0.5 s healthcheck the sandbox depends on, an egress sidecar, one volume), measured in
-- one run for: sandstack, docker-compose 1.29 (bench/stack-compose.yml, down -t 0 -v), and the
-- shortest sequence of raw Engine calls with every independent call in parallel (the floor).
-- Prints medians and ratios; absolute times depend on the machine, the ratios are the result.
--   lua5.4 bench/stack_bench.lua [REPS]      (from the repository root; needs the engine)
--   lua5.4 bench/stack_bench.lua --fresh [REPS] [OLD_TREE OLD_BUILD]   (REPS: 3, or 5 with --fresh)
-- --fresh starts every sandstack stack in a new process (a cold start, as `sandstack up` and
-- every short-lived caller pays it): its up-to-ready runs from before the process is spawned
-- to the moment docker.start returned in it. With OLD_TREE (a checkout, e.g. a git worktree of
-- an earlier commit, with its module built in OLD_TREE/OLD_BUILD) that tree's sandstack is a
-- fourth contender in the same run, so before/after ratios share one floor. With
-- SANDSTACK_BENCH_TRACE=1 each fresh start prints its progress events on stderr.
local child_tree, child_build = nil, nil
if arg[1] == "--child" then child_tree, child_build = arg[3], arg[4] end
local tree, build = child_tree or ".", child_build or "build"
package.path = tree .. "/lua/?.lua;" .. tree .. "/lua/?/init.lua;" .. package.path
package.cpath = tree .. "/" .. build .. "/?.so;" .. package.cpath
local sandstack = require "sandstack"
local core = sandstack.core
local batch = require "sandstack.stack.batch"
local http = require "sandstack.docker.http"
local apply = require "sandstack.docker.apply"

-- The child of --fresh: one start and one destroy, their monotonic times on stdout (the clock
-- is CLOCK_MONOTONIC, shared by every process of the machine).
if child_tree then
  local sandstack = require "sandstack"
  local project = arg[2]
  local anchor = dofile("bench/anchor.lua")
  local s, err = sandstack.docker.start(project, anchor { project_name = project, subnet_pool = "10.215.0.0/16",
    on_event = os.getenv("SANDSTACK_BENCH_TRACE") and function(e) io.stderr:write(("%6.2f %s %s\n"):format(e.elapsed, e.phase, e.service or "")) end })
  if not s then io.stderr:write(tostring(err), "\n"); os.exit(1) end
  local ready = sandstack.core.engine_clock()
  assert(s:destroy())
  io.stdout:write(("%.6f %.6f\n"):format(ready, sandstack.core.engine_clock()))
  os.exit(0)
end

local FRESH = arg[1] == "--fresh"
local argi = FRESH and 2 or 1
local REPS = tonumber(arg[argi]) or (FRESH and 5 or 3)
local OLD_TREE, OLD_BUILD = FRESH and arg[argi + 1], FRESH and (arg[argi + 2] or "build")
local POOL = "10.215.0.0/16"
local now = core.engine_clock

local anchor = dofile("bench/anchor.lua")
local function opts(project)
  return anchor { project_name = project, subnet_pool = POOL }
end

local function wait_http(port)
  local url = ("http://127.0.0.1:%d/health"):format(port)
  for _ = 1, 3000 do
    local r = http.request { method = "GET", url = url, timeout = 2 }
    if r and r.status == 200 then return true end
    core.sleep(0.01)
  end
  error("no readiness at " .. url)
end

-- sandstack itself
local function run_sandstack(project)
  local t0 = now()
  local s = assert(sandstack.docker.start(project, opts(project)))
  local up = now() - t0
  t0 = now()
  assert(s:destroy())
  s:close()
  return up, now() - t0
end

-- sandstack in a fresh process of tree/build: up is counted from before the spawn
local function run_fresh(tree, build)
  return function(project)
    local cmd = ("%q bench/stack_bench.lua --child %q %q %q"):format(arg[-1] or "lua5.4", project, tree, build)
    local t0 = now()
    local p = assert(io.popen(cmd))
    local out = p:read("*a")
    local ok = p:close()
    local ready, gone = out:match("^(%S+) (%S+)")
    if not ok or not ready then error("fresh start failed: " .. out) end
    return tonumber(ready) - t0, tonumber(gone) - tonumber(ready)
  end
end

-- docker-compose 1.29 with the equivalent compose file
local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("*a")
  local ok = p:close()
  if not ok then error(cmd .. "\n" .. out) end
  return out
end

local function run_compose(project, eng)
  local used = assert(apply.used_subnets(eng))
  local seed = tonumber(core.random_hex(3), 16)
  local nets = {}
  for i = 1, 3 do
    nets[i] = assert(core.stack_pick_subnet(POOL, used, seed, 28))
    used[#used + 1] = nets[i]
  end
  local env = ("PROJECT=%s SBX_SUBNET=%s PUB_SUBNET=%s EGRESS_SUBNET=%s"):format(project, nets[1], nets[2], nets[3])
  local dc = ("%s docker-compose -p %s -f bench/stack-compose.yml"):format(env, project)
  local t0 = now()
  sh(dc .. " up -d")
  local port = tonumber(sh(dc .. " port forwarder 8080"):match(":(%d+)"))
  wait_http(port)
  local up = now() - t0
  t0 = now()
  sh(dc .. " down -t 0 -v")
  return up, now() - t0
end

-- The floor: the plan's bodies sent straight, every independent call in parallel, the
-- engine's own healthcheck awaited by polling inspect.
local function run_floor(project, eng)
  local used = assert(apply.used_subnets(eng))
  local picked = assert(core.stack_pick_subnet(POOL, used, tonumber(core.random_hex(3), 16), 28, 3))
  local plan = assert(sandstack.docker.plan(project, opts(project), { api_version = eng.api_version,
    subnets = { sbx = picked[1], pub = picked[2], egress = picked[3] } }))
  local by = {}
  for _, c in ipairs(plan.containers) do by[c.service] = c end
  local function must(results)
    local e = batch.first_error(results)
    if e then error(tostring(e)) end
  end
  local t0 = now()
  local reqs = {}
  for _, n in ipairs(plan.networks) do reqs[#reqs + 1] = { n.method, n.path, n.body_json } end
  for _, v in ipairs(plan.volumes) do reqs[#reqs + 1] = { v.method, v.path, v.body_json } end
  must(batch.run(eng, reqs))
  reqs = {}
  for _, c in ipairs(plan.containers) do reqs[#reqs + 1] = { c.method, c.path, c.body_json } end
  must(batch.run(eng, reqs))
  reqs = {}
  for _, c in ipairs(plan.containers) do
    for _, cn in ipairs(c.connects) do reqs[#reqs + 1] = { cn.method, cn.path, cn.body_json } end
  end
  must(batch.run(eng, reqs))
  reqs = {}
  for _, s in ipairs { "db", "relay", "forwarder" } do reqs[#reqs + 1] = { "POST", "/containers/" .. by[s].name .. "/start" } end
  must(batch.run(eng, reqs))
  while true do
    local info = assert(eng:call("GET", "/containers/" .. by.db.name .. "/json"))
    if info.State.Health and info.State.Health.Status == "healthy" then break end
    core.sleep(0.05)
  end
  assert(eng:call("POST", "/containers/" .. by.sandbox.name .. "/start"))
  local info = assert(eng:call("GET", "/containers/" .. by.forwarder.name .. "/json"))
  wait_http(tonumber(info.NetworkSettings.Ports["8080/tcp"][1].HostPort))
  local up = now() - t0
  t0 = now()
  reqs = {}
  for _, c in ipairs(plan.containers) do reqs[#reqs + 1] = { "DELETE", "/containers/" .. c.name, nil, { query = { force = "1", v = "1" } } } end
  must(batch.run(eng, reqs))
  reqs = {}
  for _, n in ipairs(plan.networks) do reqs[#reqs + 1] = { "DELETE", "/networks/" .. n.name } end
  must(batch.run(eng, reqs))
  must(batch.run(eng, { { "DELETE", "/volumes/" .. plan.volumes[1].name } }))
  return up, now() - t0
end

local function median(t)
  table.sort(t)
  local n = #t
  return n % 2 == 1 and t[(n + 1) / 2] or (t[n / 2] + t[n / 2 + 1]) / 2
end

-- The machine's load average (other work on a shared engine moves every absolute time).
local function loadavg()
  local f = io.open("/proc/loadavg")
  local l = f and f:read("*l") or "?"
  if f then f:close() end
  return (l:match("^(%S+ %S+ %S+)") or l)
end
local load_before = loadavg()

local eng = assert(sandstack.engine {})
local contenders = { { "sandstack", FRESH and run_fresh(".", "build") or run_sandstack }, { "compose", run_compose },
  { "floor", run_floor } }
if OLD_TREE then table.insert(contenders, 2, { "old", run_fresh(OLD_TREE, OLD_BUILD) }) end
local res = {}
for _, c in ipairs(contenders) do res[c[1]] = { up = {}, down = {} } end
for rep = 1, REPS do
  -- interleaved, so engine load drifts hit all alike, and rotated: whoever follows a teardown
  -- meets an engine still busy with it, so no contender is always first
  local order = {}
  for i = 1, #contenders do order[i] = contenders[(i + rep - 2) % #contenders + 1] end
  for _, c in ipairs(order) do
    local project = "sstest-stack-bench-" .. core.random_hex(3)
    local ok, up, down = pcall(c[2], project, eng)
    if not ok then
      io.stderr:write(c[1], " failed: ", tostring(up), "\n")
      sandstack.docker.down(project)
      os.exit(1)
    end
    res[c[1]].up[rep], res[c[1]].down[rep] = up, down
    io.stdout:write(("rep %d %-9s up %6.2fs  down %6.2fs\n"):format(rep, c[1], up, down))
    io.stdout:flush()
  end
end
local m = {}
for name, r in pairs(res) do m[name] = { up = median(r.up), down = median(r.down) } end
-- from here the run's summary: docs/results/docker.md's section for this mode
package.path = "./bench/?.lua;" .. package.path
local run = require("results").begin("docker", { section = FRESH and "stack_bench-fresh" or "stack_bench",
  argv = arg, load_before = load_before })
print(("\nengine API %s, %d reps%s, load average %s before, %s after; medians:"):format(eng.api_version, REPS,
  FRESH and ", sandstack in a fresh process per start" or "", load_before, loadavg()))
for _, c in ipairs(contenders) do print(("  %-9s up-to-ready %6.2fs   teardown %6.2fs"):format(c[1], m[c[1]].up, m[c[1]].down)) end
print("ratios:")
print(("  floor / compose      up %.2fx   down %.2fx"):format(m.floor.up / m.compose.up, m.floor.down / m.compose.down))
print(("  sandstack / floor    up %.2fx   down %.2fx"):format(m.sandstack.up / m.floor.up, m.sandstack.down / m.floor.down))
print(("  sandstack / compose  up %.2fx   down %.2fx"):format(m.sandstack.up / m.compose.up, m.sandstack.down / m.compose.down))
if m.old then
  print(("  old / floor          up %.2fx   down %.2fx   (%s)"):format(m.old.up / m.floor.up, m.old.down / m.floor.down, OLD_TREE))
end
-- The start path's goals, for a fresh process per start (as `sandstack up` pays it): up-to-ready at
-- 0.75x the floor or better, teardown at 0.9x or better.
local function goal(what, ratio, limit)
  print(("  %-9s / floor %.2fx, goal <= %.2fx: %s"):format(what, ratio, limit, ratio <= limit and "met" or "NOT met"))
end
print(("goals (%s):"):format(FRESH and "a fresh process per start" or "set for --fresh; this run starts in one process"))
goal("up", m.sandstack.up / m.floor.up, 0.75)
goal("down", m.sandstack.down / m.floor.down, 0.90)
local v = eng:version()
eng:close()
run:finish { engine = v and ("Docker %s (API %s)"):format(v.Version, v.ApiVersion) or nil }
