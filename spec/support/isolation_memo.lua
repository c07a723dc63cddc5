-- Test support for the isolation self-check's memo on the engine (lua/sandstack/docker/isolation.lua):
-- an engine proxy that reports another identity (another engine, version or daemon start), and
-- the removal of the memos such a proxy made. The real engine's own memo is left alone: other
-- processes on the machine rely on it.
local core = require "sandstack.core"
local isolation = require "sandstack.docker.isolation"

local M = {}

local FAKE = "sstest-iso-"

function M.fake_id() return FAKE .. core.random_hex(6) end

-- A request's method and path: positional {method, path, ...} or the plan's keyed form.
function M.method_path(q)
  if q[1] ~= nil then return q[1], q[2] end
  return q.method, q.path
end

-- A proxy for eng whose answers to GET /info, /version and /networks/bridge carry `as`:
-- { ID =, Version =, bridge_id =, bridge_created = }. Every other call goes to eng unchanged.
function M.engine_as(eng, as)
  local proxy = setmetatable({}, { __index = function(_, k)
    local v = eng[k]
    if type(v) == "function" then return function(_, ...) return v(eng, ...) end end
    return v
  end })
  local function rewrite(path, body)
    if type(body) ~= "table" then return end
    if path == "/info" then body.ID = as.ID or body.ID end
    if path == "/version" then body.Version = as.Version or body.Version end
    if path == "/networks/bridge" then
      body.Id = as.bridge_id or body.Id
      body.Created = as.bridge_created or body.Created
    end
  end
  proxy.perform = function(_, reqs, deadline)
    local res, err = eng:perform(reqs, deadline)
    for i, q in ipairs(res and reqs or {}) do
      if res[i].ok then rewrite(select(2, M.method_path(q)), res[i].body) end
    end
    return res, err
  end
  proxy.call = function(_, method, path, body, opts)
    local res, err = eng:call(method, path, body, opts)
    if res and method == "GET" then rewrite(path, res) end
    return res, err
  end
  return proxy
end

-- Wraps proxy's perform (the plan's requests come through it): on_request(method, path, body)
-- sees each JSON body and may return another to send instead; on_answer(method, path, body)
-- sees each successful answer's body, to change it in place.
function M.intercept(proxy, on_request, on_answer)
  local perform = proxy.perform
  proxy.perform = function(self, reqs, ...)
    local sent = {}
    for i, q in ipairs(reqs) do
      sent[i] = q
      local method, path = M.method_path(q)
      local text = q[1] ~= nil and q[3] or q.body_json
      local body = on_request and type(text) == "string" and on_request(method, path, assert(core.json_decode(text)))
      if body then
        local copy = {}
        for k, v in pairs(q) do copy[k] = v end
        if q[1] ~= nil then copy[3] = core.json_encode(body) else copy.body_json = core.json_encode(body) end
        sent[i] = copy
      end
    end
    local res, err = perform(self, sent, ...)
    for i, q in ipairs(res and sent or {}) do
      local method, path = M.method_path(q)
      if res[i].ok and on_answer then on_answer(method, path, res[i].body) end
    end
    return res, err
  end
  return proxy
end

-- The memo volumes on eng: { name = labels }; with engine_id, only those of that engine (a fake
-- one's: other processes on the machine write the real engine's memo whenever they check it).
function M.memos(eng, engine_id)
  local vols = assert(eng:call("GET", "/volumes", nil, { query = { filters = { label = { isolation.MEMO_LABEL } } } }))
  local out = {}
  for _, v in ipairs(vols.Volumes or {}) do
    local labels = v.Labels or {}
    if not engine_id or labels["io.sandstack.isolation.engine"] == engine_id then out[v.Name] = labels end
  end
  return out
end

-- Removes the memos of fake engines (and the test's forgeries, which carry a fake ID too).
function M.drop_fakes(eng)
  for name, labels in pairs(M.memos(eng)) do
    local who = labels["io.sandstack.isolation.engine"] or ""
    if who:sub(1, #FAKE) == FAKE then
      assert(eng:call("DELETE", "/volumes/" .. name, nil, { ok = { [404] = true } }))
    end
  end
end

return M
