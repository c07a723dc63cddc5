-- Records that may be persisted: which keys are secrets, and a deep copy without them.
local M = {}

local SECRET_KEYS = { "api_key", "session_token" }

function M.secret_keys()
  local out = {}
  for i, k in ipairs(SECRET_KEYS) do out[i] = k end
  return out
end

local secret = {}
for _, k in ipairs(SECRET_KEYS) do secret[k] = true end

local function scrub(v, seen)
  if type(v) ~= "table" then return v end
  if seen[v] then error("scrub: the table contains a cycle", 3) end
  seen[v] = true
  local out = {}
  for k, x in pairs(v) do
    if not (type(k) == "string" and secret[k]) then out[k] = scrub(x, seen) end
  end
  seen[v] = nil
  return out
end

-- Returns a deep copy of t without the secret keys, at any depth.
function M.scrub(t)
  if type(t) ~= "table" then error("scrub: expected a table, got " .. type(t), 2) end
  return scrub(t, {})
end

-- The credentials a record may keep: each one's name, host, port, placement and placeholder,
-- copied by allow list, so a secret (or any member added later) never reaches a record.
local CREDENTIAL_FIELDS = { "name", "host", "port", "header", "format", "query", "basic", "path", "placeholder" }
function M.credentials(list)
  if list == nil then return nil end
  local out = {}
  for i, c in ipairs(list) do
    local kept = {}
    for _, k in ipairs(CREDENTIAL_FIELDS) do kept[k] = c[k] end
    out[i] = kept
  end
  return out
end

-- The placeholders the sandbox's environment holds, { {name =, placeholder =}, ... }: minted at
-- start and never changed, so they outlive set_credentials (a credential it dropped can be given
-- again: the sandbox still holds its placeholder, and a snapshot still leaves it out). A plan
-- or record that has none yet (a start's plan, a record of an older sandstack) has them in its
-- credentials. nil without credentials.
function M.placeholders(plan)
  if plan.placeholders ~= nil then return plan.placeholders end
  local out
  for i, c in ipairs(plan.credentials or {}) do
    out = out or {}
    out[i] = { name = c.name, placeholder = c.placeholder }
  end
  return out
end

return M
