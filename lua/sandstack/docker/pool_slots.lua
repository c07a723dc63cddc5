-- Credential slots of a warm pool (internal to sandstack.docker.pool). A pool's stack
-- options may declare credentials without secrets: { name =, host =, port =, <placement>,
-- length = N }. Each pooled stack then starts with a throwaway secret of N random characters per
-- slot, which nobody knows and no request can carry out while the stack waits: after readiness
-- the filler narrows its proxy to the pool's baseline policy, and only then marks it ready. The
-- sandbox holds a placeholder per slot, minted at start and never changed. A claim reads those
-- placeholders back from the sandbox's environment, then hands the session its secrets with
-- stack:set_credentials. The secret's length is the slot's: the placeholder in the sandbox has
-- it, and a response's framing depends on it.
local core = require "sandstack.core"
local E = require "sandstack.error"
local policy = require "sandstack.policy"

local M = {}

-- A slot's keys, also their table in docs/api/docker.md (sandstack.error's `described`;
-- scripts/api_tables.lua writes it): prepare reads the names, and checks each as its row says.
local SLOT_FIELDS = E.described {
  { "name", nil, type = "string", default = "required", refused = "not a string; twice" },
  { { "host", "port", "header", "format", "query", "basic", "path" }, nil, type = "as a start's credential",
    default = "", refused = "as at start (above)" },
  { "length", nil, type = "whole number", default = "required", refused = "not 16 to 4096" },
}
local MIN_SECRET, MAX_SECRET = 16, 4096

local function bad(option, message) return E.fail("compose", "invalid_option", "pool: " .. option .. " " .. message,
  { option = option }) end

-- A policy table from a table or a compiled policy (its canonical render read back).
local function as_table(p)
  if policy.is_policy(p) then return core.json_decode(p:render()) end
  local copy = core.json_decode(core.json_encode(p))
  return copy
end

-- prepare(stack_opts) -> { slots = {name -> slot}, baseline = policy table } or nil when the
-- pool declares no credentials, or nil, err. On success stack_opts.credentials holds the
-- throwaway entries and stack_opts.egress_policy the start policy: the baseline plus each slot's
-- host and port (a stack option's credential must name a host its policy admits).
function M.prepare(stack)
  if stack.credentials == nil then return nil end
  E.want(stack.credentials, "table", "sandstack.docker.pool", "credentials", "a list of slot tables")
  if type(stack.egress_policy) ~= "table" then
    return nil, select(2, bad("credentials", "need the pool's egress_policy (its baseline, e.g. { allow = {} }): a "
      .. "waiting stack's proxy admits only that"))
  end
  local baseline = as_table(stack.egress_policy)
  local start = as_table(stack.egress_policy)
  start.allow = start.allow or {}
  local slots, entries = {}, {}
  for i, c in ipairs(stack.credentials) do
    local where = ("credentials[%d]"):format(i)
    E.want(c, "table", "sandstack.docker.pool", "credentials", "a list of slot tables")
    for k in pairs(c) do
      if k == "secret" then
        return nil, select(2, bad(where .. ".secret", "is not for a pool: a pool's stacks wait with throwaway secrets; "
          .. "give length = N, and the session's secret at acquire"))
      end
      if not SLOT_FIELDS[k] then E.raise(("sandstack.docker.pool: %s: unknown option '%s'"):format(where, tostring(k))) end
    end
    local n = E.want(c.length, "number", "sandstack.docker.pool", where .. ".length", "a whole number")
    E.want(c.name, "string", "sandstack.docker.pool", where .. ".name", "a string")
    if n == nil or n ~= math.floor(n) or n < MIN_SECRET or n > MAX_SECRET then
      return nil, select(2, bad(where .. ".length", ("must be a whole number from %d to %d"):format(MIN_SECRET, MAX_SECRET)))
    end
    if type(c.name) ~= "string" or slots[c.name] then
      return nil, select(2, bad(where .. ".name", "must be a name, once"))
    end
    local e = {}
    for k, v in pairs(c) do if k ~= "length" then e[k] = v end end
    slots[c.name] = { entry = e, length = n }
    local entry = {}
    for k, v in pairs(e) do entry[k] = v end
    entry.secret = core.random_hex(math.ceil(n / 2)):sub(1, n) -- known to nobody, worth nothing
    entries[i] = entry
    start.allow[#start.allow + 1] = ("%s:%d"):format(tostring(c.host), tonumber(c.port) or 443)
  end
  stack.credentials, stack.egress_policy = entries, start
  return { slots = slots, baseline = baseline }
end

-- merge(prepared, list) -> the session's credentials as the stack option takes them (each slot's
-- fields and the session's secret), or nil, err. Each entry is { name =, secret = }, for a slot of
-- the pool, with the slot's length.
function M.merge(prepared, list)
  if type(list) ~= "table" then return bad("credentials", "must be a list of { name =, secret = }") end
  if not prepared then return bad("credentials", "need a pool whose stack options declare credential slots") end
  local out = {}
  for i, c in ipairs(list) do
    local where = ("credentials[%d]"):format(i)
    if type(c) ~= "table" then return bad(where, "must be a table") end
    for k in pairs(c) do
      if k ~= "name" and k ~= "secret" then return bad(where .. "." .. tostring(k), "is the slot's, set by the pool") end
    end
    local slot = prepared.slots[c.name]
    if not slot then return bad(where .. ".name", "names no credential slot of the pool") end
    if type(c.secret) ~= "string" or #c.secret ~= slot.length then
      return bad(where .. ".secret", ("must be a string of %d characters, the slot's length"):format(slot.length))
    end
    local e = { secret = c.secret }
    for k, v in pairs(slot.entry) do e[k] = v end
    out[i] = e
  end
  return out
end

-- A pool's model key. With the proxy sandstack adds (an egress_policy, no
-- proxy_service) the sandbox holds only its session token and the proxy the key, which a claim
-- replaces live: so a pooled stack starts with a throwaway key, random and worth nothing, and the
-- operator's stays with the pool. Returns the operator's key (stack_opts.api_key is then the
-- throwaway), or nil when the pool's stacks have no such proxy (a sandbox without one holds
-- the key itself).
function M.throwaway_model_key(stack)
  if stack.egress_policy == nil or stack.proxy_service ~= nil or type(stack.api_key) ~= "string" then return nil end
  local key = stack.api_key
  stack.api_key = "sk-pool-throwaway-" .. core.random_hex(16)
  return key
end

-- The model key a claim hands over: the session's api_key, or the pool's. nil, err when the
-- session's cannot be placed: no proxy to take it live, or not 16 to 4096 characters of
-- visible ASCII (the proxy's own rule for a key replaced live).
function M.session_model_key(pool_key, session_key)
  if session_key == nil then return pool_key end
  if not pool_key then
    return bad("api_key", "at acquire needs the proxy sandstack adds (the pool's stack has an egress_policy and no "
      .. "proxy_service): without it the sandbox holds the key, fixed at start")
  end
  if type(session_key) ~= "string" or #session_key < MIN_SECRET or #session_key > MAX_SECRET
    or session_key:find("[^\33-\126]") then
    return bad("api_key", ("must be %d to %d characters of visible ASCII"):format(MIN_SECRET, MAX_SECRET))
  end
  return session_key
end

-- The placeholders the sandbox holds, from its inspect (Config.Env), put into the plan's
-- credentials in place of the ones planning again minted. true, or nil, err.
function M.adopt_placeholders(plan, info)
  local env = {}
  local list = type(info) == "table" and type(info.Config) == "table" and info.Config.Env
  for _, kv in ipairs(type(list) == "table" and list or {}) do
    local k, v = tostring(kv):match("^([^=]+)=(.*)$")
    if k then env[k] = v end
  end
  for _, c in ipairs(plan.credentials or {}) do
    if not env[c.name] then
      return E.fail("engine", "bad_answer", "the pooled sandbox holds no placeholder for " .. tostring(c.name))
    end
    c.placeholder = env[c.name]
  end
  return true
end

return M
