-- stack:capture(dir): a tar the sandbox made is unpacked on the host by the
-- C core's extractor (csrc/capture), never by `tar -xf`. The unit tests hand-make archives (in
-- Lua, and with the host's GNU tar) holding every refused name form and member type; the #docker
-- test is the attack itself: a guest that is root in its container plants a setuid-root binary,
-- a device node, a FIFO, links and foreign owners under capture_path, and a root host captures.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local h = require "helpers"

-- A ustar/GNU tar writer, small enough to craft any header by hand. ------------------------
local function pad(s, n) return s .. string.rep("\0", n - #s) end
local function octal(n, width) return string.format("%0" .. (width - 1) .. "o", n) .. "\0" end

local function header(t)
  local magic = t.magic == "gnu" and "ustar  \0" or (t.magic == "v7" and string.rep("\0", 8) or "ustar\0" .. "00")
  local hd = table.concat {
    pad(t.name or "", 100), octal(t.mode or 420, 8), octal(t.uid or 0, 8), octal(t.gid or 0, 8),
    t.size_field or octal(t.size or 0, 12), octal(t.mtime or 1700000000, 12), "        ", t.type or "0",
    pad(t.link or "", 100), magic, pad("root", 32), pad("root", 32), octal(0, 8), octal(0, 8),
    pad(t.prefix or "", 155), pad("", 12),
  }
  assert(#hd == 512)
  local sum = 0
  for i = 1, 512 do sum = sum + hd:byte(i) end
  if t.bad_checksum then sum = sum + 1 end
  return hd:sub(1, 148) .. string.format("%06o", sum) .. "\0 " .. hd:sub(157)
end

local function blocks(data) return data .. string.rep("\0", (512 - #data % 512) % 512) end

-- One member: its header (t) and its data.
local function member(t, data)
  data = data or ""
  if t.size == nil then t.size = #data end
  return header(t) .. blocks(data)
end

-- A pax extended header ('x') from { {key, value}, ... }.
local function pax(records, typ)
  local body = {}
  for _, kv in ipairs(records) do
    local rec = " " .. kv[1] .. "=" .. kv[2] .. "\n"
    local n = #rec + 1
    while #tostring(n) + #rec ~= n do n = #tostring(n) + #rec end
    body[#body + 1] = n .. rec
  end
  return member({ name = "PaxHeaders/x", type = typ or "x" }, table.concat(body))
end

-- A GNU long name ('L') or long link ('K').
local function gnu_long(typ, name)
  return member({ name = "././@LongLink", type = typ, magic = "gnu" }, name .. "\0")
end

local END = string.rep("\0", 1024)

-- Test trees -------------------------------------------------------------------------------
local bases = {}
local function new_base()
  local b = h.must("mktemp -d /tmp/sstest-capture.XXXXXX"):gsub("%s+$", "")
  bases[#bases + 1] = b
  return b
end

-- Unpacks bytes through the core into <base>/out; returns report, err, dir, base.
local function unpack_archive(bytes, opts)
  local base = new_base()
  local dir = base .. "/out"
  assert(core.capture_mkdir(dir))
  h.write_file(dir .. "/.a.tar", bytes)
  local rep, err = core.capture_extract(dir, ".a.tar", opts)
  return rep, err, dir, base
end

-- Every path beneath root (relative), with find's type and mode: { ["a/b"] = "f 755" }.
local function tree(root)
  local out = {}
  for line in h.must("cd " .. h.q(root) .. " && find . -mindepth 1 -printf '%P|%y %m\\n'"):gmatch("[^\n]+") do
    local p, v = line:match("^(.*)|(.*)$")
    out[p] = v
  end
  return out
end

local function skipped_by_reason(rep)
  local m = {}
  for _, s in ipairs(rep.skipped) do m[s.reason] = (m[s.reason] or 0) + 1 end
  return m
end

-- Whether mode and mask share a bit (no bit operators: LuaJIT parses this file too).
local function any_bit(mode, mask)
  for b = 0, 12 do
    local v = 2 ^ b
    if math.floor(mode / v) % 2 == 1 and math.floor(mask / v) % 2 == 1 then return true end
  end
  return false
end

local function find_skip(rep, name)
  for _, s in ipairs(rep.skipped) do if s.name == name then return s end end
end

describe("capture: the archive reader and writer", function()
  after_each(function()
    for _, b in ipairs(bases) do os.execute("rm -rf " .. h.q(b)) end
    bases = {}
  end)

  it("refuses each climbing, absolute, NUL and over-long name form, from every spelling", function()
    local long_comp = string.rep("c", 256)
    local too_long = string.rep("d/", 2100) .. "x" -- 4201 bytes, components fine
    local cases = {
      -- { archive bytes, the name the report must show, reason }
      { member({ name = "/etc/capture-abs" }, "x"), "/etc/capture-abs", "absolute" },
      { member({ name = "../capture-up" }, "x"), "../capture-up", "dotdot" },
      { member({ name = "a/../../capture-climb" }, "x"), "a/../../capture-climb", "dotdot" },
      { member({ name = "a/b/.." , type = "5" }), "a/b/..", "dotdot" },
      { member({ name = "..", type = "5" }), "..", "dotdot" },
      { member({ name = "x", prefix = ".." }, "x"), "../x", "dotdot" },
      { member({ name = "x", prefix = "/tmp" }, "x"), "/tmp/x", "absolute" },
      { pax { { "path", "../pax-up" } } .. member({ name = "innocent-pax" }, "x"), "../pax-up", "dotdot" },
      { pax { { "path", "/pax-abs" } } .. member({ name = "innocent-pax2" }, "x"), "/pax-abs", "absolute" },
      { pax { { "path", "pax\0nul" } } .. member({ name = "innocent-pax3" }, "x"), "pax\0nul", "nul" },
      { pax { { "path", too_long } } .. member({ name = "innocent-pax4" }, "x"), nil, "too_long" },
      { pax { { "path", "ok/" .. long_comp } } .. member({ name = "innocent-pax5" }, "x"), "ok/" .. long_comp, "name_too_long" },
      { gnu_long("L", "../gnu-up") .. member({ name = "innocent-gnu", magic = "gnu" }, "x"), "../gnu-up", "dotdot" },
      { gnu_long("L", "/gnu-abs") .. member({ name = "innocent-gnu2", magic = "gnu" }, "x"), "/gnu-abs", "absolute" },
      { gnu_long("L", "gnu\0hidden/../../x") .. member({ name = "innocent-gnu3", magic = "gnu" }, "x"), "gnu\0hidden/../../x", "nul" },
      { gnu_long("L", too_long) .. member({ name = "innocent-gnu4", magic = "gnu" }, "x"), nil, "too_long" },
      { member({ name = "" }, "x"), "", "empty" },
      { member({ name = "./" }, "x"), "./", "empty" },
    }
    for i, c in ipairs(cases) do
      local rep, err, dir, base = unpack_archive(c[1] .. END)
      assert(rep, "case " .. i .. ": " .. tostring(err))
      assert.equal(1, #rep.skipped, "case " .. i)
      assert.equal(c[3], rep.skipped[1].reason, "case " .. i)
      if c[2] then assert.equal(c[2], rep.skipped[1].name, "case " .. i) end
      assert.equal(0, rep.files, "case " .. i)
      -- nothing was written, in dir or beside it: the base holds dir only, dir nothing
      assert.same({ out = "d 700" }, tree(base), "case " .. i)
    end
    -- a refusal is per member: the others still arrive
    local rep = assert((unpack_archive(member({ name = "../evil" }, "e") .. member({ name = "good" }, "g") .. END)))
    assert.equal(1, rep.files)
    assert.equal("dotdot", rep.skipped[1].reason)
  end)

  it("writes regular files and directories only; links, devices, FIFOs and the rest are reported", function()
    local a = member({ name = "top/", type = "5", mode = 493 })
      .. member({ name = "top/file.txt", mode = 420 }, "hello\n")
      .. member({ name = "top/sym", type = "2", link = "/etc/passwd" })
      .. member({ name = "top/sym-out", type = "2", link = "../../outside" })
      .. member({ name = "top/hard", type = "1", link = "top/file.txt" })
      .. member({ name = "top/hard-etc", type = "1", link = "/etc/shadow" })
      .. member({ name = "top/null", type = "3", mode = 438 })
      .. member({ name = "top/sda", type = "4", mode = 438 })
      .. member({ name = "top/fifo", type = "6" })
      .. member({ name = "top/sparse", type = "S" }, "map")
      .. member({ name = "top/weird", type = "Z" }, "zzz")
      .. pax { { "GNU.sparse.major", "1" }, { "GNU.sparse.name", "top/real" } } .. member({ name = "top/gnusparse" }, "map")
      .. member({ name = "top/after", mode = 420 }, "still read")
      .. END
    local rep, err, dir = unpack_archive(a)
    assert(rep, tostring(err))
    assert.same({ symlink = 2, hardlink = 2, device = 2, fifo = 1, sparse = 2, unsupported = 1 }, skipped_by_reason(rep))
    assert.same({ name = "top/sym", type = "symlink", reason = "symlink" }, find_skip(rep, "top/sym"))
    assert.same({ name = "top/null", type = "char_device", reason = "device" }, find_skip(rep, "top/null"))
    assert.same({ name = "top/sda", type = "block_device", reason = "device" }, find_skip(rep, "top/sda"))
    assert.same({ top = "d 755", ["top/file.txt"] = "f 644", ["top/after"] = "f 644" }, tree(dir))
    assert.equal("hello\n", h.read_file(dir .. "/top/file.txt"))
    assert.equal("still read", h.read_file(dir .. "/top/after"))
    assert.equal(2, rep.files)
    assert.equal(1, rep.dirs)
    assert.equal(13, rep.entries)
  end)

  it("drops set-id, sticky and group/other write bits, and keeps the owner's", function()
    local a = member({ name = "suid", mode = tonumber("4755", 8) }, "s")
      .. member({ name = "sgid", mode = tonumber("2777", 8) }, "g")
      .. member({ name = "none", mode = 0 }, "n")
      .. member({ name = "wide/", type = "5", mode = tonumber("1777", 8) })
      .. member({ name = "closed/", type = "5", mode = 0 })
      .. member({ name = "closed/in", mode = tonumber("600", 8), uid = 12345 }, "i")
      .. END
    local rep, err, dir = unpack_archive(a)
    assert(rep, tostring(err))
    assert.same({ suid = "f 755", sgid = "f 755", none = "f 600", wide = "d 755", closed = "d 700",
      ["closed/in"] = "f 600" }, tree(dir))
    local uid = h.must("id -u"):gsub("%s", "")
    assert.equal(uid .. "\n", h.must("stat -c %u " .. h.q(dir .. "/closed/in")))
    assert.equal(0, #rep.skipped)
  end)

  it("reads GNU long names, pax paths, ustar prefixes and pax sizes; the first member at a name wins", function()
    local deep = string.rep("p", 200) .. "/" .. string.rep("q", 200) .. "/f"
    local a = gnu_long("L", deep) .. member({ name = "cut-short", magic = "gnu" }, "gnu long")
      .. pax { { "path", "pax/" .. string.rep("r", 250) }, { "mtime", "1234567890.5" } } .. member({ name = "cut" }, "pax long")
      .. member({ name = "file", prefix = "pre/fix" }, "prefixed")
      .. pax { { "size", "5" } } .. member({ name = "sized", size = 0 }, "12345")
      .. member({ name = "dup" }, "first") .. member({ name = "dup" }, "second")
      .. member({ name = "dup", type = "5" })
      .. member({ name = "dup/under" }, "x")
      .. member({ name = "./dot//slashes/" .. "f" }, "normalized")
      .. END
    local rep, err, dir = unpack_archive(a)
    assert(rep, tostring(err))
    assert.equal("gnu long", h.read_file(dir .. "/" .. deep))
    assert.equal("pax long", h.read_file(dir .. "/pax/" .. string.rep("r", 250)))
    assert.equal("1234567890\n", h.must("stat -c %Y " .. h.q(dir .. "/pax/" .. string.rep("r", 250))))
    assert.equal("prefixed", h.read_file(dir .. "/pre/fix/file"))
    assert.equal("12345", h.read_file(dir .. "/sized"))
    assert.equal("first", h.read_file(dir .. "/dup"))
    assert.equal("normalized", h.read_file(dir .. "/dot/slashes/f"))
    assert.same({ exists = 2, not_directory = 1 }, skipped_by_reason(rep))
  end)

  it("unpacks what the host's GNU tar writes (gnu and pax formats) the same way", function()
    for _, fmt in ipairs { "gnu", "pax", "ustar" } do
      local base = new_base()
      local src = base .. "/src"
      local n = fmt == "ustar" and 90 or 120 -- ustar splits a name into prefix and name only
      local long = string.rep("L", n) .. "/" .. string.rep("M", n)
      h.must(table.concat({
        "mkdir -p " .. h.q(src .. "/w/sub/" .. long),
        "cd " .. h.q(src),
        "head -c 70000 /dev/urandom > w/sub/bin.dat",
        "printf long > w/sub/" .. long .. "/f",
        "ln -s /etc/passwd w/link", "ln w/sub/bin.dat w/hard", "mkfifo w/fifo",
        "chmod 4755 w/sub/bin.dat",
        "tar --format=" .. fmt .. " -cf " .. h.q(base .. "/a.tar") .. " w",
      }, " && "))
      local dir = base .. "/out"
      assert(core.capture_mkdir(dir))
      h.must("cp " .. h.q(base .. "/a.tar") .. " " .. h.q(dir .. "/a.tar"))
      local rep, err = core.capture_extract(dir, "a.tar")
      assert(rep, fmt .. ": " .. tostring(err))
      assert.equal(h.read_file(src .. "/w/sub/bin.dat"), h.read_file(dir .. "/w/sub/bin.dat"), fmt)
      assert.equal("long", h.read_file(dir .. "/w/sub/" .. long .. "/f"), fmt)
      assert.same({ symlink = 1, hardlink = 1, fifo = 1 }, skipped_by_reason(rep), fmt)
      assert.equal("f 755", tree(dir)["w/sub/bin.dat"], fmt)
      assert.is_nil(h.read_file(dir .. "/a.tar"), fmt .. ": the archive was removed")
    end
  end)

  it("caps members and bytes, and removes the partial output", function()
    local many = {}
    for i = 1, 6 do many[#many + 1] = member({ name = "d" .. i .. "/f" }, "x") end
    local rep, err, dir, base = unpack_archive(table.concat(many) .. END, { max_entries = 5 })
    assert.is_nil(rep)
    assert.equal("output_limit", err.kind)
    assert.equal("max_entries", err.reason)
    assert.equal(5, err.limit)
    assert.same({}, tree(base), "the partial output and dir itself are gone")
    assert.is_nil(h.read_file(dir .. "/d1/f"))

    local _ -- the answer this test does not read
    rep, err, _, base = unpack_archive(member({ name = "a" }, string.rep("a", 600)) .. member({ name = "b" }, string.rep("b", 600)) .. END,
      { max_bytes = 1000 })
    assert.is_nil(rep)
    assert.equal("output_limit", err.kind)
    assert.equal("max_bytes", err.reason)
    assert.same({}, tree(base))

    -- at the caps exactly, it all arrives
    rep, err = unpack_archive(table.concat(many, "", 1, 5) .. END, { max_entries = 5, max_bytes = 5 })
    assert(rep, tostring(err))
    assert.equal(5, rep.files)

    -- a rollback through a tree 1333 levels deep (more levels than the default 1024 fds)
    local deep = {}
    local path = ""
    for i = 1, 1500 do
      path = path .. (i > 1 and "/" or "") .. "dd"
      if #path > 4000 then break end
      deep[#deep + 1] = pax { { "path", path .. "/" } } .. member({ name = "d", type = "5" })
    end
    local body = table.concat(deep)
    local _ -- the answer this test does not read
    rep, err, _, base = unpack_archive(body .. member({ name = "x" }, "1") .. member({ name = "y" }, "2") .. END,
      { max_entries = #deep + 1 })
    assert.is_nil(rep)
    assert.equal("max_entries", err.reason)
    assert.same({}, tree(base))
  end)

  it("refuses malformed archives as a whole and removes what was written", function()
    local good = member({ name = "first" }, "1")
    local cases = {
      { good .. member({ name = "bad", bad_checksum = true }, "x") .. END, "checksum" },
      { good .. member({ name = "cut" }, string.rep("x", 2000)):sub(1, 1200), "truncated member" },
      { good, "no end block" },
      { good .. member({ name = "big", size_field = "zzzzzzzzzzz\0" }) .. END, "bad size" },
      { good .. pax { { "path", "p" } } .. END, "pax at the end" },
      { good .. member({ name = "PaxHeaders/x", type = "x" }, "5 path=x\n") .. member({ name = "f" }, "y") .. END, "bad pax record" },
      { good .. member({ name = "PaxHeaders/x", type = "x" }, "12 size=abc\n") .. member({ name = "f" }, "y") .. END, "bad pax size" },
    }
    for _, c in ipairs(cases) do
      local rep, err, _, base = unpack_archive(c[1])
      assert.is_nil(rep, c[2])
      assert.equal("engine", err.kind, c[2])
      assert.equal("bad_archive", err.reason, c[2] .. ": " .. tostring(err.message))
      assert.same({}, tree(base), c[2])
    end
    -- a chain of metadata headers is bounded
    local chain = {}
    for i = 1, 20 do chain[i] = gnu_long("L", "n" .. i) end
    local rep, err = unpack_archive(table.concat(chain) .. member({ name = "f" }, "x") .. END)
    assert.is_nil(rep)
    assert.same({ "engine", "bad_archive" }, { err.kind, err.reason })
  end)

  it("makes dir fresh and 0700, and refuses one that exists (a link included)", function()
    local base = new_base()
    assert(core.capture_mkdir(base .. "/fresh"))
    assert.equal("700\n", h.must("stat -c %a " .. h.q(base .. "/fresh")))
    local ok, err = core.capture_mkdir(base .. "/fresh")
    assert.is_nil(ok)
    assert.equal("invalid", err.kind)
    assert.equal("exists", err.reason)
    h.must("ln -s /tmp " .. h.q(base .. "/link"))
    ok, err = core.capture_mkdir(base .. "/link")
    assert.is_nil(ok)
    assert.equal("exists", err.reason)
    ok, err = core.capture_mkdir(base .. "/missing/below")
    assert.is_nil(ok)
    assert.equal("io", err.kind)
    assert.equal("ENOENT", err.reason)
    -- a non-plain archive name is refused
    ok, err = core.capture_extract(base .. "/fresh", "../x.tar")
    assert.is_nil(ok)
    assert.equal("archive_name", err.reason)
  end)
end)

-- The attack, live -------------------------------------------------------------------------
local PREFIX = "sstest-capture-"
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"

describe("capture: a root guest's planted files #docker", function()
  local eng
  setup(function() eng = assert(sandstack.engine {}) end)
  teardown(function() if eng then eng:close() end end)
  after_each(function()
    docker.reap { prefix = PREFIX }
    for _, b in ipairs(bases) do os.execute("rm -rf " .. h.q(b)) end
    bases = {}
  end)

  it("recreates none of them on a root host: no device, FIFO, link, set-id bit or foreign owner", function()
    local name = PREFIX .. h.random_suffix(3)
    local stack = assert(docker.start(name, { project_name = name, agent_port = 8080, forwarder_image = SOCAT,
      subnet_pool = "10.213.0.0/16", pull = "never", capture_path = "/work",
      -- typed-out loosening of the default CapDrop ALL: the planting needs MKNOD and CHOWN
      cap_drop = {},
      services = { { name = "sandbox", image = AGENT, command = { "agent" } } } }))
    local sb = name .. "-sandbox"
    -- the guest is root in its container, with Docker's default capabilities (MKNOD, CHOWN, ...)
    local plant = assert(eng:exec(sb, { "sh", "-c", table.concat({
      "set -e", "mkdir -p /work/sub /work/wide",
      "cp /bin/busybox /work/suid-root", "chmod 4755 /work/suid-root",
      "cp /bin/busybox /work/sgid", "chmod 2755 /work/sgid",
      "mknod /work/null c 1 3", "chmod 0666 /work/null",
      "mkfifo /work/fifo",
      "ln -s /etc/passwd /work/passwd-link",
      "ln -s ../../outside /work/out-link",
      "echo plain > /work/plain.txt", "ln /work/plain.txt /work/hard",
      "echo owned > /work/owned.txt", "chown 12345:12345 /work/owned.txt",
      "chmod 0777 /work/wide", "echo in-wide > /work/wide/f",
      "head -c 100000 /dev/urandom > /work/sub/bin.dat",
    }, "\n") }))
    assert.equal(0, plant.exit_code, plant.stderr)
    local want_bin = assert(eng:exec(sb, { "cat", "/work/sub/bin.dat" })).stdout
    local want_suid = assert(eng:exec(sb, { "cat", "/work/suid-root" })).stdout
    assert.equal(100000, #want_bin)

    local base = new_base()
    local dir = base .. "/cap"
    local ok, skipped = stack:capture(dir)
    assert.is_true(ok, tostring(skipped))

    -- Every rule is checked and every breach collected, so one run shows all of them.
    local breaches = {}
    local function breach(msg) breaches[#breaches + 1] = msg end
    -- nothing was written beside dir (the ../../outside link would land in base)
    for n in h.must("ls -A " .. h.q(base)):gmatch("[^\n]+") do
      if n ~= "cap" then breach("written outside dir: " .. n) end
    end
    -- dir itself is 0700 and ours
    local uid = h.must("id -u"):gsub("%s", "")
    local dmode = h.must("stat -c '%a %u' " .. h.q(dir))
    if dmode ~= "700 " .. uid .. "\n" then breach("dir is not 0700 and ours: " .. dmode) end
    -- every object is a regular file or a directory, owned by us, one link, no set-id/sticky bit,
    -- no group/other write bit
    local seen = {}
    for line in h.must("cd " .. h.q(dir) .. " && find . -mindepth 1 -printf '%y %m %U %G %n %P -> %l\\n'"):gmatch("[^\n]+") do
      local y, m, u, g, n, p = line:match("^(%S) (%d+) (%d+) (%d+) (%d+) (.-) %-> ")
      seen[p] = y
      local mode = tonumber(m, 8)
      if y ~= "f" and y ~= "d" then breach("not a file or directory: " .. line) end
      if any_bit(mode, tonumber("7000", 8)) then breach("set-id or sticky bit: " .. line) end
      if any_bit(mode, tonumber("022", 8)) then breach("group/other write: " .. line) end
      if u ~= uid or g ~= uid then breach("foreign owner: " .. line) end
      if y == "f" and n ~= "1" then breach("a hard link: " .. line) end
    end
    assert.same({}, breaches)
    -- exactly one of the hard-linked pair arrived, as a plain file
    assert.truthy((seen["work/plain.txt"] == "f") ~= (seen["work/hard"] == "f"))
    -- the regular files arrived byte-exact (the set-id copy too, without its bit)
    assert.equal(want_bin, h.read_file(dir .. "/work/sub/bin.dat"))
    assert.equal(want_suid, h.read_file(dir .. "/work/suid-root"))
    assert.equal("owned\n", h.read_file(dir .. "/work/owned.txt"))
    assert.equal("in-wide\n", h.read_file(dir .. "/work/wide/f"))
    assert.equal("d", seen["work/wide"])
    -- and the caller is told what was left out
    local reasons = {}
    for _, s in ipairs(skipped) do reasons[s.name] = s.reason end
    assert.equal("device", reasons["work/null"])
    assert.equal("fifo", reasons["work/fifo"])
    assert.equal("symlink", reasons["work/passwd-link"])
    assert.equal("symlink", reasons["work/out-link"])
    assert.truthy(reasons["work/hard"] == "hardlink" or reasons["work/plain.txt"] == "hardlink")

    -- a second capture into the same dir is refused, and the first one's files stay
    local again, err = stack:capture(dir)
    assert.is_nil(again)
    assert.equal("exists", err.reason)
    assert.equal(want_bin, h.read_file(dir .. "/work/sub/bin.dat"))
    -- caps reach the live path too, and leave nothing
    local small, serr = stack:capture(base .. "/small", { max_bytes = 1000 })
    assert.is_nil(small)
    assert.equal("output_limit", serr.kind)
    assert.is_nil(io.open(base .. "/small"))
    assert(stack:destroy())
    stack:close()
  end)
end)
