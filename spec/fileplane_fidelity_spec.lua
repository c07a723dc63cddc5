-- The file plane's path rules that the original backend's own suites expect (paths and
-- cleanup): relative paths never climb above the working directory, the
-- working directory is never cleared for removal in any spelling, a missing target is nothing
-- to remove (not an alias refusal), write makes missing parents without following a link, and
-- the per-call options { cwd = } and read's { max_bytes = }. Every escape is attempted, with a
-- control that shows the same call works inside. Each case runs with both resolvers.
local core = require "sandstack.core"
local H = require "fileplane_helpers"

local function refused(reason, v, err, what)
  assert(v == nil, (what or "") .. ": expected a refusal, got " .. tostring(v))
  assert(core.is_error(err), (what or "") .. ": no error object")
  assert.equal("invalid", err.kind, (what or "") .. ": " .. tostring(err.message))
  if reason then assert.equal(reason, err.reason, (what or "") .. ": " .. tostring(err.message)) end
end

for _, resolver in ipairs { "openat2", "walk" } do
  describe("fileplane fidelity [" .. resolver .. "]", function()
    local t, p
    before_each(function()
      t = H.tree()
      p = H.plane(t, { resolver = resolver })
    end)
    after_each(function()
      p:close()
      H.cleanup(t)
    end)

    it("refuses relative paths that climb above the working directory; the outside stays untouched", function()
      -- the control: the same calls inside the working directory work
      assert.is_true(p:write("inside.txt", "ok"))
      assert.equal("ok", p:read("inside.txt"))
      assert.equal("ok", H.slurp(t.root .. "/work/inside.txt"))
      -- ../outside.txt would land in /sandstack (the workspace root), beside work/
      local before = H.snapshot(t.root)
      for _, path in ipairs { "../outside.txt", "a/../../outside.txt", "../work/inside.txt", ".." } do
        refused("outside", p:write(path, "PWNED"))
        refused("outside", p:read(path))
        refused("outside", p:attributes(path))
        refused("outside", p:mkdir(path))
        refused("outside", p:check(path))
        refused("outside", p:resolve(path))
      end
      assert.equal(before, H.snapshot(t.root))
      assert.is_nil(H.slurp(t.root .. "/outside.txt"))
      -- the absolute form stays bounded by the storage base's parent, and is allowed there
      assert.is_true(p:write("/sandstack/top.txt", "top"))
      assert.equal("top", H.slurp(t.root .. "/top.txt"))
      refused("outside", p:write("/sandstack/../escape.txt", "PWNED"))
      assert.is_nil(H.slurp(t.base .. "/escape.txt"))
    end)

    it("never clears the working directory, in any spelling, nor what holds it", function()
      H.spit(t.root .. "/work/keep.txt", "keep")
      for _, path in ipairs { ".", "./", "a/..", "./a/../", "/sandstack/work", "/sandstack/work/", "/sandstack//work/." } do
        local v, err = p:check(path)
        refused("working_directory", v, err, path)
      end
      refused("root", p:check("/sandstack"))
      refused("root", p:check("/sandstack/work/.."))
      -- a per-call working directory is protected the same way, and so is the plane's
      assert.is_true(p:mkdir("sub"))
      refused("working_directory", p:check(".", { cwd = "sub" }))
      refused("working_directory", p:check("/sandstack/work/sub", { cwd = "sub" }))
      refused("working_directory", p:check("/sandstack/work", { cwd = "sub" }))
      assert.equal("keep", H.slurp(t.root .. "/work/keep.txt"))
      -- the control: a child of it is cleared
      assert.equal("/sandstack/work/keep.txt", p:check("keep.txt"))
      assert.equal("/sandstack/work/sub", p:check("sub"))
    end)

    it("answers false for a target that is not there, and still refuses an alias or a link", function()
      assert.is_false(p:check("missing"))
      assert.is_false(p:check("missing/deeper/still"))
      assert.is_false(p:check("/sandstack/work/missing"))
      assert.is_false(p:check("missing", { child = true }))
      -- a link on the way is refused even when what lies behind it is missing
      H.must("ln -s " .. H.q(t.outside) .. " " .. H.q(t.root .. "/work/out"))
      refused("symlink", p:check("out/missing"))
      refused("symlink", p:check("out"))
    end)

    it("child = true: a relative target must name a child of the working directory", function()
      assert.is_true(p:write("d/e/f", "x"))
      assert.equal("/sandstack/work/d", p:check("d", { child = true }))
      assert.equal("/sandstack/work/d", p:check("x/../d", { child = true }))
      refused("placement", p:check("d/e", { child = true }))
      assert.equal("/sandstack/work/d/e", p:check("e", { cwd = "d", child = true }))
      -- an absolute target may be anywhere strictly inside the workspace
      assert.equal("/sandstack/work/d/e/f", p:check("/sandstack/work/d/e/f", { child = true }))
    end)

    it("write makes missing parents, and refuses a link on the way without writing through it", function()
      assert.is_true(p:write("new/deeper/file.txt", "made"))
      assert.equal("made", H.slurp(t.root .. "/work/new/deeper/file.txt"))
      assert.equal("directory", p:attributes("new/deeper").mode)
      -- a link to the outside in the middle of a path whose tail is missing
      H.must("ln -s " .. H.q(t.outside) .. " " .. H.q(t.root .. "/work/new/link"))
      local before = H.snapshot(t.outside)
      refused("symlink", p:write("new/link/made/file.txt", "PWNED"))
      refused("symlink", p:write("new/link/file.txt", "PWNED"))
      assert.equal(before, H.snapshot(t.outside))
      assert.is_nil(H.slurp(t.outside .. "/made/file.txt"))
      -- a file where a parent should be is not turned into a directory
      local _, err = p:write("new/deeper/file.txt/x", "x")
      assert.equal("ENOTDIR", err.reason)
      assert.equal("made", H.slurp(t.root .. "/work/new/deeper/file.txt"))
    end)

    it("takes a per-call working directory for every file method", function()
      assert.is_true(p:mkdir("c"))
      assert.is_true(p:write("f.txt", "in c", { cwd = "c" }))
      assert.equal("in c", H.slurp(t.root .. "/work/c/f.txt"))
      assert.equal("in c", p:read("f.txt", { cwd = "/sandstack/work/c" }))
      assert.equal(4, p:attributes("f.txt", "size", { cwd = "c" }))
      assert.equal("file", p:attributes("f.txt", { cwd = "c" }).mode)
      assert.is_true(p:mkdir("m", { cwd = "c" }))
      assert.equal("/sandstack/work/c/m", p:resolve("m", { cwd = "c" }))
      local names = {}
      for n in p:dir(".", { cwd = "c" }) do names[n] = true end
      assert.is_true(names["f.txt"] and names["m"])
      -- relative paths of the call never climb above the call's working directory ...
      refused("outside", p:read("../f.txt", { cwd = "c/m" }))
      refused("outside", p:write("../x", "PWNED", { cwd = "c" }))
      assert.is_nil(H.slurp(t.root .. "/work/x"))
      -- ... and the working directory itself stays where relative paths may go
      refused("outside", p:read("f.txt", { cwd = "../etc" }))
      refused("outside", p:read("passwd", { cwd = "/etc" }))
      assert.has_error(function() p:read("f.txt", { cwd = 5 }) end)
      assert.has_error(function() p:read("f.txt", { bogus = 1 }) end)
    end)

    it("read { max_bytes = n } returns exactly n bytes and refuses more with output_limit", function()
      H.spit(t.root .. "/work/ten", "0123456789")
      assert.equal("0123456789", p:read("ten", { max_bytes = 10 }))
      local v, err = p:read("ten", { max_bytes = 9 })
      assert.is_nil(v)
      assert.equal("output_limit", err.kind)
      assert.equal(9, err.limit)
      for _, bad in ipairs { 0, -1, 1.5, "8", 0 / 0, math.huge } do
        v, err = p:read("ten", { max_bytes = bad })
        assert.is_nil(v, tostring(bad))
        assert.equal("invalid", err.kind, tostring(bad))
        assert.equal("max_bytes", err.option, tostring(bad))
      end
    end)
  end)
end
