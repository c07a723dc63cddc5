-- bench/session_bench.lua: the session handle against the docker CLI on the same container, in
-- one run: h:exec's p50 against `docker exec`, and a 64 MiB write and read against `docker cp`,
-- each as a ratio, with where the milliseconds go.
--   lua5.4 bench/session_bench.lua [EXECS] [ROUNDS]      (defaults 41 and 3)
-- The build dir is $SANDSTACK_BUILD (default ./build). One stack, destroyed at the end. The
-- lines printed are also written to docs/results/session.md by bench/results.lua
-- (SANDSTACK_BENCH_RESULTS=0: not).
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/support/?.lua;./bench/?.lua;" .. package.path
package.cpath = (os.getenv("SANDSTACK_BUILD") or "./build") .. "/?.so;" .. package.cpath
local sandstack = require "sandstack"
local core = sandstack.core
local h = require "helpers"
local run = require("results").begin("session", { title = "# Session handle benchmark", argv = arg })

local execs = tonumber(arg[1]) or 41
local rounds = tonumber(arg[2]) or 3
local clock = core.engine_clock
local MiB = 1024 * 1024

local function median(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  return c[math.floor((#c + 1) / 2)]
end

local function timed(f)
  local t0 = clock()
  f()
  return clock() - t0
end

local function ms(s) return ("%.1f ms"):format(s * 1000) end

local stack = assert(sandstack.docker.start("sstest-bench-session-" .. core.random_hex(3), {
  agent_port = 8080, forwarder_image = "sandstack-test/socat:local", pull = "never", subnet_pool = "10.217.0.0/16",
  services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" } } } }))
local c = stack.project .. "-sandbox"
local eng = stack.eng
local load = h.must("cut -d' ' -f1-3 /proc/loadavg"):match("[^\n]+")
local version = assert(eng:version())

local ok, err = pcall(function()
  -- exec: h:exec, the engine client's exec, the docker CLI, interleaved so drift hits all alike
  local argv = { "true" }
  local t_h, t_e, t_cli = {}, {}, {}
  local parts = { create = {}, start = {}, inspect = {} }
  for _ = 1, 3 do stack:exec(argv); h.sh("docker exec " .. c .. " true") end -- warm
  for i = 1, execs do
    t_h[i] = timed(function() assert(stack:exec(argv).code == 0) end)
    t_e[i] = timed(function() assert(eng:exec(c, argv).exit_code == 0) end)
    t_cli[i] = timed(function() assert(select(2, h.sh("docker exec " .. c .. " true"))) end)
    -- the same three requests one at a time, to say where an exec's time goes
    local id
    parts.create[i] = timed(function() id = assert(eng:call("POST", "/containers/" .. c .. "/exec",
      { Cmd = argv, AttachStdout = true, AttachStderr = true })).Id end)
    parts.start[i] = timed(function() assert(eng:call("POST", "/exec/" .. id .. "/start", { Detach = false, Tty = false },
      { raw = true })) end)
    parts.inspect[i] = timed(function() assert(eng:call("GET", "/exec/" .. id .. "/json")) end)
  end
  local ph, pe, pc = median(t_h), median(t_e), median(t_cli)
  print(("exec p50 (%d each): h:exec %s, engine exec %s, docker exec CLI %s"):format(execs, ms(ph), ms(pe), ms(pc)))
  print(("  ratio h:exec / docker exec = %.2f (goal <= 0.75); engine exec / docker exec = %.2f"):format(ph / pc, pe / pc))
  print(("  where an exec goes (p50 of each request alone): create %s, start and output %s, exit code %s;"
    .. " h:exec's p50 minus the engine exec's %s (the handle's own work: option checks, the token; the rest is noise)"):format(ms(median(parts.create)), ms(median(parts.start)),
    ms(median(parts.inspect)), ms(ph - pe)))

  -- 64 MiB: h:upload / h:write and h:download / h:read against docker cp
  local src, dst = os.tmpname(), os.tmpname()
  h.must("head -c " .. 64 * MiB .. " /dev/urandom > " .. src)
  local f = assert(io.open(src, "rb"))
  local data = f:read("*a")
  f:close()
  local w = { upload = {}, write = {}, cp_in = {} }
  local r = { download = {}, read = {}, cp_out = {} }
  for i = 1, rounds do
    w.upload[i] = timed(function() assert(stack:upload(src, "/tmp/bench.bin")) end)
    w.write[i] = timed(function() assert(stack:write("/tmp/bench.bin", data)) end)
    w.cp_in[i] = timed(function() h.must("docker cp " .. src .. " " .. c .. ":/tmp/bench.bin") end)
    r.download[i] = timed(function() assert(stack:download("/tmp/bench.bin", dst)) end)
    r.read[i] = timed(function() assert(#stack:read("/tmp/bench.bin", { max_bytes = 64 * MiB }) == 64 * MiB) end)
    r.cp_out[i] = timed(function() h.must("docker cp " .. c .. ":/tmp/bench.bin " .. dst) end)
  end
  -- where a download goes: the archive to a file, then the tar reader writing the member out
  local tmp = os.tmpname()
  local t_get = timed(function() assert(eng:download("/containers/" .. c .. "/archive", tmp,
    { query = { path = "/tmp/bench.bin" }, max_bytes = 65 * MiB })) end)
  local t_parse = timed(function() assert(core.archive_file({ path = tmp }, { to = dst })) end)
  os.remove(tmp)
  os.remove(src)
  os.remove(dst)
  local function tput(t) return ("%.0f MiB/s"):format(64 / median(t)) end
  print(("64 MiB in (p50 of %d): h:upload %s, h:write %s, docker cp %s"):format(rounds, tput(w.upload), tput(w.write),
    tput(w.cp_in)))
  print(("  ratio of throughput h:upload / docker cp = %.2f, h:write / docker cp = %.2f (goal >= 0.8)"):format(
    median(w.cp_in) / median(w.upload), median(w.cp_in) / median(w.write)))
  print(("64 MiB out (p50 of %d): h:download %s, h:read %s, docker cp %s"):format(rounds, tput(r.download), tput(r.read),
    tput(r.cp_out)))
  print(("  ratio of throughput h:download / docker cp = %.2f, h:read / docker cp = %.2f (goal >= 0.8)"):format(
    median(r.cp_out) / median(r.download), median(r.cp_out) / median(r.read)))
  print(("  where a download goes: the engine's tar to a host file %s, the tar reader writing the file %s"):format(
    ms(t_get), ms(t_parse)))
  print(("Docker %s (API %s), load average %s"):format(version.Version, eng.api_version, load))
end)
stack:destroy()
if not ok then error(err, 0) end
run:finish { engine = ("Docker %s (API %s)"):format(version.Version, eng.api_version) }
