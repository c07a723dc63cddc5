-- sandstack.gateway.console_worker: the console's blocking half, in the thread pool (as
-- gateway/worker.lua: plain data in and out, `true, value` or `false, err`, no state kept).
local core = require "sandstack.core"
local guarded = require("sandstack.gateway.worker_result").guarded

local M = {}

local function stack_of(record)
  return require("sandstack").docker.reconnect(record)
end

-- stats(record) -> true, {cpu =, cpus =, mem =, mem_total =, egress = text | nil}: the sandbox's
-- sample (h:stats) and the policy its proxy enforces (h:egress), never the record.
function M.stats(record)
  return guarded(function()
    local stack, err = stack_of(record)
    if not stack then return nil, err end
    local all; all, err = stack:stats()
    local policy = type(record.proxy) == "table" and record.proxy.added and stack:egress()
    stack:close()
    if not all then return nil, err end
    local s = all[record.sandbox or "sandbox"] or {}
    return { cpu = s.cpuUsedPct, cpus = s.cpuCount, mem = s.memUsed, mem_total = s.memTotal,
      sample_state = s.state, egress = policy and policy:render() or nil }
  end)
end

-- audit(record, skip) -> true, {lines = {...}, total = n}: the proxy's audit lines (JSON lines
-- with a decision) after the first `skip` of them.
function M.audit(record, skip)
  return guarded(function()
    local px = type(record.proxy) == "table" and record.proxy.service
    if not px then return { lines = {}, total = 0 } end
    local stack, err = stack_of(record)
    if not stack then return nil, err end
    local out; out, err = stack:logs { service = px, tail = 2000 }
    stack:close()
    if not out then return nil, err end
    local lines, n = {}, 0
    for _, text in ipairs { out.stdout or "", out.stderr or "" } do
      for line in text:gmatch("[^\n]+") do
        local v = core.json_decode(line)
        if type(v) == "table" and v.decision then
          n = n + 1
          if n > skip then lines[#lines + 1] = line end
        end
      end
    end
    return { lines = lines, total = n }
  end)
end

return M
