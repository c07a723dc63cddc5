-- The error convention of the whole public API (docs/api/README.md, "Conventions"), held to
-- every options table of the reference and to the positional arguments beside them:
--   - a programming error raises a one-line message that starts with the CALLER's file:line (a
--     wrong Lua type for an option or an argument, an options table that is not a table, an
--     unknown option key);
--   - a value of the right type that is refused is a runtime error: nil and a typed
--     sandstack.error (kind, reason "invalid_option", `option` naming it).
-- The options and their types come from the reference itself (spec/support/api_tables.lua): for
-- every row the spec passes a value of a type the row does not name, and for a number the row
-- bounds it passes -1. Nothing here reaches an engine: the handles' engine is a socket that does
-- not exist, so a check that is missing shows as a call that did not raise.
local sandstack = require "sandstack"
local E = require "sandstack.error"
local h = require "helpers"
local tables = require("api_tables").read()

local SPEC = debug.getinfo(1, "S").short_src
local DEAD = "unix:///nonexistent/sandstack-conventions.sock"
local TMP = h.must("mktemp -d /tmp/sstest-conv.XXXXXX"):gsub("%s+$", "")

local function merge(a, b)
  if b ~= nil and type(b) ~= "table" then return b end -- options that are not a table, passed on as they are
  local out = {}
  for k, v in pairs(a or {}) do out[k] = v end
  for k, v in pairs(b or {}) do out[k] = v end
  return out
end

local START = { agent_port = 8080, image = "sandstack-test/agent:local", docker_host = DEAD, timeout = 1 }
local function start_with(o) return merge(START, o) end
local POLICY = { allow = { { host = "api.example.com", methods = { "GET" } } } }
local SLOT = { name = "TOKEN", host = "api.example.com", header = "Authorization", length = 20 }
local CREDENTIAL = { name = "TOKEN", host = "api.example.com", header = "Authorization", format = "Bearer %s", secret = "s3cret-s3cret-s3cret" }

-- A docker handle on a stack that is not there: its plan is a real one, its engine a dead socket.
local function stack()
  local eng = assert(sandstack.engine { host = DEAD, api_version = "1.41", timeout = 1 })
  local plan = assert(sandstack.docker.plan("conv-1", START))
  return require("sandstack.docker.handle").new(eng, plan, {})
end
local function pool() return assert(sandstack.docker.pool { name = "conv", stack = START }) end
local function engine() return assert(sandstack.engine { host = DEAD, api_version = "1.41", timeout = 1 }) end
local function backend() return assert(sandstack.sbx.backend { sbx_path = "/nonexistent/sbx", workspace_root = TMP }) end
local function box() return require("sandstack.sbx.box").new({ backend = backend(), name = "conv", id = "x" }) end

-- submit's refusal, as poll hands it over: nil, err (or the id, when it was accepted).
local function submitted(e, id)
  for _, r in ipairs(e:poll(0)) do
    if r.id == id and r.err then return nil, r.err end
  end
  return id
end

-- How each documented options table is reached: make() builds the object a method is called on;
-- call(o, obj) makes the one public call, on ONE line (its linedefined is where a raise must
-- point), and not as a tail call (which would take the caller's frame away).
local CALLS = {
  ["sandstack.docker.start"] = { kind = "compose", call = function(o) local a, b = sandstack.docker.start("conv-1", start_with(o)) return a, b end },
  ["sandstack.docker.start services"] = { kind = "compose", call = function(o) local a, b = sandstack.docker.start("conv-1", start_with { services = { merge({ name = "sandbox", image = "x" }, o) } }) return a, b end },
  ["sandstack.docker.start services volumes"] = { kind = "compose", call = function(o) local a, b = sandstack.docker.start("conv-1", start_with { volumes = { { name = "v" } }, services = { { name = "sandbox", image = "x", volumes = { merge({ name = "v", target = "/v" }, o) } } } }) return a, b end },
  ["sandstack.docker.start volumes"] = { kind = "compose", call = function(o) local a, b = sandstack.docker.start("conv-1", start_with { volumes = { merge({ name = "v" }, o) } }) return a, b end },
  ["sandstack.docker.start ready"] = { kind = "compose", call = function(o) local a, b = sandstack.docker.start("conv-1", start_with { ready = { sandbox = merge({ test = { "CMD", "true" } }, o) } }) return a, b end },
  ["sandstack.docker.start ports"] = { kind = "compose", call = function(o) local a, b = sandstack.docker.start("conv-1", start_with { ports = { merge({ port = 3000 }, o) } }) return a, b end },
  ["sandstack.docker.start network"] = { kind = "compose", call = function(o) local a, b = sandstack.docker.start("conv-1", start_with { network = o }) return a, b end },
  ["sandstack.docker.start credentials"] = { kind = "compose", call = function(o) local a, b = sandstack.docker.start("conv-1", start_with { egress_policy = POLICY, credentials = { merge(CREDENTIAL, o) } }) return a, b end },
  ["sandstack.docker.start session"] = { kind = "compose", call = function(o) local a, b = sandstack.docker.start("conv-1", start_with(o)) return a, b end },
  ["sandstack.docker.reconnect"] = { call = function(o) local a, b = sandstack.docker.reconnect({ project = "conv" }, merge({ docker_host = DEAD }, o)) return a, b end },
  ["sandstack.docker.list"] = { call = function(o) local a, b = sandstack.docker.list(merge({ docker_host = DEAD }, o)) return a, b end },
  ["sandstack.docker.reap"] = { call = function(o) local a, b = sandstack.docker.reap(merge({ docker_host = DEAD, project = "conv" }, o)) return a, b end },
  ["sandstack.docker.down"] = { call = function(o) local a, b = sandstack.docker.down("conv", merge({ docker_host = DEAD }, o)) return a, b end },
  ["sandstack.docker.build_images"] = { call = function(o) local a, b = sandstack.docker.build_images(merge({ docker_host = DEAD }, o)) return a, b end },
  ["sandstack.docker.snapshots"] = { call = function(o) local a, b = sandstack.docker.snapshots(merge({ docker_host = DEAD }, o)) return a, b end },
  ["sandstack.docker.remove_snapshot"] = { call = function(o) local a, b = sandstack.docker.remove_snapshot({ "conv" }, merge({ docker_host = DEAD }, o)) return a, b end },
  ["sandstack.docker.pool"] = { kind = "compose", call = function(o) local a, b = sandstack.docker.pool(merge({ name = "conv", stack = START }, o)) return a, b end },
  ["sandstack.docker.pool credentials"] = { kind = "compose", call = function(o) local a, b = sandstack.docker.pool { name = "conv", stack = start_with { egress_policy = POLICY, credentials = { merge(SLOT, o) } } } return a, b end },
  ["pool:fill"] = { make = pool, call = function(o, p) local a, b = p:fill(o) return a, b end },
  ["pool:serve"] = { make = pool, call = function(o, p) local a, b = p:serve(o) return a, b end },
  ["stack:stop"] = { make = stack, call = function(o, s) local a, b = s:stop(o) return a, b end },
  ["stack:start"] = { make = stack, call = function(o, s) local a, b = s:start(o) return a, b end },
  ["stack:restart"] = { make = stack, call = function(o, s) local a, b = s:restart(o) return a, b end },
  ["stack:capture"] = { make = stack, call = function(o, s) local a, b = s:capture(TMP .. "/capture", o) return a, b end },
  ["stack:destroy"] = { make = stack, call = function(o, s) local a, b = s:destroy(o) return a, b end },
  ["h:exec"] = { make = stack, call = function(o, s) local a, b = s:exec({ "true" }, o) return a, b end },
  ["h:spawn"] = { make = stack, call = function(o, s) local a, b = s:spawn({ "true" }, o) return a, b end },
  ["h:read"] = { make = stack, call = function(o, s) local a, b = s:read("/x", o) return a, b end },
  ["h:write"] = { make = stack, call = function(o, s) local a, b = s:write("/x", "", o) return a, b end },
  ["h:upload"] = { make = stack, call = function(o, s) local a, b = s:upload(SPEC, "/x", o) return a, b end },
  ["h:download"] = { make = stack, call = function(o, s) local a, b = s:download("/x", TMP .. "/download", o) return a, b end },
  ["h:stat"] = { make = stack, call = function(o, s) local a, b = s:stat("/x", o) return a, b end },
  ["h:list"] = { make = stack, call = function(o, s) local a, b = s:list("/x", o) return a, b end },
  ["h:remove"] = { make = stack, call = function(o, s) local a, b = s:remove("/x", o) return a, b end },
  ["h:logs"] = { make = stack, call = function(o, s) local a, b = s:logs(o) return a, b end },
  ["h:stats"] = { make = stack, call = function(o, s) local a, b = s:stats(o) return a, b end },
  ["h:hibernate"] = { make = stack, call = function(o, s) local a, b = s:hibernate(o) return a, b end },
  ["h:snapshot"] = { make = stack, call = function(o, s) local a, b = s:snapshot(o) return a, b end },
  ["h:changes"] = { make = stack, call = function(o, s) local a, b = s:changes(o) return a, b end },
  ["h:answer"] = { make = stack, call = function(o, s) local a, b = s:answer(1, "allow", o) return a, b end },
  ["h:serve"] = { make = stack, call = function(o, s) local a, b = s:serve(0, merge({ on_ask = function() return "deny" end }, o)) return a, b end },
  ["sandstack.engine"] = { call = function(o) local a, b = sandstack.engine(merge({ host = DEAD, api_version = "1.41" }, o)) return a, b end },
  ["sandstack.engine tls"] = { call = function(o) local a, b = sandstack.engine { host = "https://127.0.0.1:1", api_version = "1.41", tls = o } return a, b end },
  ["eng:request"] = { make = engine, call = function(o, e) local a, b = e:request("GET", "/x", nil, o) return a, b end },
  ["eng:call"] = { make = engine, call = function(o, e) local a, b = e:call("GET", "/x", nil, o) return a, b end },
  ["eng:submit"] = { make = engine, call = function(o, e) local a, b = submitted(e, e:submit("GET", "/x", nil, o)) return a, b end },
  ["eng:exec"] = { make = engine, call = function(o, e) local a, b = e:exec("conv", { "true" }, o) return a, b end },
  ["eng:download"] = { make = engine, call = function(o, e) local a, b = e:download("/x", TMP .. "/dl", o) return a, b end },
  ["eng:events"] = { make = engine, call = function(o, e) local a, b = e:events(o) return a, b end },
  ["sandstack.sbx.backend"] = { call = function(o) local a, b = sandstack.sbx.backend(merge({ sbx_path = "/nonexistent/sbx", workspace_root = TMP }, o)) return a, b end },
  ["backend:acquire"] = { make = backend, call = function(o, bk) local a, b = bk:acquire(merge({ conversation = "c", key = "k" }, o)) return a, b end },
  ["box:exec"] = { make = box, call = function(o, bx) local a, b = bx:exec({ "true" }, o) return a, b end },
  ["box:remove"] = { make = box, call = function(o, bx) local a, b = bx:remove("x", o) return a, b end },
  ["box:reclaim"] = { make = box, call = function(o, bx) local a, b = bx:reclaim("x", o) return a, b end },
  ["sandstack.swarm.start"] = { kind = "compose", call = function(o) local a, b = sandstack.swarm.start("conv-1", start_with(o)) return a, b end },
  ["sandstack.swarm.reconnect"] = { call = function(o) local a, b = sandstack.swarm.reconnect({ project = "conv", kind = "sandstack.swarm" }, merge({ docker_host = DEAD }, o)) return a, b end },
  ["sandstack.swarm.list"] = { call = function(o) local a, b = sandstack.swarm.list(merge({ docker_host = DEAD }, o)) return a, b end },
  ["sandstack.swarm.reap"] = { call = function(o) local a, b = sandstack.swarm.reap(merge({ docker_host = DEAD, project = "conv" }, o)) return a, b end },
}

-- The Lua types a type cell of the reference names.
local WORDS = {
  { "function", "function" }, { "boolean", "boolean" }, { "`false`", "boolean" },
  { "string", "string" }, { "text", "string" }, { "path", "string" }, { '`"', "string" },
  { "second", "number" }, { "byte", "number" }, { "count", "number" }, { "number", "number" }, { "integer", "number" },
  { "table", "table" }, { "list", "table" }, { "set of", "table" }, { "record", "table" }, { "`{", "table" },
  { "client", "table" },
}
local function types_of(cell)
  local set = {}
  for _, w in ipairs(WORDS) do
    if cell:find(w[1], 1, true) then set[w[2]] = true end
  end
  return set
end

-- A value of none of the types a row names.
local CANDIDATES = { true, 42, "x", { 1 }, print }
local function wrong_value(types)
  for _, v in ipairs(CANDIDATES) do
    if not types[type(v)] then return v end
  end
end

local function describe_value(v) return type(v) == "string" and ("%q"):format(v) or type(v) end

-- Calls entry with opts; the raise it must make, checked: a string, one line, starting with the
-- file:line of entry.call (the caller), naming `name`.
local function raises_at_caller(id, entry, opts, name)
  local obj = entry.make and entry.make()
  local ok, err = pcall(entry.call, opts, obj)
  if obj and obj.close then pcall(obj.close, obj) end
  local where = ("%s:%d: "):format(SPEC, debug.getinfo(entry.call, "S").linedefined)
  assert(not ok, ("%s: %s did not raise (it returned %s)"):format(id, name, tostring(err)))
  assert(type(err) == "string", ("%s: %s raised a %s, not a message: %s"):format(id, name, type(err), tostring(err)))
  assert(err:sub(1, #where) == where, ("%s: %s raised at the wrong place: want %s..., got %s"):format(id, name, where, err))
  assert(not err:find("\n"), id .. ": the message is not one line: " .. err)
  assert(err:find(name, #where + 1, true), ("%s: the message does not name %s: %s"):format(id, name, err))
end

-- Calls entry with opts; the refusal it must return: nil, a sandstack.error of `kind` whose
-- `option` names the option.
local function refuses(id, entry, opts, name, kind, reason)
  local obj = entry.make and entry.make()
  local ok, a, err = pcall(entry.call, opts, obj)
  if obj and obj.close then pcall(obj.close, obj) end
  assert(ok, ("%s: %s = -1 raised (a value of the right type is a runtime error): %s"):format(id, name, tostring(a)))
  assert(a == nil and E.is(err), ("%s: %s = -1 was not refused (%s, %s)"):format(id, name, tostring(a), tostring(err)))
  reason = reason or "invalid_option"
  assert(err.kind == kind and err.reason == reason,
    ("%s: %s = -1: want %s/%s, got %s/%s: %s"):format(id, name, kind, reason, tostring(err.kind), tostring(err.reason), tostring(err)))
  assert(reason ~= "invalid_option" or (type(err.option) == "string" and err.option:find(name, 1, true)),
    ("%s: %s = -1: err.option is %s"):format(id, name, tostring(err.option)))
  assert(not tostring(err):find("\n"), id .. ": the message is not one line: " .. tostring(err))
end

-- A number the reference bounds below (not above 0, below 0 or 1, positive, a range).
local function bounded(row, types)
  if not types.number or types.string or types.table or types.boolean then return false end
  return row.refused:find("above 0") or row.refused:find("below [01]") or row.refused:find("positive")
    or row.refused:find("outside") or row.refused:find("not in 1") or row.refused:find("1%-")
end

-- (the gateway's configuration file is no call: every refusal of it is nil, err, held below)
local ids = {}
for id in pairs(tables) do if id ~= "gateway config" then ids[#ids + 1] = id end end
table.sort(ids)

-- A stack handle whose plan carries a credential for api.example.com (POLICY admits it).
local function stack_with_credential()
  local eng = assert(sandstack.engine { host = DEAD, api_version = "1.41", timeout = 1 })
  local plan = assert(sandstack.docker.plan("conv-1", start_with { egress_policy = POLICY, credentials = { CREDENTIAL } }))
  return require("sandstack.docker.handle").new(eng, plan, {})
end

describe("the error convention", function()
  teardown(function() h.sh("rm -rf " .. h.q(TMP)) end)

  it("raises at the caller for arguments of the wrong type, beside the options", function()
    raises_at_caller("start", { call = function() local a, b = sandstack.docker.start(42, START) return a, b end }, nil, "session_key")
    raises_at_caller("swarm", { call = function() local a, b = sandstack.swarm.start(42, START) return a, b end }, nil, "session_key")
    raises_at_caller("down", { call = function() local a, b = sandstack.docker.down(42) return a, b end }, nil, "project")
    raises_at_caller("open", { call = function() local a, b = sandstack.docker.open(42) return a, b end }, nil, "name")
    raises_at_caller("reconnect", { call = function() local a, b = sandstack.docker.reconnect(42) return a, b end }, nil, "record")
    raises_at_caller("set_egress", { make = stack, call = function(_, s) local a, b = s:set_egress(42) return a, b end }, nil, "policy")
    raises_at_caller("set_credentials", { make = stack, call = function(_, s) local a, b = s:set_credentials(42) return a, b end }, nil, "list")
    raises_at_caller("set_timeout", { make = stack, call = function(_, s) local a, b = s:set_timeout("1h") return a, b end }, nil, "seconds")
    raises_at_caller("exec", { make = stack, call = function(_, s) local a, b = s:exec(42) return a, b end }, nil, "cmd")
    raises_at_caller("write", { make = stack, call = function(_, s) local a, b = s:write("/x", 42) return a, b end }, nil, "data")
    raises_at_caller("read", { make = stack, call = function(_, s) local a, b = s:read(42) return a, b end }, nil, "path")
    raises_at_caller("fork", { make = stack, call = function(_, s) local a, b = s:fork(42) return a, b end }, nil, "new_key")
    raises_at_caller("attach", { make = stack, call = function(_, s) local a, b = s:attach(42) return a, b end }, nil, "id")
    raises_at_caller("acquire", { make = pool, call = function(_, p) local a, b = p:acquire(42) return a, b end }, nil, "session_key")
  end)

  it("returns nil, err for arguments of the right type that are refused", function()
    refuses("set_timeout", { make = stack, call = function(_, s) local a, b = s:set_timeout(-1) return a, b end }, nil, "seconds", "compose")
    refuses("read", { make = stack, call = function(_, s) local a, b = s:read("relative") return a, b end }, nil, "", "invalid", "path")
    refuses("attach", { make = stack, call = function(_, s) local a, b = s:attach("") return a, b end }, nil, "id", "invalid")
    refuses("stats every", { make = stack, call = function(_, s) local a, b = s:stats { every = 1 } return a, b end }, nil, "every", "invalid")
    refuses("stats window", { make = stack, call = function(_, s) local a, b = s:stats { window = 1, every = 2 } return a, b end }, nil, "window", "invalid")
    refuses("stats samples", { make = stack, call = function(_, s) local a, b = s:stats { window = 3601 } return a, b end }, nil, "window", "invalid")
  end)

  it("refuses a live policy that strands a credential, as a start does", function()
    local s = stack_with_credential()
    local ok, err = s:set_egress { allow = { "other.example.com" } }
    assert.is_nil(ok)
    assert.same({ "invalid", "invalid_policy", "TOKEN" }, { err.kind, err.reason, err.credential })
    assert.matches("api.example.com:443", err.message, 1, true)
    -- the control: a policy that keeps the host goes on to the proxy (here: no engine there)
    ok, err = s:set_egress(POLICY)
    assert.is_nil(ok)
    assert.equal("transport", err.kind)
    -- and a start refuses the same state
    local plan, perr = sandstack.docker.plan("conv-1", start_with { egress_policy = { allow = { "other.example.com" } },
      credentials = { CREDENTIAL } })
    assert.is_nil(plan)
    assert.equal("credentials[1].host", perr.option)
    -- under ask = true the host may still be admitted, by an answer: both take it
    local asks = { allow = { "other.example.com" }, ask = true }
    ok, err = s:set_egress(asks)
    assert.equal("transport", err.kind)
    assert(sandstack.docker.plan("conv-1", start_with { egress_policy = asks, credentials = { CREDENTIAL } }))
    s:close()
  end)

  it("says what a rule is when a URL is given as one", function()
    local p, err = sandstack.policy.compile { allow = { "https://x.com/" } }
    assert.is_nil(p)
    assert.equal("invalid", err.kind)
    assert.matches("not a URL", err.message, 1, true)
    assert.not_matches("port", err.message, 1, true)
  end)

  it("takes session keys as the message says: upper case included", function()
    assert(sandstack.docker.plan("Quickstart-1", START))
    local plan, err = sandstack.docker.plan("bad key!", START)
    assert.is_nil(plan)
    assert.equal("invalid_name", err.reason)
    assert.not_matches("lowercase", err.message, 1, true)
    assert.matches("letters, digits", err.message, 1, true)
  end)

  it("returns every refusal of the gateway's configuration file as nil, err naming the key", function()
    local config = require "sandstack.gateway.config"
    local base = { tenants = { { name = "t", token_sha256 = ("a"):rep(64) } }, stack = START }
    assert(config.check(base))
    local keys = {}
    for k in pairs(config.KEYS) do keys[#keys + 1] = k end -- every documented key
    table.sort(keys)
    for _, k in ipairs(keys) do
      local d = config.DEFAULTS[k] -- a value of another type than the default's
      local t = merge(base, { [k] = type(d) == "string" and 42 or d == nil and true or "x" })
      local ok, err = config.check(t)
      assert(ok == nil and E.is(err), k .. " was accepted")
      assert.same({ "invalid", "invalid_option", k }, { err.kind, err.reason, err.option })
    end
  end)

  it("has a way to reach every documented options table", function()
    local missing = {}
    for _, id in ipairs(ids) do
      if not CALLS[id] then missing[#missing + 1] = id end
    end
    assert(#missing == 0, "no entry in CALLS for: " .. table.concat(missing, ", "))
  end)

  for _, id in ipairs(ids) do
    local entry, doc = CALLS[id], tables[id]
    describe(id, function()
      it("raises at the caller for an unknown option and for options that are not a table", function()
        raises_at_caller(id, entry, { no_such_option = 1 }, "no_such_option")
        if not id:find(" ") then raises_at_caller(id, entry, 42, "options") end
      end)
      for _, row in ipairs(doc.rows) do
        local types = types_of(row.type)
        local bad = wrong_value(types)
        for _, name in ipairs(row.names) do
          if next(types) then
            it(("raises at the caller for %s = %s (%s)"):format(name, describe_value(bad), row.type), function()
              raises_at_caller(id, entry, { [name] = bad }, name)
            end)
          end
          if bounded(row, types) then
            it(("returns nil, err for %s = -1 (%s)"):format(name, row.refused), function()
              refuses(id, entry, { [name] = -1 }, name, entry.kind or "invalid")
            end)
          end
        end
      end
    end)
  end
end)
