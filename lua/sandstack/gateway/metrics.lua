-- sandstack.gateway.metrics: Prometheus text for GET /metrics (on a listener of its own). The
-- numbers live in a shared dict, so every nginx worker adds to the same counters (incr is
-- atomic); gauges that describe the sessions are counted from the session dict at scrape time.
local M = {}

-- Seconds; a stack start is seconds, a warm acquire a fraction of one.
M.BUCKETS = { 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120 }

local function label_value(v)
  return (tostring(v):gsub("\\", "\\\\"):gsub("\n", "\\n"):gsub('"', '\\"'))
end

-- inc(dict, name, labels_text, by): labels_text is already rendered ('kind="engine"') or nil.
function M.inc(dict, name, labels, by)
  local k = labels and (name .. "{" .. labels .. "}") or name
  dict:incr(k, by or 1, 0)
  dict:safe_add("names:" .. k, true) -- the series index, read when rendering
end

function M.failure(dict, kind)
  M.inc(dict, "sandstack_gateway_failures_total", 'kind="' .. label_value(kind or "gateway") .. '"')
end

-- observe(dict, name, seconds): one sample into the histogram `name` (cumulative buckets).
function M.observe(dict, name, seconds)
  for _, b in ipairs(M.BUCKETS) do
    if seconds <= b then M.inc(dict, name .. "_bucket", 'le="' .. b .. '"') end
  end
  M.inc(dict, name .. "_bucket", 'le="+Inf"')
  M.inc(dict, name .. "_count")
  dict:incr(name .. "_sum", seconds, 0)
  dict:safe_add("names:" .. name .. "_sum", true)
end

function M.gauge(dict, name, value)
  dict:set("gauge:" .. name, value)
end

local HELP = {
  sandstack_gateway_sessions = "gauge|Sessions in the session table, by state.",
  sandstack_gateway_pool_stacks = "gauge|Warm-pool stacks on the engine at the last refill, by state.",
  sandstack_gateway_starts_total = "counter|Sessions created, by how (cold start or warm pool).",
  sandstack_gateway_failures_total = "counter|Failed gateway operations, by error kind.",
  sandstack_gateway_destroyed_total = "counter|Sessions destroyed, by reason.",
  sandstack_gateway_adopted_total = "counter|Sessions re-adopted from the engine after a restart.",
  sandstack_gateway_start_seconds = "histogram|Time to start a session's stack (cold).",
  sandstack_gateway_acquire_seconds = "histogram|Time to hand a session a warm-pool stack.",
}

local function family(series)
  return (series:match("^([%w_]+)"):gsub("_bucket$", ""):gsub("_count$", ""):gsub("_sum$", ""))
end

-- render(metrics_dict, states, pool) -> text. states: {starting=, ready=, paused=, hibernated=, stopping=};
-- pool: {ready=, starting=, in_use=, failed=} or nil.
function M.render(dict, states, pool)
  local lines = {}
  local function head(name)
    local h = HELP[name]
    if not h then return end
    local typ, text = h:match("^(%w+)|(.*)$")
    lines[#lines + 1] = "# HELP " .. name .. " " .. text
    lines[#lines + 1] = "# TYPE " .. name .. " " .. typ
  end
  head("sandstack_gateway_sessions")
  for _, s in ipairs { "starting", "ready", "paused", "hibernated", "stopping" } do
    lines[#lines + 1] = ('sandstack_gateway_sessions{state="%s"} %d'):format(s, states[s] or 0)
  end
  if pool then
    head("sandstack_gateway_pool_stacks")
    for _, s in ipairs { "ready", "starting", "in_use", "failed" } do
      lines[#lines + 1] = ('sandstack_gateway_pool_stacks{state="%s"} %d'):format(s, pool[s] or 0)
    end
  end
  local series = {}
  for _, k in ipairs(dict:get_keys(0)) do
    local s = k:match("^names:(.*)$")
    if s then series[#series + 1] = s end
  end
  -- by family, buckets in ascending order of le
  local function le(s)
    local v = s:match('le="([^"]+)"')
    return v == "+Inf" and math.huge or tonumber(v) or -1
  end
  table.sort(series, function(a, b)
    local fa, fb = family(a), family(b)
    if fa ~= fb then return fa < fb end
    local sa, sb = a:match("^[%w_]+"), b:match("^[%w_]+")
    if sa ~= sb then return sa < sb end
    if le(a) ~= le(b) then return le(a) < le(b) end
    return a < b
  end)
  local seen = {}
  for _, s in ipairs(series) do
    local f = family(s)
    if not seen[f] then seen[f] = true; head(f) end
    lines[#lines + 1] = s .. " " .. tostring(dict:get(s) or 0)
  end
  return table.concat(lines, "\n") .. "\n"
end

return M
