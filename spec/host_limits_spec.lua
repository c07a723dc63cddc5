-- The host-limit checks without an engine: the arithmetic of each limit for a planned count, the
-- sentences (the setting named, a value that fits), the statuses a host that does not say gives,
-- the start's refusal, the address pools' capacity, and the kernel readings against the files.
-- The refusals on a real engine with its limits lowered: spec/docker_host_limits_spec.lua.
local core = require "sandstack.core"
local L = require "sandstack.docker.host_limits"
local P = require "sandstack.docker.address_pools"
local h = require "helpers"

local function read_number(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local v = tonumber((f:read("l") or ""):match("^%s*(%d+)"))
  f:close()
  return v
end

-- readings as M.read gives them, with the given host values
local function readings(host, engine)
  local h = { pid_max = 32768, threads_max = 192735, tasks = 200, inotify_max_user_instances = 128,
    neigh_gc_thresh3 = 1024, neigh_entries = 3, cgroup2 = false, unread = {} }
  for k, v in pairs(host or {}) do h[k] = v end
  return { local_engine = true, host = h, engine = engine or { pid = 4242, nofile = 20000, fds = 25, unread = {} } }
end

local function by_limit(list) return h.index_by(list, "limit") end

describe("host limits: the arithmetic", function()
  it("judges a planned count against value minus what is in use, per session", function()
    local r = by_limit(L.judge_all(readings(), 1000))
    -- 32768 - 200 = 32568 room, 35 per session: 930 fit; 1000 need 35000
    assert.equal("exceeded", r.pid_max.status)
    assert.equal(930, r.pid_max.fit)
    assert.equal(35000, r.pid_max.need)
    assert.equal(200, r.pid_max.used)
    assert.equal("ok", r.threads_max.status) -- (192735 - 200) / 35 = 5501 fit
    assert.equal(5501, r.threads_max.fit)
    assert.equal("exceeded", r.neigh_gc_thresh3.status) -- (1024 - 3) / 7 = 145
    assert.equal(145, r.neigh_gc_thresh3.fit)
    assert.equal("exceeded", r.engine_open_files.status) -- (20000 - 25) / 20 = 998
    assert.equal(998, r.engine_open_files.fit)
    assert.equal("not_applicable", r.inotify_instances.status)
  end)

  it("passes a count that fits exactly and refuses one more", function()
    local lim = by_limit(L.judge_all(readings { pid_max = 235 }, 1)).pid_max -- room 35: one fits
    assert.equal("ok", lim.status)
    assert.equal(1, lim.fit)
    lim = by_limit(L.judge_all(readings { pid_max = 234 }, 1)).pid_max
    assert.equal("exceeded", lim.status)
    assert.equal(0, lim.fit)
  end)

  it("names the setting, the value, what is in use and a value that fits", function()
    local r = by_limit(L.judge_all(readings(), 1000))
    assert.equal("kernel.pid_max is 32768 with 200 tasks in use: 1000 more sessions need about 35000 more tasks "
      .. "(35 each), room for 930: raise it with `sysctl -w kernel.pid_max=65536` (and a file in /etc/sysctl.d to "
      .. "keep it)", r.pid_max.message)
    assert.matches("net.ipv4.neigh.default.gc_thresh3 is 1024 with 3 neighbour entries in use", r.neigh_gc_thresh3.message, 1, true)
    assert.matches("`sysctl -w net.ipv4.neigh.default.gc_thresh3=7168`", r.neigh_gc_thresh3.message, 1, true)
    assert.matches("the engine's open-file limit is 20000 with 25 open files in use", r.engine_open_files.message, 1, true)
    assert.matches("`LimitNOFILE=65536`", r.engine_open_files.message, 1, true)
    assert.equal("kernel.threads-max is 192735 with 200 tasks in use: 1000 more sessions add about 35000 tasks "
      .. "(35 each); room for 5501 more sessions", r.threads_max.message)
  end)

  it("counts inotify instances on cgroup v2 only, and says the ones in use are not counted", function()
    local r = by_limit(L.judge_all(readings { cgroup2 = true, inotify_max_user_instances = 128 }, 100)).inotify_instances
    assert.equal("exceeded", r.status) -- 2 a session: 64 fit
    assert.equal(64, r.fit)
    assert.matches("inotify instances in use not counted", r.message, 1, true)
    assert.matches("`sysctl -w fs.inotify.max_user_instances=", r.message, 1, true)
    r = by_limit(L.judge_all(readings(), 100)).inotify_instances
    assert.equal("fs.inotify.max_user_instances does not apply: cgroup v1 (a shim takes an inotify instance on "
      .. "cgroup v2 only)", r.message)
  end)

  it("says why a limit it cannot read is not checked, and never refuses for it", function()
    local rd = readings { pid_max = false, tasks = false }
    rd.host.pid_max, rd.host.tasks = nil, nil
    rd.host.unread = { pid_max = "/proc/sys/kernel/pid_max: Permission denied" }
    rd.engine = { pid = 4242, unread = { fds = "/proc/4242/fd: Permission denied" }, nofile = 10 }
    local r = by_limit(L.judge_all(rd, 1))
    assert.equal("unknown", r.pid_max.status)
    assert.equal("kernel.pid_max not checked: /proc/sys/kernel/pid_max: Permission denied", r.pid_max.message)
    assert.equal("unknown", r.engine_open_files.status)
    assert.equal("the engine's open-file limit not checked: the engine (pid 4242): /proc/4242/fd: Permission denied",
      r.engine_open_files.message)
    rd.engine = { error = "the process behind /x.sock is not known here (No such process)" }
    assert.matches("not known here", by_limit(L.judge_all(rd, 1)).engine_open_files.message, 1, true)
    rd.engine = { pid = 4242, nofile_unlimited = true, unread = {} }
    assert.equal("not_applicable", by_limit(L.judge_all(rd, 1)).engine_open_files.status)
  end)

  it("checks nothing of this host for an engine elsewhere", function()
    for _, r in ipairs(L.judge_all({ local_engine = false }, 5)) do
      assert.equal("unknown", r.status)
      assert.matches("the engine is not on this host", r.message, 1, true)
    end
    assert.same({ local_engine = false }, L.read("tcp://127.0.0.1:2375"))
  end)
end)

describe("host limits: the start's check", function()
  local read = L.read
  after_each(function() L.read = read end)

  it("refuses one more session with the sentence, typed host_limit and the limit's name", function()
    L.read = function() return readings { neigh_entries = 1020 } end
    local ok, err = L.check_start()
    assert.is_nil(ok)
    assert.equal("host_limit", err.kind)
    assert.equal("neigh_gc_thresh3", err.reason)
    assert.equal("net.ipv4.neigh.default.gc_thresh3", err.setting)
    assert.equal(1024, err.value)
    assert.equal(1020, err.used)
    assert.equal("this start would meet a host limit: net.ipv4.neigh.default.gc_thresh3 is 1024 with 1020 neighbour "
      .. "entries in use: 1 more session needs about 7 more neighbour entries (7 each), room for 0: raise it with "
      .. "`sysctl -w net.ipv4.neigh.default.gc_thresh3=2048` (gc_thresh1 and gc_thresh2 below it, kept in "
      .. "/etc/sysctl.d)", err.message)
  end)

  it("lets a start through when one more fits, and when a limit cannot be read", function()
    L.read = function() return readings() end
    assert.is_true(L.check_start())
    L.read = function()
      local rd = readings()
      rd.engine = { error = "no such socket" }
      return rd
    end
    assert.is_true(L.check_start())
  end)
end)

describe("address pools", function()
  it("reads a CIDR to its first address and prefix", function()
    assert.same({ 10 * 2 ^ 24 + 96 * 2 ^ 16, 11 }, { P.cidr("10.96.0.0/11") })
    assert.same({ 10 * 2 ^ 24 + 1 * 2 ^ 16 + 2 * 256, 24 }, { P.cidr("10.1.2.9/24") })
    assert.is_nil(P.cidr("fd00::/64"))
    assert.is_nil(P.cidr("10.1.2.300/24"))
  end)

  it("finds the pools in the engine's flags, else its daemon.json, else the built-in ones", function()
    local none = function() return nil end
    local pools, src = P.engine_pools({ "dockerd", "--default-address-pool", "base=10.99.0.0/26,size=28" }, none)
    assert.same({ { base = "10.99.0.0/26", size = 28 } }, pools)
    assert.equal("the engine's --default-address-pool flags", src)
    local asked
    pools, src = P.engine_pools({ "dockerd", "--config-file=/run/ext/daemon.json" }, function(p)
      asked = p
      return '{"default-address-pools":[{"base":"10.231.0.0/16","size":24}]}'
    end)
    assert.equal("/run/ext/daemon.json", asked)
    assert.same({ { base = "10.231.0.0/16", size = 24 } }, pools)
    assert.equal("default-address-pools in /run/ext/daemon.json", src)
    pools, src = P.engine_pools({ "dockerd" }, function() return nil, core.error("io", "not_found", "none") end)
    assert.equal("the engine's built-in pools", src)
    -- a daemon.json there but not readable: not the built-in pools, but why not
    assert.same({ nil, "/proc/1/root/etc/docker/daemon.json: Permission denied" }, { P.engine_pools({ "dockerd" },
      function() return nil, core.error("io", "failed", "/proc/1/root/etc/docker/daemon.json: Permission denied") end) })
    pools, src = P.engine_pools({ "dockerd" }, none)
    assert.equal("the engine's built-in pools", src)
    assert.equal(31, (P.capacity(pools, {})))
  end)

  it("counts the networks a pool still gives against the engine's subnets", function()
    local pools = { { base = "10.99.0.0/26", size = 28 } } -- 4 networks
    assert.same({ 4, 4 }, { P.capacity(pools, {}) })
    assert.same({ 4, 2 }, { P.capacity(pools, { "10.99.0.0/28", "10.99.0.32/28", "172.17.0.0/16", "fd00::/64" }) })
    assert.same({ 4, 0 }, { P.capacity(pools, { "10.99.0.0/26" }) }) -- one wider subnet takes them all
    local r = P.judge(2, 2, 4, 2, "the pools", "give it more")
    assert.equal("exceeded", r.status)
    assert.equal(1, r.fit)
    assert.equal("the pools hold 4 networks with 2 in use: 2 more sessions need 4 more (2 each), room for 1: give it more",
      r.message)
    assert.equal("ok", P.judge(1, 2, 4, 2, "the pools", "x").status)
  end)
end)

describe("host limits: the kernel's readings", function()
  it("reads each value from its file, in constant time", function()
    local h = core.host_limits()
    assert.equal(read_number("/proc/sys/kernel/pid_max"), h.pid_max)
    assert.equal(read_number("/proc/sys/kernel/threads-max"), h.threads_max)
    assert.equal(read_number("/proc/sys/net/ipv4/neigh/default/gc_thresh3"), h.neigh_gc_thresh3)
    assert.equal(read_number("/proc/sys/fs/inotify/max_user_instances"), h.inotify_max_user_instances)
    assert.is_true(h.tasks > 0)
    assert.is_true(h.neigh_entries >= 0)
    assert.is_boolean(h.cgroup2)
    assert.same({}, h.unread)
  end)

  it("says the engine's process is not known behind a socket nobody listens on", function()
    local dir = os.tmpname()
    local proc, err = core.engine_process(dir .. ".none.sock")
    os.remove(dir)
    assert.same({ nil, "host", "engine_process" }, { proc, err.kind, err.reason })
  end)
end)

describe("sandstack check: usage", function()
  local function run(argv)
    local out, err = {}, {}
    local function sink(t) return { write = function(_, ...) for _, v in ipairs { ... } do t[#t + 1] = v end end } end
    local code = require("sandstack.cli").main(argv, sink(out), sink(err))
    return code, table.concat(out), table.concat(err)
  end

  it("refuses a count below one and a subnet pool smaller than a /28, changing nothing", function()
    local code, _, err = run { "check", "--sessions", "0" }
    assert.equal(2, code)
    assert.matches("--sessions takes a whole number of 1 or more", err, 1, true)
    code, _, err = run { "check", "--subnet-pool", "10.1.0.0/29" }
    assert.equal(2, code)
    assert.matches("--subnet-pool takes an IPv4 CIDR of /28 or larger", err, 1, true)
    code = run { "check", "extra" }
    assert.equal(2, code)
  end)
end)
