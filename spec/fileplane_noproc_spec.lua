-- The file plane's read on a host without procfs. read checks the final
-- component through an O_PATH descriptor and reopens that inode through /proc/self/fd; the old
-- fallback for a host without /proc opened the path again, so a FIFO or device node swapped in
-- after the check was opened (its driver's open ran) before the inode comparison refused it.
--
-- The child that reads runs in a private mount namespace (unshare -m) where /proc is shadowed
-- by an empty tmpfs, mounted by the child itself once its interpreter is up (ASan reads /proc
-- at start). A racer exchanges the checked file with a FIFO whose writer, blocked in open(2)
-- through a hard link, records the moment any reader opens it. Needs root (mount); unit spec
-- otherwise: no sbx, no engine.
local h = require "helpers"

local PY = select(2, h.sh("test -x /usr/bin/python3")) and "/usr/bin/python3" or "python3"

local function chomp(s) return (s:gsub("\n$", "")) end

local child_command = h.child_command

-- Runs body (Lua source; ROOT, MARKER and plane are set before it) in a child (h.child_command)
-- whose /proc is an empty tmpfs, and returns its output.
local function run_without_proc(base, root, marker, body)
  local script = base .. "/child.lua"
  local source = ("local ROOT, MARKER = %q, %q\n"):format(root, marker) .. [[
local core = require "sandstack.core"
local plane = assert(core.fileplane_open { root = ROOT })
assert(os.execute("mount -t tmpfs sstest-noproc /proc"))
local ok, res = pcall(function() ]] .. body .. [[ end)
os.execute("umount /proc")
io.write(ok and res or ("error: " .. tostring(res)))
]]
  return h.sh("unshare -m --propagation private " .. child_command(script, source))
end

local alive = require("fileplane_helpers").alive

describe("fileplane read without procfs", function()
  local base, pids
  before_each(function()
    local dir = select(2, h.sh("test -d /dev/shm -a -w /dev/shm")) and "/dev/shm" or "/tmp"
    base = chomp(h.must("mktemp -d " .. dir .. "/sstest-fpnoproc-XXXXXX"))
    h.must("mkdir -p " .. h.q(base .. "/ws/work"))
    pids = {}
  end)
  after_each(function()
    for _, pid in ipairs(pids) do h.signal(pid, "TERM") end
    if base and base:match("^/[%w/]+/sstest%-fpnoproc%-") then h.sh("rm -rf " .. h.q(base)) end
  end)

  local function need_root()
    if chomp(h.must("id -u")) ~= "0" or not select(2, h.sh("command -v unshare")) then
      pending("needs root and unshare(1) to shadow /proc in a private mount namespace")
      return false
    end
    return true
  end

  it("refuses to read, with a typed error, instead of opening the path again", function()
    if not need_root() then return end
    h.write_file(base .. "/ws/work/plain", "hello")
    local out = run_without_proc(base, base .. "/ws", base .. "/unused", [[
      local v, err = plane:read("plain")
      if v then return "read: " .. v end
      return err.kind .. " " .. tostring(err.reason) .. " " .. tostring(err.path) .. " | " .. err.message
    ]])
    assert.matches("^io no_procfs plain | .*/proc", chomp(out))
  end)

  it("never opens a FIFO swapped in after the check", function()
    if not need_root() then return end
    local w = base .. "/ws/work"
    local marker, started = base .. "/fifo-opened", base .. "/writer-started"
    h.write_file(w .. "/f", "regular")
    -- the FIFO, and a hard link outside the workspace through which the writer waits on it
    h.must("mkfifo " .. h.q(w .. "/f.fifo") .. " && ln " .. h.q(w .. "/f.fifo") .. " " .. h.q(base .. "/fifo-keep"))
    local function spawn(cmd)
      local pid = h.start("sh -c " .. h.q(cmd) .. " >/dev/null 2>&1 </dev/null")
      pids[#pids + 1] = pid
      return pid
    end
    spawn("timeout 20 sh -c " .. h.q("touch " .. h.q(started) .. "; exec 3>" .. h.q(base .. "/fifo-keep") .. "; touch "
      .. h.q(marker)))
    -- the racer: exchanges the names f and f.fifo (renameat2 RENAME_EXCHANGE) for 10 s at most
    local racer = spawn(PY .. " -c " .. h.q([[
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
end = time.monotonic() + 10
while time.monotonic() < end:
    for _ in range(500):
        libc.renameat2(-100, a, -100, b, 2)
]]) .. " " .. h.q(w .. "/f") .. " " .. h.q(w .. "/f.fifo"))
    h.must("for i in $(seq 200); do test -e " .. h.q(started) .. " && exit 0; sleep 0.02; done; exit 1")
    local out = run_without_proc(base, base .. "/ws", marker, [[
      local counts, n = {}, 0
      while n < 40000 do
        for _ = 1, 200 do
          local v, err = plane:read("f")
          local k = v and ("read " .. v) or err.reason
          counts[k] = (counts[k] or 0) + 1
        end
        n = n + 200
        local f = io.open(MARKER, "r")
        if f then f:close(); break end
      end
      local keys = {}
      for k, c in pairs(counts) do keys[#keys + 1] = k .. "=" .. c end
      table.sort(keys)
      return table.concat(keys, " ")
    ]])
    h.signal(racer, "TERM")
    if os.getenv("SSTEST_VERBOSE") then io.stderr:write(out, "\n") end
    h.sh("sleep 0.2")
    assert.is_true(alive(pids[1]), "the writer should still be blocked: " .. out)
    assert.is_nil(h.read_file(marker), "the FIFO was opened by the read: " .. out)
    assert.not_matches("error", out)
    assert.not_matches("read ", out) -- without /proc nothing is read
    assert.matches("no_procfs=%d+", out) -- the racer did not starve the check
  end)
end)
