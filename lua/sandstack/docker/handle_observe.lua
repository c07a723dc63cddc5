-- h:logs and h:stats on a stack handle (sandstack.session; docs/session.md): a service's
-- output as the engine kept it, and one sample of every service's usage, all services asked at
-- once (one batch of GET /containers/{id}/stats?stream=false).
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local target = require "sandstack.docker.target"

local M = {}
M.methods = {}

M.DEFAULT_LOG_BYTES = 8 * 1024 * 1024

local LOG_KEYS = require("sandstack.docker.method_options").logs


-- One read of a service's logs: { stdout =, stderr = }. eng: the engine the container is on.
local function read_logs(eng, c, opts, since)
  local get = ops.request("logs", c, { since = since, tail = opts.tail })
  local r, err = eng:demux(get.path, { query = get.query, max_bytes = opts.max_bytes or M.DEFAULT_LOG_BYTES,
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
  local err
  opts, err = E.options(opts, LOG_KEYS, "logs")
  if not opts then return nil, err end
  local eng, c = target.resolve(self, opts.service)
  if not eng then return nil, c end
  if opts.follow then
    return setmetatable({ eng = eng, container = c, opts = opts, seen_out = 0, seen_err = 0 }, Follow)
  end
  return read_logs(eng, c, opts, opts.since)
end

-- The usage of one container from its stats answer, under E2B's getMetrics names where they fit.
-- prev: the container's previous answer in a series (its CPU counters stand in for precpu_stats,
-- which a one-shot read leaves empty).
local function metrics(s, prev)
  local cpu, pre = s.cpu_stats or {}, (prev and prev.cpu_stats) or s.precpu_stats or {}
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

-- One read of every service: { [service] = metrics }, and the raw answers (for the next sample of
-- a series). one_shot: the engine answers at once, without measuring CPU over a second itself.
local function sample(eng, services, timeout, one_shot, prev)
  local reqs = {}
  for i, s in ipairs(services) do
    local get = ops.request("stats", s.name, { one_shot = one_shot and true or false })
    reqs[i] = { get.method, get.path, nil, { query = get.query, timeout = timeout or 30 } }
  end
  local results = eng:perform(reqs)
  local out, raw = {}, {}
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
      raw[s.service] = r.body
      out[s.service] = metrics(r.body, prev and prev[s.service])
    end
  end
  return out, raw
end

local MAX_SAMPLES = 3600

-- The series of stats{window =, every =}: a first read at once (the base of the first sample's
-- CPU), then one sample every `every` seconds until `window` has passed, each sample's CPU measured
-- since the read before it. Reads are one-shot, so a sample costs a round trip, not a second.
local function series(eng, services, opts)
  local every = opts.every or 1
  local n = math.floor(opts.window / every + 1e-9)
  local base, prev = sample(eng, services, opts.timeout, true)
  if not base then return nil, prev end
  local t0, out = core.engine_clock(), {}
  for i = 1, n do
    local wait = t0 + i * every - core.engine_clock()
    if wait > 0 then core.sleep(wait) end
    local one, raw = sample(eng, services, opts.timeout, true, prev)
    if not one then return nil, raw end
    out[i], prev = one, raw
  end
  return out
end

local STATS_OPTS = require("sandstack.docker.method_options").stats

-- h:stats() -> { [service] = { cpuUsedPct, cpuCount, memUsed, memTotal, netRx, netTx, pids,
-- timestamp } }; a service whose container is not running is { state = "not_running" }.
-- h:stats{ window =, every = } -> a list of such samples, one every `every` seconds (default 1)
-- over `window` seconds.
function M.methods.stats(self, opts)
  local err
  opts, err = E.options(opts, STATS_OPTS, "stats")
  if not opts then return nil, err end
  if opts.every ~= nil and opts.window == nil then return E.refuse("stats", "every", "needs a 'window'") end
  if opts.window and opts.window / (opts.every or 1) > MAX_SAMPLES then
    return E.refuse("stats", "window", ("must span at most %d samples of 'every'"):format(MAX_SAMPLES))
  end
  if opts.window and opts.window < (opts.every or 1) then return E.refuse("stats", "window", "must be at least 'every'") end
  local eng, services = target.services(self)
  if not eng then return nil, services end
  if opts.window then return series(eng, services, opts) end
  local one
  one, err = sample(eng, services, opts.timeout, false)
  if not one then return nil, err end
  return one
end

return M
