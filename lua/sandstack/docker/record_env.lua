-- A record keeps each service's environment by name, never by value (internal to
-- sandstack.docker). The start's options a handle keeps (snapshot.spec_of) go into its record,
-- and the record is handed out, kept on the engine (a volume's label) and in a gateway's mark:
-- a value there (a sidecar's database password) would be a secret in every copy. Reconnect,
-- wake and hibernate need no value (the containers hold their environment); a snapshot does,
-- and reads the values back from the stack's containers, where they live anyway.
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"
local store = require "sandstack.store"

local M = {}

-- The names of env (a map, or a list of "NAME=value"), sorted.
local function names_of(env)
  local out = {}
  if env[1] ~= nil then
    for _, e in ipairs(env) do out[#out + 1] = tostring(e):match("^([^=]*)") end
  else
    for k in pairs(env) do out[#out + 1] = tostring(k) end
  end
  table.sort(out)
  return out
end

-- A copy of spec in which each service's env is replaced by env_names (its names only). A
-- spec already withheld, or without services, is copied as it is.
function M.withhold(spec)
  if type(spec) ~= "table" then return spec end
  local out = {}
  for k, v in pairs(spec) do out[k] = v end
  if type(spec.services) ~= "table" then return out end
  out.services = {}
  for i, sv in ipairs(spec.services) do
    local c = {}
    for k, v in pairs(type(sv) == "table" and sv or {}) do c[k] = v end
    if type(c.env) == "table" then
      c.env_names, c.env = names_of(c.env), nil
    end
    out.services[i] = c
  end
  return out
end

-- "NAME=value" lines -> { NAME = value }.
local function env_map(lines)
  local out = {}
  for _, e in ipairs(type(lines) == "table" and lines or {}) do
    local k, v = tostring(e):match("^([^=]*)=(.*)$")
    if k then out[k] = v end
  end
  return out
end

-- What a snapshot never keeps, as the stack's containers hold it: the model key and the token
-- (any container's ANTHROPIC_API_KEY and SANDSTACK_SESSION_TOKEN), each credential's secret
-- (the added proxy's SANDSTACK_CREDENTIALS) and the sandbox's placeholders.
local function secrets_in(envs, placeholders)
  local out = {}
  local function add(v) if type(v) == "string" and #v >= 4 then out[#out + 1] = v end end
  for _, env in pairs(envs) do
    add(env.ANTHROPIC_API_KEY)
    add(env.SANDSTACK_SESSION_TOKEN)
    local creds = env.SANDSTACK_CREDENTIALS and core.json_decode(env.SANDSTACK_CREDENTIALS)
    for _, c in ipairs(type(creds) == "table" and creds or {}) do add(type(c) == "table" and c.secret) end
  end
  for _, p in ipairs(placeholders) do add(p) end
  return out
end

local function holds_secret(v, secrets)
  for _, s in ipairs(secrets) do if v:find(s, 1, true) then return true end end
  return false
end

-- spec with each service's env_names turned back into env: the values each service's container
-- holds for those names, read from the engine (one round of inspects, every container of the
-- stack), but never the model key's variable nor a value holding a secret of the stack (the
-- sandstack wiring a restore sets again). spec as it is when nothing is withheld. plan: the
-- handle's plan (its containers and credentials). Returns spec, or nil, err.
function M.fill(eng, plan, spec)
  local withheld = false
  for _, sv in ipairs(type(spec.services) == "table" and spec.services or {}) do
    withheld = withheld or type(sv.env_names) == "table"
  end
  if not withheld then return spec end
  local names = {}
  for i, c in ipairs(plan.containers) do names[i] = c.name end
  local r = batch.run(eng, core.session_requests("inspect", names), 60)
  local envs, by_service = {}, {}
  for i, c in ipairs(plan.containers) do
    if not r[i].ok then return nil, r[i].err end
    if r[i].status == 404 then
      return nil, E.new("engine", "not_found", "container " .. c.name
        .. " is gone: its environment cannot be read for the snapshot", { status = 404 })
    end
    local cfg = type(r[i].body) == "table" and r[i].body.Config or {}
    envs[c.name] = env_map(cfg.Env)
    by_service[c.service] = envs[c.name]
  end
  local placeholders = {}
  for _, c in ipairs(store.placeholders(plan) or {}) do placeholders[#placeholders + 1] = c.placeholder end
  local secrets = secrets_in(envs, placeholders)
  local out = {}
  for k, v in pairs(spec) do out[k] = v end
  out.services = {}
  for i, sv in ipairs(spec.services) do
    local c = {}
    for k, v in pairs(sv) do c[k] = v end
    if type(sv.env_names) == "table" then
      local held, env = by_service[sv.name] or {}, {}
      for _, n in ipairs(sv.env_names) do
        local v = held[n]
        if v and n ~= "ANTHROPIC_API_KEY" and not holds_secret(v, secrets) then env[n] = v end
      end
      c.env, c.env_names = env, nil
    end
    out.services[i] = c
  end
  return out
end

return M
