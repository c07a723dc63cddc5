-- The sbx backend's egress logic, pure (no CLI calls): what the host's global rules, secrets
-- and governance mean for one allowlist, and which sbx rules express the allowlist.
-- The allowlist is a compiled sandstack.policy; "*.x" there means subdomains of x at any depth,
-- never x itself. Every question about hosts (does an sbx resource or pattern meet what the
-- allowlist admits?) is answered by the policy's C matcher (csrc/policy/coverage.c:
-- policy:coverage, policy:reaches); this file only sequences the answers.
local M = {}

local function lower(s) return (s or ""):lower() end

-- The resources of a rule from `sbx policy ls --json` (network rules and http targets).
function M.resources(rule)
  local out = {}
  for _, r in ipairs(rule.resources or {}) do out[#out + 1] = r end
  for _, t in ipairs(rule.http_targets or {}) do
    if t.host then out[#out + 1] = t.host end
  end
  return out
end

-- Reads what the host's egress state means for an allowlist (a compiled policy).
--   state = { rules = <policy ls json>.rules, secrets = <secret ls json>, governance = bool }
--   name: the sandbox name (its own scope counts for secrets)
-- Returns { deny = {resources to deny for the sandbox} } or nil, reason, detail.
function M.assess(allow, state, name)
  if state.governance then
    return nil, "governance", "organization governance is active: this host's rules do not apply"
  end
  local scopes = { global = true, ["sandbox:" .. name] = true }
  local sec = state.secrets or {}
  for _, s in ipairs(sec.secrets or {}) do
    if scopes[s.scope] and (s.type == nil or s.type == "service") then
      return nil, "service_secret", ("a stored %s secret %q (%s) is injected into domains sbx does not report;"
        .. " remove it with `sbx secret rm`"):format(tostring(s.type or "service"), tostring(s.name), tostring(s.scope))
    end
  end
  if (tonumber(sec.env_only_count) or 0) > 0 then
    return nil, "env_secret", "sbx takes service secrets from the host environment; unset them"
      .. " (`sbx secret ls` counts them)"
  end
  for _, c in ipairs(sec.custom_secrets or {}) do
    if scopes[c.scope] then
      for _, t in ipairs(c.targets or {}) do
        if allow:reaches(t) then
          return nil, "custom_secret", ("a custom secret (%s) targets %s, which the allowlist reaches;"
            .. " remove it with `sbx secret rm --placeholder`"):format(tostring(c.env), t)
        end
      end
    end
  end
  local deny, seen = {}, {}
  for _, r in ipairs(state.rules or {}) do
    if r.scope == "global" and r.decision == "allow" and r.status ~= "inactive" then
      for _, res in ipairs(M.resources(r)) do
        local c = allow:coverage(res)
        if c == "all" then
          return nil, "global_allow_all", "the global ** allow rule (sbx policy init allow-all) opens"
            .. " every host; run `sbx policy reset` then `sbx policy init deny-all`"
        elseif c == "glob" then
          return nil, "global_allow_glob", ("the global allow %q is a glob sbx matches in ways a deny cannot"
            .. " mirror exactly; remove it with `sbx policy rm network --resource %s`"):format(res, res)
        elseif c == "wider" then
          return nil, "global_allow", ("the global allow %q admits a requested host and more;"
            .. " remove it with `sbx policy rm network --resource %s`"):format(res, res)
        -- "covered" and "apex_denied" ("**.x" beside "*.x", whose apex the sandbox denies itself)
        -- open nothing beyond the allowlist: left as they are
        elseif c == "disjoint" and not seen[res] then
          seen[res] = true
          deny[#deny + 1] = res
        end
      end
    end
  end
  return { deny = deny }
end

-- sbx path globs for one policy path: "/v1/*" admits /v1 and everything under it.
local function sbx_paths(p)
  if p:sub(-2) == "/*" then
    local base = p:sub(1, -3)
    return { base == "" and "/" or base, base .. "/**" }
  end
  return { p }
end

-- A rule that opens every method, path and port of its hosts.
local function plain(r)
  return r.port == nil and r.methods == nil and r.paths == nil
end

-- The sbx allow/deny commands (argument lists after `sbx policy`) that express the allowlist
-- (a compiled policy) for sandbox `name`.
function M.commands(allow, name)
  local list = allow:rules()
  local cmds, plain_res, listed = {}, {}, {}
  for _, e in ipairs(list) do
    if not e.wildcard and plain(e) then listed[e.host] = true end
  end
  for _, e in ipairs(list) do
    local res = (e.wildcard and "**." or "") .. e.host .. ((e.port and e.port ~= 0) and (":" .. e.port) or "")
    local methods = e.methods and #e.methods > 0 and table.concat(e.methods, ",") or nil
    local paths = e.paths and #e.paths > 0 and e.paths or nil
    if not methods and not paths then
      plain_res[#plain_res + 1] = res
    else
      for _, p in ipairs(paths or { "/*" }) do
        for _, sp in ipairs(sbx_paths(p)) do
          cmds[#cmds + 1] = { "allow", "network", "--sandbox", name, res, "--method", methods or "ANY", "--path", sp }
        end
      end
    end
    -- sbx's **.x also admits x; the policy's *.x must not, unless x is listed on its own
    if e.wildcard and not listed[e.host] then
      listed[e.host] = true
      cmds[#cmds + 1] = { "deny", "network", "--sandbox", name, e.host }
    end
  end
  if #plain_res > 0 then
    table.insert(cmds, 1, { "allow", "network", "--sandbox", name, table.concat(plain_res, ",") })
  end
  return cmds
end

-- A canonical string of the rules scoped to one sandbox, to notice any change later.
function M.fingerprint(rules, name)
  local scope, parts = "sandbox:" .. name, {}
  for _, r in ipairs(rules or {}) do
    if r.scope == scope then
      local res = {}
      for _, x in ipairs(r.resources or {}) do res[#res + 1] = x end
      table.sort(res)
      local ht = {}
      for _, t in ipairs(r.http_targets or {}) do
        ht[#ht + 1] = tostring(t.host) .. " " .. table.concat(t.methods or {}, ",") .. " " .. tostring(t.path or "")
      end
      table.sort(ht)
      parts[#parts + 1] = table.concat({ tostring(r.decision), tostring(r.resource_type), tostring(r.status),
        table.concat(res, ","), table.concat(ht, ";") }, "|")
    end
  end
  table.sort(parts)
  return table.concat(parts, "\n")
end

-- Drift: what changed since the sandbox opened. Returns nil when nothing did, else reason, detail.
function M.drift(allow, state, name, fingerprint)
  if M.fingerprint(state.rules, name) ~= fingerprint then
    return "rules_changed", "the sandbox's own sbx rules differ from what sbx reported when it opened"
  end
  local own_deny = {}
  for _, r in ipairs(state.rules or {}) do
    if r.scope == "sandbox:" .. name and r.decision == "deny" then
      for _, x in ipairs(r.resources or {}) do own_deny[lower(x)] = true end
    end
  end
  local filtered = {}
  for _, r in ipairs(state.rules or {}) do
    if r.scope == "global" and r.decision == "allow" and r.status ~= "inactive" then
      local keep = {}
      for _, x in ipairs(M.resources(r)) do
        if not own_deny[lower(x)] then keep[#keep + 1] = x end
      end
      if #keep > 0 then
        filtered[#filtered + 1] = { scope = "global", decision = "allow", resources = keep }
      end
    end
  end
  local st = { rules = filtered, secrets = state.secrets, governance = state.governance }
  local res, reason, detail = M.assess(allow, st, name)
  if not res then return reason, detail end
  if #res.deny > 0 then
    return "global_allow", ("a new global allow (%s) admits hosts beyond the allowlist"):format(table.concat(res.deny, ","))
  end
  return nil
end

return M
