-- sandstack.gateway.openapi: the gateway's API as an OpenAPI 3.1 document, served at
-- GET /openapi.json, so that an agent host in Python or TypeScript generates its client. The
-- routes are this file's table (ROUTES), one entry per path and method; spec/gateway_openapi_spec
-- holds it to the locations gateway/nginx_conf.lua renders and to the handlers' own routes (the
-- lifecycle verbs, the egress asks), and sends every documented request to a live gateway.
local core = require "sandstack.core"

local M = {}

local JSON = "application/json"

local function obj(props, required)
  return { type = "object", properties = props, required = required }
end
local str, int, num, bool = { type = "string" }, { type = "integer" }, { type = "number" }, { type = "boolean" }

local SCHEMAS = {
  Error = obj({ error = obj({ kind = str, message = str, reason = str, key = str }, { "kind", "message" }) }, { "error" }),
  Created = obj({ key = str, secret = { type = "string", description = "the session's secret, shown once" },
    endpoint_path = str, snapshot = { type = "object" }, node = str }, { "key", "endpoint_path" }),
  Session = obj({ key = str, state = str, tenant = str, created = int, endpoint_path = str, node = str },
    { "key", "state" }),
  Destroyed = obj({ key = str, destroyed = bool }, { "key", "destroyed" }),
  Changed = obj({ key = str, state = str, snapshot = { type = "object" }, expires = { type = "object" } }, { "key" }),
  Ask = obj({ id = int, host = str, port = int, method = str, path = { type = { "string", "null" } }, service = str,
    at = num }, { "id", "host", "port" }),
  Answer = obj({ decision = { type = "string", enum = { "allow", "deny" } },
    remember = { type = "string", enum = { "once", "session" } }, reason = str }, { "decision" }),
  Answered = obj({ id = int, decision = str, remembered = str, by = str }, { "id", "decision" }),
  Snapshots = obj({ snapshots = { type = "array", items = { type = "object" } }, used = { type = "object" },
    quota = { type = "object" } }, { "snapshots" }),
  Removed = obj({ id = str, removed = bool }, { "id", "removed" }),
  Health = obj({ sandstack = str, engine_api = str, node = str }),
}

local function ref(name) return { ["$ref"] = "#/components/schemas/" .. name } end

-- One answer: a status and its schema's name (nil: no body described; "text", "events": text).
local function answer(description, schema)
  local a = { description = description }
  if schema == "text" then a.content = { ["text/plain"] = { schema = str } }
  elseif schema == "events" then a.content = { ["text/event-stream"] = { schema = str } }
  elseif schema then a.content = { [JSON] = { schema = ref(schema) } } end
  return a
end

local ERR = {
  ["400"] = answer("the request is malformed", "Error"),
  ["401"] = answer("no or wrong tenant token or session secret", "Error"),
  ["404"] = answer("no such session (or route) in the tenant's key space", "Error"),
  ["409"] = answer("the session's state does not allow it", "Error"),
  ["429"] = answer("a cap of sessions, snapshots or streams (Retry-After)", "Error"),
  ["502"] = answer("the backend failed", "Error"),
  ["503"] = answer("starting, busy or adopting (Retry-After)", "Error"),
  ["504"] = answer("the backend timed out", "Error"),
}

local TENANT = { { tenant = {} } }
local BOTH = { { tenant = {}, session_secret = {} } }
local SECRET = { { session_secret = {} } }

local function path_param(name, description)
  return { name = name, ["in"] = "path", required = true, description = description, schema = str }
end
local KEY = path_param("key", "the session key: [a-z0-9][a-z0-9_-]*, at most 48")

local function query(name, schema, description)
  return { name = name, ["in"] = "query", required = false, schema = schema, description = description }
end

-- op(id, summary, security, ok status, ok answer, errors, extra): an operation.
local function op(id, summary, security, status, ok, errs, extra)
  local responses = { [status] = ok }
  for _, code in ipairs(errs) do responses[code] = { ["$ref"] = "#/components/responses/E" .. code } end
  local o = { operationId = id, summary = summary, security = security, responses = responses }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function body(schema_name)
  return { required = true, content = { [JSON] = { schema = ref(schema_name) } } }
end

local CREATE_ERRS = { "401", "409", "429", "502", "503", "504" }
local OWN_ERRS = { "401", "404", "409", "502", "503", "504" }

-- The lifecycle verbs (gateway/lifecycle.lua's VERBS): POST /sessions/{key}/<verb>, each its own
-- path, with the tenant's token and the session's secret (without the token the POST is the
-- agent's own route, proxied).
local VERBS = {
  pause = { "pause every service (memory kept)" },
  resume = { "resume a paused session" },
  hibernate = { "stop the containers, keep networks and volumes",
    { query("timeout", int, "seconds of grace before the engine kills") } },
  wake = { "start a hibernated session again" },
  snapshot = { "snapshot the session (within the tenant's quota)",
    { query("name", str, "a name for the snapshot"), query("keep", str, "1: it outlives the session") } },
  fork = { "a new session of the same tenant from a snapshot of this one",
    { query("key", str, "the new session's key (default: random)") }, "201", "Created" },
}
local VERB_ORDER = { "pause", "resume", "hibernate", "wake", "snapshot", "fork" }

-- ROUTES: { path, method, operation, backends } (backends: nil for both, else a set).
local function routes()
  local r = {
    { "/ping", "get", op("ping", "liveness of nginx", {}, "200", answer("pong", "text"), {}) },
    { "/health", "get", op("health", "engine reachability", {}, "200", answer("the engine answers", "Health"),
      { "502", "503", "504" }) },
    { "/openapi.json", "get", op("openapi", "this document", {}, "200", answer("OpenAPI 3.1", nil), {}) },
    { "/sessions", "post", op("createSession", "a session with a random key", TENANT, "201",
      answer("created", "Created"), CREATE_ERRS) },
    { "/sessions/{key}", "post", op("createSessionWithKey", "a session of this key in the tenant's key space", TENANT,
      "201", answer("created", "Created"), CREATE_ERRS) },
    { "/sessions/{key}", "get", op("getSession", "a session's state", BOTH, "200", answer("the session", "Session"),
      { "401", "404", "502", "503" }) },
    { "/sessions/{key}", "delete", op("deleteSession", "destroy a session and its stack", BOTH, "200",
      answer("destroyed", "Destroyed"), OWN_ERRS) },
    { "/sessions/{key}", "patch", op("setTimeout", "move the session's expiry", BOTH, "200",
      answer("changed", "Changed"), { "400", "401", "404", "409", "502" },
      { requestBody = { required = true, content = { [JSON] = { schema = obj({ ttl = num }, { "ttl" }) } } } }) },
  }
  for _, v in ipairs(VERB_ORDER) do
    local d = VERBS[v]
    r[#r + 1] = { "/sessions/{key}/" .. v, "post", op(v .. "Session", d[1], BOTH, d[3] or "200",
      answer("done", d[4] or "Changed"), OWN_ERRS, { parameters = d[2] }) }
  end
  local docker = { docker = true }
  r[#r + 1] = { "/sessions/{key}/egress/asks", "get", op("listAsks", "the requests the proxy holds for an answer",
    BOTH, "200", { description = "pending asks", content = { [JSON] = { schema = { type = "array", items = ref("Ask") } } } },
    OWN_ERRS), docker }
  r[#r + 1] = { "/sessions/{key}/egress/asks/stream", "get", op("streamAsks", "pending asks as server-sent events",
    BOTH, "200", answer("events `ask`", "events"), { "401", "404", "409", "429" }), docker }
  r[#r + 1] = { "/sessions/{key}/egress/asks/{id}", "post", op("answerAsk", "allow or deny one ask", BOTH, "200",
    answer("answered", "Answered"), { "400", "401", "404", "409", "502" },
    { requestBody = body("Answer"), parameters = { path_param("id", "the ask's id (digits)") } }), docker }
  r[#r + 1] = { "/snapshots", "get", op("listSnapshots", "the tenant's snapshots and quota", TENANT, "200",
    answer("the snapshots", "Snapshots"), { "401", "502" }), docker }
  r[#r + 1] = { "/snapshots/{id}", "delete", op("deleteSnapshot", "remove a kept snapshot", TENANT, "200",
    answer("removed", "Removed"), { "401", "404", "409", "502" }, { parameters = { path_param("id", "snap-<hex>") } }),
    docker }
  -- the agent's own routes, proxied: any method, any path below the key
  for _, m in ipairs { "get", "post", "put", "patch", "delete" } do
    r[#r + 1] = { "/sessions/{key}/{path}", m, op(m .. "Agent", "proxied to the session's agent as /{path} "
      .. "(any depth: slashes stay)", SECRET, "200", answer("the agent's answer"), { "401", "404", "502", "503", "504" },
      { parameters = { path_param("path", "the agent's path") } }) }
  end
  return r
end
M.routes = routes
M.VERBS = VERB_ORDER

-- document(conf) -> the OpenAPI table for a gateway of conf.backend ("docker" or "swarm").
function M.document(conf)
  local backend = conf and conf.backend or "docker"
  local paths = {}
  for _, r in ipairs(routes()) do
    local path, method, o, only = r[1], r[2], r[3], r[4]
    if not only or only[backend] then
      local item = paths[path]
      if not item then
        item = {}
        if path:find("{key}", 1, true) then item.parameters = { KEY } end
        paths[path] = item
      end
      item[method] = o
    end
  end
  local errors = {}
  for code, a in pairs(ERR) do errors["E" .. code] = a end
  return {
    openapi = "3.1.0",
    info = { title = "sandstack gateway", version = core.VERSION,
      description = "One sandbox stack per agent session (docs/gateway.md). Errors are {error: {kind, message}}. "
        .. "/metrics is served on the metrics listener, not here." },
    paths = paths,
    components = {
      schemas = SCHEMAS,
      responses = errors,
      securitySchemes = {
        tenant = { type = "http", scheme = "bearer", description = "a tenant's token" },
        session_secret = { type = "apiKey", ["in"] = "header", name = "X-Sandstack-Session-Secret",
          description = "the session's secret, from its create" },
      },
    },
  }
end

-- The document as JSON text. A Lua {} encodes as an object: the empty lists OpenAPI wants (a
-- security list without a credential, a scheme's scopes) are written as [] here. The only empty
-- objects the document has are those.
function M.json(conf)
  local text = core.json_encode(M.document(conf))
  return (text:gsub('"(security)":{}', '"%1":[]'):gsub('"(tenant)":{}', '"%1":[]'):gsub('"(session_secret)":{}', '"%1":[]'))
end

return M
