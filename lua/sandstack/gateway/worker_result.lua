-- sandstack.gateway.worker_result: the result contract of every function the gateway runs in
-- ngx.run_worker_thread (gateway/worker.lua and its siblings): `true, value` or `false, plain
-- error`, for only plain data crosses between the thread's VM and nginx's. Its own module so that
-- each worker module uses it without requiring another.
local M = {}

-- An error as plain data: its string, number and boolean fields, with kind and message always set.
function M.plain_error(err)
  if type(err) ~= "table" then return { kind = "gateway", message = tostring(err) } end
  local out = {}
  for k, v in pairs(err) do
    local t = type(v)
    if type(k) == "string" and (t == "string" or t == "number" or t == "boolean") then out[k] = v end
  end
  out.kind = out.kind or "gateway"
  out.message = out.message or tostring(err)
  return out
end

-- fn(...) with raised errors and nil, err both turned into false, plain err.
function M.guarded(fn, ...)
  local ok, a, b = pcall(fn, ...)
  if not ok then return false, M.plain_error(a) end
  if a == nil then return false, M.plain_error(b) end
  return true, a
end

return M
