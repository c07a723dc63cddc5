-- The proxy's control channel: the stack's control directory (a socket the module reaches
-- itself) against the Engine exec of `sandstack-proxy --control` (the fallback, and the only way
-- before), both measured in this one run on the same stacks.
--   1. set_egress on one running stack, N times each way: p50 and p99 (goal: p50 <= 2 ms).
--   2. A warm pool's acquire that hands the session its policy, a credential and its model key,
--      PROCS processes acquiring at once, ROUNDS rounds each way: p50 and p99 (goal: p50 <= 10 ms,
--      p99 <= 30 ms), and what runs in each millisecond.
--   lua5.4 bench/control_bench.lua [ROUNDS [N]]   (from the repository root, as root; needs the
--   engine and this build's sandstack-proxy; ROUNDS = 10, N = 200)
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.path = "./bench/?.lua;" .. package.path
local run = require("results").begin("control", {
  title = "# Results: the proxy's control channel, socket against exec (bench/control_bench.lua)", argv = arg })
package.cpath = (os.getenv("SANDSTACK_BUILD") or "./build") .. "/?.so;" .. package.cpath
local sandstack = require "sandstack"
local core = require "sandstack.core"
local docker = sandstack.docker
local R = require "pool_rounds"
local pct, ms, column = R.pct, R.ms, R.column

local ROUNDS, N = tonumber(arg[1]) or 10, tonumber(arg[2]) or 200
local PROCS = 4
local NAME = "ssbench-ctl-" .. core.random_hex(3)
local build = os.getenv("SANDSTACK_BUILD") or "./build"
local PROXY, FWD = "sandstack-test/proxy:control-bench", "sandstack-test/forwarder:control-bench"
assert(docker.build_images { proxy_binary = build .. "/sandstack-proxy", proxy_image = PROXY, forwarder_image = FWD })

local engine_version = (function()
  local eng = assert(sandstack.engine {})
  local v = eng:version()
  eng:close()
  return v and (v.Version .. ", API " .. v.ApiVersion) or "?"
end)()
print(("control_bench: %s, engine %s, load average %s"):format(NAME, engine_version, R.loadavg()))

-- A sandbox, the added proxy with a credential slot and the credential route (the model key);
-- the hosts are names in TEST-NET-3 that no request here reaches: only the control is measured.
local SLOT = 33
local function stack_opts()
  return { agent_port = 8080, pull = "never", forwarder_image = FWD, proxy_image = PROXY, subnet_pool = "10.219.0.0/16",
    services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" } } },
    api_key = "sk-bench-" .. core.random_hex(16), egress_policy = { allow = {} },
    proxy_hosts = { ["c.test"] = "203.0.113.3", ["model.test"] = "203.0.113.4" },
    proxy_upstream = "http://model.test:8080",
    credentials = { { name = "ECHO_TOKEN", host = "c.test", port = 9443, header = "X-Token", length = SLOT } } }
end
local HAND_OVER = { api_key = "sk-session-" .. core.random_hex(16),
  egress_policy = { allow = { "model.test:8080", "c.test:9443" } },
  credentials = { { name = "ECHO_TOKEN", secret = ("s"):rep(SLOT) } } }

-- 1. set_egress, alternating two policies, on one stack: by its socket, then by the exec
local A_POL, B_POL = { allow = { "a.test:443", "c.test:9443" } }, { allow = { "b.test:443", "c.test:9443" } }
local function times(stack, n)
  local ts = {}
  for i = 1, n do
    local t0 = core.engine_clock()
    assert(stack:set_egress(i % 2 == 0 and A_POL or B_POL))
    ts[i] = core.engine_clock() - t0
  end
  return ts
end
local o = stack_opts()
o.credentials = nil
local stack = assert(docker.start(NAME .. "-one", o))
local way = stack.plan.proxy.control
local load1 = R.loadavg()
local by_socket = times(stack, N)
local rec = core.json_decode(core.json_encode(stack:record()))
rec.proxy.control = "exec"
local exec_h = assert(docker.reconnect(rec))
local by_exec = times(exec_h, math.max(20, N // 10))
exec_h:close()
-- the parts of one set_egress by the socket: the policy compiled and rendered, and the round
local compile_ts, round_ts = {}, {}
local control = require "sandstack.docker.control"
for i = 1, N do
  local t0 = core.engine_clock()
  local json = sandstack.policy.compile(i % 2 == 0 and A_POL or B_POL):render()
  local t1 = core.engine_clock()
  assert(control.send(stack, "set-egress", json))
  compile_ts[i], round_ts[i] = t1 - t0, core.engine_clock() - t1
end
assert(stack:destroy())
stack:close()
print(("\n1. set_egress on one stack (the stack's way: %s; load average %s)"):format(way, load1))
print(("   by the socket (n=%d)  p50 %7.2f ms   p99 %7.2f ms   goal p50 <= 2 ms: %s"):format(#by_socket,
  ms(pct(by_socket, 50)), ms(pct(by_socket, 99)), pct(by_socket, 50) <= 0.002 and "met" or "NOT met"))
print(("   by the exec   (n=%d)   p50 %7.2f ms   p99 %7.2f ms   (the baseline)"):format(#by_exec, ms(pct(by_exec, 50)),
  ms(pct(by_exec, 99))))
print(("   socket/exec p50 = 1/%.0f"):format(pct(by_exec, 50) / pct(by_socket, 50)))
print(("   its parts (p50): %.3f ms the policy compiled and rendered in C, %.3f ms the round to the proxy"
  .. " (connect, send, the proxy parses, checks and swaps, audit line, answer)"):format(ms(pct(compile_ts, 50)),
  ms(pct(round_ts, 50))))

-- 2. the acquire with the hand-over, PROCS processes at once, each way on the same pool
local name = NAME .. "-w"
local pool = assert(docker.pool { name = name, size = PROCS + 2, max = PROCS + 8, stack = stack_opts() })
assert(pool:fill() == PROCS + 2, "the pool did not fill")
local function measure(prelude)
  local lines = R.rounds { name = name, rounds = ROUNDS, procs = PROCS, stack = stack_opts(), acquire = HAND_OVER,
    prelude = prelude, between = function() R.recycle(name) end }
  return R.parse(lines, true), #lines
end
local load2 = R.loadavg()
local rs_socket, n_socket = measure(nil)
local rs_exec, n_exec = measure('require("sandstack.docker.control").found = function() return "exec" end')
R.drain(name)
local function report(label, rs, n)
  local total = column(rs, function(r) return r.total end)
  print(("   %-13s (n=%d of %d warm)  p50 %7.2f ms   p99 %7.2f ms"):format(label, #rs, n, ms(pct(total, 50)),
    ms(pct(total, 99))))
  return total
end
print(("\n2. acquire with the hand-over of policy, credential and model key, %d processes at once (load average %s)")
  :format(PROCS, load2))
local ts = report("by the socket", rs_socket, n_socket)
local later = {}
for _, r in ipairs(rs_socket) do if r.round > 1 then later[#later + 1] = r end end
report("  a process's later acquires", later, n_socket)
local te = report("by the exec", rs_exec, n_exec)
print(("   goals p50 <= 10 ms: %s, p99 <= 30 ms: %s; socket/exec p50 = 1/%.1f"):format(
  pct(ts, 50) <= 0.010 and "met" or "NOT met", pct(ts, 99) <= 0.030 and "met" or "NOT met", pct(te, 50) / pct(ts, 50)))
print("   what runs in each millisecond (each step's p50 and p99 by the socket, p50 by the exec):")
local steps = {
  { function(r) return r.engine end, "engine: the pool's engine client, if not made with the pool (a /version round)" },
  { function(r) return r.find end, "find: the store read, one idle stack's file locked (no engine call)" },
  { function(r) return r.list end, "list: the container list (only when the store has no idle stack)" },
  { function(r) return r.plan end, "plan: the plan in C; the rename and the record already sent" },
  { function(r) return r.handle end, "handle: a new engine client, the control socket looked up" },
  { function(r) return r.egress end, "hand-over: policy, credentials, model key; one round to the proxy (socket) or"
    .. " an exec per command" },
  { function(r) return r.claim end, "claim: the rest of the rename's wait (when answered before the hand-over)" },
  { function(r) return r.record end, "record: the rest of the record's wait" },
  { function(r) return r.mark end, "mark: pool-ready renamed pool-claimed, its directory synced" },
  { function(r) return math.max(0, r.total - r.engine - r.find - r.list - r.plan - r.handle - r.egress - r.claim
    - r.record - r.mark) end, "the rest: checks, the event, the clock" },
  { function(r) return r.after end, "after the answer (not in the acquire): the rename's and record's answers, taken"
    .. " at the handle's next call (here close)" },
}
for _, s in ipairs(steps) do
  local sock = column(rs_socket, s[1])
  print(("     %6.2f %6.2f %7.2f ms  %s"):format(ms(pct(sock, 50)), ms(pct(sock, 99)), ms(pct(column(rs_exec, s[1]), 50)),
    s[2]))
end
local slow = rs_socket[1]
for _, r in ipairs(rs_socket) do if r.total > slow.total then slow = r end end
if slow then
  local parts = {}
  for _, s in ipairs(steps) do parts[#parts + 1] = ("%.2f"):format(ms(s[1](slow))) end
  print(("   the slowest by the socket, %.2f ms (round %d, %d tries), in the order above: %s"):format(ms(slow.total),
    slow.round, slow.tries, table.concat(parts, " ")))
end
print(("load average at the end: %s"):format(R.loadavg()))
run:finish { engine = engine_version }
