-- Lua/C crossings per `sandstack.docker.start` (the first in the process and a later one),
-- `destroy`, an engine exec and an sbx box:exec, each against the goal of one C call per step.
-- A call hook counts every call of a C function that sandstack's core module provides (its
-- functions and the methods of every userdata it makes), and every call back into Lua from one of
-- them (a hook, req_adapter). The standard library is not counted. The result is the ratio
-- against the count of the first version (below). The count does not depend on timing but for
-- the loops that poll (health, the forwarder's port, readiness): it varies by a few.
-- box:exec runs against the sbx simulator (spec/support/sbx-sim), set up as the sbx specs do.
-- A sandstack.swarm start runs against a scripted swarm (spec/support/scripted_engine.lua: a
-- manager and a node whose tasks run at once): each call of its clients' methods, and of the
-- client constructor, counts as the one crossing the real client's C method is, and nothing
-- inside them counts.
--   lua5.4 bench/crossings_bench.lua     (from the repository root; needs the engine)
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.path = "./bench/?.lua;" .. package.path
local run = require("results").begin("crossings", {
  title = "# Results: C crossings per step (bench/crossings_bench.lua)", argv = arg })
package.cpath = (os.getenv("SANDSTACK_CPATH") or "./build/?.so;") .. package.cpath
local sandstack = require "sandstack"
local core = require "sandstack.core"

-- Measured with this script on the tree of commit 8d9d017 (before the plan object and the batch
-- call), same stack, engine 20.10: every request was submit + run + take (+ finished) and a
-- json_decode, every body a json_encode. Override to compare against another tree.
local BASELINE = { start = tonumber(os.getenv("CROSSINGS_BASELINE_START")) or 216,
  destroy = tonumber(os.getenv("CROSSINGS_BASELINE_DESTROY")) or 59 }

local anchor = dofile("bench/anchor.lua")
local function opts(project)
  -- the anchor stack with its egress sidecar as the proxy of an egress policy (the policy is
  -- compiled in the model: one more thing the old layout crossed back and forth for)
  local o = anchor { project_name = project, subnet_pool = "10.217.0.0/16", proxy_service = "relay",
    egress_policy = { allow = { "api.anthropic.com", "*.pypi.org" } } }
  o.services[3].port = 3128
  return o
end

-- Every C function of the core: the module's, and those in any metatable the core registered.
local function core_functions()
  local set, n = {}, 0
  local function add(t, prefix)
    for k, v in pairs(t) do
      if type(v) == "function" and not set[v] then set[v] = prefix .. tostring(k); n = n + 1 end
    end
  end
  add(core, "core.")
  for k, v in pairs(debug.getregistry()) do
    if type(k) == "string" and k:find("sandstack", 1, true) and type(v) == "table" then
      add(v, k .. ":")
      if type(v.__index) == "table" then add(v.__index, k .. ":") end
    end
  end
  return set, n
end

local by_name = {}
-- stand_in: Lua functions (func -> name) that stand for C ones: a call of one counts as one
-- crossing, and what it calls counts not at all.
local function counted(fn, stand_in)
  by_name = {}
  local set = core_functions()
  stand_in = stand_in or {}
  local into_c, back_to_lua, depth_in_c, inside_stand_in = 0, 0, 0, 0
  local stack = {}
  debug.sethook(function(ev)
    local info = debug.getinfo(2, "fS")
    if ev == "call" or ev == "tail call" then
      if inside_stand_in > 0 then
        if ev == "call" then stack[#stack + 1] = "inner" end
        return
      end
      local fake = info and stand_in[info.func]
      local is_core = info and (set[info.func] or fake) or false
      if is_core then
        into_c = into_c + 1; depth_in_c = depth_in_c + 1
        by_name[is_core] = (by_name[is_core] or 0) + 1
      end
      if fake then inside_stand_in = inside_stand_in + 1 end
      if info and info.what == "Lua" and not fake and depth_in_c > 0 and stack[#stack] then back_to_lua = back_to_lua + 1 end
      if ev == "call" then stack[#stack + 1] = fake and "fake" or is_core
      elseif fake then stack[#stack] = "fake" end -- a tail call: its return ends the frame it replaced
    else
      local was = table.remove(stack)
      if was == "fake" then inside_stand_in = inside_stand_in - 1 end
      if was and was ~= "inner" then depth_in_c = depth_in_c - 1 end
    end
  end, "cr")
  local ok, a, b = pcall(fn)
  debug.sethook()
  assert(ok, a)
  if os.getenv("CROSSINGS_DETAIL") then
    for name, c in pairs(by_name) do io.stderr:write(("  %4d %s\n"):format(c, name)) end
    io.stderr:write(("  %4d back into Lua\n"):format(back_to_lua))
  end
  return into_c + back_to_lua, a, b
end

-- The goals ("One C call per step"), each printed beside its count.
local GOALS = { first_start = 20, later_start = 12, exec = 4, box_exec = 4, swarm_start = 20 }
local function line(what, n, goal, extra)
  local verdict = goal and ((n <= goal and "goal met" or "goal NOT met") .. (" (<= %d)"):format(goal)) or ""
  print(("crossings per %-22s %4d  %s%s"):format(what .. ":", n, verdict, extra or ""))
end
local function ratio(n, base) return base > 0 and ("; %.2fx of the baseline %d"):format(n / base, base) or "" end

-- A first start in this process, then a second stack in the same process (what a later start
-- costs once the process has its engine client, its isolation verdict and its images checked).
local p1, p2 = "sstest-xing-" .. core.random_hex(3), "sstest-xing-" .. core.random_hex(3)
local n_first, stack, err = counted(function() return sandstack.docker.start(p1, opts(p1)) end)
assert(stack, err and err.message)
local n_later, stack2, err2 = counted(function() return sandstack.docker.start(p2, opts(p2)) end)
if not stack2 then stack:destroy() stack:close() error(err2 and err2.message) end

-- One exec in the stack's running sandbox, through the stack's own engine client.
local sandbox
for _, c in ipairs(stack.plan.containers) do
  if c.service == "sandbox" then sandbox = c.name end
end
local n_exec, res, xerr = counted(function() return stack.eng:exec(sandbox, { "echo", "hello" }) end)
if not (res and res.stdout == "hello\n") then
  stack:destroy() stack2:destroy()
  error("exec did not answer hello: " .. tostring(xerr))
end

local n_destroy = counted(function() return assert(stack:destroy()) end)
stack:close()
assert(stack2:destroy())
stack2:close()

-- One box:exec against the sbx simulator (spec/support/sbx-sim), as the sbx specs set it up.
package.path = "./spec/?.lua;./spec/support/?.lua;" .. package.path
local H = require "sbx_helpers"
local senv = H.setup("xing")
local backend = assert(sandstack.sbx.backend(senv.backend_opts))
local box = assert(backend:acquire { conversation = "xing", key = "exec" })
assert(box:exec({ "true" })) -- a first exec opens what later ones reuse (nothing at present)
local n_box, bres = counted(function() return box:exec({ "echo", "hello" }) end)
assert(bres and bres.stdout == "hello\n", "box:exec did not answer hello")
local n_box_env = counted(function() return box:exec({ "echo", "hello" }, { env = { A = "1" } }) end)
-- With an allowlist every exec first re-reads the host's egress state (three sbx calls).
local abox = assert(backend:acquire { conversation = "xing", key = "allow", egress = "allowlist",
  egress_allow = { "api.anthropic.com" } })
local n_box_allow = counted(function() return abox:exec({ "echo", "hello" }, { env = { A = "1" } }) end)
abox:dispose()
box:dispose()
-- the simulator's containers go with the env, as the sbx specs leave none (dispose alone kept two)
local left = H.teardown_backend(senv, backend)
if left ~= 0 then io.stderr:write(("crossings_bench: %d sbx simulator containers left\n"):format(left)) end

-- A sandstack.swarm start of the same stack, against the scripted swarm.
local scripted = require "spec.support.scripted_engine"
local sw = scripted.swarm()
local stand_in = {}
local make_client = sw.client
sw.client = function(host)
  local c = make_client(host)
  for k, f in pairs(c) do if type(f) == "function" then stand_in[f] = "swarm client:" .. k end end
  return c
end
local undo = scripted.install(sw)
stand_in[sandstack.engine] = "sandstack.engine (client constructor)"
local sopts = opts("s-xing")
sopts.subnet_pool, sopts.pull, sopts.docker_host = nil, nil, "tcp://manager.scripted:2376" -- the swarm refuses both
local n_swarm, sstack, serr = counted(function() return sandstack.swarm.start("xing", sopts) end, stand_in)
undo()
assert(sstack, serr and serr.message)
sstack:close()

line("first start", n_first, GOALS.first_start, ratio(n_first, BASELINE.start))
line("swarm start (scripted)", n_swarm, GOALS.swarm_start)
line("later start", n_later, GOALS.later_start)
line("destroy", n_destroy, nil, ratio(n_destroy, BASELINE.destroy))
line("eng:exec", n_exec, GOALS.exec)
line("box:exec", n_box, GOALS.box_exec)
line("box:exec with env", n_box_env, nil)
line("box:exec allowlist+env", n_box_allow, nil)
run:finish()
