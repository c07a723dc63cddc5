-- sandstack.gateway.streams: the long streams that poll a session through the thread pool, the
-- console's audit lines (gateway/console.lua) and the egress asks (gateway/asks.lua), made cheap
-- and capped:
--   - a tenant holds at most max_streams_per_tenant of them open, a session
--     max_streams_per_session (gateway/limits.lua); one more is answered 429 limit at once;
--   - all of a session's streams of one kind in this nginx worker read one poller: a timer that
--     calls the thread pool once per interval while any of them is open, whatever their number.
-- So the streams' share of the pool is one call per session and kind per interval, on at most
-- max_streams_per_tenant sessions per tenant. A stream's places are given back when it ends,
-- whatever ends it (the log phase calls done: a closed client, an abort, an error).
local S = require "sandstack.gateway.sessions"
local limits = require "sandstack.gateway.limits"

local M = {}

-- This nginx worker's pollers: [kind .. ":" .. sid] = { users =, seq =, ok =, value = }.
local pollers = {}

-- join(key, interval, fetch, timer_at) -> p: the worker's poller of key, one more reader. Each
-- tick calls fetch() -> ok, value (nil: nothing this time) and, when it answered, stores it as
-- p.ok, p.value and bumps p.seq; ticks stop when no reader is left. timer_at: ngx.timer.at.
function M.join(key, interval, fetch, timer_at)
  local p = pollers[key]
  if not p then
    p = { users = 0, seq = 0 }
    pollers[key] = p
    local function store(ok, value)
      if ok ~= nil then p.ok, p.value, p.seq = ok, value, p.seq + 1 end
    end
    local NO_TIMER = { kind = "busy", message = "no timer for the stream's poller (lua_max_pending_timers)" }
    local function stop() if pollers[key] == p then pollers[key] = nil end end
    local function tick(premature)
      if premature or p.users <= 0 then return stop() end
      local called, ok, value = pcall(fetch)
      if not called then ok, value = false, { kind = "gateway", message = tostring(ok) } end
      store(ok, value)
      if not timer_at(interval, tick) then stop(); store(false, NO_TIMER) end
    end
    if not timer_at(0, tick) then stop(); store(false, NO_TIMER) end
  end
  p.users = p.users + 1
  return p
end

function M.leave(p) p.users = p.users - 1 end

-- pollers_open() -> how many pollers this worker runs (for the specs)
function M.pollers_open()
  local n = 0
  for _ in pairs(pollers) do n = n + 1 end
  return n
end

-- done(): a stream's end, from the stream itself or the log phase (gateway.lua's done): its
-- places and its poller let go, once.
function M.done()
  local st = ngx.ctx.sandstack_stream
  if not st then return end
  ngx.ctx.sandstack_stream = nil
  limits.close_stream(st.dict, st.tenant, st.sid)
  if st.poller then M.leave(st.poller) end
end

-- run(G, h, o): one stream; the answer is sent. h = {fail =}. o:
--   tenant, sid, key      whose stream
--   kind, interval        the poller's name and period (seconds)
--   seconds               the stream's life
--   fetch(record)         the thread-pool call: ok, value
--   head()                sends the status and headers (once the stream is admitted)
--   each(ok, value)       a new poll's answer: writes events; false ends the stream
--   tick()                after each wait: flushes; false when the client is gone
--   gone()                the session left the table
function M.run(G, h, o)
  local c = G.conf
  local ok, which = limits.open_stream(G.dict, o.tenant, o.sid, c.max_streams_per_tenant, c.max_streams_per_session)
  if not ok then
    local option = "max_streams_per_" .. which
    ngx.header["Retry-After"] = "10"
    return h.fail(429, "limit", ("this %s has %d console and ask streams open (%s): close one, or wait for one to end")
      :format(which, c[option], option), { reason = "streams_" .. which })
  end
  local st = { dict = G.dict, tenant = o.tenant, sid = o.sid }
  ngx.ctx.sandstack_stream = st
  st.poller = M.join(o.kind .. ":" .. o.sid, o.interval, function()
    local e = S.get(G.dict, o.sid)
    if not e or e.state ~= "ready" then return nil end -- a paused or stopped stack is not asked
    return o.fetch(e.record)
  end, ngx.timer.at)
  o.head()
  local seen, deadline = 0, ngx.now() + o.seconds
  while ngx.now() < deadline do
    local e = S.get(G.dict, o.sid)
    if not e or e.key ~= o.key then o.gone(); break end
    local p = st.poller
    if p.seq > seen then
      seen = p.seq
      if o.each(p.ok, p.value) == false then break end
    end
    if not o.tick() then break end
    ngx.sleep(o.interval)
  end
  M.done()
end

return M
