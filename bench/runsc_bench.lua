-- What gVisor costs: the anchor stack of bench/stack_bench.lua (sandbox with agent and
-- a volume, forwarder, a sidecar with a 0.5 s healthcheck the sandbox depends on, an egress
-- sidecar) brought up to ready and torn down under runtime = "runsc" and under the engine's
-- default (runc), alternately in one run, and the round trip of an HTTP request through each
-- stack's forwarder. Prints medians and the runsc/runc ratios; absolute times depend on the
-- machine, the ratios are the result.
--   lua5.4 bench/runsc_bench.lua [REPS] [REQUESTS]   (from the repository root; needs the engine
--                                                     with runsc registered: spec/support/runsc-setup.sh)
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.path = "./bench/?.lua;" .. package.path
local run = require("results").begin("runsc", {
  title = "# Results: gVisor against runc (bench/runsc_bench.lua)", argv = arg })
package.cpath = "./build/?.so;" .. package.cpath
local sandstack = require "sandstack"
local core = sandstack.core
local http = require "sandstack.docker.http"

local REPS = tonumber(arg[1]) or 3
local REQUESTS = tonumber(arg[2]) or 200
local POOL = "10.217.0.0/16"
local now = core.engine_clock

local anchor = dofile("bench/anchor.lua")
local function opts(project, runtime)
  return anchor { project_name = project, subnet_pool = POOL, runtime = runtime }
end

local function median(t)
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  local n = #s
  if n == 0 then return 0 / 0 end
  return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end

-- One stack: up-to-ready, REQUESTS sequential GETs through the forwarder (each a new
-- connection, as a client's request is), teardown.
local function one(runtime)
  local project = "sstest-runsc-bench-" .. core.random_hex(3)
  local t0 = now()
  local s = assert(sandstack.docker.start(project, opts(project, runtime)))
  local up = now() - t0
  local rtts = {}
  for i = 1, REQUESTS do
    local r0 = now()
    local r = http.request { method = "GET", url = s.endpoint .. "/health", timeout = 10 }
    assert(r and r.status == 200, "request " .. i .. " failed")
    rtts[i] = now() - r0
  end
  t0 = now()
  assert(s:destroy())
  s:close()
  return up, now() - t0, median(rtts)
end

local eng = assert(sandstack.engine {})
local info = assert(eng:call("GET", "/info"))
eng:close()
if not (info.Runtimes and info.Runtimes.runsc) then
  io.stderr:write("runsc is not registered with the engine: run spec/support/runsc-setup.sh\n")
  os.exit(2)
end
local args = table.concat(info.Runtimes.runsc.runtimeArgs or {}, " ")

local res = { runc = { up = {}, down = {}, rtt = {} }, runsc = { up = {}, down = {}, rtt = {} } }
one(nil) -- warm-up (images, page cache), not counted
one("runsc")
for _ = 1, REPS do
  for _, rt in ipairs { "runc", "runsc" } do -- alternated, so drift hits both alike
    local up, down, rtt = one(rt == "runsc" and "runsc" or nil)
    local r = res[rt]
    r.up[#r.up + 1], r.down[#r.down + 1], r.rtt[#r.rtt + 1] = up, down, rtt
  end
end

print(("runsc bench: %d reps, %d requests per stack, runsc args: %s"):format(REPS, REQUESTS, args))
print(("%-8s %12s %12s %14s"):format("runtime", "up (s)", "down (s)", "request (ms)"))
for _, rt in ipairs { "runc", "runsc" } do
  local r = res[rt]
  print(("%-8s %12.2f %12.2f %14.2f"):format(rt, median(r.up), median(r.down), median(r.rtt) * 1000))
end
local a, b = res.runc, res.runsc
print(("ratio runsc/runc: up %.2fx, teardown %.2fx, request round trip %.2fx"):format(
  median(b.up) / median(a.up), median(b.down) / median(a.down), median(b.rtt) / median(a.rtt)))
run:finish()
