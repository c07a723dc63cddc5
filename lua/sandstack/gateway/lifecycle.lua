-- sandstack.gateway.lifecycle: a session over time through the gateway (docs/lifecycle.md).
--   POST  /sessions/<key>/pause|resume|hibernate|wake|snapshot   tenant token and session secret
--   POST  /sessions/<key>/fork?key=NEW   a new session of the same tenant (its own secret), as
--         POST /sessions/NEW answers, with the snapshot it was made from
--   PATCH /sessions/<key>   body {"ttl": seconds}                 the same
-- A POST to /sessions/<key>/<verb> is the gateway's when it carries a tenant's token (which never
-- goes on to the agent); without one it is the agent's own route, proxied as any other. The
-- session is looked up in the tenant's own key space, as GET and DELETE do. A hibernated
-- session is kept in the table with state "hibernated" (its proxied routes answer 503 until a
-- wake), a paused one with state "paused" (503 until a resume). The expiry timer's pass (scan)
-- also runs the backend's reap{expired = true} over this gateway's stacks, and drops or marks
-- the sessions it destroyed or hibernated.
local S = require "sandstack.gateway.sessions"
local limits = require "sandstack.gateway.limits"

local M = {}

M.VERBS = { pause = true, resume = true, hibernate = true, wake = true, snapshot = true, fork = true }
local WORKER = "sandstack.gateway.lifecycle_worker"

-- The verb of a proxied path, or nil.
function M.verb(path) local v = path:match("^/([a-z]+)/?$"); return v and M.VERBS[v] and v or nil end

-- The argument of a verb from the request's query: hibernate's ?timeout=S, snapshot's
-- ?name=N&keep=1 (kept: it outlives the session, gateway/snapshots.lua), fork's ?key=NEW.
function M.arg(verb)
  if verb == "hibernate" then return tonumber(ngx.var.arg_timeout) end
  if verb == "snapshot" then
    local keep = ngx.var.arg_keep
    return { name = ngx.var.arg_name, keep = keep == "1" or keep == "true" }
  end
  if verb == "fork" then return ngx.var.arg_key end
  return nil
end

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
  local ok, res
  if verb == "snapshot" then -- within the tenant's quota, owned by the session
    ok, res = require("sandstack.gateway.snapshots").call(G, entry, arg)
  else
    ok, res = G.run_in(WORKER, "call", entry.record, verb, arg)
  end
  if not ok then
    return h.fail(h.failure_status(res), res.kind or "gateway", res.message or (verb .. " failed"), { reason = res.reason })
  end
  entry.record = res.record
  local state = LEAVES[verb] or entry.state
  if state == "ready" then S.ready(G.dict, sid, entry) else S.keep(G.dict, sid, entry, state) end
  return h.reply(200, { key = entry.key, state = entry.state, snapshot = res.snapshot, expires = res.expires })
end

-- The expiry pass, on either backend: its reap{expired = true} over this gateway's prefix
-- (lifecycle_worker.reap). On docker, what it destroyed leaves the table and what it hibernated
-- is marked so; on a swarm the manager is the table (its lookups then say not_found or
-- hibernated) and the backend's expired(G, by) drops what this gateway cached of them.
function M.scan(G)
  local c = G.conf
  local ok, done = G.run_in(WORKER, "reap", c.project_prefix, c.stack and c.stack.docker_host, c.backend,
    c.stack and c.stack.timeout)
  if not ok then
    -- every thread-pool VM busy serving requests: the next pass does it, so not an error
    ngx.log(done and done.kind == "busy" and ngx.WARN or ngx.ERR, "sandstack gateway: expiry reap: ",
      tostring(done and done.message))
    return
  end
  if #done == 0 then return end
  local by = {}
  for _, d in ipairs(done) do
    by[d.project] = d
    if d.action == "destroy" then -- "idle" is the gateway's own idle_ttl's: the stack's is idle_timeout
      require("sandstack.gateway.metrics").inc(G.metrics, "sandstack_gateway_destroyed_total",
        'reason="' .. (d.reason == "idle" and "idle_timeout" or d.reason) .. '"')
    end
    ngx.log(ngx.NOTICE, "sandstack gateway: stack ", d.project, " ", d.action == "destroy" and "destroyed" or "hibernated",
      " (", d.reason, ")")
  end
  if G.backend.expired then G.backend.expired(G, by) end
  for _, sid in ipairs(S.keys(G.dict)) do
    local entry = S.get(G.dict, sid)
    local d = entry and entry.record and by[entry.record.project]
    if d and d.action == "destroy" then
      S.remove(G.dict, sid, entry)
      limits.release(G.dict, entry.tenant)
    elseif d then
      S.keep(G.dict, sid, entry, "hibernated")
    end
  end
end

return M
