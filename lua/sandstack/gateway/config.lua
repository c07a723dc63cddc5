-- sandstack.gateway.config: the gateway's configuration, checked once before nginx starts.
-- The operator writes a Lua file that returns a table (examples/openresty-gateway/config.lua);
-- `sandstack gateway` checks it here, renders nginx.conf from it (gateway/nginx_conf.lua) and
-- hands nginx the checked table as JSON, so the workers never see an unchecked value.
local E = require "sandstack.error"
local core = require "sandstack.core"

local M = {}

-- Every key the file may set, with its default (nil: required or optional without default).
M.DEFAULTS = {
  name = "gateway",          -- this node's name: its stacks carry io.sandstack.gateway=<name>
  listen = "127.0.0.1:8088", -- the API and proxy listener
  metrics_listen = "127.0.0.1:9145", -- GET /metrics (Prometheus text), a listener of its own
  project_prefix = "gw-",    -- a session's project is <prefix><key>.<tenant tag> (pooled: <prefix>pool-<hex>)
  max_sessions = 100,        -- the global cap (starting and live sessions)
  idle_ttl = 1800,           -- seconds without a proxied request before a session is destroyed
  max_ttl = 86400,           -- seconds after which a session is destroyed whatever it does
  expiry_interval = 10,      -- seconds between two expiry scans
  workers = 1, threads = 8, vms = 32,
  user = nil,                -- the workers' user; default: M.worker_user (unprivileged where it can be)
  worker_connections = 1024,
  dict_size = "10m",
  client_max_body_size = "10m",
  proxy_connect_timeout = 5, proxy_read_timeout = 3600, proxy_send_timeout = 3600,
  client_body_timeout = 60, client_header_timeout = 30, send_timeout = 3600,
  create_timeout = 300,      -- nginx's own bound on POST /sessions (a start or an acquire)
  lua_path = nil, lua_cpath = nil, -- nginx's search paths; `sandstack gateway` derives defaults
  nginx = nil,               -- { http = "...", server = "...", metrics = "..." }: extra directives
  error_log_level = "notice",
  backend = "docker",        -- "docker": this node's engine; "swarm": sandstack.swarm, stack.docker_host a manager
  swarm = nil,               -- backend "swarm": { node = <this node's hostname in the swarm>, cache_ttl = 5 }
  console = true,            -- the operator's console at /console (backend "docker"; docs/gateway.md)
  console_root = nil,        -- its files (web/console); default: beside the modules, then share/
  max_streams_per_tenant = 8, -- open console and ask streams (audit lines, asks) of one tenant
  max_streams_per_session = 4, -- and of one session
  snapshot_quota = nil,      -- every tenant's snapshots: { count = 10, bytes = 10 GiB } (QUOTA below)
}
-- A tenant's snapshots (and forks', which their child owns): how many, and how many bytes as the
-- engine reports them (gateway/snapshot_quota.lua). A tenant's own snapshot_quota overrides.
M.QUOTA = { count = 10, bytes = 10 * 1024 * 1024 * 1024 }
-- Every key the file may set: the check's set and the reference's table (docs/gateway.md,
-- "Configuration keys"; scripts/api_tables.lua writes it from here). The defaults are DEFAULTS'.
M.KEYS = E.described {
  { "name", type = "string", default = "`\"gateway\"`",
    refused = "not `[a-z0-9][a-z0-9_.-]*`: this node's name, on its stacks (`io.sandstack.gateway`)" },
  { "listen", type = "string, `host:port`", default = "`\"127.0.0.1:8088\"`",
    refused = "not a plain word: the API and proxy listener" },
  { "metrics_listen", type = "string, `host:port`", default = "`\"127.0.0.1:9145\"`",
    refused = "not a plain word: `GET /metrics`, a listener of its own" },
  { "project_prefix", type = "string", default = "`\"gw-\"`",
    refused = "not `[a-z0-9][a-z0-9_.-]*`, or over 38 characters" },
  { "tenants", type = "list of `{ name =, token_sha256 =, max_sessions =, snapshot_quota = }`", default = "required",
    refused = "empty; a name not `[A-Za-z0-9_.-]+`, over 64 characters, twice, or two with one tag; a digest not 64 hex digits" },
  { "stack", type = "table, `sandstack.docker.start`'s options", default = "required",
    refused = "with `project_name`, a function, or an `egress_policy` that does not compile" },
  { "pool", type = "`{ size =, max =, concurrency =, interval = }`", default = "none; `size` `1`, `max` twice it, `concurrency` `2`, `interval` `5`",
    refused = "`max` under `size`; `concurrency` outside 1-16; `interval` under 0.1; with backend `\"swarm\"`" },
  { "max_sessions", type = "count", default = "`100`",
    refused = "under 1: the cap of starting and live sessions" },
  { "idle_ttl", type = "whole seconds", default = "`1800`",
    refused = "under 1: a session without a proxied request that long is destroyed" },
  { "max_ttl", type = "whole seconds", default = "`86400`",
    refused = "under 1 or under `idle_ttl`: a session is destroyed after it" },
  { "expiry_interval", type = "seconds", default = "`10`",
    refused = "under 0.1: between two expiry scans" },
  { { "workers", "threads", "vms" }, type = "count", default = "`1`, `8`, `32`",
    refused = "under 1 ([openresty.md](openresty.md))" },
  { "user", type = "string", default = "unprivileged where it can be ([openresty.md](openresty.md))",
    refused = "not a plain word: the workers' user" },
  { "worker_connections", type = "count", default = "`1024`",
    refused = "under 16" },
  { { "dict_size", "client_max_body_size" }, type = "string, nginx's size", default = "`\"10m\"`",
    refused = "not a plain word" },
  { { "proxy_connect_timeout", "proxy_read_timeout", "proxy_send_timeout", "client_body_timeout",
    "client_header_timeout", "send_timeout" }, type = "whole seconds", default = "`5`, `3600`, `3600`, `60`, `30`, `3600`",
    refused = "under 1" },
  { "create_timeout", type = "whole seconds", default = "`300`",
    refused = "under 10: nginx's bound on `POST /sessions`" },
  { { "lua_path", "lua_cpath" }, type = "string, a search path", default = "`sandstack gateway`'s",
    refused = "holds a quote, a brace or a line break" },
  { "nginx", type = "`{ http =, server =, metrics = }`, strings", default = "none",
    refused = "another key, or not a string: extra directives (TLS)" },
  { "error_log_level", type = "string", default = "`\"notice\"`",
    refused = "not a plain word" },
  { "backend", type = "string, `\"docker\"` or `\"swarm\"`", default = "`\"docker\"`",
    refused = "anything else; `\"swarm\"`: `stack.docker_host` a manager" },
  { "swarm", type = "`{ node =, cache_ttl = }`", default = "none (`cache_ttl` `5`)",
    refused = "without backend `\"swarm\"`; no `node`; `cache_ttl` outside 0.1-3600" },
  { "console", type = "boolean", default = "`true`",
    refused = "not a boolean: the operator's console at `/console`" },
  { "console_root", type = "string, a directory", default = "beside the modules, then `share/`",
    refused = "not an absolute path of `[A-Za-z0-9_.@+/-]`" },
  { "max_streams_per_tenant", type = "count", default = "`8`",
    refused = "under 1: one tenant's open console and ask streams" },
  { "max_streams_per_session", type = "count", default = "`4`",
    refused = "under 1: one session's" },
  { "snapshot_quota", type = "`{ count =, bytes = }`", default = "`{ count = 10, bytes = 10 GiB }`",
    refused = "not whole numbers >= 0; a tenant's own overrides it" },
}
local REQUIRED_TABLES = { tenants = true, stack = true }
local POOL_KEYS = { size = true, max = true, concurrency = true, interval = true }
local TENANT_KEYS = { name = true, token_sha256 = true, max_sessions = true, snapshot_quota = true }
local QUOTA_KEYS = { count = true, bytes = true }
local NGINX_KEYS = { http = true, server = true, metrics = true }
local SWARM_KEYS = { node = true, cache_ttl = true }
local NUMBERS = { max_sessions = 1, idle_ttl = 1, max_ttl = 1, expiry_interval = 0.1, workers = 1,
  threads = 1, vms = 1, worker_connections = 16, proxy_connect_timeout = 1, proxy_read_timeout = 1,
  proxy_send_timeout = 1, client_body_timeout = 1, client_header_timeout = 1, send_timeout = 1,
  create_timeout = 10, max_streams_per_tenant = 1, max_streams_per_session = 1 }

local function bad(option, message)
  return E.fail("invalid", "invalid_option", "gateway config: " .. message, { option = option })
end

local function whole(v, min)
  return type(v) == "number" and v == math.floor(v) and v >= min
end

-- Each tenant has its own key space: a session's sid is "<key>.<tenant>" (a Docker session key of
-- at most 200 characters, so a name of at most 64 always fits), its project carries the tenant's
-- tag (the first 8 hex digits of SHA-256(name)), and two tenants must not share a tag.
M.TENANT_NAME_MAX = 64
M.PROJECT_PREFIX_MAX = 63 - 16 - 9

function M.tenant_tag(name) return core.sha256_hex(name):sub(1, 8) end

-- quota(q, under, option) -> a checked {count =, bytes =}, each missing one taken from under
local function quota(q, under, option)
  if type(q) ~= "table" then return bad(option, option .. " must be a table { count =, bytes = }") end
  for k in pairs(q) do
    if not QUOTA_KEYS[k] then return bad(option, option .. ": unknown key '" .. tostring(k) .. "'") end
  end
  local out = { count = q.count or under.count, bytes = q.bytes or under.bytes }
  if not whole(out.count, 0) or not whole(out.bytes, 0) then
    return bad(option, option .. ": count and bytes are whole numbers >= 0")
  end
  return out
end

local function check_tenants(list, default_quota)
  if #list == 0 then return bad("tenants", "at least one tenant is needed") end
  local names, tags = {}, {}
  for i, t in ipairs(list) do
    if type(t) ~= "table" then return bad("tenants", "tenant " .. i .. " must be a table") end
    for k in pairs(t) do
      if not TENANT_KEYS[k] then return bad("tenants", "tenant " .. i .. ": unknown key '" .. tostring(k) .. "'") end
    end
    if type(t.name) ~= "string" or not t.name:match("^[%w_.-]+$") then
      return bad("tenants", "tenant " .. i .. ": name must be [A-Za-z0-9_.-]+")
    end
    if #t.name > M.TENANT_NAME_MAX then
      return bad("tenants", "tenant " .. i .. ": name longer than " .. M.TENANT_NAME_MAX .. " characters")
    end
    if names[t.name] then return bad("tenants", "tenant name '" .. t.name .. "' twice") end
    names[t.name] = true
    local tag = M.tenant_tag(t.name)
    if tags[tag] then
      return bad("tenants", "tenants '" .. tags[tag] .. "' and '" .. t.name .. "' have the same project tag " .. tag
        .. " (SHA-256 of the name): rename one")
    end
    tags[tag] = t.name
    -- A digest, never a token: 64 lowercase hex digits (`printf %s TOKEN | sha256sum`).
    if type(t.token_sha256) ~= "string" or not t.token_sha256:match("^" .. ("%x"):rep(64) .. "$") then
      return bad("tenants", "tenant " .. t.name .. ": token_sha256 must be 64 hex digits")
    end
    t.token_sha256 = t.token_sha256:lower()
    if t.max_sessions ~= nil and not whole(t.max_sessions, 0) then
      return bad("tenants", "tenant " .. t.name .. ": max_sessions must be a whole number >= 0")
    end
    if t.snapshot_quota ~= nil then
      local q, err = quota(t.snapshot_quota, default_quota, "tenants")
      if not q then return nil, err end
      t.snapshot_quota = q
    end
  end
  return true
end

local function check_pool(pool)
  if type(pool) ~= "table" then return bad("pool", "pool must be a table") end
  for k in pairs(pool) do
    if not POOL_KEYS[k] then return bad("pool", "pool: unknown key '" .. tostring(k) .. "'") end
  end
  pool.size = pool.size or 1
  pool.max = pool.max or math.max(pool.size, 1) * 2
  pool.concurrency = pool.concurrency or 2
  pool.interval = pool.interval or 5
  if not whole(pool.size, 0) or not whole(pool.max, 1) or pool.max < pool.size then
    return bad("pool", "pool: size >= 0 and max >= size, whole numbers")
  end
  if not whole(pool.concurrency, 1) or pool.concurrency > 16 then
    return bad("pool", "pool: concurrency from 1 to 16")
  end
  if type(pool.interval) ~= "number" or pool.interval < 0.1 then return bad("pool", "pool: interval >= 0.1") end
  return true
end

local function functions_in(t, seen)
  seen = seen or {}
  if seen[t] then return nil end
  seen[t] = true
  for k, v in pairs(t) do
    if type(v) == "function" then return tostring(k) end
    if type(v) == "table" then
      local f = functions_in(v, seen)
      if f then return tostring(k) .. "." .. f end
    end
  end
end

-- check(t) -> config | nil, err: a checked copy of t with the defaults filled in.
function M.check(t)
  if type(t) ~= "table" then return bad(nil, "the file must return a table") end
  local c = {}
  for k, v in pairs(t) do
    if not M.KEYS[k] then
      return bad(k, "unknown key '" .. tostring(k) .. "'")
    end
    c[k] = v
  end
  for k, v in pairs(M.DEFAULTS) do if c[k] == nil then c[k] = v end end
  for k in pairs(REQUIRED_TABLES) do
    if type(c[k]) ~= "table" then return bad(k, k .. " must be a table") end
  end
  local ok, err
  c.snapshot_quota, err = quota(c.snapshot_quota or {}, M.QUOTA, "snapshot_quota")
  if not c.snapshot_quota then return nil, err end
  ok, err = check_tenants(c.tenants, c.snapshot_quota)
  if not ok then return nil, err end
  for k, min in pairs(NUMBERS) do
    if type(c[k]) ~= "number" or c[k] < min or (min >= 1 and c[k] ~= math.floor(c[k])) then
      return bad(k, k .. " must be a number >= " .. min)
    end
  end
  for _, k in ipairs { "name", "listen", "metrics_listen", "project_prefix", "dict_size", "user",
    "client_max_body_size", "error_log_level" } do
    -- these go into nginx.conf verbatim: no quotes, semicolons, braces or spaces
    if (k ~= "user" or c[k] ~= nil) and (type(c[k]) ~= "string" or not c[k]:match("^[%w_.:%[%]/-]+$")) then
      return bad(k, k .. " must be a plain word (letters, digits, _ . : [ ] / -)")
    end
  end
  if not c.name:match("^[a-z0-9][a-z0-9_.-]*$") then return bad("name", "name must be [a-z0-9][a-z0-9_.-]*") end
  if not c.project_prefix:match("^[a-z0-9][a-z0-9_.-]*$") then
    return bad("project_prefix", "project_prefix must be [a-z0-9][a-z0-9_.-]*")
  end
  -- a project is at most 63 characters: prefix, 16 hex digits (a long key's digest), "." and a tag
  if #c.project_prefix > M.PROJECT_PREFIX_MAX then
    return bad("project_prefix", "project_prefix must be at most " .. M.PROJECT_PREFIX_MAX .. " characters")
  end
  if c.max_ttl < c.idle_ttl then return bad("max_ttl", "max_ttl must be at least idle_ttl") end
  if c.stack.project_name ~= nil then return bad("stack", "the gateway names the projects: drop stack.project_name") end
  local f = functions_in(c.stack)
  if f then return bad("stack", "stack." .. f .. " is a function: it cannot cross into the thread pool") end
  -- the policy every session starts with (allow_private included), refused here rather than at
  -- each session's start
  if c.stack.egress_policy ~= nil then
    if type(c.stack.egress_policy) ~= "table" then return bad("stack", "stack.egress_policy must be a policy table") end
    local _, perr = require("sandstack.policy").compile(c.stack.egress_policy)
    if perr then return bad("stack", "stack.egress_policy: " .. perr.message) end
  end
  if c.pool ~= nil then
    ok, err = check_pool(c.pool)
    if not ok then return nil, err end
  end
  ok, err = M.check_backend(c)
  if not ok then return nil, err end
  if c.nginx ~= nil then
    if type(c.nginx) ~= "table" then return bad("nginx", "nginx must be a table of directive strings") end
    for k, v in pairs(c.nginx) do
      if not NGINX_KEYS[k] or type(v) ~= "string" then return bad("nginx", "nginx: http, server, metrics (strings)") end
    end
  end
  if type(c.console) ~= "boolean" then return bad("console", "console must be true or false") end
  if c.console_root ~= nil and (type(c.console_root) ~= "string" or not c.console_root:match("^/[%w_.@+/-]*$")) then
    return bad("console_root", "console_root must be an absolute directory path (letters, digits, _ . @ + / -)")
  end
  for _, k in ipairs { "lua_path", "lua_cpath" } do
    if c[k] ~= nil and (type(c[k]) ~= "string" or c[k]:find('["{}\n]')) then
      return bad(k, k .. " must be a search path without quotes or braces")
    end
  end
  return c
end

-- worker_user(c) -> user, why, chosen: the workers' user, the file's own when it names one;
-- otherwise chosen here (chosen = true), with why it is root when it is.
-- Unprivileged ("nobody:<the Engine socket's group>") unless something they do needs root: only
-- root can give an added proxy its control directory, which a warm pool's claims and every live
-- egress call use (without it each is an Engine exec); a swarm's
-- managers are reached with certificates an operator keeps root's; and an Engine that is not a
-- unix socket owned by a named group other than root's cannot be reached by another user at all.
function M.worker_user(c)
  if c.user ~= nil then return c.user, nil, false end
  local user, why = M.default_user(c)
  return user, why, true
end

function M.default_user(c)
  if c.backend ~= "docker" then return "root", "the backend is \"swarm\" (a manager's certificates are root's)" end
  if c.pool ~= nil then return "root", "a warm pool claims through its proxies' control directories" end
  local s = type(c.stack) == "table" and c.stack or {}
  if s.egress_policy ~= nil and s.proxy_service == nil then
    return "root", "stack.egress_policy adds a proxy, whose control directory only root can give"
  end
  local a = core.engine_address(type(s.docker_host) == "string" and s.docker_host or nil)
  local path = a and a.unix_path
  if not path then return "root", "the Engine is not a unix socket (" .. tostring(a and a.host or s.docker_host) .. ")" end
  local st = core.file_stat(path)
  local group = st and st.gid ~= 0 and core.group_name(st.gid)
  if not group or not group:match("^[%w_.-]+$") then
    return "root", "the Engine socket " .. path .. " has no group of its own"
  end
  return "nobody:" .. group
end

-- unreachable(places, user) -> dir, mode, name: the first directory on the way to one of places
-- ({name = a directory, or a search path of "?" patterns}) that user's workers cannot enter (no
-- search bit for others; root enters every one), or nil. nginx's workers read the modules and
-- the console's files, and keep request and response bodies in the prefix's temp directories.
local function closed_on(dir)
  local path = ""
  for part in dir:gmatch("[^/]+") do
    path = path .. "/" .. part
    local st = core.file_stat(path)
    if st and st.type == "directory" and st.mode % 2 == 0 then return path, st.mode end
  end
end

function M.unreachable(places, user)
  if user == "root" or user:match("^root:") then return nil end
  local names = {}
  for name in pairs(places) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    for entry in tostring(places[name]):gmatch("[^;]+") do
      local dir = entry:match("^(/.*)/[^/]*%?") or (not entry:find("?", 1, true) and entry:match("^/.*"))
      if dir then
        local at, mode = closed_on(dir)
        if at then return at, mode, name end
      end
    end
  end
  return nil
end

-- The backend: "docker" (the node's own engine), or "swarm" (docs/gateway.md "On a swarm"):
-- every node's gateway starts sessions through the manager and finds them there.
function M.check_backend(c)
  if c.backend == "docker" then
    if c.swarm ~= nil then return bad("swarm", "swarm is for backend = \"swarm\"") end
    return true
  end
  if c.backend ~= "swarm" then return bad("backend", "backend must be \"docker\" or \"swarm\"") end
  local sw = c.swarm
  if type(sw) ~= "table" then return bad("swarm", "backend \"swarm\" needs swarm = { node = <this node's hostname> }") end
  for k in pairs(sw) do
    if not SWARM_KEYS[k] then return bad("swarm", "swarm: unknown key '" .. tostring(k) .. "'") end
  end
  if type(sw.node) ~= "string" or sw.node == "" or #sw.node > 255 then
    return bad("swarm", "swarm.node must be this node's hostname as the swarm names it")
  end
  sw.cache_ttl = sw.cache_ttl or 5
  if type(sw.cache_ttl) ~= "number" or sw.cache_ttl < 0.1 or sw.cache_ttl > 3600 then
    return bad("swarm", "swarm.cache_ttl: seconds, from 0.1 to 3600")
  end
  -- a warm pool is one engine's; expiry and adoption are not done on a swarm (docs/gateway.md)
  if c.pool ~= nil then return bad("pool", "pool is not offered with backend \"swarm\"") end
  if type(c.stack.docker_host) ~= "string" then
    return bad("stack", "backend \"swarm\" needs stack.docker_host: a manager's Engine API")
  end
  return true
end

-- load(path) -> config | nil, err: runs the file (it returns the table) and checks it.
function M.load(path)
  local chunk, lerr = loadfile(path)
  if not chunk then return E.fail("invalid", "bad_config", "gateway config: " .. tostring(lerr)) end
  local ok, t = pcall(chunk)
  if not ok then return E.fail("invalid", "bad_config", "gateway config: " .. tostring(t)) end
  return M.check(t)
end

return M
