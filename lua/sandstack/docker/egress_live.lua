-- A running stack's egress, changed live (internal to sandstack.docker and sandstack.swarm, the
-- handles' set_egress, egress, set_credentials and set_model_key). The added proxy listens on a control socket that
-- nothing in the sandbox can reach (docs/proxy.md, "Policy changed live"); docker/control.lua
-- carries each command there, by a socket file the host reaches or by an Engine exec. Every
-- answer is read from the proxy itself: the handle caches no policy.
local core = require "sandstack.core"
local E = require "sandstack.error"
local policy = require "sandstack.policy"
local store = require "sandstack.store"
local transport = require "sandstack.docker.control"

local M = {}

-- The proxy's refusals, as typed errors: a policy it cannot parse is the caller's (invalid).
local INVALID = { invalid_policy = true, needs_restart = true, invalid_credentials = true }

local function refused(stack, verb, answer)
  local reason = type(answer.error) == "string" and answer.error or "refused"
  return nil, E.new(INVALID[reason] and "invalid" or "proxy", reason, verb .. ": " .. tostring(answer.message),
    { rule = answer.rule, index = answer.index, service = stack.plan.proxy.service })
end

-- One control command (verb, payload string or nil) -> the proxy's answer table, or nil, err:
-- every command goes through here, over the stack's transport (docker/control.lua).
local function control(stack, verb, payload)
  local line, err = transport.send(stack, verb, payload)
  if not line then return nil, err end
  local answer = core.json_decode(line)
  if type(answer) ~= "table" then
    return nil, E.new("proxy", "no_control", ("the proxy did not answer %s: %s"):format(verb, line:sub(1, 300)),
      { service = stack.plan.proxy.service })
  end
  if answer.ok ~= true then return refused(stack, verb, answer) end
  return answer
end
M.control = control

-- A policy table (compiled here) or a compiled sandstack.policy, as the JSON the proxy parses.
local function rendered(p)
  if policy.is_policy(p) then return p:render() end
  E.want(p, "table", "set_egress", "argument 'policy'", "a policy table or a compiled sandstack.policy")
  if p == nil then E.raise("set_egress: argument 'policy' must be a policy table or a compiled sandstack.policy, got nil") end
  local compiled, err = policy.compile(p)
  if not compiled then
    return nil, E.new("invalid", "invalid_policy", "set_egress: " .. tostring(err.message), { rule = err.rule })
  end
  return compiled:render()
end

local validate -- below: the credentials option's own validator

-- The credentials in force (the handle's, without their secrets) against the policy json: nil,
-- or the refusal a start and set_credentials give for the same state (a credential whose host
-- no rule admits could never be used), worded for set_egress.
local function strands_credentials(stack, json)
  local list = {}
  for i, c in ipairs(stack.plan.credentials or {}) do
    local e = { secret = string.rep("x", 16) } -- the validator wants one; only hosts are compared
    for k, v in pairs(c) do if k ~= "placeholder" then e[k] = v end end
    list[i] = e
  end
  if #list == 0 then return nil end
  local err = validate(list, json)
  if not err then return nil end
  local c = list[tonumber(tostring(err.option):match("^credentials%[(%d+)%]%.host$"))]
  if not c then return E.new("invalid", "invalid_policy", "set_egress: " .. tostring(err.message)) end
  return E.new("invalid", "invalid_policy", ("set_egress: the policy admits no request to %s:%d, where the credential %s "
    .. "is sent, so it could never be used; keep a rule for that host, or drop the credential with set_credentials "
    .. "first"):format(c.host, c.port or 443, c.name), { credential = c.name })
end

-- true, or nil, err; a refused policy changes nothing (the proxy keeps the one in force). A
-- policy that leaves a credential in force without its host is refused, as at start; `narrow`
-- (a warm pool's waiting stack, whose credentials are throwaway slots) lets it through.
function M.set_egress(stack, p, narrow)
  local json, err = rendered(p)
  if not json then return nil, err end
  if not narrow then
    err = strands_credentials(stack, json)
    if err then return nil, err end
  end
  local answer; answer, err = control(stack, "set-egress", json)
  if not answer then return nil, err end
  return true
end

-- The policy in force, compiled, and its digest (sha256 of the canonical render), as the proxy
-- reports them.
function M.egress(stack)
  local answer, err = control(stack, "egress")
  if not answer then return nil, err end
  local p; p, err = policy.load(answer.rendered or core.json_encode(answer.policy))
  if not p then return nil, err end
  return p, answer.digest
end

-- The credentials option's own validator (csrc/stack/credentials.c, through the stack model) on
-- list, against the policy in force: nil, or the compose error naming credentials[i].field.
function validate(list, in_force_json)
  local model, err = core.stack_model({ agent_port = 1, image = "validate", api_key = string.rep("k", 32),
    egress_policy = core.json_decode(in_force_json), credentials = list }, "set-credentials")
  if not model then return err end
  model:close()
end

local function refuse(i, field, message)
  local option = ("credentials[%d].%s"):format(i, field)
  return E.fail("compose", "invalid_option", "set_credentials: " .. option .. " " .. message, { option = option })
end

-- The credential route's model key: { name = "ANTHROPIC_API_KEY", secret = KEY } in the
-- list, nothing else in that entry. Its placeholder is the session token the sandbox holds, so
-- the key may have any length the proxy takes (16 to 4096 characters of visible ASCII). Returns
-- the entry as the proxy takes it, nil when i is not the model key's, or nil, err.
local MODEL_KEY = "ANTHROPIC_API_KEY"
local function model_key_entry(i, c)
  if type(c) ~= "table" or c.name ~= MODEL_KEY then return nil end
  for k in pairs(c) do
    if k ~= "name" and k ~= "secret" then
      return nil, select(2, refuse(i, tostring(k), "is not for the model key: its host is the upstream's and its "
        .. "placeholder the session token; give name and secret only"))
    end
  end
  local key = c.secret
  if type(key) ~= "string" or #key < 16 or #key > 4096 or key:find("[^\33-\126]") then
    return nil, select(2, refuse(i, "secret", "must be 16 to 4096 characters of visible ASCII"))
  end
  return { name = MODEL_KEY, secret = key }
end

-- The model key alone, replaced live: the credentials in force stay. true, or nil, err (the key
-- in force stays).
function M.set_model_key(stack, key)
  local entry, err = model_key_entry(1, { name = MODEL_KEY, secret = key })
  if not entry then
    err.message = err.message:gsub("credentials%[1%]%.secret", "api_key")
    err.option = "api_key"
    return nil, err
  end
  local answer; answer, err = control(stack, "set-model-key", key)
  if not answer then return nil, err end
  return true
end

-- The whole table of credentials, secrets included, as the stack option takes it. Each name must
-- be one the stack started with (the sandbox holds its placeholder and no other), and a new
-- secret must have its placeholder's length (a response's framing depends on it). An entry
-- { name = "ANTHROPIC_API_KEY", secret = } replaces the model key; without one the key in force
-- stays. true, or nil, err; on any refusal the proxy keeps the credentials in force.
local ENTRY_FIELDS = { "name", "host", "port", "header", "format", "query", "basic", "path" }

-- set-credentials' payload for list, checked against the policy in force (in_force_json, its
-- render; nil asks the proxy, one command more, when an entry needs it): the payload and the
-- entries a record keeps, or nil, err.
local function credentials_payload(stack, list, in_force_json)
  E.want(list, "table", "set_credentials", "argument 'list'", "a list of credentials")
  if list == nil then E.raise("set_credentials: argument 'list' must be a list of credentials, got nil") end
  local rest, model, err = {}, nil, nil
  for i, c in ipairs(list) do
    local m; m, err = model_key_entry(i, c)
    if err then return nil, err end
    if m and model then return refuse(i, "name", "gives the model key a second time") end
    if m then model = m else rest[#rest + 1] = { i = i, c = c } end
  end
  if #rest > 0 then -- the checks that need the policy in force
    local plain = {}
    for k, r in ipairs(rest) do plain[k] = r.c end
    if not in_force_json then
      local in_force; in_force, err = M.egress(stack)
      if not in_force then return nil, err end
      in_force_json = in_force:render()
    end
    err = validate(plain, in_force_json)
    if err then -- named by the caller's own index
      local k, field = tostring(err.option):match("^credentials%[(%d+)%]%.?(.*)$")
      if k and rest[tonumber(k)] then
        local option = ("credentials[%d]%s"):format(rest[tonumber(k)].i, field ~= "" and "." .. field or "")
        err.message = err.message:gsub("credentials%[" .. k .. "%]", option:match("^[^.]+"), 1)
        err.option = option
      end
      return nil, err
    end
  end
  local known = {}
  for _, c in ipairs(store.placeholders(stack.plan) or {}) do known[c.name] = c end
  local entries = {}
  for n, r in ipairs(rest) do
    local i, c = r.i, r.c
    local k = known[c.name]
    if not k then
      return refuse(i, "name", "names no credential of this stack: the sandbox holds no placeholder for "
        .. tostring(c.name) .. " (a new credential needs a new stack)")
    end
    if #c.secret ~= #k.placeholder then
      return refuse(i, "secret", ("must be %d characters long, as the placeholder the sandbox holds"):format(#k.placeholder))
    end
    local e = { secret = c.secret, placeholder = k.placeholder }
    for _, f in ipairs(ENTRY_FIELDS) do e[f] = c[f] end
    e.port = e.port or 443
    entries[n] = e
  end
  local payload = entries
  if model then
    payload = { model }
    for _, e in ipairs(entries) do payload[#payload + 1] = e end
  end
  return #payload > 0 and core.json_encode(payload) or "[]", entries
end

function M.set_credentials(stack, list)
  local payload, entries = credentials_payload(stack, list)
  if not payload then return nil, entries end
  local answer, err = control(stack, "set-credentials", payload)
  if not answer then return nil, err end
  stack.plan.credentials = store.credentials(entries) -- what a record keeps: no secret, no model key
  return true
end


-- The ask hook (the proxy's ask.c): under a policy with ask = true, the requests no rule admits
-- wait in the proxy until answered. The pending asks, oldest first: { id, host, port, method,
-- path, service, at }; path is nil for a tunnel (service "https"), at is Unix seconds.
function M.asks(stack)
  local answer, err = control(stack, "egress-asks")
  if not answer then return nil, err end
  local out = {}
  for i, a in ipairs(answer.asks or {}) do
    out[i] = { id = a.id, host = a.host, port = a.port, method = a.method,
      path = type(a.path) == "string" and a.path or nil, service = a.service, at = a.at }
  end
  return out
end

local DECISIONS = { allow = true, deny = true }
local REMEMBER = { once = true, session = true }
local ANSWER_KEYS = E.described {
  { "remember", "string", type = "string, `\"once\"` or `\"session\"`", default = "`\"once\"`",
    refused = "anything else: `invalid`" },
  { "reason", "string", type = "string", default = "none",
    refused = "over 200 printable ASCII characters: `invalid`" },
  { "by", "string", type = "string", default = "`\"host\"`",
    refused = "over 64 printable ASCII characters: `invalid`" },
}

local function printable(v, max)
  return v == nil or (type(v) == "string" and #v <= max and not v:find("[^\32-\126]"))
end

-- answer(id, "allow"|"deny", { remember = "once"|"session", reason =, by = }): true, or nil, err
-- (kind "invalid" for a bad argument, "not_found"/no_such_ask for an ask already gone).
function M.answer(stack, id, decision, opts)
  opts = E.options(opts, ANSWER_KEYS, "answer")
  E.want(id, "number", "answer", "argument 'id'", "a pending ask's id")
  E.want(decision, "string", "answer", "argument 'decision'", '"allow" or "deny"')
  if type(id) ~= "number" or id ~= math.floor(id) or id < 1 then
    return E.fail("invalid", "ask_id", "answer: id must be a pending ask's id (a whole number from egress_asks)")
  end
  if not DECISIONS[decision] then
    return E.fail("invalid", "decision", "answer: decision must be \"allow\" or \"deny\", not " .. tostring(decision))
  end
  if opts.remember ~= nil and not REMEMBER[opts.remember] then
    return E.fail("invalid", "remember", "answer: remember must be \"once\" or \"session\"")
  end
  if not printable(opts.reason, 200) then
    return E.fail("invalid", "reason", "answer: reason must be at most 200 printable ASCII characters")
  end
  if not printable(opts.by, 64) then
    return E.fail("invalid", "by", "answer: by must be at most 64 printable ASCII characters")
  end
  local answer, err = control(stack, "egress-answer", core.json_encode({ id = id, decision = decision,
    remember = opts.remember or "once", reason = opts.reason, by = opts.by or "host" }))
  if not answer then
    if err.reason == "no_such_ask" then return E.fail("not_found", "no_such_ask", err.message, { id = id }) end
    return nil, err
  end
  return { id = answer.id, decision = answer.decision, remembered = answer.remembered == true }
end

-- A session's egress handed over in one round (a warm pool's claim): { policy =, credentials =,
-- model_key = } each optional, sent as one batch that the proxy runs in order up to the first
-- refusal (the policy first: a credential's host must be one it admits). The credentials are
-- checked against the policy handed over, or the one in force. true, or nil, err.
function M.hand_over(stack, h)
  local cmds, json, entries, err = {}, nil, nil, nil
  if h.policy ~= nil then
    json, err = rendered(h.policy)
    if not json then return nil, err end
    cmds[#cmds + 1] = { "set-egress", json }
  end
  if h.credentials ~= nil then
    local payload; payload, entries = credentials_payload(stack, h.credentials, json)
    if not payload then return nil, entries end
    cmds[#cmds + 1] = { "set-credentials", payload }
  elseif h.model_key then
    local entry; entry, err = model_key_entry(1, { name = MODEL_KEY, secret = h.model_key })
    if not entry then
      err.message, err.option = err.message:gsub("credentials%[1%]%.secret", "api_key"), "api_key"
      return nil, err
    end
    cmds[#cmds + 1] = { "set-model-key", h.model_key }
  end
  if #cmds == 0 then return true end
  local line; line, err = transport.send(stack, cmds)
  if not line then return nil, err end
  local answer = core.json_decode(line)
  local answers = type(answer) == "table" and type(answer.answers) == "table" and answer.answers or nil
  if not answers then
    return nil, E.new("proxy", "no_control", "the proxy did not answer the hand-over: " .. line:sub(1, 300),
      { service = stack.plan.proxy.service })
  end
  for i, c in ipairs(cmds) do
    local a = answers[i]
    if type(a) ~= "table" or a.ok ~= true then return refused(stack, c[1], type(a) == "table" and a or {}) end
  end
  if entries then stack.plan.credentials = store.credentials(entries) end
  return true
end

return M
