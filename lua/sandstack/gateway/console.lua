-- sandstack.gateway.console: the operator's console (docs/gateway.md, "The console"). nginx
-- serves its static files (web/console) at /console/; these are its JSON routes under
-- /console/api/, in the event loop like every gateway handler:
--   GET    sessions                       the tenant's own sessions (key, state, created, expires)
--   POST   sessions                       a new session of the configured stack (no secret)
--   GET    sessions/<key>/stats           CPU, memory and the egress policy (h:stats, h:egress)
--   POST   sessions/<key>/<verb>          pause resume hibernate wake snapshot fork
--   DELETE sessions/<key>
--   POST   sessions/<key>/ticket          a single-use ticket for the terminal's WebSocket
--   GET    sessions/<key>/terminal?ticket=T   the WebSocket to a shell on a terminal (h:spawn)
--   GET    sessions/<key>/egress/log      the proxy's audit lines, as server-sent events
--   GET    sessions/<key>/egress/asks[/stream], POST .../asks/<id>   pending asks (gateway/asks.lua)
--   GET    pool                           the warm pool's idle, claimed and starting counts
-- Every route but the terminal takes the tenant's token in Authorization (never a cookie, so a
-- page of another origin cannot act with it) and sees only that tenant's sessions. A browser
-- cannot set a header on a WebSocket, so the terminal takes a ticket instead: 128 random bits,
-- minted by an authenticated POST for one session, good once and for 30 seconds. Nothing here
-- sends a session's secret, its record (the operator's stack configuration) or its digest.
local core = require "sandstack.core"
local S = require "sandstack.gateway.sessions"
local ws = require "sandstack.gateway.console_ws"

local M = {}

local WORKER = "sandstack.gateway.console_worker"
M.TICKET_TTL = 30
M.STREAM_SECONDS = 600 -- an audit stream ends after this; the page opens it again

-- The headers of every console answer: no inline script, no framing, no sniffing, no referrer.
-- style-src allows inline styles: xterm.js writes its theme into a <style> element.
M.CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
  .. "font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
local HEADERS = {
  ["Content-Security-Policy"] = M.CSP, ["X-Content-Type-Options"] = "nosniff", ["X-Frame-Options"] = "DENY",
  ["Referrer-Policy"] = "no-referrer", ["Cross-Origin-Opener-Policy"] = "same-origin",
  ["Cross-Origin-Resource-Policy"] = "same-origin",
}

-- The rock's version (rockspec/): a LuaRocks tree keeps the console's files in the rock's directory.
local ROCK_VERSION = "scm-1"

-- root(c) -> the console's directory: console_root, else web/console of the source tree the
-- modules are in, else share/sandstack/console of the prefix they were installed under, else
-- the rock's directory when that prefix is a LuaRocks tree (`luarocks make`, bootstrap.sh).
function M.root(c)
  if c.console_root then return c.console_root end
  local here = package.searchpath("sandstack.gateway.console", package.path)
  local dir = here and here:match("^(.*)/sandstack/gateway/console%.lua$")
  if dir then
    dir = dir:match("^/") and dir or ((os.getenv("PWD") or ".") .. "/" .. dir:gsub("^%./", ""))
    local cands = { dir .. "/../web/console", dir .. "/../../sandstack/console" }
    local tree, abi = dir:match("^(.*)/share/lua/(5%.%d)$")
    if tree then
      cands[3] = ("%s/lib/luarocks/rocks-%s/sandstack/%s/share/sandstack/console"):format(tree, abi, ROCK_VERSION)
    end
    for _, cand in ipairs(cands) do
      local f = io.open(cand .. "/index.html", "rb")
      if f then f:close(); return cand end
    end
  end
  return nil
end

-- nginx(c) -> the console's locations for nginx.conf ("" when it is off or has no files); only
-- a backend that serves the console asks (gateway/nginx_conf.lua).
function M.nginx(c)
  if c.console == false then return "" end
  local root = M.root(c)
  if not root then return "" end
  local add = {}
  for k, v in pairs(HEADERS) do add[#add + 1] = ('      add_header %s "%s" always;'):format(k, v) end
  table.sort(add)
  local headers = table.concat(add, "\n")
  return ([[
    location = /console { return 301 /console/; }
    location /console/api/ {
      default_type application/json;
      lua_check_client_abort on; # a stream the page closed ends at once, not at its next write
%s
      add_header Cache-Control "no-store" always;
      content_by_lua_block { require("sandstack.gateway").console() }
      log_by_lua_block { require("sandstack.gateway").done() } # a stream's places, however it ended
    }
    location /console/ {
      alias %s/;
      index index.html;
      types { text/html html; text/javascript js; text/css css; image/png png; }
%s
    }
]]):format(headers, root, headers)
end

local function now() return ngx.now() end

-- What the browser sees of a session: never the record, the digest or the secret. egress: the
-- session's stack has the proxy sandstack adds, so its policy, audit lines and asks can be shown
-- (without it the page offers none of them).
local function view(G, sid, e)
  local seen = G.dict:get("seen:" .. sid) or e.created
  local c = G.conf
  local expires = math.min((e.created or 0) + c.max_ttl, seen + c.idle_ttl)
  local px = e.record and e.record.proxy
  return { key = e.key, state = e.state, created = e.created, expires = math.floor(expires),
    forked = e.record and e.record.fork_snapshot and true or nil, egress = type(px) == "table" and px.added == true }
end

-- A failure's message as the browser gets it: the tenant knows its session by its key, never by
-- the project the engine knows its stack by (<prefix><key>.<tag>, or a pool's <prefix>pool-<hex>).
-- The session's own project becomes its key; any other project of this gateway, "a stack".
function M.scrub(conf, message, e)
  local text = tostring(message)
  local project = e and e.record and e.record.project
  local function literal(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end
  if type(project) == "string" and project ~= "" then text = text:gsub(literal(project), (e.key:gsub("%%", "%%%%"))) end
  return (text:gsub(literal(conf.project_prefix) .. "[%w_.%-]*", "a stack"))
end

local function own(G, tenant, key)
  if not G.valid_key(key) then return nil end
  local sid = S.sid(tenant.name, key)
  local e = S.get(G.dict, sid)
  if not e or e.tenant ~= tenant.name then return nil end
  return sid, e
end

local function list(G, tenant)
  local out = {}
  for _, sid in ipairs(S.keys(G.dict)) do
    local e = S.get(G.dict, sid)
    if e and e.tenant == tenant.name then out[#out + 1] = view(G, sid, e) end
  end
  table.sort(out, function(a, b) return (a.created or 0) < (b.created or 0) end)
  return G.reply(200, { sessions = out, now = math.floor(now()) })
end

local function pool(G)
  local p = G.conf.pool
  if not p then return G.reply(200, { enabled = false }) end
  local m = ngx.shared.sandstack_metrics
  return G.reply(200, { enabled = true, size = p.size, max = p.max, idle = m:get("gauge:pool_ready") or 0,
    claimed = m:get("gauge:pool_in_use") or 0, starting = m:get("gauge:pool_starting") or 0 })
end

local function stats(G, e, fail)
  if e.state ~= "ready" then return G.reply(200, { key = e.key, state = e.state }) end
  local ok, res = G.run_in(WORKER, "stats", e.record)
  if not ok then return fail(G.failure_status(res), res.kind or "gateway", res.message or "stats failed") end
  res.key = e.key
  return G.reply(200, res)
end

-- A ticket: "t:<hex>" holds the sid (value) and a use count (incr), both for TICKET_TTL.
local function ticket(G, sid)
  local t = core.random_hex(16)
  local ok, err = G.dict:safe_add("t:" .. t, sid, M.TICKET_TTL)
  if ok then ok, err = G.dict:safe_add("tu:" .. t, 0, M.TICKET_TTL) end
  if not ok then return G.fail(503, "gateway", "cannot keep a ticket: " .. tostring(err)) end
  return G.reply(201, { ticket = t, expires_in = M.TICKET_TTL })
end

-- take(G, t) -> sid | nil: the ticket's session, once; incr is atomic across workers.
local function take(G, t)
  if type(t) ~= "string" or not t:match("^%x+$") or #t ~= 32 then return nil end
  local sid = G.dict:get("t:" .. t)
  local uses = sid and G.dict:incr("tu:" .. t, 1)
  G.dict:delete("t:" .. t)
  if uses ~= 1 then return nil end
  return sid
end

-- The same origin as the page, when the browser says where it comes from.
local function same_origin()
  local origin = ngx.var.http_origin
  if not origin then return true end
  local host = origin:match("^https?://([^/]+)$")
  return host ~= nil and host == ngx.var.http_host
end

-- GET .../terminal: the WebSocket. Binary frames are the terminal's bytes both ways; a text
-- frame from the page is JSON {type = "resize", cols =, rows =}.
local function terminal(G, key)
  local sid = take(G, ngx.var.arg_ticket)
  local e = sid and S.get(G.dict, sid)
  if not e or e.key ~= key then return G.fail(403, "forbidden", "a fresh ticket is needed: POST .../ticket") end
  if not same_origin() then return G.fail(403, "forbidden", "the WebSocket's Origin is not this gateway") end
  if e.state ~= "ready" then return G.fail(409, "conflict", "session is " .. tostring(e.state)) end
  local accept = ws.accept_key(ngx.var.http_sec_websocket_key)
  if not accept or (ngx.var.http_upgrade or ""):lower() ~= "websocket" then
    return G.fail(400, "invalid", "a WebSocket upgrade is needed")
  end
  local cols, rows = tonumber(ngx.var.arg_cols) or 80, tonumber(ngx.var.arg_rows) or 24
  local p, err = require("sandstack.docker.cosocket").spawn(e.record, { "/bin/sh" },
    { tty = true, cols = math.max(1, math.min(500, math.floor(cols))), rows = math.max(1, math.min(200, math.floor(rows))),
      env = { "TERM=xterm-256color", "PS1=$ " } })
  if not p then return G.fail(502, err.kind or "engine", err.message or "spawn failed") end
  local sock, serr = ngx.req.socket(true)
  if not sock then p:close(); return ngx.log(ngx.ERR, "console terminal: ", serr) end
  local ok = sock:send("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    .. "Sec-WebSocket-Accept: " .. accept .. "\r\n\r\n")
  if not ok then p:close(); return end
  S.opened(G.dict, sid) -- an open terminal keeps the session from idling out
  local pump = ngx.thread.spawn(function()
    while true do
      local data, rerr = p:read(3600)
      if data then
        if not sock:send(ws.encode(ws.BINARY, data)) then return end
      elseif rerr and rerr.reason ~= "timeout" then
        sock:send(ws.encode(ws.CLOSE, ws.close_payload(1000, "the shell ended")))
        return
      end
    end
  end)
  sock:settimeout(3600 * 1000)
  local reader = ws.reader(function(n) return sock:receive(n) end)
  while true do
    local op, payload = reader()
    if not op then break end -- closed, or a frame the codec refused (payload says why)
    if op == ws.BINARY then
      if not p:write(payload) then break end
    elseif op == ws.TEXT then
      local msg = core.json_decode(payload)
      if type(msg) == "table" and msg.type == "resize" and tonumber(msg.cols) and tonumber(msg.rows) then
        p:resize(math.max(1, math.min(500, math.floor(msg.cols))), math.max(1, math.min(200, math.floor(msg.rows))))
      elseif type(msg) == "table" and msg.type == "input" and type(msg.data) == "string" then
        if not p:write(msg.data) then break end
      end
    elseif op == ws.CLOSE then
      break
    end
  end
  ngx.thread.kill(pump)
  p:kill("HUP")
  p:close()
  S.closed(G.dict, sid)
  sock:send(ws.encode(ws.CLOSE, ws.close_payload(1000, "")))
  return ngx.exit(ngx.HTTP_OK)
end

-- An audit line as the browser gets it: its session is the tenant's key, not the name the
-- proxy was started under (the gateway's internal session id, or a pool's placeholder).
function M.audit_line(line, key)
  local v = core.json_decode(line)
  if type(v) ~= "table" then return line end
  v.session = key
  return core.json_encode(v)
end

-- GET .../egress/log: the audit lines of the session's proxy, as server-sent events
-- ("event: audit", the line as data), read every second from the proxy's log by the session's
-- one poller (gateway/streams.lua: capped per tenant and session).
local function audit_stream(G, tenant, sid, key)
  local sent = 0
  return require("sandstack.gateway.streams").run(G, G, { tenant = tenant.name, sid = sid, key = key,
    kind = "audit", interval = 1, seconds = M.STREAM_SECONDS,
    fetch = function(record) return G.run_in(WORKER, "audit", record, 0) end,
    head = function()
      ngx.header["Content-Type"] = "text/event-stream"
      ngx.header["X-Accel-Buffering"] = "no"
      ngx.print(": audit lines of ", key, "\n\n")
    end,
    each = function(ok, res)
      if not ok then return true end -- a failed read: the next second's
      for i = sent + 1, #res.lines do ngx.print("event: audit\ndata: ", M.audit_line(res.lines[i], key), "\n\n") end
      sent = math.max(sent, #res.lines)
    end,
    tick = function()
      ngx.print(": tick\n\n")
      return ngx.flush(true)
    end,
    gone = function() ngx.print("event: gone\ndata: {}\n\n"); ngx.flush(true) end })
end

-- api(G): content of /console/api/...
function M.api(G)
  local path = ngx.var.uri:sub(#"/console/api/" + 1)
  local method = ngx.req.get_method()
  local key, rest = path:match("^sessions/([^/]+)/?(.*)$")
  if rest == "terminal" and method == "GET" then return terminal(G, key) end
  local tenant = G.tenant_of_request()
  if not tenant then
    ngx.header["WWW-Authenticate"] = 'Bearer realm="sandstack"'
    return G.fail(401, "unauthorized", "a tenant token is needed: Authorization: Bearer <token>")
  end
  if path == "pool" and method == "GET" then return pool(G) end
  if path == "sessions" then
    if method == "GET" then return list(G, tenant) end
    if method == "POST" then return G.create(tenant, nil, nil, true) end
    return G.fail(405, "gateway", "method not allowed")
  end
  if not key then return G.fail(404, "not_found", "no such console route") end
  local sid, e = own(G, tenant, key)
  if not sid then return G.fail(404, "not_found", "no such session", { key = key }) end
  -- every failure about this session is told by its key (M.scrub)
  local function fail(status, kind, message, extra) return G.fail(status, kind, M.scrub(G.conf, message, e), extra) end
  local h = { reply = G.reply, fail = fail, failure_status = G.failure_status }
  if rest == "" and method == "DELETE" then
    if e.state ~= "ready" and e.state ~= "hibernated" and e.state ~= "paused" then
      return fail(409, "conflict", "session is " .. tostring(e.state), { key = key })
    end
    local ok, err = G.destroy(sid, e, "deleted")
    if not ok then return fail(G.failure_status(err), err.kind or "gateway", err.message or "destroy failed") end
    return G.reply(200, { key = key, destroyed = true })
  end
  if rest == "stats" and method == "GET" then return stats(G, e, fail) end
  if rest == "ticket" and method == "POST" then
    if e.state ~= "ready" then
      return fail(409, "conflict", "the session is not running: resume or wake it first")
    end
    return ticket(G, sid)
  end
  if rest == "egress/log" and method == "GET" then return audit_stream(G, tenant, sid, key) end
  local asks = require("sandstack.gateway.asks")
  local route = asks.route("/" .. rest)
  if route then -- the ask routes of the API (gateway/asks.lua), by the tenant's token alone
    return asks.handle(G, h, tenant, e, route)
  end
  local verb = rest:match("^([a-z]+)$")
  if method == "POST" and verb and require("sandstack.gateway.lifecycle").VERBS[verb] then
    if verb == "fork" then
      if e.state ~= "ready" then return fail(409, "conflict", "session is " .. tostring(e.state)) end
      return G.create(tenant, nil, e.record, true)
    end
    local lifecycle = require("sandstack.gateway.lifecycle")
    return lifecycle.handle(G, h, sid, e, verb, lifecycle.arg(verb))
  end
  return G.fail(404, "not_found", "no such console route")
end

return M
