-- A warm pool's acquire on a swarm (sandstack.swarm.pool), on a three-node swarm of nested
-- engines (spec/support/swarm-cluster.sh): a pool filled on a worker, then one acquire per
-- pooled stack, each handing the session a policy and a model key (through the node's engine:
-- a swarm's proxy is reached by exec). The baseline, in the same run on the same node: a cold
-- sandstack.swarm.start of the same stack, which is what the pool saves the session.
--   lua5.4 bench/swarm_pool_bench.lua [N]    (root, from the repository root; default 6 stacks)
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath
local sandstack = require "sandstack"
local core = sandstack.core

local N = tonumber(arg[1]) or 6
local PREFIX = "sstest-swpoolb-" .. core.random_hex(2):lower() .. "-"
local CLUSTER = "bash spec/support/swarm-cluster.sh"
local up

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  return out, p:close()
end
local function pct(xs, p)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  return #t > 0 and t[math.max(1, math.ceil(#t * p))] or 0
end

-- SANDSTACK_BENCH_CLUSTER=PREFIX: a cluster of swarm-cluster.sh already up (left up afterwards)
local given = os.getenv("SANDSTACK_BENCH_CLUSTER")
if given then
  PREFIX = given
  local dir = (os.getenv("SANDSTACK_NESTED_DIR") or "/var/lib/sandstack-nested") .. "/"
  CLUSTER = "true"
  up = ("MANAGER_SOCK=%s%sn1/run/docker.sock\nNODE2_NAME=%sn2\n"):format(dir, given, given)
end
local ok
if not given then
  up, ok = sh(CLUSTER .. " up " .. PREFIX .. " 2>/dev/null")
  if not ok then
    sh(CLUSTER .. " down " .. PREFIX .. " >/dev/null 2>&1")
    error("swarm-cluster.sh up failed")
  end
end
local manager = "unix://" .. up:match("MANAGER_SOCK=([^\n]+)")
local worker = up:match("NODE2_NAME=([^\n]+)")
local stack = { docker_host = manager, agent_port = 8080, ready_timeout = 90, -- no reservation: the pool and the cold starts share one node
  constraints = { "node.hostname==" .. worker },
  services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" } } },
  egress_policy = { allow = {} }, api_key = "sk-bench-operator-" .. core.random_hex(8) }

local results = require("results")
local run = results.begin("swarm-claim", { section = "swarm_pool", argv = arg, markdown = true,
  title = "## A swarm pool's acquire",
  intro = "bench/swarm_pool_bench.lua: a pool's acquire on a worker of a three-node swarm of nested engines, "
    .. "the session's policy and model key handed over; the baseline is a cold start of the same stack." })

local steps = { total = {}, list = {}, claim = {}, node = {}, handle = {}, egress = {} }
local cold, fill_s, stacks = {}, 0, {}
local pool
local ok_run, err_run = pcall(function()
  pool = assert(sandstack.swarm.pool { name = "bench" .. core.random_hex(2):lower(), size = N, max = N, stack = stack })
  local t0 = core.engine_clock()
  assert(pool:fill() == N, "the pool did not fill")
  fill_s = core.engine_clock() - t0
  for i = 1, N do
    local s = assert(pool:acquire("bench-" .. i, { egress_policy = { allow = { "model.test" } } }))
    local t = pool.last_acquire
    for k, xs in pairs(steps) do xs[#xs + 1] = t[k] or 0 end
    stacks[#stacks + 1] = s
  end
  for i = 1, 2 do
    t0 = core.engine_clock()
    local s = assert(sandstack.swarm.start("bench-cold-" .. i, stack))
    cold[#cold + 1] = core.engine_clock() - t0
    stacks[#stacks + 1] = s
  end
end)
for _, s in ipairs(stacks) do s:destroy(); s:close() end
if pool then pool:close() end
sh(CLUSTER .. " down " .. PREFIX .. " >/dev/null 2>&1")
if not ok_run then error(err_run, 0) end

local c50 = pct(cold, 0.5)
print(("A pool of %d filled on one worker in %.1f s (2 starts at once). %d acquires, each with a hand-over:"):format(
  N, fill_s, N))
print()
print("| | p50 ms | p99 ms | p50 / cold start |")
print("|---|---|---|---|")
print(("| cold `sandstack.swarm.start` (baseline, %d runs) | %.0f | %.0f | 1.00 |"):format(#cold, 1000 * c50,
  1000 * pct(cold, 0.99)))
print(("| pool acquire | %.1f | %.1f | %.3f |"):format(1000 * pct(steps.total, 0.5), 1000 * pct(steps.total, 0.99),
  pct(steps.total, 0.5) / c50))
for _, k in ipairs { "list", "claim", "node", "handle", "egress" } do
  print(("| - %s | %.1f | %.1f | |"):format(k == "egress" and "hand-over (exec on the node)" or k,
    1000 * pct(steps[k], 0.5), 1000 * pct(steps[k], 0.99)))
end
run:finish {}
