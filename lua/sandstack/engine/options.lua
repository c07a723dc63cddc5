-- Options, TLS settings and request encoding of the engine client (internal to
-- sandstack.engine): what turns a caller's arguments into the method, target, headers and body
-- the transport sends. Argument mistakes raise (API.md: programming errors), at the caller of
-- the public method (`level`).
local core = require "sandstack.core"
local E = require "sandstack.error"

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

-- A positive number or nil: true, or nil, err (invalid/invalid_option) for a number that is not
-- above 0; another type raises at the caller (docs/api/README.md, "Conventions").
function O.check_number(v, what, name)
  E.want(v, "number", what, name)
  if v ~= nil and not (v > 0) then return E.refuse(what, name, "must be a number above 0") end
  return true
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

-- Percent-encoding: all but [A-Za-z0-9-._~] as %XX (the C core's one encoder, util/url.h).
O.urlencode = core.urlencode

-- {Name = "v"} and {"Name: v"} as a sorted list of "Name: v" lines.
function O.header_lines(headers, what, level)
  level = (level or 2) + 1
  if headers == nil then return nil end
  E.want(headers, "table", what, "headers")
  local out, names = {}, {}
  for k, v in pairs(headers) do
    if type(k) == "number" then
      if type(v) ~= "string" or not v:find(":") then
        E.raise(what .. ": option 'headers': entries must be 'Name: value' strings")
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
    if line:find("[\r\n]") then E.raise(what .. ": option 'headers': values must not contain CR or LF") end
  end
  return out
end

-- The versioned target: "/v1.41/containers/json?all=true". Paths already carrying a version and
-- /_ping (which every version serves) are sent as they are; the query's keys sorted, its values
-- percent-encoded, a table value as JSON. Built by the C core, as perform builds every target
-- (csrc/lua/engine_target.c), raising at `level` as error() counts it from here.
function O.target(api_version, path, query, what, level)
  local target = core.engine_target(api_version, path, query, what, (level or 2) + 1)
  return target -- not a tail call: the level counts this function
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
  E.raise(what .. ": argument 'body' must be a table (sent as JSON) or a string, got " .. type(body))
end

return O
