-- The sbx backend's conventions without a sandbox: a closed backend refuses every
-- use with a "closed" error object, box:dir raises as lfs.dir does, records reach the disk
-- through the file plane (fsync before the rename, the directory after it), and the egress
-- host matcher is the policy's C one. Unit specs: no sbx, no engine.
local core, policy, sbx = require "sandstack.core", require "sandstack.policy", require "sandstack.sbx"
local h, H = require "helpers", require "sbx_helpers"
-- internals, reached through their own modules (the Backend has only API.md's methods)
local records, boxes = require "sandstack.sbx.records", require "sandstack.sbx.box"
local retirement = require "sandstack.sbx.retirement"
local egress = require "sandstack.sbx.egress"

-- A backend on a scratch root whose sbx cannot run, and a Box on a recorded, local workspace
-- (nothing below calls sbx: usability is read from the record, files from the plane).
local function local_box()
  local root = h.must("mktemp -d /tmp/sstest-sbxunit.XXXXXX"):match("%S+")
  local b = assert(sbx.backend { sbx_path = "/nonexistent/sbx", workspace_root = root, name_prefix = "u-" })
  local name = "u-box"
  assert(core.mkdir(root .. "/" .. name))
  local ws = root .. "/" .. name .. "/ws"
  assert(core.mkdir(ws, 493))
  assert(core.mkdir(ws .. "/work", 493))
  assert(records.write(b, name, { name = name, id = "id-1" }))
  local box = boxes.new { backend = b, name = name, id = "id-1", workspace = ws, mount = "/sandstack",
    work_dir = "/sandstack/work", egress = "closed" }
  return b, box, root
end

local function raised(fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error to be raised")
  assert.is_true(core.is_error(err), "raised something that is not an error object: " .. tostring(err))
  return err
end

describe("sbx backend close", function()
  it("refuses every method after close with a closed error object; close is idempotent", function()
    local b, box, root = local_box()
    assert(box:write("a.txt", "x")) -- usable before
    b:close()
    b:close()
    for what, fn in pairs {
      acquire = function() return b:acquire { conversation = "c", key = "k" } end,
      dispose = function() return b:dispose { conversation = "c", key = "k" } end,
      dispose_scope = function() return b:dispose_scope("c") end,
      exec = function() return box:exec { "true" } end,
      read = function() return box:read("a.txt") end,
      dir = function() for _ in box:dir(".") do end end,
      remove = function() return box:remove("a.txt") end,
      box_dispose = function() return box:dispose() end,
    } do
      local err = raised(fn)
      assert.equal("closed", err.kind, what)
      assert.matches("closed", tostring(err), nil, nil, what)
    end
    box:close()
    box:close()
    h.must("rm -rf " .. h.q(root))
  end)

  it("has close, and on Lua 5.4 __close, on the backend object", function()
    local root = h.must("mktemp -d /tmp/sstest-sbxunit.XXXXXX"):match("%S+")
    local b = assert(sbx.backend { sbx_path = "/nonexistent/sbx", workspace_root = root })
    assert.is_function(b.close)
    if _VERSION == "Lua 5.4" and not rawget(_G, "jit") then
      assert.equal(b.close, getmetatable(b).__close)
    end
    b:close()
    h.must("rm -rf " .. h.q(root))
  end)
end)

describe("box:dir", function()
  it("iterates like lfs.dir and raises the error object on a bad path, never 'call a nil value'", function()
    local b, box, root = local_box()
    assert(box:write("a.txt", "x"))
    local names = {}
    for n in box:dir(".") do names[#names + 1] = n end
    table.sort(names)
    assert.same({ ".", "..", "a.txt" }, names)
    local err = raised(function() for _ in box:dir("missing") do end end)
    assert.equal("io", err.kind)
    assert.equal("ENOENT", err.reason)
    err = raised(function() for _ in box:dir("a.txt") do end end)
    assert.equal("ENOTDIR", err.reason)
    err = raised(function() for _ in box:dir("../../..") do end end) -- outside the workspace
    assert.equal("invalid", err.kind)
    -- a retired box raises its retirement
    assert.is_true(retirement.retire(box, "test"))
    err = raised(function() for _ in box:dir(".") do end end)
    assert.equal("retired", err.kind)
    b:close()
    h.must("rm -rf " .. h.q(root))
  end)
end)

describe("sbx records", function()
  it("are written through the records plane: fsync, rename, then fsync of the directory", function()
    local _, _, has = h.sh("command -v strace")
    if has ~= 0 then pending("strace is not installed") return end
    local dir = h.must("mktemp -d /tmp/sstest-sbxunit.XXXXXX"):match("%S+")
    local trace = H.strace_writes(dir, ([[
      local sbx, records = require "sandstack.sbx", require "sandstack.sbx.records"
      local b = assert(sbx.backend { sbx_path = "/nonexistent/sbx", workspace_root = %q })
      assert(require("sandstack.core").mkdir(%q))
      io.stderr:write("MARK\n") -- only the record write is traced after this
      assert(records.write(b, "n", { id = "new record" }))
      b:close()
    ]]):format(dir .. "/root", dir .. "/root/n"), "MARK")
    local f = assert(io.open(dir .. "/root/n/record.json"))
    local data = f:read("a")
    f:close()
    h.must("rm -rf " .. h.q(dir))
    assert.equal("new record", core.json_decode(data).id)
    H.assert_synced_rename(trace)
  end)

  it("never follow a link planted under the workspace root", function()
    local b, box, root = local_box()
    local outside = h.must("mktemp -d /tmp/sstest-sbxunit.XXXXXX"):match("%S+")
    h.must("ln -s " .. h.q(outside) .. " " .. h.q(root .. "/u-link"))
    local ok, err = records.write(b, "u-link", { id = "x" })
    assert.is_nil(ok)
    assert.equal("invalid", err.kind)
    assert.equal("symlink", err.reason)
    assert.equal("", h.must("ls -A " .. h.q(outside)))
    assert.is_nil(records.read(b, "u-link"))
    assert.equal("id-1", records.read(b, box.name).id)
    b:close()
    h.must("rm -rf " .. h.q(root) .. " " .. h.q(outside))
  end)
end)

describe("sbx egress host matching (csrc/policy/coverage.c)", function()
  it("a secret targeting a long wildcard apex the allowlist admits is refused", function()
    -- an apex of 243 bytes: "sandstack-probe." + apex is no valid host, "a." + apex is
    local label = string.rep("a", 59)
    local apex = ("x%s.y%s.z%s.w%s"):format(label, label, label, label)
    assert.equal(243, #apex)
    local allow = assert(policy.compile { allow = { "*." .. apex } })
    assert.is_true(allow:admits("b." .. apex))
    assert.is_true(allow:reaches("*." .. apex))
    assert.is_true(allow:reaches("**." .. apex))
    assert.is_true(allow:reaches("b." .. apex))
    assert.is_false(allow:reaches(apex)) -- *.x never admits x itself
    local _, reason = egress.assess(allow, { rules = {}, secrets = { secrets = {}, env_only_count = 0,
      custom_secrets = { { scope = "global", env = "T", targets = { "*." .. apex } } } } }, "n")
    assert.equal("custom_secret", reason)
  end)

  it("reads sbx resources as sbx writes them: ports, case, a trailing dot, brackets", function()
    local allow = assert(policy.compile { allow = { "api.example.com", "*.svc.example" } })
    for res, want in pairs {
      ["api.example.com:443"] = "covered", ["API.Example.COM."] = "covered", ["x.svc.example:8443"] = "covered",
      ["*.svc.example"] = "covered", ["**.svc.example"] = "apex_denied", ["**.api.example.com"] = "wider", ["[::1]:443"] = "disjoint",
      ["example.com"] = "disjoint", ["*.example.com"] = "wider", ["**"] = "all", ["*"] = "all",
    } do
      assert.equal(want, allow:coverage(res), res)
    end
    assert.is_true(allow:reaches("[::1]:443")) -- a pattern the policy cannot read reaches everything
    assert.is_true(allow:reaches("bad..name"))
    assert.is_true(allow:reaches("x\0y"))
    assert.is_false(allow:reaches("other.example"))
    assert.is_false(allow:reaches("svc.example"))
  end)
end)
