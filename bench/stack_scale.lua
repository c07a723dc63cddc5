-- Sessions per host: minimal stacks kept alive on one engine, counted up in levels (10, 100, 500,
-- 1000 by default). At each level ten more are started one after another and timed, then the
-- host is sampled: its memory, its tasks, the neighbour entries, the firewall rules and the
-- engine's networks, each per session alive. The start's p50 at each level is put against the
-- p50 at the first level, measured in the same run (the cost a start pays for the sessions
-- already running). Between levels the stacks are started W at a time by worker processes.
-- The run ends at the last level, or at the first failure (the limit this design meets first),
-- and everything goes by `sandstack reap --prefix`, timed.
--   lua5.4 bench/stack_scale.lua [--levels 10,100,500,1000] [--workers 8] [--egress]
--   (from the repository root, as root: it reads the firewall and the neighbour tables)
-- --egress: each stack with the egress proxy sandstack adds (a policy) and a credential.
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local PREFIX = "sstest-scale-"
local POOL = "10.216.0.0/16" -- /28s: 4096 networks, room for 1000 sessions of three

local function stack_options(name, egress)
  local o = { project_name = name, agent_port = 8080, subnet_pool = POOL, pull = "never", timeout = 300,
    services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" } } } }
  if egress then
    o.egress_policy = { allow = { "api.example.test" } }
    o.credentials = { { name = "API_KEY", host = "api.example.test", header = "Authorization",
      format = "Bearer %s", secret = "sk-scale-0123456789abcdef" } }
  end
  return o
end

-- The start's steps, in order, by the event that ends each: what a start spends where, so a step
-- that grows with the sessions alive shows by name (the checks: the lists, /info and the
-- isolation memo; the creates: networks, volumes and containers, whose creates are sent in one
-- pipelined round, so their events end together; the containers' starts; the agent's first answer).
local PHASES = { { "checks", { isolation_remembered = true, isolation_verified = true } },
  { "creates", { network_created = true, container_created = true, volume_created = true } },
  { "starts", { container_started = true } }, { "ready", { ready = true } } }

local function start_one(docker, core, name, egress)
  local t0 = core.engine_clock()
  local ends = {}
  local opts = stack_options(name, egress)
  opts.on_event = function(ev)
    for i, ph in ipairs(PHASES) do
      if ph[2][ev.phase] then ends[i] = ev.elapsed end
    end
  end
  local s, err = docker.start(name, opts)
  if not s then return nil, err end
  s:close() -- the stack stays; only this process's hold on it ends
  local steps, last = {}, 0
  for i = 1, #PHASES do
    if ends[i] then steps[i], last = ends[i] - last, ends[i] end
  end
  return core.engine_clock() - t0, steps
end

-- A worker: `--worker ID FIRST COUNT [--egress]` starts stacks FIRST..FIRST+COUNT-1 one after
-- another, printing "UP seconds" or "FAIL message" for each (it stops at the first failure).
if arg[1] == "--worker" then
  local docker, core = require("sandstack").docker, require "sandstack.core"
  local first, count, egress = tonumber(arg[3]), tonumber(arg[4]), arg[5] == "--egress"
  for i = first, first + count - 1 do
    local dt, err = start_one(docker, core, ("%s%05d"):format(PREFIX, i), egress)
    if not dt then print("FAIL " .. tostring(err):gsub("\n", " ")) io.stdout:flush() os.exit(1) end
    print(("UP %.3f"):format(dt)) io.stdout:flush()
  end
  os.exit(0)
end

local levels, workers, egress = { 10, 100, 500, 1000 }, 8, false
do
  local i = 1
  while arg[i] do
    if arg[i] == "--levels" then
      levels = {}
      for n in arg[i + 1]:gmatch("%d+") do levels[#levels + 1] = tonumber(n) end
      i = i + 2
    elseif arg[i] == "--workers" then workers = tonumber(arg[i + 1]); i = i + 2
    elseif arg[i] == "--egress" then egress = true; i = i + 1
    else io.stderr:write("stack_scale: unknown argument " .. arg[i] .. "\n") os.exit(2) end
  end
end
table.sort(levels)
assert(levels[1] and levels[1] >= 10, "stack_scale: the first level is at least 10 (its ten timed starts)")

local sandstack = require "sandstack"
local docker, core = sandstack.docker, require "sandstack.core"

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>/dev/null"))
  local s = p:read("a")
  p:close()
  return s
end
local function count_lines(cmd) return select(2, sh(cmd):gsub("\n", "")) end

-- What the host holds: memory in use (MemTotal - MemAvailable), tasks (threads of every
-- process), IPv4 neighbour entries, firewall rules (iptables-save's -A lines, every table) and
-- the engine's networks.
local function host_sample()
  local mi = sh("cat /proc/meminfo")
  local used = tonumber(mi:match("MemTotal:%s*(%d+)")) - tonumber(mi:match("MemAvailable:%s*(%d+)"))
  return { mem_kb = used, tasks = count_lines("ls -d /proc/[0-9]*/task/[0-9]*"),
    neigh = count_lines("ip -4 neigh show"), rules = count_lines("iptables-save | grep '^-A'"),
    networks = count_lines("docker network ls -q"), proxies = count_lines("pgrep -x docker-proxy") }
end

local function quantile(t, q)
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  return s[math.max(1, math.ceil(#s * q))]
end

-- the stacks of this bench alive on the engine
local function ours()
  local n = 0
  for _, s in ipairs(assert(docker.list {})) do
    if s.project:sub(1, #PREFIX) == PREFIX then n = n + 1 end
  end
  return n
end

if ours() > 0 then
  io.stderr:write(("stack_scale: %d stacks named %s* are alive; remove them first: sandstack reap --prefix %s\n")
    :format(ours(), PREFIX, PREFIX))
  os.exit(1)
end

local run = require("results").begin("scale", {
  title = "# Sessions per host: measured (bench/stack_scale.lua)",
  argv = arg,
  section = egress and "stack_scale_egress" or "stack_scale",
})
print(("%s sessions (one busybox sandbox serving HTTP, the default forwarder%s), started %d at a time between "
  .. "levels; at each level ten more one after another, timed. Per session: the host's growth since the "
  .. "run began, divided by the sessions alive."):format(egress and "Egress" or "Minimal",
  egress and ", the egress proxy sandstack adds with a policy and a credential" or "", workers))
print("")
print("| alive | start p50 s | start p95 s | p50 / p50 at " .. levels[1] .. " | host MiB per session | tasks per session | neighbour entries | firewall rules | networks | docker-proxy |")
print("|---|---|---|---|---|---|---|---|---|---|")
io.stdout:flush()

local base = host_sample()
local alive, next_index, first_p50, failure = 0, 1, nil, nil
local phase_rows = {}

-- fills to `target` alive, `workers` processes at a time; nil, message at the first failure
local function fill(target)
  local need = target - alive
  if need <= 0 then return true end
  local outs, per = {}, math.ceil(need / workers)
  local launched = 0
  for w = 1, workers do
    local n = math.min(per, need - launched)
    if n <= 0 then break end
    outs[w] = os.tmpname()
    os.execute(("lua5.4 bench/stack_scale.lua --worker w%d %d %d%s > %s 2>&1 &"):format(w, next_index, n,
      egress and " --egress" or "", outs[w]))
    next_index, launched = next_index + n, launched + n
  end
  local expected = launched
  while true do
    core.sleep(1)
    local up, done, fail = 0, 0, nil
    for _, path in pairs(outs) do
      local f = io.open(path)
      local s = f and f:read("a") or ""
      if f then f:close() end
      up = up + select(2, s:gsub("UP ", ""))
      fail = fail or s:match("FAIL ([^\n]*)")
      if fail then done = done + 1 end
    end
    if up >= expected or (fail and up + done >= expected) then
      alive = alive + up
      for _, path in pairs(outs) do os.remove(path) end
      if fail then return nil, fail end
      return true
    end
    if fail then -- the others go on to their end; count them once they stop growing
      core.sleep(5)
      local up2 = 0
      for _, path in pairs(outs) do
        local f = io.open(path)
        local s = f and f:read("a") or ""
        if f then f:close() end
        up2 = up2 + select(2, s:gsub("UP ", ""))
      end
      if up2 == up then
        alive = alive + up
        for _, path in pairs(outs) do os.remove(path) end
        return nil, fail
      end
    end
  end
end

for _, level in ipairs(levels) do
  local ok, ferr = fill(level - 10)
  if not ok then failure = ("filling to %d: %s"):format(level - 10, ferr) break end
  local times, steps = {}, {}
  for _ = 1, 10 do
    local dt, st = start_one(docker, core, ("%s%05d"):format(PREFIX, next_index), egress)
    next_index = next_index + 1
    if not dt then failure = ("at %d alive: %s"):format(alive, tostring(st)) break end
    alive = alive + 1
    times[#times + 1] = dt
    for i = 1, #PHASES do
      steps[i] = steps[i] or {}
      if st[i] then table.insert(steps[i], st[i]) end
    end
  end
  if failure then break end
  local p50, p95 = quantile(times, 0.5), quantile(times, 0.95)
  first_p50 = first_p50 or p50
  local h = host_sample()
  print(("| %d | %.3f | %.3f | %.2f | %.1f | %.1f | %d | %d | %d | %d |"):format(alive, p50, p95, p50 / first_p50,
    (h.mem_kb - base.mem_kb) / 1024 / alive, (h.tasks - base.tasks) / alive, h.neigh, h.rules, h.networks, h.proxies))
  io.stdout:flush()
  local row = {}
  for i = 1, #PHASES do row[i] = steps[i][1] and ("%.3f"):format(quantile(steps[i], 0.5)) or "-" end
  phase_rows[#phase_rows + 1] = ("| %d | %s |"):format(alive, table.concat(row, " | "))
end

print("")
local names = {}
for i, ph in ipairs(PHASES) do names[i] = ph[1] end
print("Where a start's time goes (p50 s of each step of the ten timed starts; checks: the engine lists, /info and the isolation memo):")
print("")
print("| alive | " .. table.concat(names, " | ") .. " |")
print("|---|" .. ("---|"):rep(#PHASES))
for _, r in ipairs(phase_rows) do print(r) end
print("")
if failure then print("The first limit met: " .. failure) else print("No failure up to " .. alive .. " alive.") end
local t0 = core.engine_clock()
local out = sh("lua5.4 bin/sandstack reap --prefix " .. PREFIX .. " --json")
local removed = select(2, out:gsub('"' .. PREFIX:gsub("%p", "%%%0"), ""))
local down = core.engine_clock() - t0
print(("Teardown by `sandstack reap --prefix`: %d stacks in %.1f s (%.2f s a stack)."):format(removed, down,
  down / math.max(removed, 1)))
local rest = ours()
if rest > 0 then print(("%d stacks were left; reap again."):format(rest)) end
run:finish()
