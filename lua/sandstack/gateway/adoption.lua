-- sandstack.gateway.adoption: an nginx restart loses nothing. The stacks are the truth: each
-- session's stack carries a marker (gateway/worker.lua) with its key, tenant, the digest of its
-- secret and its record. After a full stop/start the dict is empty; one worker lists this
-- node's stacks on the engine, re-reads their ports and puts them back, and removes the stacks
-- that were mid-start when nginx went away (no marker). After a reload (HUP) the dict survives
-- with its "adopted" mark and nothing is done. Until adoption is over, a request for a key the
-- dict does not know is answered 503 with Retry-After (gateway.lua), not 404.
local S = require "sandstack.gateway.sessions"
local limits = require "sandstack.gateway.limits"
local metrics = require "sandstack.gateway.metrics"

local M = {}

function M.done(dict)
  return dict:get("adopted") ~= nil
end

-- run(G) -> true | nil, err: one adoption pass (in a timer: it calls the thread pool).
function M.run(G)
  local keep = {}
  for _, key in ipairs(S.keys(G.dict)) do keep[key] = true end
  local c = G.conf
  local ok, res = G.run("adopt", { node = c.name, prefix = c.project_prefix, keep = keep,
    docker_host = c.stack.docker_host, timeout = c.stack.timeout })
  if not ok then return nil, res end
  for _, s in ipairs(res.sessions) do
    -- back into its tenant's own key space (sessions.lua): the marker names key and tenant
    local sid = type(s.key) == "string" and type(s.tenant) == "string" and S.sid(s.tenant, s.key)
    if sid and type(s.digest) == "string" and not S.get(G.dict, sid) then
      local entry = { tenant = s.tenant, key = s.key, digest = s.digest, created = s.created, record = s.record }
      local stored, err = S.ready(G.dict, sid, entry)
      if stored then
        -- counted like a new session, so limits hold across restarts (never refused: it exists)
        G.dict:incr("count:*", 1, 0)
        G.dict:incr("count:" .. tostring(s.tenant), 1, 0)
        G.dict:set("seen:" .. sid, ngx.now()) -- a restart is no reason to expire everyone at once
        metrics.inc(G.metrics, "sandstack_gateway_adopted_total")
      else
        ngx.log(ngx.ERR, "sandstack gateway: cannot adopt ", s.key, ": ", tostring(err))
      end
    end
  end
  for _, p in ipairs(res.rolled_back) do
    ngx.log(ngx.NOTICE, "sandstack gateway: removed ", p, " (it was mid-start when nginx stopped)")
    metrics.inc(G.metrics, "sandstack_gateway_destroyed_total", 'reason="rolled_back"')
  end
  for _, p in ipairs(res.failed) do
    ngx.log(ngx.ERR, "sandstack gateway: marked stack ", p, " could not be re-read; left in place")
  end
  return true
end

-- start(G): at init_worker, in worker 0 only; retried every 2 s until the engine answers.
function M.start(G)
  if M.done(G.dict) then return true end
  local function attempt(premature)
    if premature or M.done(G.dict) then return end
    local ok, err = M.run(G)
    if ok then
      G.dict:set("adopted", true)
      ngx.log(ngx.NOTICE, "sandstack gateway: adoption done, ", limits.count(G.dict), " sessions")
    else
      ngx.log(ngx.ERR, "sandstack gateway: adoption failed (retrying): ", tostring(err and err.message or err))
      ngx.timer.at(2, attempt)
    end
  end
  return ngx.timer.at(0, attempt)
end

return M
