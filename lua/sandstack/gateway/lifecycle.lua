-- sandstack.gateway.lifecycle: a session over time through the gateway (docs/lifecycle.md).
--   POST  /sessions/<key>/pause|resume|hibernate|wake|snapshot   tenant token and session secret
--   POST  /sessions/<key>/fork?key=NEW   a new session of the same tenant (its own secret), as
--         POST /sessions/NEW answers, with the snapshot it was made from
--   PATCH /sessions/<key>   body {"ttl": seconds}                 the same
-- A POST to /sessions/<key>/<verb> is the gateway's when it carries a tenant's token (which never
-- goes on to the agent); without one it is the agent's own route, proxied as any other. The
-- session is looked up in the tenant's own key space, as GET and DELETE do. A hibernated
-- session is kept in the table with state "hibernated" (its proxied routes answer 503 until a
-- wake), a paused one with state "paused" (503 until a resume). The expiry timer's pass (scan) also runs sandstack.docker.reap{expired = true} over
-- this gateway's stacks, and drops or marks the sessions it destroyed or hibernated.
local S = require "sandstack.gateway.sessions"
local limits = require "sandstack.gateway.limits"

local M = {}

M.VERBS = { pause = true, resume = true, hibernate = true, wake = true, snapshot = true, fork = true }
local WORKER = "sandstack.gateway.lifecycle_worker"

-- The verb of a proxied path, or nil.
function M.verb(path) local v = path:match("^/([a-z]+)/?$"); return v and M.VERBS[v] and v or nil end

-- The table's states each verb accepts (a paused session is "paused" in the table, so GET, the
-- console and the proxied routes see it), and the state a success leaves.
local ACCEPTS = { wake = { hibernated = true }, resume = { paused = true, ready = true },
  set_timeout = { ready = true, paused = true, hibernated = true } }
local RUNNING = { ready = true, paused = true }
local LEAVES = { pause = "paused", resume = "ready", hibernate = "hibernated", wake = "ready" }

-- handle(G, h, sid, entry, verb, arg): h = {reply =, fail =, failure_status =}; the answer is sent.
function M.handle(G, h, sid, entry, verb, arg)
  local accepts = ACCEPTS[verb] or RUNNING
  if not accepts[entry.state] then
    local want = verb == "wake" and "hibernated" or verb == "resume" and "paused" or "running"
    return h.fail(409, "conflict", "session is " .. tostring(entry.state) .. ": " .. verb .. " needs it " .. want,
      { key = entry.key })
  end
  local ok, res = G.run_in(WORKER, "call", entry.record, verb, arg)
  if not ok then
    return h.fail(h.failure_status(res), res.kind or "gateway", res.message or (verb .. " failed"), { reason = res.reason })
  end
  entry.record = res.record
  local state = LEAVES[verb] or entry.state
  if state == "ready" then S.ready(G.dict, sid, entry) else S.keep(G.dict, sid, entry, state) end
  return h.reply(200, { key = entry.key, state = entry.state, snapshot = res.snapshot, expires = res.expires })
end

-- The expiry pass: what sandstack.docker.reap{expired = true} destroyed leaves the table, what
-- it hibernated is marked so.
function M.scan(G)
  local ok, done = G.run_in(WORKER, "reap", G.conf.project_prefix, G.conf.stack and G.conf.stack.docker_host)
  if not ok then
    ngx.log(ngx.ERR, "sandstack gateway: expiry reap: ", tostring(done and done.message))
    return
  end
  if #done == 0 then return end
  local by = {}
  for _, d in ipairs(done) do by[d.project] = d end
  for _, sid in ipairs(S.keys(G.dict)) do
    local entry = S.get(G.dict, sid)
    local d = entry and entry.record and by[entry.record.project]
    if d and d.action == "destroy" then
      S.remove(G.dict, sid, entry)
      limits.release(G.dict, entry.tenant)
      ngx.log(ngx.NOTICE, "sandstack gateway: session ", sid, " destroyed (", d.reason, ")")
    elseif d then
      S.keep(G.dict, sid, entry, "hibernated")
      ngx.log(ngx.NOTICE, "sandstack gateway: session ", sid, " hibernated (", d.reason, ")")
    end
  end
end

return M
