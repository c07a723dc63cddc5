-- A session over time (docs/lifecycle.md), measured against cold starts of the anchor stack
-- (bench/anchor.lua) in this one run: pause, resume to the agent's next answer (goal: p50 <=
-- 25 ms), hibernate, wake to ready (goal: <= 1.0x a cold start), snapshot of a stack whose
-- workspace holds 100 MiB, and fork to ready. Prints a table and writes docs/results/lifecycle.md
-- (bench/results.lua).
--   lua5.4 bench/lifecycle_bench.lua [ROUNDS]   (from the repository root; needs the engine; ROUNDS = 5)
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = (os.getenv("SANDSTACK_BUILD") or "./build") .. "/?.so;" .. package.cpath
local sandstack = require "sandstack"
local core = require "sandstack.core"
local docker = sandstack.docker
local http = require "sandstack.docker.http"
local run = require("results").begin("lifecycle", { title = "# A session over time: measured (bench/lifecycle_bench.lua)",
  intro = "Each ratio is against the cold start of the anchor stack measured in the same run.", markdown = true,
  argv = arg })

local ROUNDS = tonumber(arg[1]) or 5
local now = core.engine_clock
local PREFIX = "ssbench-life-" .. core.random_hex(3)
local anchor = dofile("bench/anchor.lua")

local function pct(xs, p)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s[math.max(1, math.ceil(p / 100 * #s))]
end
local function timed(fn)
  local t0 = now()
  local a, b = fn()
  return now() - t0, a, b
end
local function answers(stack)
  local r = http.request { url = stack.endpoint .. "/health", timeout = 5 }
  assert(r and r.status == 200, "the agent did not answer")
end

local n = 0
local function key(tag) n = n + 1; return ("%s-%s%d"):format(PREFIX, tag, n) end
local function start(tag, extra)
  local k = key(tag)
  local o = anchor(extra)
  o.project_name = k
  o.subnet_pool = o.subnet_pool or "10.218.0.0/16" -- its own addresses: the engine's default pools may be full
  return assert(docker.start(k, o))
end

local results, snaps, frozen = {}, {}, 0
local load0 = io.open("/proc/loadavg"):read("*l"):match("^(%S+ %S+ %S+)")
local ok, err = pcall(function()
  -- cold starts: the baseline
  local cold = {}
  for i = 1, ROUNDS do
    local t, s = timed(function() return start("cold") end)
    cold[i] = t
    assert(s:destroy())
    s:close()
  end
  local stack = start("main")
  local sbx = stack.project .. "-sandbox"
  assert(os.execute(("docker exec %s sh -c 'head -c 104857600 /dev/urandom > /workspace/big'"):format(sbx)))
  local pause, resume, cli_resume, thaw, answer = {}, {}, {}, {}, {}
  -- what a pause freezes: the services (the forwarder and an added proxy keep running)
  local names = require("sandstack.docker.lifecycle").service_names(stack)
  frozen = #names
  for i = 1, ROUNDS * 4 do
    pause[i] = timed(function() assert(stack:pause()) end)
    local t0 = now()
    assert(stack:resume())
    thaw[i] = now() - t0
    answers(stack)
    resume[i] = now() - t0
    answer[i] = resume[i] - thaw[i]
    -- the baseline: the docker CLI's unpause of the same containers, to the agent's answer
    assert(stack:pause())
    cli_resume[i] = timed(function()
      assert(os.execute("docker unpause " .. table.concat(names, " ") .. " >/dev/null"))
      answers(stack)
    end)
  end
  -- what the resume's parts cost alone: the agent's answer on a running stack (the path through
  -- the forwarder), and the Engine's unpause of the sandbox alone (one runc process)
  local plain, one = {}, {}
  local R, batch = core.session_requests, require "sandstack.stack.batch"
  local others = {}
  for _, c in ipairs(names) do if c ~= sbx then others[#others + 1] = c end end
  for i = 1, ROUNDS * 4 do
    plain[i] = timed(function() answers(stack) end)
    assert(stack:pause())
    assert(batch.run(stack.eng, R("unpause", others), 60)[1].ok)
    one[i] = timed(function() assert(batch.run(stack.eng, R("unpause", { sbx }), 60)[1].ok) end)
  end
  local hib, wake = {}, {}
  for i = 1, ROUNDS do
    hib[i] = timed(function() assert(stack:hibernate { timeout = 1 }) end)
    local rec = stack:record()
    local t, woke = timed(function() return assert(docker.wake(rec)) end)
    wake[i] = t
    stack:close()
    stack = woke
  end
  local snap_t, fork_t = {}, {}
  for i = 1, math.max(2, math.floor(ROUNDS / 2)) do
    local t, s = timed(function() return assert(stack:snapshot { name = "bench" }) end)
    snap_t[i] = t
    snaps[#snaps + 1] = s
    local k = key("fork")
    local ft, child, fs = timed(function() return stack:fork(k, { project_name = k }) end)
    assert(child, fs)
    answers(child)
    fork_t[i] = ft
    snaps[#snaps + 1] = fs
    assert(child:destroy())
    child:close()
  end
  assert(stack:destroy())
  stack:close()
  local c50 = pct(cold, 50)
  results = {
    { "cold start (anchor)", cold, nil },
    { "pause", pause, nil },
    { "resume to the agent's answer", resume, "goal p50 <= 25 ms" },
    { "  its part: resume(), one round of unpauses", thaw, "" },
    { "  its part: the agent's answer after it", answer, "" },
    { "baseline: `docker unpause` of the same containers to the answer", cli_resume, nil },
    { "  for scale: the agent's answer on a running stack", plain, "" },
    { "  for scale: the Engine's unpause of the sandbox alone", one, "" },
    { "hibernate (stop grace 1 s)", hib, nil },
    { "wake to ready", wake, "goal <= 1.0x cold" },
    { "snapshot, 100 MiB workspace", snap_t, nil },
    { "fork to ready (snapshot + start)", fork_t, nil },
  }
  results.c50 = c50
end)
docker.reap { prefix = PREFIX }
local mine = {}
for _, s in ipairs(snaps) do mine[#mine + 1] = s.id end
if #mine > 0 then docker.remove_snapshot(mine) end
if not ok then error(err, 0) end

local eng = assert(sandstack.engine {})
local v = assert(eng:version())
eng:close()
local lines = {
  ("sandstack %s, %d rounds; load average %s at the start, %s at the end. A pause freezes the %d services"
    .. " (the forwarder keeps running)."):format(core.VERSION, ROUNDS, load0,
    io.open("/proc/loadavg"):read("*l"):match("^(%S+ %S+ %S+)"), frozen),
  "",
  "| step | n | p50 ms | max ms | p50 / cold p50 | note |",
  "|---|---|---|---|---|---|",
}
for _, r in ipairs(results) do
  local p50 = pct(r[2], 50)
  lines[#lines + 1] = ("| %s | %d | %.1f | %.1f | %.3f | %s |"):format(r[1], #r[2], p50 * 1e3, pct(r[2], 100) * 1e3,
    p50 / results.c50, r[3] or "")
end
local text = table.concat(lines, "\n") .. "\n"
io.write(text)
run:finish { engine = ("Docker %s (API %s)"):format(v.Version, v.ApiVersion) }
