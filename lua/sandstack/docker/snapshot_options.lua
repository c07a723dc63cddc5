-- A snapshot's options (internal to docker/snapshot.lua): what a snapshot keeps of a start's
-- options (no secret, no project name, no function), whether a value is a snapshot record, and
-- the options a start from a snapshot gets.
local core = require "sandstack.core"
local E = require "sandstack.error"
local store = require "sandstack.store"

local M = {}

local function deep_copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = deep_copy(x) end
  return out
end

-- A service's env without the model key's variable (the model puts the session token there and
-- removes any other: csrc/stack/plan.c) and without an entry whose value holds a secret of the
-- options. env: a map, or a list of "NAME=value".
local function env_without(env, secrets)
  if type(env) ~= "table" then return env end
  local function secret_in(v)
    if type(v) ~= "string" then return false end
    for _, sec in ipairs(secrets) do if v:find(sec, 1, true) then return true end end
    return false
  end
  local out = {}
  if env[1] ~= nil then
    for _, e in ipairs(env) do
      local k, v = tostring(e):match("^([^=]*)=?(.*)$")
      if k ~= "ANTHROPIC_API_KEY" and not secret_in(v) then out[#out + 1] = e end
    end
  else
    for k, v in pairs(env) do
      if k ~= "ANTHROPIC_API_KEY" and not secret_in(v) then out[k] = v end
    end
  end
  return out
end

-- The options a snapshot keeps: the start's options without a secret (api_key, session_token,
-- each credential's secret, and any env entry that holds one or names the model key), without
-- the project name (a restore is a new session) and without functions; a compiled policy as
-- its JSON.
function M.spec_of(opts)
  local out = {}
  for k, v in pairs(opts) do
    if type(v) ~= "function" and k ~= "project_name" and k ~= "ttl" and k ~= "idle_timeout" and k ~= "on_expiry"
      and k ~= "from_snapshot" then
      out[k] = v
    end
  end
  local p = out.egress_policy
  if type(p) == "table" and getmetatable(p) and p.render then out.egress_policy = core.json_decode(p:render()) end
  local secrets = {}
  for _, v in ipairs { opts.api_key, opts.session_token } do
    if type(v) == "string" and #v >= 4 then secrets[#secrets + 1] = v end
  end
  for _, c in ipairs(type(opts.credentials) == "table" and opts.credentials or {}) do
    if type(c) == "table" and type(c.secret) == "string" and #c.secret >= 4 then secrets[#secrets + 1] = c.secret end
  end
  if type(out.services) == "table" then
    local svcs = {}
    for i, sv in ipairs(out.services) do
      local c = {}
      for k, v in pairs(type(sv) == "table" and sv or {}) do c[k] = v end
      c.env = env_without(c.env, secrets)
      svcs[i] = c
    end
    out.services = svcs
  end
  out.credentials = store.credentials(out.credentials)
  if out.credentials then
    for _, c in ipairs(out.credentials) do c.placeholder = nil end -- a restore mints its own
  end
  return store.scrub(deep_copy(out))
end

-- snap as an option `name` of what: a non-table raises at the caller; a table that is not a
-- snapshot record is nil, err (invalid/not_a_snapshot).
function M.check(snap, what, name)
  E.want(snap, "table", what, name, "a snapshot record from stack:snapshot()")
  if type(snap) ~= "table" or snap.kind ~= "sandstack.snapshot" or type(snap.id) ~= "string"
    or type(snap.spec) ~= "table" then
    return E.fail("invalid", "not_a_snapshot", what .. ": option '" .. name .. "' is not a snapshot record from "
      .. "stack:snapshot() (an entry of sandstack.docker.snapshots() is not one)", { option = name })
  end
  return true
end

-- The options of a start from snap: its spec under the caller's options (secrets, a new
-- project name, ...), the sandbox's image the snapshot's, the egress policy the one in force
-- at the snapshot unless the caller gives one.
function M.restore_opts(snap, opts)
  local o = deep_copy(snap.spec)
  for k, v in pairs(opts) do if k ~= "from_snapshot" then o[k] = v end end
  if opts.services == nil and type(o.services) == "table" then
    for _, s in ipairs(o.services) do
      if s.name == snap.sandbox then s.image = snap.image end
    end
  elseif opts.image == nil and o.image ~= nil then
    o.image = snap.image
  end
  if opts.egress_policy == nil and snap.egress_policy ~= nil then o.egress_policy = snap.egress_policy end
  return o
end

return M
