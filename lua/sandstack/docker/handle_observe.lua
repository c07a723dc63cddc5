-- h:logs and h:stats on a stack handle (sandstack.session; docs/session.md): a service's
-- output as the engine kept it, and one sample of every service's usage, all services asked at
-- once (one batch of GET /containers/{id}/stats?stream=false).
local core = require "sandstack.core"
local E = require "sandstack.error"
local target = require "sandstack.docker.target"

local M = {}
M.methods = {}

M.DEFAULT_LOG_BYTES = 8 * 1024 * 1024

local LOG_KEYS = { service = true, since = true, tail = true, follow = true, max_bytes = true, timeout = true }

local function cpath(name) return "/containers/" .. core.urlencode(name) end

-- One read of a service's logs: { stdout =, stderr = }. eng: the engine the container is on.
local function read_logs(eng, c, opts, since)
  local q = { stdout = "1", stderr = "1" }
  if since then q.since = tostring(since) end
  if opts.tail then q.tail = tostring(opts.tail) end
  local r, err = eng:demux(cpath(c) .. "/logs", { query = q, max_bytes = opts.max_bytes or M.DEFAULT_LOG_BYTES,
    timeout = opts.timeout })
  if not r then return nil, err end
  return r
end

-- A followed log: s:read(timeout) -> { stdout =, stderr = } of what came since the last read
-- (both "" when nothing did by the timeout), or nil, err; s:close(). The engine is asked again
-- from the last second seen (logs have one-second `since` resolution), and what was already
-- handed out is skipped by length.
local Follow = {}
Follow.__index = Follow

function Follow:read(timeout)
  if self.closed then return E.fail("transport", "closed", "the log stream is closed") end
  local deadline = core.engine_clock() + (timeout or 5)
  while true do
    local r, err = read_logs(self.eng, self.container, self.opts, nil)
    if not r then return nil, err end
    local out = { stdout = r.stdout:sub(self.seen_out + 1), stderr = r.stderr:sub(self.seen_err + 1) }
    self.seen_out, self.seen_err = #r.stdout, #r.stderr
    if out.stdout ~= "" or out.stderr ~= "" or core.engine_clock() >= deadline then return out end
    core.sleep(0.1)
  end
end

function Follow:close() self.closed = true end

-- h:logs({service, since, tail, follow, max_bytes}) -> { stdout =, stderr = }, or with
-- follow = true a stream (see Follow) whose first read starts at `since`/`tail`.
function M.methods.logs(self, opts)
  opts = E.check_keys(opts, LOG_KEYS, "logs")
  if opts.since ~= nil and type(opts.since) ~= "number" then error("logs: option 'since' must be a unix time in seconds", 2) end
  if opts.tail ~= nil and (type(opts.tail) ~= "number" or opts.tail < 0 or opts.tail ~= math.floor(opts.tail)) then
    error("logs: option 'tail' must be a whole number of lines", 2)
  end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  if opts.follow then
    return setmetatable({ eng = eng, container = c, opts = opts, seen_out = 0, seen_err = 0 }, Follow)
  end
  return read_logs(eng, c, opts, opts.since)
end

-- The usage of one container from its stats answer, under E2B's getMetrics names where they fit.
local function metrics(s)
  local cpu, pre = s.cpu_stats or {}, s.precpu_stats or {}
  local cu, pu = cpu.cpu_usage or {}, pre.cpu_usage or {}
  local ncpu = cpu.online_cpus or (cu.percpu_usage and #cu.percpu_usage) or 1
  local dc = (cu.total_usage or 0) - (pu.total_usage or 0)
  local ds = (cpu.system_cpu_usage or 0) - (pre.system_cpu_usage or 0)
  local mem = s.memory_stats or {}
  local used = mem.usage or 0
  local st = mem.stats or {}
  used = used - (st.inactive_file or st.total_inactive_file or 0) -- what `docker stats` shows
  local rx, tx = 0, 0
  for _, n in pairs(s.networks or {}) do rx, tx = rx + (n.rx_bytes or 0), tx + (n.tx_bytes or 0) end
  return {
    cpuUsedPct = (ds > 0 and dc >= 0) and (dc / ds) * ncpu * 100 or 0,
    cpuCount = ncpu,
    memUsed = used > 0 and used or 0,
    memTotal = mem.limit or 0,
    netRx = rx, netTx = tx,
    pids = (s.pids_stats or {}).current or 0,
    timestamp = s.read,
  }
end

-- h:stats() -> { [service] = { cpuUsedPct, cpuCount, memUsed, memTotal, netRx, netTx, pids,
-- timestamp } }; a service whose container is not running is { state = "not_running" }.
function M.methods.stats(self, opts)
  opts = E.check_keys(opts, { timeout = true }, "stats")
  local eng, services = target.services(self)
  if not eng then return nil, services end
  local reqs = {}
  for i, s in ipairs(services) do
    reqs[i] = { "GET", cpath(s.name) .. "/stats", nil, { query = { stream = "false" }, timeout = opts.timeout or 30 } }
  end
  local results = eng:perform(reqs)
  local out = {}
  for i, s in ipairs(services) do
    local r = results[i]
    if not r.ok then
      if r.err and r.err.status == 404 then out[s.service] = { state = "missing" }
      else return nil, r.err end
    elseif type(r.body) ~= "table" or not r.body.cpu_stats then
      return E.fail("engine", "bad_answer", "stats of " .. s.name .. ": not a stats object")
    elseif not r.body.memory_stats or not r.body.memory_stats.limit then
      out[s.service] = { state = "not_running" }
    else
      out[s.service] = metrics(r.body)
    end
  end
  return out
end

return M
