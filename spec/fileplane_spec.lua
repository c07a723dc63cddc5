-- The file plane: every test below is an attack that must fail, or the contract the
-- sbx box relies on. The "guest" is a host process (or, in #docker tests, a container with the
-- workspace bind-mounted) that plants links, FIFOs, devices and races against the host.
local core = require "sandstack.core"
local H = require "fileplane_helpers"

local IS54 = _VERSION == "Lua 5.4" and not rawget(_G, "jit")
local MODE = os.getenv("SANDSTACK_TEST_MODE") or "lua54"

-- plane:dir raises its error object, as lfs.dir does (a `for` over nil would only say "attempt
-- to call a nil value"): listing(p, path) -> iterator, state, or nil, the raised error object.
local function listing(p, path)
  local ok, it, d = pcall(p.dir, p, path)
  if ok then return it, d end
  assert(core.is_error(it), "plane:dir raised something that is not an error object: " .. tostring(it))
  return nil, it
end

-- err must be a refusal of the given reason (kind "invalid").
local function refused(reason, v, err, what)
  assert(v == nil, (what or "") .. ": expected a refusal, got " .. tostring(v))
  assert(type(err) == "table", (what or "") .. ": no error object")
  assert.equal("invalid", err.kind, (what or "") .. ": " .. tostring(err.message))
  if reason then assert.equal(reason, err.reason, (what or "") .. ": " .. tostring(err.message)) end
end

describe("fileplane", function()
  local t
  before_each(function() t = H.tree() end)
  after_each(function() H.cleanup(t) end)

  describe("API", function()
    it("opens with options checked: unknown keys, a bad guest_root or cwd raise", function()
      assert.has_error(function() core.fileplane_open { root = t.root, bogus = 1 } end)
      assert.has_error(function() core.fileplane_open { guest_root = "/x" } end)
      assert.has_error(function() core.fileplane_open { root = t.root, guest_root = "/" } end)
      assert.has_error(function() core.fileplane_open { root = t.root, guest_root = "rel" } end)
      assert.has_error(function() core.fileplane_open { root = t.root, guest_root = "/a/../b" } end)
      assert.has_error(function() core.fileplane_open { root = t.root, cwd = "/elsewhere" } end)
      assert.has_error(function() core.fileplane_open { root = t.root, cwd = "work" } end)
      assert.has_error(function() core.fileplane_open { root = t.root, resolver = "magic" } end)
      local p, err = core.fileplane_open { root = t.base .. "/missing" }
      assert.is_nil(p)
      assert.equal("io", err.kind)
      assert.equal("ENOENT", err.reason)
      p = H.plane(t, { guest_root = "/maf-sandbox/", cwd = "/maf-sandbox/work/" })
      assert.equal("/maf-sandbox/work/x", p:resolve("x"))
      p:close()
    end)

    it("closes idempotently and refuses use after close", function()
      local p = H.plane(t)
      p:close()
      p:close()
      assert.has_error(function() p:read("x") end)
      assert.has_error(function() p:resolver() end)
    end)

    it("closes on scope exit and on break out of dir (Lua 5.4)", function()
      if not IS54 then return end
      local chunk = assert(load([[
        local core, root = ...
        local p <close> = core.fileplane_open { root = root }
        local it, d, init, closing = p:dir(".")
        for _ in it, d, init, closing do break end
        return p, d
      ]]))
      local p, d = chunk(core, t.root)
      assert.has_error(function() p:read("x") end, "fileplane: the plane is closed")
      assert.has_error(function() d:next() end)
    end)

    it("writes, reads, lists, stats and makes directories like lfs", function()
      local p = H.plane(t)
      assert.is_true(p:write("a.txt", "hello"))
      assert.equal("hello", p:read("a.txt"))
      assert.equal("hello", p:read("/sandstack/work/a.txt"))
      assert.equal("hello", H.slurp(t.root .. "/work/a.txt"))
      assert.is_true(p:mkdir("sub"))
      assert.is_true(p:write("sub/b", ""))
      assert.equal("", p:read("sub/b"))
      local names = {}
      for n in p:dir(".") do names[#names + 1] = n end
      table.sort(names)
      assert.same({ ".", "..", "a.txt", "sub" }, names)
      local a = p:attributes("a.txt")
      assert.equal("file", a.mode)
      assert.equal(5, a.size)
      assert.equal("rw-r--r--", a.permissions)
      for _, k in ipairs { "modification", "access", "change", "uid", "gid", "nlink", "ino", "dev" } do
        assert.is_number(a[k], k)
      end
      assert.equal("directory", p:attributes("sub").mode)
      assert.equal("directory", p:attributes("/sandstack").mode)
      assert.equal(5, p:attributes("a.txt", "size"))
      assert.equal("/sandstack/work/a.txt", p:check("a.txt")) -- the guest path, for the guest's rm
      assert.equal("/sandstack/work/sub/b", p:resolve("sub/./b"))
      -- a rewrite keeps the old file's permission bits
      H.must("chmod 600 " .. H.q(t.root .. "/work/a.txt"))
      assert.is_true(p:write("a.txt", "again"))
      assert.equal("rw-------", p:attributes("a.txt").permissions)
      p:close()
    end)

    it("reports OS failures as kind io with the errno name", function()
      local p = H.plane(t)
      local v, err = p:read("missing")
      assert.is_nil(v)
      assert.equal("io", err.kind)
      assert.equal("ENOENT", err.reason)
      assert.equal("missing", err.path)
      p:mkdir("d")
      v, err = p:mkdir("d")
      assert.equal("EEXIST", err.reason)
      v, err = p:write("d", "x")
      assert.equal("io", err.kind)
      v, err = listing(p, "missing")
      assert.equal("ENOENT", err.reason)
      -- a generic for over it raises that error object, never "attempt to call a nil value"
      local ok, raised = pcall(function() for _ in p:dir("missing") do end end)
      assert.is_false(ok)
      assert.is_true(core.is_error(raised))
      assert.equal("io", raised.kind)
      assert.equal("ENOENT", raised.reason)
      assert.equal("missing", raised.path)
      assert(p:write("plain", "x"))
      v, err = p:write("plain/x", "x") -- a parent that is a file is not made a directory
      assert.equal("io", err.kind)
      assert.equal("ENOTDIR", err.reason)
      refused("root", p:check("/sandstack"))
      refused("not_regular", p:read("d"))
      p:close()
    end)

    it("refuses a read over max_read without allocating it", function()
      local p = H.plane(t, { max_read = 1000 })
      p:write("small", string.rep("x", 1000))
      assert.equal(1000, #p:read("small"))
      p:write("big", string.rep("x", 1001))
      refused("too_large", p:read("big"))
      -- a sparse 64 GiB file: allocating it would fail or take long; the cap refuses it at once
      H.must("truncate -s 64G " .. H.q(t.root .. "/work/huge"))
      local q = H.plane(t)
      refused("too_large", q:read("huge"))
      p:close()
      q:close()
    end)

    it("names its resolver and can be forced onto the walk", function()
      local a, w = H.plane(t, { resolver = "auto" }), H.plane(t, { resolver = "walk" })
      a:read("missing") -- the first lookup decides openat2 or not
      assert.truthy(({ openat2 = true, walk = true })[a:resolver()])
      assert.equal("walk", w:resolver())
      a:close()
      w:close()
    end)

    it("falls back to the walk when the kernel answers ENOSYS to openat2", function()
      -- a child under a seccomp filter that fails openat2 with ENOSYS, as a pre-5.6 kernel does
      H.must("ln -s /etc " .. H.q(t.root .. "/work/l"))
      local script = t.base .. "/nosys.lua"
      H.spit(script, ([[
        local core = require "sandstack.core"
        local a = assert(core.fileplane_open { root = %q })
        assert(a:write("x", "fallback"))
        local _, err = a:read("l/hostname")
        local b = assert(core.fileplane_open { root = %q, resolver = "openat2" })
        local _, berr = b:read("x")
        print(a:read("x"), a:resolver(), err.reason, berr.reason)
      ]]):format(t.root, t.root))
      local out = H.must(H.python() .. " spec/support/fileplane_nosys.py " .. H.child_lua() .. " " .. H.q(script))
      assert.equal("fallback\twalk\tsymlink\tENOSYS", out)
    end)
  end)

  for _, resolver in ipairs { "openat2", "walk" } do
    describe("with the " .. resolver .. " resolver", function()
      local p
      before_each(function() p = H.plane(t, { resolver = resolver }) end)
      after_each(function() p:close() end)

      it("refuses a planted symlink to /, /etc, outside and a sibling at every position", function()
        local before_out, before_sib = H.snapshot(t.outside), H.snapshot(t.sibling)
        local hostname = H.slurp("/etc/hostname")
        local probe = H.probe_name()
        local targets = {
          { dir = "/", suffix = "etc/hostname", file = "/etc/hostname" },
          { dir = "/etc", suffix = "hostname", file = "/etc/hostname" },
          { dir = t.outside, suffix = "p/q/canary", file = t.outside .. "/canary" },
          { dir = t.sibling, suffix = "p/q/canary", file = t.sibling .. "/canary" },
        }
        H.must("mkdir -p " .. H.q(t.root .. "/work/a/b"))
        local n = 0
        for ti, tg in ipairs(targets) do
          -- link host path -> guest path through it
          local cases = {
            { t.root .. "/L" .. ti, tg.dir, "/sandstack/L" .. ti .. "/" .. tg.suffix, "/sandstack/L" .. ti },
            { t.root .. "/work/L" .. ti, tg.dir, "L" .. ti .. "/" .. tg.suffix, "L" .. ti },
            { t.root .. "/work/a/b/L" .. ti, tg.dir, "/sandstack/work/a/b/L" .. ti .. "/" .. tg.suffix,
              "/sandstack/work/a/b/L" .. ti },
            { t.root .. "/work/a/F" .. ti, tg.file, "a/F" .. ti, nil },
            { t.root .. "/work/a/D" .. ti, tg.dir, "a/D" .. ti, "a/D" .. ti },
          }
          for _, c in ipairs(cases) do
            H.must("ln -s " .. H.q(c[2]) .. " " .. H.q(c[1]))
            local path, dirpath = c[3], c[4]
            local what = resolver .. " " .. path
            local v, err = p:read(path)
            refused("symlink", v, err, "read " .. what)
            refused("symlink", p:write(path, "PWNED"))
            refused("symlink", p:mkdir(path))
            refused("symlink", listing(p, path))
            refused("symlink", p:check(path))
            local a, aerr = p:attributes(path)
            if path:find("/", 1, true) and not path:match("^a/[FD]%d$") then
              refused("symlink", a, aerr, "attributes " .. what)
            else
              -- a final link is reported as itself, never followed
              assert.equal("link", a.mode, what)
            end
            if dirpath then
              refused("symlink", p:write(dirpath .. "/" .. probe, "PWNED"))
              refused("symlink", p:mkdir(dirpath .. "/" .. probe))
              refused("symlink", p:read(dirpath .. "/canary"))
              refused("symlink", p:attributes(dirpath .. "/canary"))
              refused("symlink", p:check(dirpath .. "/canary"))
            end
            n = n + 1
          end
        end
        assert.equal(20, n)
        assert.equal(before_out, H.snapshot(t.outside))
        assert.equal(before_sib, H.snapshot(t.sibling))
        assert.equal(hostname, H.slurp("/etc/hostname"))
        assert.is_nil(H.slurp("/etc/" .. probe))
        assert.is_nil(H.slurp("/" .. probe))
        assert.falsy(select(2, H.sh("test -e " .. H.q("/" .. probe) .. " -o -e " .. H.q("/etc/" .. probe))))
      end)

      it("never escapes while a guest swaps a directory for a symlink in a tight loop", function()
        H.must("mkdir -p " .. H.q(t.outside .. "/d") .. " " .. H.q(t.root .. "/work/d"))
        local marker = "only-outside-" .. core.random_hex(4)
        H.spit(t.outside .. "/f", t.canary)
        H.spit(t.outside .. "/" .. marker, t.canary)
        H.spit(t.root .. "/work/d/f", "inside")
        local canary_ino = tonumber(H.must("stat -c %i " .. H.q(t.outside .. "/f")))
        local before = H.snapshot(t.outside)
        local pid = H.spawn(H.python() .. " spec/support/fileplane_swap.py " .. H.q(t.root .. "/work/d") .. " "
          .. H.q(t.outside) .. " 3")
        local ok, failed, i = 0, 0, 0
        local function tally(v)
          if v then ok = ok + 1 else failed = failed + 1 end
        end
        repeat
          for _ = 1, 50 do
            i = i + 1
            local s = p:read("d/f")
            assert(s ~= t.canary, "read escaped to the outside file")
            tally(s)
            tally(p:write("d/f", "inside-" .. i))
            local a = p:attributes("d/f")
            if a then assert(a.ino ~= canary_ino, "attributes escaped") end
            tally(a)
            local it, d = listing(p, "d")
            if it then
              for name in it, d do assert(name ~= marker, "dir listed the outside directory") end
            end
            tally(it)
            tally(p:mkdir("d/new" .. i % 8))
            tally(p:check("d/f"))
          end
        until not H.alive(pid)
        assert(ok > 0 and failed > 0, "the race did not run: " .. ok .. " ok, " .. failed .. " refused")
        assert.equal(before, H.snapshot(t.outside))
      end)

      it("reads neither FIFOs nor devices, and never opens a FIFO", function()
        local w = t.root .. "/work"
        H.must("mkfifo " .. H.q(w .. "/fifo") .. " && mknod " .. H.q(w .. "/null") .. " c 1 3")
        -- A writer blocks opening the FIFO until someone opens it for reading.
        local started, marker = t.base .. "/fifo-started", t.base .. "/fifo-opened"
        local pid = H.spawn("timeout 2 sh -c " .. H.q("touch " .. H.q(started) .. "; exec 3>" .. H.q(w .. "/fifo")
          .. "; touch " .. H.q(marker)))
        while not H.slurp(started) do H.sleep(0.02) end
        H.sleep(0.2) -- let the writer reach its blocking open
        refused("not_regular", p:read("fifo"))
        refused("not_regular", p:read("null"))
        assert.equal("named pipe", p:attributes("fifo").mode)
        assert.equal("char device", p:attributes("null").mode)
        local v, err = listing(p, "fifo")
        assert.is_nil(v)
        assert.equal("ENOTDIR", err.reason)
        v, err = listing(p, "null")
        assert.equal("ENOTDIR", err.reason)
        while H.alive(pid) do H.sleep(0.1) end
        assert.is_nil(H.slurp(marker), "the FIFO was opened")
        -- write replaces the name, never opens what stood there
        assert.is_true(p:write("fifo", "now a file"))
        assert.equal("now a file", p:read("fifo"))
      end)

      it("refuses hard links by default and never writes through one", function()
        H.must("ln " .. H.q(t.outside .. "/canary") .. " " .. H.q(t.root .. "/work/h"))
        local stat = "stat -c '%s %Y %i' " .. H.q(t.outside .. "/canary")
        local before = H.must(stat)
        assert.equal(2, p:attributes("h").nlink)
        refused("hardlink", p:read("h"))
        assert.is_true(p:write("h", "replaced"))
        assert.equal("replaced", p:read("h"))
        assert.equal(t.canary, H.slurp(t.outside .. "/canary"))
        assert.equal(before, H.must(stat)) -- same size, mtime and inode: never written
        -- allow_hardlinks reads a file the guest linked inside its own workspace
        H.spit(t.root .. "/work/x", "mine")
        H.must("ln " .. H.q(t.root .. "/work/x") .. " " .. H.q(t.root .. "/work/y"))
        refused("hardlink", p:read("y"))
        local q = H.plane(t, { resolver = resolver, allow_hardlinks = true })
        assert.equal("mine", q:read("y"))
        q:close()
      end)

      it("handles .., ., doubled slashes, NUL, long names, deep trees and non-UTF-8 names", function()
        local ok_cases = {
          { "a/./b//c/", "/sandstack/work/a/b/c" }, { "/sandstack/work/..", "/sandstack" },
          { "/sandstack//work/./x", "/sandstack/work/x" }, { "/sandstack", "/sandstack" },
          { "/sandstack/", "/sandstack" }, { ".", "/sandstack/work" }, { "x/../y", "/sandstack/work/y" },
          { "//sandstack/./work", "/sandstack/work" },
        }
        for _, c in ipairs(ok_cases) do assert.equal(c[2], p:resolve(c[1]), c[1]) end
        local bad = {
          { "..", "outside" }, { "../x", "outside" }, { "a/../..", "outside" }, { "../work/x", "outside" },
          { "../..", "outside" }, { "../../etc/passwd", "outside" }, { "/", "outside" },
          { "/etc/passwd", "outside" }, { "/sandstackx/a", "outside" }, { "/sandstac", "outside" },
          { "/sandstack/../sandstack/work", "outside" }, { "/x/../sandstack/work", "outside" },
          { "/sandstack/work/../../../etc", "outside" }, { "", "empty" }, { "a\0b", "nul" },
          { "/sandstack\0/work", "nul" }, { string.rep("x", 256), "name_too_long" },
          { string.rep("a/", 2100), "too_long" },
        }
        for _, c in ipairs(bad) do
          local path, reason = c[1], c[2]
          refused(reason, p:resolve(path))
          refused(reason, p:read(path))
          refused(reason, p:write(path, "PWNED"))
          refused(reason, p:mkdir(path))
          refused(reason, p:attributes(path))
          refused(reason, listing(p, path))
          refused(reason, p:check(path))
        end
        assert.is_nil(H.slurp("/etc/passwd"):find("PWNED", 1, true))
        -- 255 bytes is the longest name Linux keeps
        local long = string.rep("n", 255)
        assert.is_true(p:write(long, "long"))
        assert.equal("long", p:read(long))
        -- non-UTF-8 names are bytes like any other, listed verbatim
        local odd = "\xff\xfe\x80-\xc3\xa9"
        assert.is_true(p:write(odd, "odd"))
        assert.equal("odd", p:read(odd))
        assert.equal("/sandstack/work/" .. odd, p:check(odd))
        local seen = false
        for n in p:dir(".") do if n == odd then seen = true end end
        assert.is_true(seen)
        -- a deep tree: 400 levels, then a path just over the 4095-byte cap
        local path = ""
        for _ = 1, 400 do
          path = path .. (path == "" and "" or "/") .. "d"
          assert.is_true(p:mkdir(path))
        end
        assert.is_true(p:write(path .. "/f", "deep"))
        assert.equal("deep", p:read(path .. "/f"))
        assert.equal("file", p:attributes(path .. "/f").mode)
        assert.equal("/sandstack/work/" .. path .. "/f", p:check(path .. "/f"))
        refused("too_long", p:read(string.rep("d/", 2047) .. "f"))
      end)

      it("shows a polling reader whole files only while the file is rewritten", function()
        local A, B = string.rep("a", 1048576), string.rep("b", 1572864)
        assert.is_true(p:write("f", A))
        local script = t.base .. "/writer.lua"
        H.spit(script, ([[
          local core = require "sandstack.core"
          local p = assert(core.fileplane_open { root = %q, resolver = %q })
          local A, B = string.rep("a", 1048576), string.rep("b", 1572864)
          for i = 1, 300 do assert(p:write("f", i %% 2 == 0 and A or B)) end
        ]]):format(t.root, resolver))
        local pid = H.spawn(H.child_lua() .. " " .. H.q(script))
        local reads, seen = 0, {}
        repeat
          local s = assert(p:read("f"))
          assert(s == A or s == B, "a partial file of " .. #s .. " bytes")
          local f = assert(io.open(t.root .. "/work/f", "rb"))
          local s2 = f:read("*a")
          f:close()
          assert(s2 == A or s2 == B, "a partial file of " .. #s2 .. " bytes (plain read)")
          seen[s:sub(1, 1)] = true
          reads = reads + 1
        until not H.alive(pid)
        assert(reads > 0)
        assert.equal(A, p:read("f")) -- the last write (i = 300) was A
      end)

      it("leaves the old file intact when the writer is killed mid-write", function()
        local old = "OLD CONTENT " .. core.random_hex(8)
        local script = t.base .. "/big.lua"
        H.spit(script, ([[
          local core = require "sandstack.core"
          local p = assert(core.fileplane_open { root = %q, resolver = %q })
          local big = string.rep("n", 67108864)
          assert(p:write("f", big))
        ]]):format(t.root, resolver))
        -- each try races a 64 MiB write for a moment inside it: a loaded host can miss it three
        -- times (a CI run did), so up to ten tries, ending at the first caught
        local killed_mid = 0
        for _ = 1, 10 do
          assert.is_true(p:write("f", old))
          local pid = H.spawn(H.child_lua() .. " " .. H.q(script))
          local caught = false
          while not caught and H.alive(pid) do
            for name in p:dir(".") do
              if name:match("^%.sandstack%-tmp%-") then
                local a = p:attributes(name)
                if a and a.size > 0 then caught = true end
              end
            end
          end
          if caught then H.kill(pid, "KILL") end
          while H.alive(pid) do H.sleep(0.05) end
          local a = assert(p:attributes("f"))
          if a.size == #old then
            assert.equal(old, p:read("f"))
            if caught then killed_mid = killed_mid + 1 end
          else
            assert.equal(67108864, a.size) -- the write completed before the kill: whole
          end
          H.sh("rm -f " .. H.q(t.root .. "/work") .. "/.sandstack-tmp-*")
          if killed_mid > 0 then break end
        end
        assert(killed_mid > 0, "never caught the writer mid-write")
      end)
    end)
  end

  it("survives a container guest planting links, devices and racing swaps #docker", function()
    local project = H.project()
    local ok, err = pcall(function()
      local id = H.container(project, t.root)
      local before_sib = H.snapshot(t.sibling)
      local probe = H.probe_name()
      local out, good = H.docker_exec(id, table.concat({
        "set -e; cd /sandstack/work",
        "ln -s / root; ln -s /etc etc; ln -s " .. H.q(t.outside) .. " out; ln -s " .. H.q(t.sibling) .. " sib",
        "mkdir -p a/b; ln -s /etc a/b/deep; ln -s " .. H.q(t.outside .. "/canary") .. " a/fin",
        "mkfifo fifo; mknod null c 1 3; echo mine > own; ln own own2",
      }, "\n"))
      assert(good, out)
      for _, resolver in ipairs { "openat2", "walk" } do
        local p = H.plane(t, { resolver = resolver })
        for _, path in ipairs { "root/etc/hostname", "etc/hostname", "out/canary", "sib/canary", "out/p/q/canary",
          "a/b/deep/hostname", "a/fin", "/sandstack/work/root/" .. probe } do
          refused("symlink", p:read(path))
          refused("symlink", p:write(path, "PWNED"))
          refused("symlink", p:check(path))
          refused("symlink", listing(p, path))
          refused("symlink", p:mkdir(path))
        end
        refused("symlink", p:mkdir("etc/" .. probe))
        refused("symlink", p:write("out/" .. probe, "PWNED"))
        refused("symlink", p:attributes("sib/canary"))
        refused("not_regular", p:read("fifo"))
        refused("not_regular", p:read("null"))
        refused("hardlink", p:read("own2"))
        p:close()
      end
      -- the container swaps work/d for a link to the outside directory while the host works in it
      H.must("mkdir -p " .. H.q(t.root .. "/work/d"))
      H.spit(t.root .. "/work/d/f", "inside")
      H.spit(t.outside .. "/f", t.canary)
      local before = H.snapshot(t.outside)
      H.must("docker exec -d " .. id .. " bash -c " .. H.q("cd /sandstack/work; end=$((SECONDS+4)); "
        .. "while [ $SECONDS -lt $end ]; do mv d d.real; ln -s " .. H.q(t.outside) .. " d; rm d; mv d.real d; done; "
        .. "touch /sandstack/swapper-done"))
      local p = H.plane(t)
      local okc, failc, i = 0, 0, 0
      while not H.slurp(t.root .. "/swapper-done") do
        i = i + 1
        local s = p:read("d/f")
        assert(s ~= t.canary, "read escaped")
        if s then okc = okc + 1 else failc = failc + 1 end
        if p:write("d/f", "inside-" .. i) then okc = okc + 1 else failc = failc + 1 end
        if p:mkdir("d/n" .. i) then okc = okc + 1 else failc = failc + 1 end
      end
      p:close()
      assert(okc > 0 and failc > 0, "the race did not run: " .. okc .. " ok, " .. failc .. " refused")
      assert.equal(before, H.snapshot(t.outside))
      assert.equal(before_sib, H.snapshot(t.sibling))
      assert.is_nil(H.slurp("/etc/" .. probe))
    end)
    H.remove_project(project)
    assert(ok, err)
  end)

  -- The fuzz build exists after bootstrap --test; it runs once, in the lua54 mode.
  local fuzz = "build-fuzz/fuzz_fileplane_path"
  local fuzz_bin = io.open(fuzz, "rb")
  if fuzz_bin then fuzz_bin:close() end
  if MODE == "lua54" and fuzz_bin then
    it("runs the libFuzzer path target clean", function()
      local out, ok = H.sh(fuzz .. " -runs=10000 -seed=1")
      assert(ok, out)
      assert.matches("Done 10000 runs", out)
    end)
  end
end)
