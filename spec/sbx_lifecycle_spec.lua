-- Ownership, warm acquire, egress rules as sbx holds them, create races, disposal and its
-- "delete only what was there before" rule.
local core = require "sandstack.core"
local H = require "sbx_helpers"

describe("sbx lifecycle #docker", function()
  local env, backend
  setup(function() env, backend = H.setup_backend("life") end)
  teardown(function() assert.equal(0, H.teardown_backend(env, backend)) end)

  local function listed(name)
    local out = H.sbx(env, "ls", "--json")
    local v = core.json_decode(out)
    for _, sb in ipairs(v.sandboxes) do
      if sb.name == name then return sb end
    end
  end

  local function exists(path)
    local f = io.open(path, "r")
    if f then f:close() return true end
    return false
  end

  it("a warm acquire returns the same sandbox; different egress, image or work_dir is invalid", function()
    local box = assert(backend:acquire{ conversation = "c", key = "warm" })
    local again = assert(backend:acquire{ conversation = "c", key = "warm" })
    assert.equal(box.id, again.id)
    assert.equal(box.name, again.name)
    local _, err = backend:acquire{ conversation = "c", key = "warm", egress = "allowlist", egress_allow = { "a.example" } }
    assert.equal("invalid", err.kind)
    _, err = backend:acquire{ conversation = "c", key = "warm", image = "sandstack-test/agent:local" }
    assert.equal("invalid", err.kind)
    _, err = backend:acquire{ conversation = "c", key = "warm", work_dir = "/other/work" }
    assert.equal("invalid", err.kind)
    -- a different kind is a different sandbox
    local k2 = assert(backend:acquire{ conversation = "c", key = "warm", kind = "second" })
    assert.not_equal(box.name, k2.name)
    -- dispose(key) removes every kind of that key and nothing else
    local other = assert(backend:acquire{ conversation = "c", key = "keep" })
    local res = assert(backend:dispose{ conversation = "c", key = "warm" })
    assert.equal(2, #res.removed)
    assert.is_nil(listed(box.name))
    assert.is_nil(listed(k2.name))
    assert.is_false(exists(box.workspace))
    assert.truthy(listed(other.name))
    local _, rerr = box:exec({ "true" })
    assert.equal("retired", rerr.kind)
    assert(other:dispose())
  end)

  it("refuses bad options before touching sbx", function()
    assert.has_error(function() backend:acquire{ conversation = "c", key = "k", bogus = true } end)
    local _, err = backend:acquire{ conversation = "c", key = "k", work_dir = "/work" }
    assert.equal("invalid", err.kind)
    _, err = backend:acquire{ conversation = "c", key = "k", egress = "allowlist" }
    assert.equal("invalid", err.kind)
    _, err = backend:acquire{ conversation = "c", key = "k", egress = "allowlist",
      egress_allow = { { host = "a.example", authority = "x" } } }
    assert.equal("invalid", err.kind)
    _, err = backend:acquire{ conversation = "c", key = "k", work_dir = "/tmp/work" } -- /tmp exists in the image
    assert.equal("invalid", err.kind)
    assert.equal("work_dir", err.reason)
  end)

  it("opens an allowlist only after its rules are in, and keeps closed sandboxes closed", function()
    local box = assert(backend:acquire{ conversation = "c", key = "allow", egress = "allowlist", egress_allow = {
      "api.example.com", "*.svc.example", { host = "x.example", methods = { "GET" }, paths = { "/v1/*" } } } })
    local function check(target)
      local out = H.sbx(env, "policy", "check", "network", "--json", "--sandbox", box.name, target)
      return core.json_decode(out).allowed
    end
    assert.is_true(check("api.example.com"))
    assert.is_true(check("a.b.svc.example"))
    assert.is_false(check("svc.example")) -- the wildcard does not admit its apex
    assert.is_false(check("other.example"))
    local pol = H.sbx(env, "policy", "ls", box.name, "--json")
    assert.not_matches('"%*%*"', pol) -- the ** deny is gone
    assert.matches('"methods": %["GET"%]', pol)
    assert.matches('/v1/%*%*', pol)
    local closed = assert(backend:acquire{ conversation = "c", key = "closed" })
    local out = H.sbx(env, "policy", "check", "network", "--json", "--sandbox", closed.name, "api.example.com")
    assert.is_false(core.json_decode(out).allowed)
    assert(box:dispose())
    assert(closed:dispose())
  end)

  it("two creates racing one name give one sandbox and a conflict", function()
    local code = ([[
      local sbx = require "sandstack.sbx"
      local create, records = require "sandstack.sbx.create", require "sandstack.sbx.records"
      local b = assert(sbx.backend(%s))
      local box, err = create.create(b, records.name_for(b, "c", "race", "default"), { egress = "closed", mount = "/sandstack",
        work_dir = "/sandstack/work", allow_canon = "" })
      print(box and ("id=" .. box.id) or ("err=" .. err.kind .. "/" .. tostring(err.reason)))
    ]]):format(H.opts_literal(env))
    local a, b = H.spawn(code), H.spawn(code)
    local ra, rb = a:result(), b:result()
    local ids, conflicts = {}, 0
    for _, r in ipairs({ ra, rb }) do
      local id = r:match("id=(%S+)")
      if id then ids[#ids + 1] = id end
      if r:match("err=sbx/conflict") then conflicts = conflicts + 1 end
    end
    assert.equal(1, #ids, ra .. rb)
    assert.equal(1, conflicts, ra .. rb)
    local name = require("sandstack.sbx.records").name_for(backend, "c", "race", "default")
    assert.equal(ids[1], listed(name).id)
    -- the loser left no workspace behind
    local dirs = core.listdir(env.workspace_root .. "/" .. name)
    local ws = 0
    for _, d in ipairs(dirs) do if d:match("^ws%-") then ws = ws + 1 end end
    assert.equal(1, ws)
    assert(backend:dispose{ conversation = "c", key = "race" })
  end)

  it("dispose_scope racing a create deletes only what was there before", function()
    local first = assert(backend:acquire{ conversation = "scope", key = "k1" })
    local child = H.spawn(([[
      local sbx = require "sandstack.sbx"
      local b = assert(sbx.backend(%s))
      local box, err
      for _ = 1, 5 do
        box, err = b:acquire{ conversation = "scope", key = "k2" }
        if box then break end
      end
      print(box and ("ws=" .. box.workspace .. " name=" .. box.name) or ("err=" .. tostring(err)))
    ]]):format(H.opts_literal(env)))
    local res, err = backend:dispose_scope("scope")
    assert(res, tostring(err))
    local out = child:result()
    assert.is_false(exists(first.workspace))
    assert.is_nil(listed(first.name))
    -- whatever the interleaving, a sandbox that exists afterwards still has its workspace
    local ws, name = out:match("ws=(%S+) name=(%S+)")
    assert.truthy(ws, out)
    local sb = listed(name)
    if sb then
      assert.is_true(exists(ws))
      assert.equal(ws, sb.workspaces[1])
    end
    assert(backend:dispose_scope("scope"))
    assert.is_nil(listed(name))
  end)

  it("a handle never removes the sandbox that replaced it", function()
    local box = assert(backend:acquire{ conversation = "c", key = "replace" })
    H.sbx(env, "rm", "--force", box.name) -- removed behind the backend's back
    local fresh = assert(backend:acquire{ conversation = "c", key = "replace" })
    assert.not_equal(box.id, fresh.id)
    assert(box:dispose())
    assert.truthy(listed(fresh.name))
    assert.equal(fresh.id, listed(fresh.name).id)
    assert.is_true(exists(fresh.workspace))
    assert(fresh:dispose())
    assert.is_nil(listed(fresh.name))
  end)

  it("disposal finds a sandbox from its workspace directory alone", function()
    local box = assert(backend:acquire{ conversation = "dirs", key = "k" })
    H.sbx(env, "rm", "--force", box.name)
    assert.is_true(exists(box.workspace))
    local res = assert(backend:dispose_scope("dirs"))
    assert.same({ box.name }, res.removed)
    assert.is_false(exists(box.workspace))
  end)
end)
