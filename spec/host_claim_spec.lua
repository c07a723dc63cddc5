-- core.claim_file: a claim on a host file that processes race for (an exclusive flock taken
-- without waiting), as a warm pool's store uses it (lua/sandstack/docker/pool_store.lua):
-- exactly one winner among processes claiming at once, the file free again when its holder
-- dies, a file the winner moved away never claimed by its old name, and one renamed while held
-- still held under its new name. Files in a temporary directory of the test, removed at the end;
-- the child processes are the test's own.
local h = require "helpers"
local core = require "sandstack.core"

local work

-- n child processes run `body` (Lua source; arg[1] is the process number) behind a barrier
-- file; each prints one line, then waits for the file `done` before it exits (so every claim
-- is held while the others try). Returns each one's line.
local function at_once(n, body)
  local dir = work .. "/race-" .. h.random_suffix(3)
  h.must("mkdir " .. h.q(dir))
  local cmd = h.child_command(dir .. "/child.lua", ([[
    local core = require "sandstack.core"
    local dir = %q
    while not io.open(dir .. "/go") do core.sleep(0.002) end
  ]]):format(dir) .. body .. ([[
    io.stdout:flush()
    while not io.open(dir .. "/done") do core.sleep(0.005) end
  ]]))
  local parts = {}
  for i = 1, n do parts[#parts + 1] = ("(%s %d > %s/out%d 2>&1 &)"):format(cmd, i, dir, i) end
  h.must(table.concat(parts, "; "))
  h.write_file(dir .. "/go", "")
  local out = {}
  for i = 1, n do
    for _ = 1, 1200 do
      out[i] = h.read_file(dir .. "/out" .. i) or ""
      if out[i]:find("\n", 1, true) then break end
      core.sleep(0.01)
    end
  end
  h.write_file(dir .. "/done", "")
  return out
end

describe("core.claim_file", function()
  lazy_setup(function() work = h.must("mktemp -d /tmp/sstest-claim.XXXXXX"):gsub("%s+$", "") end)
  lazy_teardown(function() if work then h.sh("rm -rf " .. h.q(work)) end end)

  it("returns the file's contents to the one claimant, 'held' to another until it is released", function()
    local path = work .. "/one"
    h.write_file(path, '{"port":1234}')
    local c, body = core.claim_file(path)
    assert.truthy(c)
    assert.equal('{"port":1234}', body)
    -- a second open file of the same process is another claimant: flock locks the open file
    local again, why = core.claim_file(path)
    assert.is_false(again); assert.equal("held", why)
    c:release()
    c:release() -- idempotent
    local third = assert(core.claim_file(path))
    third:release()
  end)

  it("says 'gone' for a missing file and for one the winner moved away; a link is not followed", function()
    local path = work .. "/moved"
    h.write_file(path, "x")
    local none, why = core.claim_file(work .. "/nothing")
    assert.is_false(none); assert.equal("gone", why)
    local c = assert(core.claim_file(path))
    assert.is_true(c:move(path .. ".claimed"))
    local late; late, why = core.claim_file(path)
    assert.is_false(late); assert.equal("gone", why)
    assert.equal("x", h.read_file(path .. ".claimed"))
    local nothing, err = c:move(path .. ".again")
    assert.is_nil(nothing); assert.equal("released", err.reason)
    h.must("ln -s " .. h.q(path .. ".claimed") .. " " .. h.q(work .. "/link"))
    local linked; linked, err = core.claim_file(work .. "/link")
    assert.is_nil(linked); assert.equal("io", err.kind)
  end)

  it("renames a claimed file and keeps the lock on its new name, until it is released", function()
    local path = work .. "/kept"
    h.write_file(path, "k")
    local c = assert(core.claim_file(path))
    assert.is_true(c:rename(path .. ".claimed"))
    local old, why = core.claim_file(path)
    assert.is_false(old); assert.equal("gone", why)
    local other; other, why = core.claim_file(path .. ".claimed")
    assert.is_false(other); assert.equal("held", why) -- still this claim's
    local bad, err = c:rename(work .. "/no-such-dir/x")
    assert.is_nil(bad); assert.equal("io", err.kind)
    c:release()
    local next_one = assert(core.claim_file(path .. ".claimed"))
    next_one:release()
    local released; released, err = c:rename(path)
    assert.is_nil(released); assert.equal("released", err.reason)
  end)

  it("lets exactly one of 6 processes claiming one file at once win, 3 times over", function()
    for round = 1, 3 do
      local path = work .. "/race" .. round
      h.write_file(path, "r" .. round)
      local out = at_once(6, ([[
        local c, what = core.claim_file(%q)
        if c then _G.keep = c end
        print(c and ("WON " .. what) or ("LOST " .. tostring(what)))
      ]]):format(path))
      local won, held = 0, 0
      for i = 1, 6 do
        if out[i]:match("^WON r" .. round) then won = won + 1 elseif out[i]:match("^LOST held") then held = held + 1 end
      end
      assert.equal(1, won, table.concat(out))
      assert.equal(5, held, table.concat(out))
    end
  end)

  it("is free again when its holder dies without releasing it", function()
    local path = work .. "/crash"
    h.write_file(path, "c")
    local dir = work .. "/holder"
    h.must("mkdir " .. h.q(dir))
    local cmd = h.child_command(dir .. "/child.lua", ([[
      local core = require "sandstack.core"
      local c = assert(core.claim_file(%q))
      print("HELD"); io.stdout:flush()
      while true do core.sleep(1) end
    ]]):format(path))
    local pid = h.start(("%s > %s/out 2>&1"):format(cmd, h.q(dir)))
    for _ = 1, 1000 do
      if (h.read_file(dir .. "/out") or ""):find("HELD", 1, true) then break end
      core.sleep(0.01)
    end
    local held, why = core.claim_file(path)
    assert.is_false(held); assert.equal("held", why)
    assert(h.signal(pid, "KILL"), "the holder ended before it was killed")
    local c
    for _ = 1, 500 do -- the kernel drops the lock as the process goes
      c = core.claim_file(path)
      if c then break end
      core.sleep(0.01)
    end
    assert.truthy(c, "the dead holder's claim was not freed")
    c:release()
  end)
end)
