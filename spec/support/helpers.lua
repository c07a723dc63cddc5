-- Small helpers shared by the specs and their support files: shell quoting, running a shell
-- command, whole-file reads and writes, random name suffixes.
--
--   local h = require "helpers"
--   local out, ok, code = h.sh("ls " .. h.q(dir))   -- stdout and stderr together
--   local out = h.must("mktemp -d /tmp/x.XXXXXX")   -- raises with the output when it fails
--   h.write_file(path, data); local data = h.read_file(path) -- nil when it cannot be opened
--   local project = "sstest-proxy-" .. h.random_suffix(4)
--   local line = h.wait_for("the audit line", function() return find_line() end, 15)
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

-- nbytes random bytes as lowercase hex: a suffix that keeps two runs' names apart.
function h.random_suffix(nbytes)
  return core.random_hex(nbytes or 4)
end

-- Calls f every `every` seconds (default 0.05) until it returns a true value, which it returns;
-- raises "timed out waiting for <what>" at the caller after `seconds` (default 15) by the
-- engine's monotonic clock.
function h.wait_for(what, f, seconds, every)
  local stop = core.engine_clock() + (seconds or 15)
  repeat
    local v = f()
    if v then return v end
    core.sleep(every or 0.05)
  until core.engine_clock() > stop
  error("timed out waiting for " .. what, 2)
end

return h
