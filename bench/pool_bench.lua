-- Warm pools (issue 16): the time from acquire to the first agent answer, a pooled stack against
-- a cold start of the same anchor stack (the reference stack of bench/stack_bench.lua), at
-- concurrency 1 and 8 (8 processes acquiring at once), p50 and p99; and fill throughput against
-- starting the same stacks one by one with sandstack.docker.start. Both sides are measured in
-- this one run: the ratios are the result, the absolute times depend on the machine.
--   lua5.4 bench/pool_bench.lua [N]        (from the repository root; needs the engine; N = 8)
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("SANDSTACK_BUILD") or "./build") .. "/?.so;" .. package.cpath -- SANDSTACK_BUILD: another build dir
local sandstack = require "sandstack"
local http = require "sandstack.docker.http"
local core = require "sandstack.core" -- its monotonic clock and sleep

local N = tonumber(arg[1]) or 8
local SUBNETS = "10.216.0.0/16"
local now = core.engine_clock
local NAME = "ssbench-pool-" .. sandstack.core.random_hex(3)

local anchor_stack = dofile("bench/anchor.lua")
local function anchor()
  return anchor_stack { subnet_pool = SUBNETS }
end

local function pool_of(name, size)
  return assert(sandstack.docker.pool { name = name, size = size, max = size + 16, stack = anchor() })
end

-- acquire, then one GET through the forwarder: what a gateway's POST /sessions waits for
local function acquire_and_answer(pool, key)
  local t0 = now()
  local s = assert(pool:acquire(key))
  local r = http.request { method = "GET", url = s.endpoint .. "/health", timeout = 10 }
  assert(r and r.status == 200, "the agent did not answer")
  local dt = now() - t0
  assert(s:destroy()); s:close()
  return dt
end

local function pct(xs, p)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s[math.max(1, math.ceil(p / 100 * #s))]
end

-- The anchor options as Lua source, for the child processes (they hold no functions).
local function anchor_source()
  local o = anchor()
  local function ser(v)
    if type(v) == "table" then
      local parts = {}
      for k, x in pairs(v) do parts[#parts + 1] = "[" .. ser(k) .. "]=" .. ser(x) end
      return "{" .. table.concat(parts, ",") .. "}"
    end
    return type(v) == "string" and ("%q"):format(v) or tostring(v)
  end
  return "return " .. ser(o)
end

local function read(path)
  local f = io.open(path)
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

-- N processes acquire from pool `name` at once (a file is the start signal); each prints its
-- acquire-to-answer time, then destroys its stack.
local function concurrent(name, tag)
  local dir = io.popen("mktemp -d /tmp/ssbench-pool.XXXXXX"):read("*l")
  local o = assert(io.open(dir .. "/opts.lua", "w"))
  o:write(anchor_source())
  o:close()
  local f = assert(io.open(dir .. "/child.lua", "w"))
  f:write(("package.path = %q; package.cpath = %q\n"):format(package.path, package.cpath), ([[
    local sandstack = require "sandstack"
    local http = require "sandstack.docker.http"
    local core = require "sandstack.core" -- its monotonic clock and sleep
    local pool = assert(sandstack.docker.pool { name = %q, size = 0, max = 64, stack = dofile(%q) })
    while not io.open(%q) do core.sleep(0.005) end
    local t0 = core.engine_clock()
    local s = assert(pool:acquire(%q .. arg[1]))
    local r = http.request { method = "GET", url = s.endpoint .. "/health", timeout = 10 }
    assert(r and r.status == 200)
    print(("T %%.6f"):format(core.engine_clock() - t0))
    io.stdout:flush()
    s:destroy()
    print("DONE")
  ]]):format(name, dir .. "/opts.lua", dir .. "/go", tag))
  f:close()
  local cmds = {}
  for i = 1, N do cmds[i] = ("(lua5.4 %s/child.lua %d > %s/out%d 2>&1 &)"):format(dir, i, dir, i) end
  os.execute(table.concat(cmds, "; "))
  core.sleep(1.0) -- every child loads and waits at the barrier
  io.open(dir .. "/go", "w"):close()
  local ts = {}
  for i = 1, N do
    for _ = 1, 1200 do
      local s = read(dir .. "/out" .. i)
      if s:find("DONE", 1, true) then ts[#ts + 1] = tonumber(s:match("T (%S+)")); break end
      if s:find("lua5.4:", 1, true) then error("child " .. i .. ": " .. s) end
      core.sleep(0.1)
    end
  end
  os.execute("rm -rf " .. dir)
  assert(#ts == N, "a child did not finish")
  return ts
end

local function report(label, xs)
  print(("%-34s p50 %8.1f ms   p99 %8.1f ms   (n=%d)"):format(label, pct(xs, 50) * 1e3, pct(xs, 99) * 1e3, #xs))
end

local rows = {}

-- Concurrency 1. Cold: an empty pool's acquire is a normal start (plus the claim).
local cold1, pooled1 = {}, {}
local empty = pool_of(NAME .. "-c", 0)
for i = 1, N do cold1[i] = acquire_and_answer(empty, "cold-" .. i) end
local pool = pool_of(NAME .. "-w", N)
local t0 = now()
assert(pool:fill() == N) -- the default: 4 starts at once
local fill_t = now() - t0
-- the same fill with one start at a time (the baseline of the bounded parallel fill)
local serial = pool_of(NAME .. "-f1", N)
t0 = now()
assert(serial:fill { concurrency = 1 } == N)
local fill1_t = now() - t0
assert(sandstack.docker.reap { pool = NAME .. "-f1" })
for i = 1, N do pooled1[i] = acquire_and_answer(pool, "warm-" .. i) end

-- Fill throughput against the same N stacks started one by one.
t0 = now()
local one = {}
for i = 1, N do one[i] = assert(sandstack.docker.start("seq-" .. i, (function() local o = anchor(); o.project_name = NAME .. "-s" .. i; return o end)())) end
local seq_t = now() - t0
for _, s in ipairs(one) do s:destroy(); s:close() end

-- Concurrency 8: N processes acquire at once, from an empty pool (cold) and a filled one.
local cold8 = concurrent(NAME .. "-c8", "cold8-")
local pool8 = pool_of(NAME .. "-w8", N)
assert(pool8:fill() == N)
local pooled8 = concurrent(NAME .. "-w8", "warm8-")

report("cold   acquire->answer, conc 1", cold1)
report("pooled acquire->answer, conc 1", pooled1)
report("cold   acquire->answer, conc " .. N, cold8)
report("pooled acquire->answer, conc " .. N, pooled8)
rows[1] = pct(pooled1, 50) / pct(cold1, 50)
rows[2] = pct(pooled8, 50) / pct(cold8, 50)
print(("pooled/cold p50: conc 1 = 1/%.0f, conc %d = 1/%.0f   (goal: at most 1/30)"):format(1 / rows[1], N, 1 / rows[2]))
print(("pooled/cold p99: conc 1 = 1/%.0f, conc %d = 1/%.0f"):format(pct(cold1, 99) / pct(pooled1, 99), N,
  pct(cold8, 99) / pct(pooled8, 99)))
print(("fill: %d stacks in %.1f s = %.1f stacks/min; one by one: %.1f stacks/min; ratio %.2f"):format(N, fill_t,
  N / fill_t * 60, N / seq_t * 60, seq_t / fill_t))
print(("fill concurrency 4 against concurrency 1: %.2fx the throughput"):format(fill1_t / fill_t))

for _, n in ipairs { NAME .. "-c", NAME .. "-w", NAME .. "-c8", NAME .. "-w8" } do sandstack.docker.reap { pool = n } end
