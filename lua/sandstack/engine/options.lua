-- Options, TLS settings and request encoding of the engine client (internal to
-- sandstack.engine): what turns a caller's arguments into the method, target, headers and body
-- the transport sends. Argument mistakes raise (API.md: programming errors), at the caller of
-- the public method (`level`).
local core = require "sandstack.core"

local O = {}

local MiB = 1024 * 1024
O.DEFAULTS = {
  DEFAULT_TIMEOUT = 30,
  DEFAULT_MAX_BYTES = 16 * MiB,        -- a response body kept in memory
  DEFAULT_EXEC_MAX_BYTES = 8 * MiB,    -- stdout + stderr of one exec
  DEFAULT_EVENTS_MAX_BYTES = 1 * MiB,  -- event bytes held unread
  MIN_EVENTS_MAX_BYTES = 64 * 1024,    -- curl hands over up to 16 KiB at once
  DEFAULT_DOWNLOAD_MAX_BYTES = 1024 * MiB,
}

-- A positive number or nil.
function O.check_number(v, what, name, level)
  if v ~= nil and (type(v) ~= "number" or v ~= v or v <= 0) then
    error(what .. ": option '" .. name .. "' must be a positive number", (level or 2) + 1)
  end
  return v
end

function O.nonempty(s)
  if s ~= nil and s ~= "" then return s end
  return nil
end

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- The TLS settings of the Go client and the CLI: DOCKER_CERT_PATH (default ~/.docker) holds
-- ca.pem, cert.pem, key.pem; DOCKER_TLS_VERIFY non-empty verifies the server; DOCKER_TLS
-- alone means TLS without verification. nil: no TLS.
function O.tls_config(opts_tls)
  if opts_tls == false then return nil end
  local verify_env = O.nonempty(os.getenv("DOCKER_TLS_VERIFY"))
  local cert_path = O.nonempty(os.getenv("DOCKER_CERT_PATH"))
  local want = opts_tls ~= nil or verify_env or cert_path or O.nonempty(os.getenv("DOCKER_TLS"))
  if not want then return nil end
  local t = type(opts_tls) == "table" and opts_tls or {}
  local dir = cert_path or ((os.getenv("HOME") or "") .. "/.docker")
  local function pick(explicit, name)
    if explicit then return explicit end
    local p = dir .. "/" .. name
    return file_exists(p) and p or nil
  end
  local verify = t.verify
  if verify == nil then verify = verify_env ~= nil or opts_tls ~= nil end
  return { ca = pick(t.ca, "ca.pem"), cert = pick(t.cert, "cert.pem"), key = pick(t.key, "key.pem"),
    verify = verify and true or false }
end

function O.urlencode(s)
  return (s:gsub("[^%w%-%._~]", function(c) return string.format("%%%02X", c:byte()) end))
end

local function query_value(v, what, level)
  local t = type(v)
  if t == "string" then return v end
  if t == "number" then
    if v == math.floor(v) and v > -2^53 and v < 2^53 then return string.format("%d", v) end
    return tostring(v)
  end
  if t == "boolean" then return v and "true" or "false" end
  if t == "table" then
    local s, err = core.json_encode(v)
    if not s then error(what .. ": query value cannot be JSON-encoded: " .. err.message, level + 1) end
    return s
  end
  error(what .. ": query values must be strings, numbers, booleans or tables", level + 1)
end

-- "?k=v&..." with keys sorted (stable URLs make logs and tests readable).
local function encode_query(query, what, level)
  if query == nil then return "" end
  if type(query) ~= "table" then error(what .. ": option 'query' must be a table", level + 1) end
  local keys = {}
  for k in pairs(query) do
    if type(k) ~= "string" then error(what .. ": query keys must be strings", level + 1) end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = O.urlencode(k) .. "=" .. O.urlencode(query_value(query[k], what, level + 1))
  end
  return #parts > 0 and ("?" .. table.concat(parts, "&")) or ""
end

-- {Name = "v"} and {"Name: v"} as a sorted list of "Name: v" lines.
function O.header_lines(headers, what, level)
  level = (level or 2) + 1
  if headers == nil then return nil end
  if type(headers) ~= "table" then error(what .. ": option 'headers' must be a table", level) end
  local out, names = {}, {}
  for k, v in pairs(headers) do
    if type(k) == "number" then
      if type(v) ~= "string" or not v:find(":") then
        error(what .. ": header entries must be 'Name: value' strings", level)
      end
      out[#out + 1] = v
    else
      names[#names + 1] = k
    end
  end
  table.sort(names)
  for _, k in ipairs(names) do
    out[#out + 1] = tostring(k) .. ": " .. tostring(headers[k])
  end
  for _, line in ipairs(out) do
    if line:find("[\r\n]") then error(what .. ": header values must not contain CR or LF", level) end
  end
  return out
end

-- The versioned target: "/v1.41/containers/json?all=true". Paths already carrying a version and
-- /_ping (which every version serves) are sent as they are.
function O.target(api_version, path, query, what, level)
  level = (level or 2) + 1
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then
    error(what .. ": path must be a string starting with '/'", level)
  end
  local target = path
  if api_version and not path:match("^/v%d+%.%d+/") and not path:match("^/_ping") then
    target = "/v" .. api_version .. path
  end
  local q = encode_query(query, what, level)
  if q ~= "" then target = target .. (path:find("?", 1, true) and "&" .. q:sub(2) or q) end
  return target
end

-- A table is sent as JSON, a string as it is. -> payload, content type | nil, nil, err
function O.encode_body(body, content_type, what, level)
  if body == nil then return nil end
  if type(body) == "string" then return body, content_type end
  if type(body) == "table" then
    local s, err = core.json_encode(body)
    if not s then return nil, nil, err end
    return s, "application/json"
  end
  error(what .. ": body must be a table (sent as JSON) or a string", (level or 2) + 1)
end

return O
