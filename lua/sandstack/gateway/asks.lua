-- sandstack.gateway.asks: a session's egress asks through the gateway (docs/egress-ask.md).
--   GET  /sessions/<key>/egress/asks           the pending asks, a JSON list
--   GET  /sessions/<key>/egress/asks/stream    text/event-stream: one "ask" event per new ask
--   POST /sessions/<key>/egress/asks/<id>      {"decision": "allow"|"deny", "remember", "reason"}
-- Like the lifecycle routes, these are the gateway's when the request carries a tenant's token
-- (with the session's secret, in the tenant's own key space); without one the path is the
-- agent's, proxied as any other. The answer is recorded as by the tenant.
local core = require "sandstack.core"

local M = {}

local WORKER = "sandstack.gateway.asks_worker"
local STREAM_MAX = 3600 -- seconds one stream stays open; a client reconnects for more
local POLL = 0.5

-- The route of a proxied path: "list", "stream", or the ask id (a number); nil when not one.
function M.route(path)
  local rest = path:match("^/egress/asks(.*)$")
  if not rest then return nil end
  if rest == "" or rest == "/" then return "list" end
  if rest == "/stream" then return "stream" end
  local id = rest:match("^/(%d+)$")
  return id and tonumber(id) or nil
end

-- One ask as JSON: path is null for a tunnel (the proxy sees host and port only).
local function ask_json(a)
  local text = core.json_encode({ id = a.id, host = a.host, port = a.port, method = a.method, path = a.path,
    service = a.service, at = a.at })
  if a.path == nil then text = text:gsub("}$", ',"path":null}') end
  return text
end

-- A list as JSON, [] when empty (an empty Lua table would encode as {}).
local function list_json(asks)
  local parts = {}
  for i, a in ipairs(asks) do parts[i] = ask_json(a) end
  return "[" .. table.concat(parts, ",") .. "]"
end

local function list(G, h, entry)
  local ok, res = G.run_in(WORKER, "list", entry.record)
  if not ok then -- invalid: a stack without a proxy sandstack added has no asks to list
    local status = res.kind == "invalid" and 409 or h.failure_status(res)
    return nil, h.fail(status, res.kind or "gateway", res.message or "listing the asks failed", { reason = res.reason })
  end
  return res
end

-- The stream: every ask not sent before, as `event: ask` with its JSON, read from the session's
-- one poller (gateway/streams.lua: every POLL seconds, capped per tenant and session); a comment
-- line keeps idle proxies from closing it. Ends when the client goes, the session's asks cannot be
-- read (a full thread pool is waited out), the session is gone, or after STREAM_MAX seconds.
local function stream(G, h, entry)
  local sent, last_beat, wrote = {}, 0, false
  local function event(kind, doc)
    ngx.print("event: ", kind, "\ndata: ", core.json_encode(doc), "\n\n")
    ngx.flush(true)
  end
  require("sandstack.gateway.streams").run(G, h, { tenant = entry.tenant, sid = G.sid(entry.tenant, entry.key),
    key = entry.key, kind = "asks", interval = POLL, seconds = STREAM_MAX,
    fetch = function(record) return G.run_in(WORKER, "list", record) end,
    head = function()
      ngx.status = 200
      ngx.header["Content-Type"] = "text/event-stream"
      ngx.header["Cache-Control"] = "no-store"
      ngx.header["X-Accel-Buffering"] = "no"
    end,
    each = function(ok, res)
      if not ok then
        if res.kind == "busy" then return true end -- the pool was full: the next poll
        event("error", { kind = res.kind, message = res.message })
        return false
      end
      for _, a in ipairs(res) do
        if not sent[a.id] then
          sent[a.id] = true
          ngx.print("event: ask\nid: ", a.id, "\ndata: ", ask_json(a), "\n\n")
          wrote = true
        end
      end
    end,
    tick = function()
      if not wrote and ngx.now() - last_beat > 15 then ngx.print(": waiting\n\n"); wrote = true end
      if not wrote then return true end
      wrote, last_beat = false, ngx.now()
      return ngx.flush(true) -- nil: the client went away
    end,
    gone = function() event("error", { kind = "not_found", message = "the session is gone" }) end })
  return ngx.exit(200)
end

local function answer(G, h, entry, tenant, id)
  ngx.req.read_body()
  local body = core.json_decode(ngx.req.get_body_data() or "")
  if type(body) ~= "table" or (body.decision ~= "allow" and body.decision ~= "deny")
    or (body.remember ~= nil and type(body.remember) ~= "string") or (body.reason ~= nil and type(body.reason) ~= "string") then
    return h.fail(400, "invalid", 'POST takes {"decision": "allow"|"deny", "remember": "once"|"session", "reason": text}')
  end
  local opts = { remember = body.remember, reason = body.reason, by = tenant.name }
  local ok, res = G.run_in(WORKER, "answer", entry.record, id, body.decision, opts)
  if not ok then
    local status = res.kind == "not_found" and 404 or res.kind == "invalid" and 400 or h.failure_status(res)
    return h.fail(status, res.kind or "gateway", res.message or "answering failed", { reason = res.reason })
  end
  return h.reply(200, { id = res.id, decision = res.decision, remembered = res.remembered, by = tenant.name })
end

-- handle(G, h, tenant, entry, route): h = { reply =, fail =, failure_status = }; the answer is sent.
function M.handle(G, h, tenant, entry, route)
  local method = ngx.req.get_method()
  if entry.state ~= "ready" then
    return h.fail(409, "conflict", "session is " .. tostring(entry.state), { key = entry.key })
  end
  if route == "list" or route == "stream" then
    if method ~= "GET" then ngx.header["Allow"] = "GET"; return h.fail(405, "gateway", "method not allowed") end
    if route == "stream" then return stream(G, h, entry) end
    local asks, sent = list(G, h, entry)
    if not asks then return sent end
    ngx.status = 200
    ngx.header["Content-Type"] = "application/json"
    ngx.say(list_json(asks))
    return ngx.exit(200)
  end
  if method ~= "POST" then ngx.header["Allow"] = "POST"; return h.fail(405, "gateway", "method not allowed") end
  return answer(G, h, entry, tenant, route)
end

return M
