-- The conforming egress proxy's logic (SECURITY.md "A conforming proxy"), run by nginx's Lua
-- module. init() reads the environment once and refuses to start on anything missing;
-- access() runs for every request: token check, policy check, credential swap, routing.
--
--   SANDSTACK_SESSION_TOKEN  the per-session token the sandbox holds as its API key
--   ANTHROPIC_API_KEY        the real provider key; only this process and the upstream see it
--   SANDSTACK_UPSTREAM       the provider origin, scheme://host[:port]
--                            (default https://api.anthropic.com)
--   SANDSTACK_EGRESS_POLICY  the policy rendered by sandstack.policy (default: the upstream
--                            host, every method and path)
--
-- Requests in origin form ("POST /v1/messages") go to the upstream. Requests in absolute form
-- ("GET http://host/x", what HTTP_PROXY clients send) go to that host when the policy admits
-- it; the real key is added only when that host is the upstream itself.
local core = require "sandstack.core"

local M = {}
local cfg -- set once in init (the master process), read-only afterwards

local function die(msg)
  error("sandstack egress proxy: " .. msg, 0)
end

local function parse_origin(url)
  local scheme, host, port = url:match("^(https?)://([%w%.%-]+):?(%d*)/?$")
  if not scheme then return nil end
  port = tonumber(port) or (scheme == "https" and 443 or 80)
  return scheme, host:lower(), port
end

function M.init()
  local token = os.getenv("SANDSTACK_SESSION_TOKEN")
  local key = os.getenv("ANTHROPIC_API_KEY")
  if not token or #token < 16 then die("SANDSTACK_SESSION_TOKEN is missing or shorter than 16 characters") end
  if not key or key == "" then die("ANTHROPIC_API_KEY is missing") end
  if key == token then die("the session token must not be the real key") end
  local upstream = os.getenv("SANDSTACK_UPSTREAM")
  if not upstream or upstream == "" then upstream = "https://api.anthropic.com" end
  local scheme, host, port = parse_origin(upstream)
  if not scheme then die("SANDSTACK_UPSTREAM must be http(s)://host[:port]") end
  local json, policy, err = os.getenv("SANDSTACK_EGRESS_POLICY")
  if json and json ~= "" then
    policy, err = core.policy_load(json)
  else
    policy, err = core.policy_compile { allow = { host } }
  end
  if not policy then die("the egress policy is refused: " .. tostring(err)) end
  cfg = { token = token, key = key, scheme = scheme, host = host, port = port, policy = policy }
end

local function respond(status, kind, message, extra)
  local body = { type = "error", error = { type = kind, message = "sandstack egress proxy: " .. message } }
  for k, v in pairs(extra or {}) do body[k] = v end
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  ngx.header["Cache-Control"] = "no-store"
  ngx.print(core.json_encode(body))
  return ngx.exit(status)
end

-- Which credential header carried the token: "x-api-key", "authorization", "proxy" or nil.
local function token_carrier(h)
  local bearer = "Bearer " .. cfg.token
  if h["x-api-key"] == cfg.token then return "x-api-key" end
  if h["authorization"] == bearer then return "authorization" end
  if h["proxy-authorization"] == bearer then return "proxy" end
  return nil
end

-- scheme, host, port, path of the destination, or nil and a message.
local function destination()
  local target = ngx.var.request:match("^%S+%s+(%S+)")
  if target and target:sub(1, 1) == "/" then
    return cfg.scheme, cfg.host, cfg.port, ngx.var.request_uri
  end
  local scheme, authority, path = (target or ""):match("^(%a+)://([^/?#]*)(.*)$")
  if not scheme or scheme:lower() ~= "http" then
    return nil, "only origin-form requests and http:// absolute URIs are served (no CONNECT tunnels)"
  end
  local host, port = authority:match("^([%w%.%-]+):?(%d*)$")
  if not host then return nil, "the request names an authority this proxy does not read" end
  if path == "" then path = "/" end
  return "http", host:lower(), tonumber(port) or 80, path
end

function M.access()
  local h, err = ngx.req.get_headers(100)
  if err == "truncated" then return respond(431, "invalid_request_error", "too many request headers") end
  local carrier = token_carrier(h)
  if not carrier then
    return respond(401, "authentication_error", "the request does not carry this session's token")
  end
  local scheme, host, port, path = destination()
  if not scheme then return respond(400, "invalid_request_error", host) end
  local method = ngx.req.get_method()
  local verdict = cfg.policy:explain(host, method, path, port)
  if not verdict.admitted then
    local shown = path:match("^[^?]*")
    return respond(403, "permission_error",
      ("%s %s on %s:%d is outside the egress policy (%s%s)"):format(method, shown, host, port, verdict.reason,
        verdict.rule and (", rule " .. verdict.rule) or ""),
      { policy = { decision = "deny", reason = verdict.reason, rule = verdict.rule, host = host, port = port,
                   method = method, path = shown } })
  end
  -- Never forward the token: drop every header that carries it, wherever the client put it.
  for name, value in pairs(h) do
    if type(value) == "table" then value = table.concat(value, "\n") end
    if value:find(cfg.token, 1, true) then ngx.req.clear_header(name) end
  end
  ngx.req.clear_header("proxy-authorization")
  ngx.req.clear_header("proxy-connection")
  local to_upstream = host == cfg.host and port == cfg.port and scheme == cfg.scheme
  if to_upstream then
    if carrier == "authorization" then
      ngx.req.set_header("authorization", "Bearer " .. cfg.key)
    else
      ngx.req.clear_header("authorization")
      ngx.req.set_header("x-api-key", cfg.key)
    end
  end
  ngx.var.ss_target = scheme .. "://" .. host .. ":" .. port
  local default_port = (scheme == "https" and 443) or 80
  ngx.var.ss_host = port == default_port and host or (host .. ":" .. port)
  ngx.var.ss_sni = host
end

return M
