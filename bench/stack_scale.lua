-- Scale: N stacks alive at once on one engine, started W at a time (W worker processes, each
-- starting its share one after another and holding the handles), all with subnet_pool /28s.
-- Prints the time per stack, each worker's Lua memory and RSS, then tears everything down.
--   lua5.4 bench/stack_scale.lua [N=100] [W=10]      (from the repository root)
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local N, W = tonumber(arg[1]) or 100, tonumber(arg[2]) or 10
local POOL = "10.216.0.0/16"

if arg[3] == "--worker" then
  local docker = require("sandstack").docker
  local core = require "sandstack.core" -- its monotonic clock and sleep
  local id, count, flag = arg[4], tonumber(arg[5]), arg[6]
  local stacks = {}
  for i = 1, count do
    local name = ("sstest-stack-scale-%s-%d"):format(id, i)
    local t0 = core.engine_clock()
    local s, err = docker.start(name, { project_name = name, agent_port = 8080, subnet_pool = POOL, pull = "never",
      timeout = 120, -- with a hundred bridges the engine's network calls slow down
      forwarder_image = "sandstack-test/socat:local",
      services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" } } } })
    if not s then print("FAIL " .. tostring(err)) io.stdout:flush() break end
    stacks[#stacks + 1] = s
    print(("UP %.3f"):format(core.engine_clock() - t0)) io.stdout:flush()
  end
  collectgarbage()
  local rss = io.open("/proc/self/status"):read("*a"):match("VmRSS:%s*(%d+)")
  print(("MEM lua_kb=%.0f rss_kb=%s"):format(collectgarbage("count"), rss)) io.stdout:flush()
  while not io.open(flag) do core.sleep(0.2) end
  for _, s in ipairs(stacks) do s:destroy() end
  print("DOWN") io.stdout:flush()
  os.exit(0)
end

local core = require "sandstack.core" -- its monotonic clock and sleep
local flag = os.tmpname()
os.remove(flag)
local outs, t0 = {}, core.engine_clock()
for w = 1, W do
  outs[w] = os.tmpname()
  local share = math.floor(N / W) + (w <= N % W and 1 or 0)
  os.execute(("lua5.4 bench/stack_scale.lua %d %d --worker w%d %d %s > %s 2>&1 &"):format(N, W, w, share, flag, outs[w]))
end
local function read(w) local h = io.open(outs[w]); local s = h and h:read("*a") or ""; if h then h:close() end; return s end
local up, times, failed
repeat
  core.sleep(0.5)
  up, times, failed = 0, {}, nil
  local mem = 0
  for w = 1, W do
    local s = read(w)
    for t in s:gmatch("UP ([%d%.]+)") do up = up + 1; times[#times + 1] = tonumber(t) end
    if s:find("FAIL") then failed = s:match("FAIL[^\n]*") end
    if s:find("MEM") then mem = mem + 1 end
  end
until mem == W -- a worker that fails stops starting and reports too
local wall = core.engine_clock() - t0
table.sort(times)
print(("%d of %d stacks up at once, %d at a time, in %.1fs (%.2fs of wall time per stack)"):format(up, N, W, wall, wall / math.max(up, 1)))
if #times > 0 then
  print(("start of one stack: median %.2fs, max %.2fs"):format(times[math.ceil(#times / 2)], times[#times]))
end
for w = 1, W do
  local l = read(w):match("MEM[^\n]*")
  if l then print(("worker %d (%s stacks held): %s"):format(w, select(2, read(w):gsub("UP", "")), l)) end
end
if failed then print("first failure: " .. failed) end
assert(io.open(flag, "w")):close()
repeat
  core.sleep(0.5)
  local down = 0
  for w = 1, W do if read(w):find("DOWN") or read(w):find("FAIL") then down = down + 1 end end
until down == W
print(("all torn down after %.1fs"):format(core.engine_clock() - t0))
os.remove(flag)
for w = 1, W do os.remove(outs[w]) end
require("sandstack").docker.reap { prefix = "sstest-stack-scale-" }
