-- sandstack.gateway.auth: who may do what. Tenants prove themselves with a bearer token whose
-- SHA-256 digest is in the configuration; sessions with a secret minted from the CSPRNG at
-- creation, of which only the SHA-256 digest is ever kept (in the shared dict and in a label
-- on the stack). Pure functions of their arguments: usable in the event loop, the thread VMs
-- and plain Lua (the unit spec).
local core = require "sandstack.core"

local M = {}

M.SECRET_BYTES = 32 -- 256 bits from getrandom(2), sent to the client as 64 hex digits
M.SECRET_HEADER = "X-Sandstack-Session-Secret"

-- equal(a, b) -> boolean, in time that depends on the lengths only, never on where the first
-- difference is. Callers compare digests of equal, public length (64), so the length check
-- leaks nothing; the loop visits every byte and folds the differences without branching on them.
function M.equal(a, b)
  if type(a) ~= "string" or type(b) ~= "string" or #a ~= #b then return false end
  local diff = 0
  for i = 1, #a do
    local x, y = a:byte(i), b:byte(i)
    diff = diff + (x - y) * (x - y) -- 0 only when every byte matches
  end
  return diff == 0
end

function M.digest(s)
  return core.sha256_hex(s)
end

-- new_secret() -> secret, digest. The secret goes to the client once; the digest stays.
function M.new_secret()
  local secret = core.random_hex(M.SECRET_BYTES)
  return secret, core.sha256_hex(secret)
end

-- bearer(header value) -> token | nil: the token of "Bearer <token>" (scheme case-insensitive).
function M.bearer(value)
  if type(value) ~= "string" then return nil end
  local scheme, token = value:match("^%s*(%a+)%s+(%S+)%s*$")
  if not scheme or scheme:lower() ~= "bearer" then return nil end
  return token
end

-- tenant(tenants, token) -> tenant | nil. Every tenant's digest is compared, matched or not,
-- so the time taken does not tell which tenant (or how many) came before a match.
function M.tenant(tenants, token)
  if type(token) ~= "string" or #token == 0 or #token > 4096 then return nil end
  local d = core.sha256_hex(token)
  local found
  for _, t in ipairs(tenants) do
    if M.equal(d, t.token_sha256) and not found then found = t end
  end
  return found
end

-- session_ok(entry, secret) -> boolean: the presented secret hashes to the stored digest.
function M.session_ok(entry, secret)
  if type(entry) ~= "table" or type(entry.digest) ~= "string" then return false end
  if type(secret) ~= "string" or #secret == 0 or #secret > 1024 then return false end
  return M.equal(core.sha256_hex(secret), entry.digest)
end

return M
