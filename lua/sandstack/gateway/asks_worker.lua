-- sandstack.gateway.asks_worker: the blocking half of the gateway's egress-ask routes
-- (gateway/asks.lua), run in the thread pool with gateway/worker.lua's contract: plain data in,
-- `true, value` or `false, plain error` out, no state kept.
local guarded = require("sandstack.gateway.worker_result").guarded

local M = {}

local function with_stack(record, fn)
  return guarded(function()
    local stack, err = require("sandstack").docker.reconnect(record)
    if not stack then return nil, err end
    local res; res, err = fn(stack)
    stack:close()
    if res == nil then return nil, err end
    return res
  end)
end

-- list(record) -> true, { {id, host, port, method, path, service, at}, ... }
function M.list(record)
  return with_stack(record, function(stack) return stack:egress_asks() end)
end

-- answer(record, id, decision, opts) -> true, { id, decision, remembered }
function M.answer(record, id, decision, opts)
  return with_stack(record, function(stack) return stack:answer(id, decision, opts) end)
end

return M
