-- core.rmtree, the removal of a box's workspace: a guest racing renames
-- and symlinks must not make it delete anything outside the tree, trees deeper than PATH_MAX
-- and deeper than the descriptor limit are removed, and every failure is reported. Unit specs:
-- no sbx, no engine (they run in the lua54, luajit and asan modes). Scratch trees live in
-- /dev/shm/sstest-rmtree-*; the mount test needs root and is skipped without it.
local core = require "sandstack.core"
local h = require "helpers"

local PY = select(2, h.sh("test -x /usr/bin/python3")) and "/usr/bin/python3" or "python3"
local HELPER = "spec/support/rmtree_race.py"

local function chomp(s) return (s:gsub("\n$", "")) end

local function scratch()
  local dir = select(2, h.sh("test -d /dev/shm -a -w /dev/shm")) and "/dev/shm" or "/tmp"
  return chomp(h.must("mktemp -d " .. dir .. "/sstest-rmtree-XXXXXX"))
end

local function cleanup(base)
  if not (base and base:match("^/[%w/]+/sstest%-rmtree%-")) then return end
  -- a mount left by a failed run first, so that rm never reaches the bind-mounted directory
  h.sh("grep -o ' " .. base .. "/[^ ]*' /proc/self/mounts | sort -r | xargs -r -n1 umount -l")
  h.sh("rm -rf " .. h.q(base))
end

local function present(p) return select(2, h.sh("test -e " .. h.q(p) .. " -o -L " .. h.q(p))) end

-- Every entry under dir with its type and size: equal listings mean nothing was removed.
local function listing(dir) return h.must("cd " .. h.q(dir) .. " && find . -printf '%p %y %s\\n' | sort") end

local function count_files(dir) return tonumber(chomp(h.must("find " .. h.q(dir) .. " -type f | wc -l"))) end

local function removed(path)
  local ok, err = core.rmtree(path)
  assert(ok, err and tostring(err.message))
  assert.is_true(ok)
  assert.is_false(present(path), path .. " is still there")
end

-- Ends the racer and waits until it is gone or a zombie (its parent shell is gone, and the
-- reaper that inherits it may take a second).
local function stop(pid)
  h.signal(pid, "TERM")
  for _ = 1, 500 do
    if not h.running(pid) then return end
    h.sh("sleep 0.01")
  end
  error("the racer " .. pid .. " did not end")
end

local child_command = h.child_command

describe("rmtree", function()
  local base
  before_each(function() base = scratch() end)
  after_each(function() cleanup(base) end)

  it("removes files, links and plain trees, and is true for a path that does not exist", function()
    assert.is_true(core.rmtree(base .. "/nothing-here"))
    assert.is_true(core.rmtree(base .. "/nothing/under/here"))
    h.must("cd " .. h.q(base) .. " && echo x > file && mkdir -p t/a/b t/c && echo y > t/a/b/f && "
      .. "ln -s f t/a/l && mkfifo t/c/fifo && : > t/.hidden")
    removed(base .. "/file")
    removed(base .. "/t/") -- a trailing slash names the same directory
  end)

  it("removes a symlink at the root and links inside, never what they point to", function()
    local outside = base .. "/outside"
    h.must("mkdir -p " .. h.q(outside .. "/sub") .. " && echo keep > " .. h.q(outside .. "/f") .. " && echo keep > "
      .. h.q(outside .. "/sub/g"))
    local before = listing(outside)
    -- the root itself is a link to the outside directory
    h.must("ln -s " .. h.q(outside) .. " " .. h.q(base .. "/rootlink"))
    removed(base .. "/rootlink")
    -- links inside the tree: to the directory, to a file in it, and to a directory below it
    local ws = base .. "/ws"
    h.must("mkdir -p " .. h.q(ws .. "/a/b") .. " && cd " .. h.q(ws) .. " && ln -s " .. h.q(outside) .. " dirlink && "
      .. "ln -s " .. h.q(outside .. "/f") .. " a/filelink && ln -s " .. h.q(outside .. "/sub") .. " a/b/sublink")
    removed(ws)
    assert.equal(before, listing(outside))
  end)

  it("removes a tree deeper than PATH_MAX and returns true", function()
    local root = base .. "/deep"
    h.must(PY .. " " .. HELPER .. " deep " .. h.q(root) .. " 3000") -- 6000+ bytes of path
    local ok, err = core.rmtree(root)
    assert.is_nil(err and err.message)
    assert.is_true(ok)
    assert.is_false(present(root))
  end)

  it("uses a bounded number of descriptors: 5000 levels with ulimit -n 32", function()
    local root = base .. "/deeper"
    h.must(PY .. " " .. HELPER .. " deep " .. h.q(root) .. " 5000")
    local script = base .. "/child.lua"
    local out = h.sh("ulimit -n 32 && " .. child_command(script, ([[
      local ok, err = require("sandstack.core").rmtree(%q)
      io.write(ok and "removed" or ("failed: " .. tostring(err and err.message)))
    ]]):format(root)))
    assert.equal("removed", chomp(out))
    assert.is_false(present(root))
  end)

  it("reports a failure: a mount point inside the tree is neither crossed nor removed", function()
    if chomp(h.must("id -u")) ~= "0" then
      pending("needs root for mount --bind")
      return
    end
    -- a bind mount of a directory of the same filesystem: the same st_dev, another mount
    local ws, other = base .. "/ws", base .. "/other"
    h.must("mkdir -p " .. h.q(ws .. "/a/mnt") .. " " .. h.q(other .. "/sub") .. " && echo keep > " .. h.q(other .. "/f")
      .. " && echo keep > " .. h.q(other .. "/sub/g") .. " && echo x > " .. h.q(ws .. "/a/x"))
    local before = listing(other)
    h.must("mount --bind " .. h.q(other) .. " " .. h.q(ws .. "/a/mnt"))
    local ok, err = core.rmtree(ws)
    local after = listing(other)
    h.must("umount " .. h.q(ws .. "/a/mnt"))
    assert.is_nil(ok)
    assert.equal("io", err.kind) -- host I/O
    assert.equal("mount", err.reason)
    assert.matches("mnt", err.message)
    assert.equal(before, after) -- nothing behind the mount point was removed
    -- with the mount gone, the same call finishes the job
    removed(ws)
    assert.equal(before, listing(other))
  end)

  it("never deletes outside the tree while a racing guest swaps in links to it", function()
    local rounds, gone, results, leftovers = 8, 0, {}, {}
    for r = 1, rounds do
      local root, outside = base .. "/ws" .. r, base .. "/outside" .. r
      h.must(PY .. " " .. HELPER .. " build " .. h.q(root) .. " " .. h.q(outside))
      local n0 = count_files(outside)
      local ready = base .. "/ready" .. r
      local pid = h.start("sh -c " .. h.q(PY .. " " .. HELPER .. " race " .. h.q(root) .. " " .. h.q(outside)
        .. " 10 " .. h.q(ready)) .. " >/dev/null 2>&1 </dev/null")
      h.must("for i in $(seq 200); do test -e " .. h.q(ready) .. " && exit 0; sleep 0.02; done; exit 1")
      local ok, err = core.rmtree(root)
      stop(pid)
      results[#results + 1] = ok and "true" or (err.reason .. ": " .. err.message)
      if not ok then assert.equal("io", err.kind) end
      gone = gone + (n0 - count_files(outside))
      -- the guest stopped: whatever the race left, the next call removes it
      local ok2, err2 = core.rmtree(root)
      if not ok2 or present(root) then leftovers[#leftovers + 1] = root .. ": " .. tostring(err2 and err2.message) end
    end
    assert.equal(0, gone, gone .. " files outside the tree were deleted in " .. rounds .. " rounds; "
      .. table.concat(results, " | "))
    assert.same({}, leftovers)
    if os.getenv("SSTEST_VERBOSE") then io.stderr:write(table.concat(results, " | "), "\n") end
  end)

  it("restarts from the root when a directory is moved to another parent under the walk", function()
    -- ws/p0/m (100 directories of 30 files) moves to ws/p1/m and back while it is removed: the
    -- walk, climbing out of m, finds a ".." it did not come from (about one run in six)
    local rounds, results, leftovers = 6, {}, {}
    for r = 1, rounds do
      local root = base .. "/ws" .. r
      h.must("mkdir -p " .. h.q(root .. "/p0/m") .. " " .. h.q(root .. "/p1") .. " && cd " .. h.q(root .. "/p0/m")
        .. " && for i in $(seq 100); do mkdir s$i && (cd s$i && touch $(seq -f f%g 30)); done")
      local ready = base .. "/ready" .. r
      local pid = h.start("sh -c " .. h.q(PY .. " " .. HELPER .. " move " .. h.q(root .. "/p0/m") .. " "
        .. h.q(root .. "/p1/m") .. " 10 " .. h.q(ready)) .. " >/dev/null 2>&1 </dev/null")
      h.must("for i in $(seq 200); do test -e " .. h.q(ready) .. " && exit 0; sleep 0.02; done; exit 1")
      local ok, err = core.rmtree(root)
      stop(pid)
      results[#results + 1] = ok and "true" or (err.reason .. ": " .. err.message)
      if not ok then assert.equal("io", err.kind) end
      local ok2, err2 = core.rmtree(root)
      if not ok2 or present(root) then leftovers[#leftovers + 1] = root .. ": " .. tostring(err2 and err2.message) end
    end
    assert.same({}, leftovers)
    if os.getenv("SSTEST_VERBOSE") then io.stderr:write(table.concat(results, " | "), "\n") end
  end)
end)
