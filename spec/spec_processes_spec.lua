-- The specs' own processes are signalled by pid AND start time (spec/support/helpers.lua): a pid
-- alone names a stranger once the spec's process has ended and the kernel gave the pid again,
-- which on CI's busy 2-core machine (pid_max 32768) happens within minutes. A docker-proxy so
-- ended leaves a forwarder's published port refusing every connection.
local h = require "helpers"

local function gone(pid) return h.read_file("/proc/" .. pid .. "/stat") == nil end

describe("the specs' processes", function()
  it("are stopped by their pid while they are the process that was started", function()
    local pid = h.start("sleep 30 >/dev/null 2>&1 </dev/null")
    assert.is_true(h.running(pid))
    h.stop(pid, 5)
    assert.is_false(h.running(pid))
  end)

  it("never signal a pid nobody tracked", function()
    local pid = tonumber(h.must("sleep 30 >/dev/null 2>&1 </dev/null & echo $!"):match("%d+"))
    local sent = h.signal(pid, "KILL")
    local alive = not gone(pid)
    h.track(pid); h.stop(pid, 5) -- the test's own sleep, now tracked
    assert.is_false(sent)
    assert.is_true(alive)
  end)

  it("never signal a later process that got the same pid", function()
    -- a tracked process ends and is reaped; the next pid is set so that a new process gets its
    -- pid again (ns_last_pid, root only). Another process of the machine may take it first: then
    -- the attempt is made again.
    local reused, stranger
    for _ = 1, 20 do
      local pid = h.start("sleep 30 >/dev/null 2>&1 </dev/null")
      h.stop(pid, 5)
      h.wait_for("the reaping of " .. pid, function() return gone(pid) end, 10)
      local other = tonumber(h.must(("echo %d > /proc/sys/kernel/ns_last_pid; sleep 30 >/dev/null 2>&1 </dev/null & echo $!")
        :format(pid - 1)):match("%d+"))
      if other == pid then reused, stranger = pid, other break end
      h.track(other); h.stop(other, 5)
    end
    assert.truthy(reused, "no process got a pid again in 20 attempts")
    local running, sent = h.running(reused), h.signal(reused, "KILL")
    local alive = not gone(stranger)
    h.track(stranger); h.stop(stranger, 5) -- the test's own stranger, tracked anew
    assert.is_false(running)
    assert.is_false(sent)
    assert.is_true(alive)
  end)
end)
