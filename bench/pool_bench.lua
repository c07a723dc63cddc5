-- Warm pools, measured against cold starts of the same anchor stack
-- (bench/anchor.lua) in this one run: the ratios are the result, the absolute times depend on the
-- machine.
--   1. The claim candidates the Engine offers, each timed and checked for the answer a second
--      claimant gets (a claim is atomic only if the second one is refused).
--   2. acquire with 4 processes acquiring from one pool at once, ROUNDS rounds, against a cold
--      start with 4 processes starting at once: p50 and p99, both ratios against the goals
--      (p50 <= 1/200, p99 <= 1/80 of the cold p50), agent-sandbox's published figures beside
--      them, and what runs in each millisecond of an acquire.
--   3. A burst of 20 acquires against a pool of 4 (acquire_many: 4 warm, 16 cold at the pool's
--      concurrency 4) against 20 cold starts the same way: p50 of each.
--   lua5.4 bench/pool_bench.lua [ROUNDS]   (from the repository root; needs the engine; ROUNDS = 12)
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.path = "./bench/?.lua;" .. package.path
local run = require("results").begin("pool", {
  title = "# Results: warm pools against cold starts (bench/pool_bench.lua)", argv = arg })
package.cpath = (os.getenv("SANDSTACK_BUILD") or "./build") .. "/?.so;" .. package.cpath -- SANDSTACK_BUILD: another build dir
local sandstack = require "sandstack"
local core = require "sandstack.core" -- its monotonic clock and sleep
local batch = require "sandstack.stack.batch"
local inventory = require "sandstack.docker.inventory"

local ROUNDS = tonumber(arg[1]) or 12
local PROCS, BURST, BURST_POOL = 4, 20, 4
local SUBNETS = "10.216.0.0/16"
local now = core.engine_clock
local NAME = "ssbench-pool-" .. core.random_hex(3)
local anchor_stack = dofile("bench/anchor.lua")
local function anchor() return anchor_stack { subnet_pool = SUBNETS } end

local R = require "pool_rounds"
local pct, ms, loadavg, column = R.pct, R.ms, R.loadavg, R.column

print(("pool_bench: %s, engine %s, load average %s"):format(NAME, (function()
  local eng = assert(sandstack.engine {})
  local v = eng:version()
  eng:close()
  return v and (v.Version .. ", API " .. v.ApiVersion) or "?"
end)(), loadavg()))

-- 1. The claim candidates. Each is timed N times on fresh objects, and the same request is sent
-- again: the answer to that second claimant says whether the candidate can arbitrate at all.
do
  local eng = assert(sandstack.engine {})
  local label = { ["io.sandstack.bench"] = NAME }
  local image = "sandstack-test/socat:local"
  local function mark_body() return { Image = image, Entrypoint = { "true" }, NetworkDisabled = true, Labels = label,
    HostConfig = { NetworkMode = "none" } } end
  local cands = {
    { "container create <p>-claim (the old claim)", function(p)
      return { "POST", "/containers/create", mark_body(), { query = { name = p .. "-claim" } } } end },
    { "rename <p>-ready -> <p>-claim (the claim now)", function(p) return inventory.claim_request(p) end,
      setup = function(p) return { "POST", "/containers/create", mark_body(), { query = { name = p .. "-ready" } } } end },
    { "volume create <p>-claim (the session record)", function(p)
      return { "POST", "/volumes/create", { Name = p .. "-claim", Labels = label } } end },
    { "network create <p>-claim, CheckDuplicate", function(p)
      return { "POST", "/networks/create", { Name = p .. "-claim", CheckDuplicate = true, Internal = true, Labels = label } } end },
    { "label update (POST /containers/{id}/update)", function(p)
      return { "POST", "/containers/" .. p .. "-x/update", { Labels = { ["io.sandstack.session"] = "s" } } } end,
      setup = function(p) return { "POST", "/containers/create", mark_body(), { query = { name = p .. "-x" } } } end },
  }
  print("\n1. claim candidates (20 each, one at a time)                   p50       p99   second claimant")
  for ci, c in ipairs(cands) do
    local ts, second = {}, nil
    for i = 1, 20 do
      local p = ("%s-k%d-%d"):format(NAME, ci, i)
      if c.setup then assert(batch.run(eng, { c.setup(p) }, 30)[1].ok) end
      local t0 = now()
      local r = batch.run(eng, { c[2](p) }, 30)[1]
      ts[i] = now() - t0
      assert(r.ok, c[1] .. ": " .. tostring(r.err and r.err.message))
      if i == 1 then
        local again = batch.run(eng, { c[2](p) }, 30)[1]
        second = again.ok and ("answered " .. tostring(again.status) .. ": NOT a claim") or ("refused " .. tostring(again.status))
        if ci == 5 then
          local info = eng:call("GET", "/containers/" .. p .. "-x/json")
          if not (info and info.Config.Labels["io.sandstack.session"]) then second = second .. " (labels left unchanged)" end
        end
      end
    end
    print(("   %-58s %7.2f ms %7.2f ms   %s"):format(c[1], ms(pct(ts, 50)), ms(pct(ts, 99)), second))
  end
  local f = { label = { "io.sandstack.bench=" .. NAME } }
  local cs = eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } }) or {}
  local ns = eng:call("GET", "/networks", nil, { query = { filters = f } }) or {}
  local vs = eng:call("GET", "/volumes", nil, { query = { filters = f } }) or {}
  local objs = { containers = {}, networks = {}, volumes = {} }
  for _, c in ipairs(cs) do objs.containers[#objs.containers + 1] = c.Id end
  for _, n in ipairs(ns) do objs.networks[#objs.networks + 1] = n.Id end
  for _, v in ipairs(vs.Volumes or {}) do objs.volumes[#objs.volumes + 1] = v.Name end
  assert(batch.remove(eng, objs))
  eng:close()
  print("   (a rename to one fixed name is the claim: exactly one of concurrent renames succeeds, the others get"
    .. "\n    404, 400 or 409; spec/docker_pool_claim_spec.lua proves it with 8 processes)")
end

local function rounds_of(name, rounds, between_rounds)
  return R.rounds { name = name, rounds = rounds, procs = PROCS, stack = anchor(), between = between_rounds }
end
local recycle, drain, parse = R.recycle, R.drain, R.parse

-- 2. Cold: PROCS processes start at once from an empty pool (the cold path: the normal start,
-- then the claim), 2 rounds; their stacks are destroyed between rounds.
local cold_pool = NAME .. "-c"
local cold = column(parse(rounds_of(cold_pool, 2, function() drain(cold_pool) end)), function(r) return r.total end)

-- Warm: a pool of PROCS + 2 ready stacks, PROCS processes acquiring at once, ROUNDS rounds.
local warm_pool = NAME .. "-w"
local pool = assert(sandstack.docker.pool { name = warm_pool, size = PROCS + 2, max = PROCS + 8, stack = anchor() })
assert(pool:fill() == PROCS + 2)
local load_warm = loadavg()
local lines = rounds_of(warm_pool, ROUNDS, function() recycle(warm_pool) end)
local rs = parse(lines, true)
local warm = column(rs, function(r) return r.total end)
local n_cold_in_warm = #lines - #warm
drain(warm_pool)

local cold50 = pct(cold, 50)
print(("\n2. acquire, %d processes at once from one pool (load average %s)"):format(PROCS, load_warm))
print(("   cold start (%d processes at once, n=%d)   p50 %8.1f ms   p99 %8.1f ms"):format(PROCS, #cold, ms(cold50), ms(pct(cold, 99))))
print(("   acquire    (%d processes at once, n=%d)  p50 %8.2f ms   p99 %8.2f ms   (agent-sandbox: p50 34-64 ms, p95 53-80 ms)"):format(
  PROCS, #warm, ms(pct(warm, 50)), ms(pct(warm, 99))))
if n_cold_in_warm > 0 then print(("   (%d acquires found no idle stack and started cold; left out)"):format(n_cold_in_warm)) end
local r50, r99 = cold50 / pct(warm, 50), cold50 / pct(warm, 99)
print(("   acquire p50 = 1/%.0f of the cold p50: %s (goal 1/200)"):format(r50, r50 >= 200 and "goal met" or "goal NOT met"))
print(("   acquire p99 = 1/%.0f of the cold p50: %s (goal 1/80)"):format(r99, r99 >= 80 and "goal met" or "goal NOT met"))
print("   what runs in each millisecond of an acquire (p50 of each step over the acquires; the rest is per acquire):")
local steps = {
  { function(r) return r.list end, "list: the pool's containers with state and ports (the re-check), one request" },
  { function(r) return r.claim end, "claim: the rename of <p>-ready to <p>-claim, one request per try" },
  { function(r) return r.plan end, "plan: the stack's plan in C, with the record request in flight" },
  { function(r) return r.handle end, "handle: the stack handle (a new engine client, no request)" },
  { function(r) return math.max(0, r.record - r.plan - r.handle) end,
    "record: the rest of the wait for the volume naming the session" },
  { function(r) return math.max(0, r.total - r.list - r.claim - r.record) end,
    "the rest: argument checks, the shuffle, the event, the child's clock" },
}
for _, s in ipairs(steps) do print(("     %7.2f ms  %s"):format(ms(pct(column(rs, s[1]), 50)), s[2])) end
table.sort(rs, function(a, b) return a.total > b.total end)
for i = 1, math.min(3, #rs) do
  local r = rs[i]
  print(("   slowest #%d: %.1f ms = list %.1f + claim %.1f (%d tries) + plan, handle and record %.1f + rest %.1f"):format(i,
    ms(r.total), ms(r.list), ms(r.claim), r.tries, ms(r.record), ms(math.max(0, r.total - r.list - r.claim - r.record))))
end
local retried = 0
for _, r in ipairs(rs) do if r.tries > 1 then retried = retried + 1 end end
print(("   %d of %d acquires lost a race for their first stack and claimed another (each loss: one more rename)"):format(
  retried, #rs))

-- 3. The burst: BURST acquires at once (acquire_many) against a pool of BURST_POOL, against the
-- same burst from an empty pool.
local function burst(name, size)
  local p = assert(sandstack.docker.pool { name = name, size = size, max = BURST + size, stack = anchor(), concurrency = 4 })
  if size > 0 then assert(p:fill() == size) end
  local keys = {}
  for i = 1, BURST do keys[i] = "burst-" .. i end
  local out = assert(p:acquire_many(keys))
  local ts, warm_n = {}, 0
  for i, r in ipairs(out) do
    assert(r.stack, "burst session " .. i .. ": " .. tostring(r.err and r.err.message))
    ts[i] = r.seconds
    r.stack:close()
  end
  for i = 1, size do if out[i].seconds < 1 then warm_n = warm_n + 1 end end
  drain(name)
  return ts, warm_n
end
local load_burst = loadavg()
local bw, warm_n = burst(NAME .. "-bw", BURST_POOL)
local bc = burst(NAME .. "-bc", 0)
print(("\n3. burst: %d acquires at once, pool of %d, cold starts at concurrency 4 (load average %s)"):format(BURST, BURST_POOL, load_burst))
print(("   against a pool of %d: p50 %6.2f s  (first %d: %d under 1 s, the warm ones), last %.2f s"):format(BURST_POOL,
  pct(bw, 50), BURST_POOL, warm_n, pct(bw, 100)))
print(("   %d cold starts:       p50 %6.2f s, last %.2f s   burst/cold p50 = %.2f"):format(BURST, pct(bc, 50), pct(bc, 100),
  pct(bw, 50) / pct(bc, 50)))
print(("load average at the end: %s"):format(loadavg()))
run:finish()
