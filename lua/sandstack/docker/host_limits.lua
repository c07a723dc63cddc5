-- The host's limits a count of sessions would meet, checked before they bite: each limit named
-- with its value now, what is in use, what the sessions would add, and the setting to raise.
-- `sandstack check --sessions N` reports them for a planned N (with the address pools of
-- sandstack.docker.address_pools); every start runs check_start first, which refuses with the
-- same sentence (kind "host_limit") where one more session would not fit, instead of the
-- kernel's or the engine's failure halfway through. check_start reads a few files the kernel
-- answers in constant time (core.host_limits, core.engine_process): nothing it does grows with
-- the sessions alive, and nothing is cached.
local core = require "sandstack.core"
local E = require "sandstack.error"

local M = {}

-- What one minimal session (a sandbox and its socat forwarder, two bridge networks, one port
-- published on 127.0.0.1) adds on the host. Measured on Docker 20.10, cgroup v1, Linux 6.18
-- (docs/docker.md, "Host limits", says how): tasks: 2 containerd shims of 11 to 13 threads, a
-- docker-proxy of 6 to 8, socat, sandstack-init, the agent (33 to 35); engine_files: the engine's open files
-- (its containers' stdio pipes, log files, the proxy's pipes); neigh_entries: the kernel's
-- neighbour table (shared by every network namespace) right after a start; networks: bridge
-- networks; inotify_instances: one per shim, on cgroup v2 only.
M.PER_SESSION = { tasks = 35, engine_files = 20, neigh_entries = 7, networks = 2, inotify_instances = 2 }

-- The limits: name (the error's reason), the setting a user raises and how, the unit counted.
local LIMITS = {
  { name = "pid_max", setting = "kernel.pid_max", per = "tasks", unit = "tasks", value = "pid_max", used = "tasks",
    how = "`sysctl -w kernel.pid_max=%d` (and a file in /etc/sysctl.d to keep it)" },
  { name = "threads_max", setting = "kernel.threads-max", per = "tasks", unit = "tasks", value = "threads_max",
    used = "tasks",
    how = "`sysctl -w kernel.threads-max=%d` (and a file in /etc/sysctl.d to keep it)" },
  { name = "neigh_gc_thresh3", setting = "net.ipv4.neigh.default.gc_thresh3", per = "neigh_entries",
    unit = "neighbour entries", value = "neigh_gc_thresh3", used = "neigh_entries",
    how = "`sysctl -w net.ipv4.neigh.default.gc_thresh3=%d` (gc_thresh1 and gc_thresh2 below it, kept in /etc/sysctl.d)" },
  { name = "inotify_instances", setting = "fs.inotify.max_user_instances", per = "inotify_instances",
    unit = "inotify instances", value = "inotify_max_user_instances", cgroup2_only = true, how = "`sysctl -w fs.inotify.max_user_instances=%d` (kept in /etc/sysctl.d)" },
  { name = "engine_open_files", setting = "the engine's open-file limit", per = "engine_files", unit = "open files",
    how = "`LimitNOFILE=%d` in the engine's unit (`systemctl edit docker`, then restart it)" },
}

local function raise_to(need)
  -- the next round value above what is needed, so the sentence names a setting that fits
  local step = need < 10000 and 1024 or 65536
  return math.ceil((need + 1) / step) * step
end

-- One limit judged for n more sessions. value: the limit; used: what is in use now (nil when
-- the host does not say, as for inotify instances); per: each session's cost. Returns
-- { limit =, setting =, status = "ok" | "exceeded", value =, used =, need =, fit =, message = }:
-- need is what n sessions add, fit how many more sessions the room left holds.
function M.judge(lim, value, used, per, n)
  local need = n * per
  local room = value - (used or 0)
  local fit = room > 0 and math.floor(room / per) or 0
  local r = { limit = lim.name, setting = lim.setting, value = value, used = used, need = need, fit = fit,
    per_session = per }
  local now = used and ("%d %s in use"):format(used, lim.unit) or (lim.unit .. " in use not counted")
  local function sessions(k) return k == 1 and "session" or "sessions" end
  if need <= room then
    r.status = "ok"
    r.message = ("%s is %d with %s: %d more %s add%s about %d %s (%d each); room for %d more sessions"):format(
      lim.setting, value, now, n, sessions(n), n == 1 and "s" or "", need, lim.unit, per, fit)
  else
    r.status = "exceeded"
    r.message = ("%s is %d with %s: %d more %s need%s about %d more %s (%d each), room for %d: raise it with %s"):format(
      lim.setting, value, now, n, sessions(n), n == 1 and "s" or "", need, lim.unit, per, fit, lim.how:format(raise_to((used or 0) + need)))
  end
  return r
end

local function unknown(lim, why)
  return { limit = lim.name, setting = lim.setting, status = "unknown",
    message = ("%s not checked: %s"):format(lim.setting, why) }
end

local function not_applying(lim, why)
  return { limit = lim.name, setting = lim.setting, status = "not_applicable",
    message = ("%s does not apply: %s"):format(lim.setting, why) }
end

-- The readings of this host: host = core.host_limits(); engine = core.engine_process's table,
-- or { error = message } when the engine's process is not found (a remote engine, another pid
-- namespace, no permission). local_engine false: the engine is not on this host, whose kernel
-- limits are then not the ones the sessions meet.
function M.read(docker_host)
  local addr = core.engine_address(docker_host)
  if not addr or not addr.unix_path then return { local_engine = false } end
  local eng, err = core.engine_process(addr.unix_path)
  return { local_engine = true, host = core.host_limits(), engine = eng or { error = err.message } }
end

-- Each limit judged for n sessions from readings (M.read's): an array in LIMITS' order.
function M.judge_all(rd, n)
  local per = M.PER_SESSION
  local out = {}
  for _, lim in ipairs(LIMITS) do
    local r
    if not rd.local_engine then
      r = unknown(lim, "the engine is not on this host (a tcp:// or ssh:// address)")
    elseif lim.name == "engine_open_files" then
      local e = rd.engine
      if e.error then
        r = unknown(lim, e.error)
      elseif e.nofile_unlimited then
        r = not_applying(lim, ("the engine (pid %d) has no open-file limit"):format(e.pid))
      elseif not e.nofile or not e.fds then
        local why = (e.unread or {}).nofile or (e.unread or {}).fds or "not readable"
        r = unknown(lim, ("the engine (pid %d): %s"):format(e.pid, why))
      else
        r = M.judge(lim, e.nofile, e.fds, per[lim.per], n)
      end
    else
      local h = rd.host
      local unread = h.unread or {}
      if lim.cgroup2_only and h.cgroup2 == false then
        r = not_applying(lim, "cgroup v1 (a shim takes an inotify instance on cgroup v2 only)")
      elseif h[lim.value] == nil or (lim.used and h[lim.used] == nil) then
        r = unknown(lim, unread[lim.value] or unread[lim.used] or "not readable")
      else
        r = M.judge(lim, h[lim.value], lim.used and h[lim.used], per[lim.per], n)
      end
    end
    out[#out + 1] = r
  end
  return out
end

-- The check of every start: one more session against each limit, from a few constant-time
-- reads. true, or nil and the first limit it would meet (kind "host_limit", reason the limit's
-- name, fields setting, value, used, need). A limit that cannot be read is not a refusal.
function M.check_start(docker_host)
  for _, r in ipairs(M.judge_all(M.read(docker_host), 1)) do
    if r.status == "exceeded" then
      return E.fail("host_limit", r.limit, "this start would meet a host limit: " .. r.message,
        { setting = r.setting, value = r.value, used = r.used, need = r.need })
    end
  end
  return true
end

return M
