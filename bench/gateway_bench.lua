-- The gateway: POST /sessions through a real nginx to the first answer of the
-- session's agent, with a warm pool against cold starts, both measured in this one run on the
-- same engine; the ratio is the result, the absolute times depend on the machine.
--   lua5.4 bench/gateway_bench.lua [N]    (from the repository root; needs nginx and the engine;
--   SANDSTACK_BUILD / SANDSTACK_NGINX_BUILD: the Lua 5.4 and LuaJIT builds, default ./build(-luajit))
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/support/?.lua;" .. package.path
package.path = "./bench/?.lua;" .. package.path
local run = require("results").begin("gateway", {
  title = "# Results: the gateway, warm pool against cold starts (bench/gateway_bench.lua)", argv = arg })
package.cpath = (os.getenv("SANDSTACK_BUILD") or "./build") .. "/?.so;" .. package.cpath
local core = require "sandstack.core"
local gh = require "gateway_harness"
local h = require "helpers"

local N = tonumber(arg[1]) or 5
local now = core.engine_clock

local function sorted(xs)
  local t = { table.unpack(xs) }
  table.sort(t)
  return t
end
local function median(xs) local t = sorted(xs) return t[math.floor((#t + 1) / 2)] end

-- One round: N sessions one after the other, each timed from the POST to the agent's answer,
-- then deleted (outside the timing).
local function round(node, label)
  local times = {}
  for i = 1, N do
    local t0 = now()
    local st, doc, body = node:api("POST", "/sessions", { token = gh.TOKENS.alice, timeout = 180 })
    assert(st == 201, label .. ": POST " .. tostring(st) .. " " .. tostring(body) .. node:error_log())
    local ast = node:api("GET", "/sessions/" .. doc.key .. "/health", { secret = doc.secret })
    times[i] = now() - t0
    assert(ast == 200, label .. ": agent answered " .. tostring(ast))
    node:api("DELETE", "/sessions/" .. doc.key, { token = gh.TOKENS.alice, secret = doc.secret })
    if label == "pooled" then
      -- wait for the refill, so that every POST of the round meets a warm stack
      h.wait_for("the pool's refill", function()
        local m = node:metrics()
        return m:find('sandstack_gateway_pool_stacks{state="ready"} 1', 1, true)
          and m:find('sandstack_gateway_pool_stacks{state="in_use"} 0', 1, true)
      end, 120, 0.2)
    end
  end
  return times
end

local prefix = gh.PREFIX .. "bench-"
local cold_node = gh.start(gh.config { project_prefix = prefix .. "c-", max_sessions = 10 })
local okc, cold = pcall(round, cold_node, "cold")
cold_node:stop()
local pool_node = gh.start(gh.config { project_prefix = prefix .. "p-", max_sessions = 10,
  pool = { size = 1, max = 2, interval = 0.5 } })
local okp, pooled = pcall(function()
  h.wait_for("the pool's first fill", function()
    return pool_node:metrics():find('sandstack_gateway_pool_stacks{state="ready"} 1', 1, true)
  end, 120, 0.2)
  return round(pool_node, "pooled")
end)
pool_node:stop()
require("sandstack").docker.reap { pool = prefix .. "p-pool" }
gh.cleanup(prefix)
assert(okc, cold)
assert(okp, pooled)
local mc, mp = median(cold), median(pooled)
print(("POST /sessions -> first agent answer, through nginx, N=%d each (median)"):format(N))
print(("  cold    %7.3f s   (all: %s)"):format(mc, table.concat((function()
  local t = {} for i, x in ipairs(cold) do t[i] = ("%.2f"):format(x) end return t end)(), " ")))
print(("  pooled  %7.3f s   (all: %s)"):format(mp, table.concat((function()
  local t = {} for i, x in ipairs(pooled) do t[i] = ("%.2f"):format(x) end return t end)(), " ")))
print(("  ratio cold/pooled = %.1fx"):format(mc / mp))
run:finish()
