-- Small helpers shared by the specs and their support files: shell quoting, running a shell
-- command, whole-file reads and writes, random name suffixes.
--
--   local h = require "helpers"
--   local out, ok, code = h.sh("ls " .. h.q(dir))   -- stdout and stderr together
--   local out = h.must("mktemp -d /tmp/x.XXXXXX")   -- raises with the output when it fails
--   h.write_file(path, data); local data = h.read_file(path) -- nil when it cannot be opened
--   local project = "sstest-proxy-" .. h.random_suffix(4)
--   local line = h.wait_for("the audit line", function() return find_line() end, 15)
--   local code, out, err = h.cli("ls", "--json")    -- `sandstack ...` run in this process
--   local pid = h.start("sleep 60 >/dev/null 2>&1"); h.stop(pid) -- by pid and start time
local core = require "sandstack.core"

local h = {}

-- A single-quoted shell word for any value (a ' becomes '\'').
function h.q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- Runs a shell command; returns its output (stdout and stderr of the whole command, byte for
-- byte), whether it exited 0, and its exit code. The shell prints the status: LuaJIT's popen
-- close does not report it. A subshell, so that an `exit` in cmd still leaves the status line;
-- the newline before `)` lets cmd end in a comment or a here-doc.
function h.sh(cmd)
  local f = assert(io.popen("( " .. cmd .. "\n) 2>&1; echo \"__rc=$?\"", "r"))
  local out = f:read("*a")
  f:close()
  local body, rc = out:match("^(.-)__rc=(%d+)\n?$")
  if not body then return out, false, nil end
  return body, rc == "0", tonumber(rc)
end

-- The keys of t, sorted (a stable order to visit or report them in).
-- list's entries by one of their fields: { [entry[field]] = entry }
function h.index_by(list, field)
  local out = {}
  for _, e in ipairs(list) do out[e[field]] = e end
  return out
end

function h.sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- h.sh that raises (with the command and its output) unless the command exits 0.
function h.must(cmd)
  local out, ok = h.sh(cmd)
  assert(ok, "command failed: " .. cmd .. "\n" .. out)
  return out
end

-- The whole file, or nil when it cannot be opened.
function h.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- Replaces the file's content; raises when it cannot be written.
function h.write_file(path, data)
  local f = assert(io.open(path, "wb"))
  assert(f:write(data))
  assert(f:close())
end

-- A container's environment as the engine holds it (Config.Env): { NAME = value }.
function h.container_env(eng, name)
  local m = {}
  for _, e in ipairs(assert(eng:call("GET", "/containers/" .. name .. "/json")).Config.Env or {}) do
    local k, v = e:match("^([^=]+)=(.*)$")
    m[k] = v
  end
  return m
end

-- How many containers, networks and volumes carry a project label starting with prefix.
function h.count_labelled(eng, prefix)
  local f = { label = { "io.sandstack.project" } }
  local q = { query = { filters = f } }
  local lists = { assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } })),
    assert(eng:call("GET", "/networks", nil, q)), assert(eng:call("GET", "/volumes", nil, q)).Volumes or {} }
  local n = 0
  for _, list in ipairs(lists) do
    for _, o in ipairs(list) do
      if (o.Labels["io.sandstack.project"] or ""):sub(1, #prefix) == prefix then n = n + 1 end
    end
  end
  return n
end

-- A shell command running Lua source in a child process with this test mode's interpreter
-- (lua5.4, luajit, or the ASan build's sandstack-asan-lua) and the same module build, for tests
-- that need other limits, namespaces or a process of their own. The source goes into script.
function h.child_command(script, source)
  local dir = package.cpath:match("^([^;]*)/%?%.so")
  local interp = "lua5.4"
  if jit then
    interp = "luajit"
  elseif dir and select(2, h.sh("test -x " .. h.q(dir .. "/sandstack-asan-lua"))) then
    interp = dir .. "/sandstack-asan-lua" -- takes a script only: the prelude goes into it
  end
  local prelude = ("package.cpath=%q .. package.cpath; package.path=%q .. package.path\n"):format(
    package.cpath:match("^[^;]*;"), "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;./spec/support/?.lua;")
  h.write_file(script, prelude .. source)
  return h.q(interp) .. " " .. h.q(script)
end

-- Waits until process pid has exited (gone, or a zombie): a kill returns before that, and the
-- process's files, with their locks, close late in its exit, after its memory is torn down
-- (milliseconds for an ASan build's shadow). Raises after seconds (default 30).
function h.wait_exit(pid, seconds)
  h.wait_for("the exit of process " .. pid, function()
    local stat = h.read_file("/proc/" .. pid .. "/stat")
    return not stat or stat:match("^%d+ %b() Z") ~= nil
  end, seconds or 30)
end

-- Processes a spec started in the background, known by pid AND start time. A pid alone names
-- another process once the first has ended and been reaped: pids wrap within minutes on a busy
-- machine (pid_max 32768 on CI's), and a signal sent by pid alone would end a stranger, a
-- docker-proxy say, whose forwarded port then refuses every connection. Only a tracked pid,
-- while it is still the process that was tracked, is ever signalled.
local started = {} -- pid -> start time (clock ticks since boot), false when gone when tracked

-- A process's state letter and start time, or nil once it is gone.
local function stat_of(pid)
  local stat = h.read_file("/proc/" .. pid .. "/stat")
  if not stat then return nil end
  local fields = {}
  for x in (stat:match("^%d+ %b() (.*)$") or ""):gmatch("%S+") do fields[#fields + 1] = x end
  return fields[1], fields[20]
end

-- h.track(pid) -> pid (a number): the process just started, remembered with its start time.
function h.track(pid)
  pid = tonumber(pid)
  if pid then started[pid] = select(2, stat_of(pid)) or false end
  return pid
end

-- h.start(cmd) -> pid: cmd run in the background by a shell, tracked. cmd sends its stdout and
-- stderr elsewhere itself (a file, /dev/null): the shell's output is read to its end, so a
-- process still holding it would keep this call waiting until it ended.
function h.start(cmd)
  return h.track(h.must(cmd .. " & echo $!"):match("%d+"))
end

-- Whether the tracked process pid still runs: the same start time, not a zombie. false for a
-- pid this process never tracked.
function h.running(pid)
  if not pid or not started[pid] then return false end
  local state, born = stat_of(pid)
  return state ~= nil and state ~= "Z" and state ~= "X" and born == started[pid]
end

-- h.signal(pid, sig) -> whether sig (a name: TERM, KILL, ...) was sent: only while h.running(pid).
-- group = true: to its process group (a process started under setsid leads its own).
function h.signal(pid, sig, group)
  if not h.running(pid) then return false end
  return select(2, h.sh(("kill -%s %s%d"):format(sig, group and "-" or "", pid))) -- (LuaJIT's os.execute gives a number)
end

-- h.stop(pid, grace): TERM, then KILL after grace seconds (default 15) while it still runs.
function h.stop(pid, grace)
  if not h.signal(pid, "TERM") then return end
  for _ = 1, (grace or 15) * 10 do
    if not h.running(pid) then return end
    core.sleep(0.1)
  end
  h.signal(pid, "KILL")
end

-- A shell expression for the environment file of a docker sandbox's service, the first process
-- its PID 1 (sandstack-init, whose own environment no process of the sandbox may read) started.
h.SERVICE_ENVIRON = [[/proc/$(awk '$4 == 1 {print $1}' /proc/[0-9]*/stat | sort -n | head -1)/environ]]

-- nbytes random bytes as lowercase hex: a suffix that keeps two runs' names apart.
function h.random_suffix(nbytes)
  return core.random_hex(nbytes or 4)
end

-- Calls f every `every` seconds (default 0.05) until it returns a true value, which it returns;
-- raises "timed out waiting for <what>" at the caller after `seconds` (default 15) by the
-- engine's monotonic clock. what may be a function giving that text, called only then (so it
-- can carry what a log says at that moment). The one poll of the specs: a caller for whom the
-- time running out is an answer, not a failure, calls it through pcall.
function h.wait_for(what, f, seconds, every)
  local stop = core.engine_clock() + (seconds or 15)
  repeat
    local v = f()
    if v then return v end
    core.sleep(every or 0.05)
  until core.engine_clock() > stop
  error("timed out waiting for " .. (type(what) == "function" and what() or what), 2)
end

-- Runs `sandstack ARGV...` in this process: its exit code, stdout and stderr.
function h.cli(...)
  local o, e = {}, {}
  local out = { write = function(self, ...) for _, x in ipairs { ... } do o[#o + 1] = x end return self end }
  local err = { write = function(self, ...) for _, x in ipairs { ... } do e[#e + 1] = x end return self end }
  local code = require("sandstack.cli").main({ ... }, out, err)
  return code, table.concat(o), table.concat(e)
end

return h
