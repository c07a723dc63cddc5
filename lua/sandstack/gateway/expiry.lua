-- sandstack.gateway.expiry: sessions do not live forever. A timer in one nginx worker scans the
-- session table every expiry_interval seconds and destroys (through the thread pool, like every
-- Engine call) each ready or paused session
--   - idle for idle_ttl: no proxied request has begun or ended for that long, and none is open
--     (an SSE stream, a long chunked answer or a WebSocket held open counts as activity for as
--     long as it is open, however long that is);
--   - older than max_ttl, open streams or not.
local S = require "sandstack.gateway.sessions"

local M = {}

-- why(entry, now, seen, open, conf) -> "idle" | "max_ttl" | nil
function M.why(entry, now, seen, open, conf)
  if entry.state ~= "ready" and entry.state ~= "paused" then return nil end
  if entry.created and now - entry.created >= conf.max_ttl then return "max_ttl" end
  if (open or 0) > 0 then return nil end
  if now - (seen or entry.created or now) >= conf.idle_ttl then return "idle" end
  return nil
end

-- scan(G): one pass. G: dict, conf, destroy(key, entry, reason).
function M.scan(G)
  local now = ngx.now()
  for _, key in ipairs(S.keys(G.dict)) do
    local entry = S.get(G.dict, key)
    if entry then
      local open = G.dict:get("open:" .. key)
      if (open or 0) > 0 then G.dict:set("seen:" .. key, now) end -- still streaming: active now
      local reason = M.why(entry, now, G.dict:get("seen:" .. key), open, G.conf)
      if reason then G.destroy(key, entry, reason) end
    end
  end
end

-- start(G): the timer; each pass runs to its end before the next can begin (a dict lock), so a
-- slow destroy never has two passes racing over the same sessions.
function M.start(G)
  local function tick(premature)
    if premature then return end
    if not G.dict:add("lock:expiry", true, 600) then return end
    local ok, err = pcall(M.scan, G)
    -- the stacks' own expiry (start's ttl, PATCH's ttl, idle_timeout), by the backend's reap
    if ok then ok, err = pcall(require("sandstack.gateway.lifecycle").scan, G) end
    -- the snapshots of the sessions gone, by the passes above or otherwise
    if ok then ok, err = pcall(require("sandstack.gateway.snapshots").sweep, G) end
    G.dict:delete("lock:expiry")
    if not ok then ngx.log(ngx.ERR, "sandstack gateway: expiry scan: ", tostring(err)) end
  end
  return ngx.timer.every(G.conf.expiry_interval, tick)
end

return M
