-- bench/sbx_exec_bench.lua: what the exec wrapper costs, as a ratio against a bare `sbx exec`
-- of the same command in the same sandbox, and the host memory of many short execs.
--   lua5.4 bench/sbx_exec_bench.lua [ROUNDS] [EXECS]     (defaults 20 and 1000)
-- Uses the simulator (spec/support/sbx-sim), or a real sbx with SANDSTACK_SBX_E2E=1. The build
-- dir is $SANDSTACK_BUILD (default ./build).
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/support/?.lua;" .. package.path
package.path = "./bench/?.lua;" .. package.path
local run = require("results").begin("sbx-exec", {
  title = "# Results: the sbx exec wrapper against a bare sbx exec (bench/sbx_exec_bench.lua)", argv = arg })
package.cpath = (os.getenv("SANDSTACK_BUILD") or "./build") .. "/?.so;" .. package.cpath
local core = require "sandstack.core"
local sbx = require "sandstack.sbx"
local H = require "sbx_helpers"

local rounds = tonumber(arg[1]) or 20
local execs = tonumber(arg[2]) or 1000

local function now()
  local r = core.sbx_run({ "date", "+%s.%N" })
  return tonumber(r.stdout)
end

local function status(field)
  for line in io.lines("/proc/self/status") do
    local v = line:match("^" .. field .. ":%s+(%d+)")
    if v then return tonumber(v) end
  end
end

local function median(t)
  table.sort(t)
  return t[math.floor((#t + 1) / 2)]
end

local env = H.setup("bench")
local b = assert(sbx.backend(env.backend_opts))
local box = assert(b:acquire{ conversation = "bench", key = "exec" })
local argv = { "echo", "hello" }

local wrapped, bare = {}, {}
for _ = 1, rounds do
  local t0 = now()
  assert(box:exec(argv).stdout == "hello\n")
  local t1 = now()
  local r = assert(core.sbx_run({ env.sbx, "exec", box.name, "echo", "hello" }, { timeout = 60 }))
  assert(r.stdout == "hello\n")
  local t2 = now()
  wrapped[#wrapped + 1] = t1 - t0
  bare[#bare + 1] = t2 - t1
end
local mw, mb = median(wrapped), median(bare)
print(("exec round trip: wrapper / bare sbx exec = %.2f (median of %d rounds each)"):format(mw / mb, rounds))

collectgarbage()
local rss0, lua0 = status("VmRSS"), collectgarbage("count")
for i = 1, execs do
  local r = assert(box:exec({ "echo", tostring(i) }))
  assert(r.stdout == i .. "\n")
end
collectgarbage()
local rss1, lua1 = status("VmRSS"), collectgarbage("count")
print(("%d short execs: RSS grew %d KiB (%.2f KiB per exec), Lua heap grew %.0f KiB, peak RSS %d KiB")
  :format(execs, rss1 - rss0, (rss1 - rss0) / execs, lua1 - lua0, status("VmHWM")))

box:dispose()
b:close()
H.teardown(env)
run:finish { engine = os.getenv("SANDSTACK_SBX_E2E") == "1" and "a real sbx"
  or "the sbx simulator (spec/support/sbx-sim)" }
