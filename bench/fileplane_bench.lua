-- The file plane against its limit and against a plane-less backend, measured in one run:
-- stat, read and write of 4 KiB files at depth 1 and depth 8 below the workspace root,
--   plane   plane:attributes / plane:read / plane:write (atomic: temp file + rename)
--   plain   lstat / open+read+close / open(O_TRUNC)+write+close on the same host path
--           (the test-only module sandstack_test.fileplane_bench, spec/support/csrc/fileplane_bench.c:
--           the same Lua-to-C call overhead as the plane, and never part of the shipped module)
--   exec    `docker exec <container> cat <file>` on the same file, bind-mounted (read only)
-- Prints the time per operation and the ratios; absolute times depend on the machine.
--   lua5.4 bench/fileplane_bench.lua [ITERATIONS] [DIR]   (from the repository root; the build
--   dir is $SANDSTACK_BUILD, default ./build)
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.path = "./bench/?.lua;" .. package.path
local run = require("results").begin("fileplane", { section = "fileplane_bench", argv = arg })
package.cpath = (os.getenv("SANDSTACK_BUILD") or "./build") .. "/?.so;" .. package.cpath
local core = require "sandstack.core"
local baseline = require "sandstack_test.fileplane_bench"

local N = tonumber(arg[1]) or 20000
local DIR = arg[2] or "/tmp"
local EXEC_N = 20
local now = core.engine_clock -- monotonic

local function sh(cmd)
  local f = assert(io.popen(cmd .. " 2>&1"))
  local out = f:read("a")
  local ok = f:close()
  assert(ok, cmd .. ": " .. out)
  return (out:gsub("\n$", ""))
end

local base = sh("mktemp -d " .. DIR .. "/sstest-fileplane-bench-XXXXXX")
local root = base .. "/ws"
local data = string.rep("x", 4096)
local depths = {
  [1] = "f",
  [8] = "a/b/c/d/e/f/g/f",
}
sh("mkdir -p " .. root .. "/a/b/c/d/e/f/g")
for _, rel in pairs(depths) do
  local f = assert(io.open(root .. "/" .. rel, "wb"))
  f:write(data)
  f:close()
end

local plane = assert(core.fileplane_open { root = root, guest_root = "/sandstack", cwd = "/sandstack" })
local plain = baseline.plain

-- Seconds per call of fn over n calls, best of 3 batches (the least disturbed).
local function per_op(n, fn)
  local best = math.huge
  for _ = 1, 3 do
    local t0 = now()
    for _ = 1, n do fn() end
    local dt = (now() - t0) / n
    if dt < best then best = dt end
  end
  return best
end

local rows = {}
local function row(name, depth, a, b, c)
  rows[#rows + 1] = { name = name, depth = depth, plane = a, plain = b, exec = c }
end

for _, depth in ipairs { 1, 8 } do
  local rel = depths[depth]
  local guest, host = "/sandstack/" .. rel, root .. "/" .. rel
  assert(plane:read(guest) == data and plain("read", host, 8192) == data)
  row("stat", depth, per_op(N, function() assert(plane:attributes(guest, "size")) end),
    per_op(N, function() assert(plain("stat", host)) end))
  row("stat (whole table)", depth, per_op(N, function() assert(plane:attributes(guest)) end),
    per_op(N, function() assert(plain("stat", host)) end))
  row("read", depth, per_op(N, function() assert(plane:read(guest)) end),
    per_op(N, function() assert(plain("read", host, 8192)) end))
  row("write", depth, per_op(N // 4, function() assert(plane:write(guest, data)) end),
    per_op(N // 4, function() assert(plain("write", host, data)) end))
end

-- The exec path: one container with the workspace mounted where the guest sees it.
local project = "sstest-fileplane-bench-" .. core.random_hex(4)
local id = sh("docker run -d --label io.sandstack.project=" .. project .. " -v " .. root
  .. ":/sandstack:ro sandstack-test/base:local sleep 600")
local ok, err = pcall(function()
  for _, depth in ipairs { 1, 8 } do
    local cmd = "docker exec " .. id .. " cat /sandstack/" .. depths[depth]
    assert(#sh(cmd) == #data)
    local t0 = now()
    for _ = 1, EXEC_N do sh(cmd) end
    local exec = (now() - t0) / EXEC_N
    for _, r in ipairs(rows) do
      if r.name == "read" and r.depth == depth then r.exec = exec end
    end
  end
end)
sh("docker rm -f " .. id .. " >/dev/null")
assert(ok, err)
plane:close()
sh("rm -rf " .. base)

print(("fileplane bench: %d iterations (writes %d), exec %d, resolver %s, dir %s"):format(N, N // 4, EXEC_N,
  "openat2/auto", DIR))
print(("%-20s %5s %12s %12s %12s %10s %10s"):format("op", "depth", "plane us", "plain us", "exec us",
  "plane/plain", "exec/plane"))
for _, r in ipairs(rows) do
  print(("%-20s %5d %12.2f %12.2f %12s %10.2f %10s"):format(r.name, r.depth, r.plane * 1e6, r.plain * 1e6,
    r.exec and ("%.0f"):format(r.exec * 1e6) or "-", r.plane / r.plain,
    r.exec and ("%.0f"):format(r.exec / r.plane) or "-"))
end
run:finish()
