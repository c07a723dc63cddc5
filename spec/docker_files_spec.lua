-- The file methods of a live sandstack.docker stack under a hostile guest (#docker): a listing
-- reads names, not contents (a sparse 16 GiB file costs the host nothing), a download has a
-- budget and writes once, and nothing is destroyed by a write (docker cp's rules: a copy onto
-- a directory goes into it, a write to a directory is an error). One stack serves every
-- it-block; its project starts "sstest-files-" and is destroyed at the end.
local sandstack = require "sandstack"
local h = require "helpers"

local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
local GiB = 1024 * 1024 * 1024

-- Bytes this process has caused to be written to storage so far (the kernel's count).
local function written()
  local f = assert(io.open("/proc/self/io"))
  local n = tonumber(f:read("a"):match("write_bytes:%s*(%d+)"))
  f:close()
  return n
end

local function names_of(list)
  local out = {}
  for i, m in ipairs(list) do out[i] = m.name end
  return table.concat(out, " ")
end

local run = h.cli -- `sandstack ARGV...` in this process: exit code, stdout, stderr

-- The entries of a host directory, "name" and "name/" for directories, sorted.
local function host_tree(dir)
  local out = {}
  local p = io.popen("cd " .. h.q(dir) .. " && find . -mindepth 1 -printf '%P %y %m\\n' | sort")
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return table.concat(out, "\n")
end

describe("the file methods against a hostile guest #docker", function()
  local stack, tmp

  local function sh(cmd)
    local r = assert(stack:exec(cmd))
    assert.equal(0, r.code, r.stderr)
    return r.stdout
  end

  setup(function()
    stack = assert(sandstack.docker.start("sstest-files-" .. h.random_suffix(3), { agent_port = 8080,
      forwarder_image = SOCAT, subnet_pool = "10.216.0.0/16", pull = "never",
      services = { { name = "sandbox", image = AGENT, command = { "agent" } } } }))
    tmp = os.tmpname()
    os.remove(tmp)
    assert(os.execute("mkdir -m 700 " .. h.q(tmp)))
  end)

  teardown(function()
    if tmp then os.execute("rm -rf " .. h.q(tmp)) end
    if stack then assert(stack:destroy()) end
  end)

  describe("a listing reads names, not contents", function()
    setup(function()
      -- free for the guest: no block of it is written
      sh("mkdir -p /work/big && truncate -s 16G /work/big/sparse && echo a > /work/big/a && mkdir /work/big/z")
    end)

    it("lists a directory holding a sparse 16 GiB file without writing it on the host", function()
      local before = written()
      local list = assert(stack:list("/work/big"))
      local grew = written() - before
      assert.equal("a sparse z", names_of(list))
      assert.same({ "file", 16 * GiB }, { list[2].type, list[2].size })
      assert.equal("directory", list[3].type)
      assert.is_true(grew < 16 * 1024 * 1024, ("the listing wrote %d bytes on the host"):format(grew))
    end)

    it("stats the sparse file from the engine's header alone", function()
      local before = written()
      local st = assert(stack:stat("/work/big/sparse"))
      assert.same({ "sparse", "file", 16 * GiB }, { st.name, st.type, st.size })
      assert.is_true(written() - before < 1024 * 1024)
    end)

    it("still lists a small directory, a missing one (ENOENT) and a file (ENOTDIR)", function()
      sh("mkdir -p /work/small/sub && echo x > /work/small/f && ln -s /etc /work/small/l")
      local list = assert(stack:list("/work/small"))
      assert.equal("f l sub", names_of(list))
      assert.same({ "link", "/etc" }, { list[2].type, list[2].link })
      local _, err = stack:list("/work/none")
      assert.same({ "io", "ENOENT" }, { err.kind, err.reason })
      _, err = stack:list("/work/small/f")
      assert.same({ "io", "ENOTDIR" }, { err.kind, err.reason })
    end)

    it("refuses a download of the sparse file over the default budget, typed, leaving nothing", function()
      local dst = tmp .. "/sparse"
      local before = written()
      local _, err = stack:download("/work/big/sparse", dst)
      local grew = written() - before
      assert.is_table(err)
      assert.equal("output_limit", err.kind, tostring(err))
      assert.is_true(err.limit < 16 * GiB)
      assert.is_nil(io.open(dst))
      assert.equal("", host_tree(tmp))
      assert.is_true(grew < 16 * 1024 * 1024, ("the refused download wrote %d bytes"):format(grew))
    end)

    it("downloads over a budget raised on purpose, writing the file once", function()
      sh("head -c 67108864 /dev/urandom > /work/rand.bin")
      local dst = tmp .. "/rand.bin"
      local _, err = stack:download("/work/rand.bin", dst, { max_bytes = 32 * 1024 * 1024 })
      assert.equal("output_limit", err.kind)
      assert.is_nil(io.open(dst))
      local before = written()
      assert.equal(67108864, stack:download("/work/rand.bin", dst, { max_bytes = 128 * 1024 * 1024 }))
      local grew = written() - before
      assert.is_true(grew < 96 * 1024 * 1024, ("64 MiB downloaded with %d bytes written"):format(grew))
      local want = sh("md5sum /work/rand.bin"):match("%x+")
      local p = io.popen("md5sum " .. h.q(dst))
      local got = p:read("a"):match("%x+")
      p:close()
      assert.equal(want, got)
      os.remove(dst)
    end)
  end)

  describe("nothing is destroyed by a write", function()
    it("refuses h:write to a directory, which keeps what it holds", function()
      sh("mkdir -p /work/d && echo keep > /work/d/important.txt")
      local ok, err = stack:write("/work/d", "x")
      assert.is_nil(ok)
      assert.same({ "io", "EISDIR" }, { err.kind, err.reason })
      assert.equal("keep\n", stack:read("/work/d/important.txt"))
    end)

    it("uploads a file onto a directory into it, as docker cp does", function()
      sh("mkdir -p /work/into && echo keep > /work/into/important.txt")
      local src = tmp .. "/big.bin"
      h.write_file(src, "payload")
      assert(os.execute("chmod 640 " .. h.q(src)))
      assert.is_true(stack:upload(src, "/work/into"))
      assert.equal("payload", stack:read("/work/into/big.bin"))
      assert.equal(tonumber("640", 8), stack:stat("/work/into/big.bin").mode)
      assert.equal("keep\n", stack:read("/work/into/important.txt"))
      os.remove(src)
    end)

    it("refuses an upload that would replace a directory with a file", function()
      sh("mkdir -p /work/clash/same.bin && echo keep > /work/clash/same.bin/inner")
      local src = tmp .. "/same.bin"
      h.write_file(src, "payload")
      local ok, err = stack:upload(src, "/work/clash")
      os.remove(src)
      assert.is_nil(ok)
      assert.same({ "io", "EISDIR" }, { err.kind, err.reason })
      assert.equal("keep\n", stack:read("/work/clash/same.bin/inner"))
    end)

    it("refuses a write that lands nowhere the guest can see", function()
      for _, p in ipairs { "/proc/x", "/sys/x", "/dev/x", "/dev/shm/x" } do
        local ok, err = stack:write(p, "x")
        assert.is_nil(ok, p)
        assert.same({ "invalid", "mount" }, { err.kind, err.reason }, p)
      end
      sh("ln -s /proc /work/toproc")
      local ok, err = stack:write("/work/toproc/y", "x")
      assert.is_nil(ok)
      assert.same({ "invalid", "mount" }, { err.kind, err.reason })
    end)

    it("shows no engine host path in an error", function()
      sh("echo hi > /work/plain")
      local errs = {}
      errs[#errs + 1] = select(2, stack:read("/work/plain/x"))
      errs[#errs + 1] = select(2, stack:stat("/work/plain/x"))
      errs[#errs + 1] = select(2, stack:list("/work/plain/x"))
      errs[#errs + 1] = select(2, stack:download("/work/plain/x", tmp .. "/x"))
      errs[#errs + 1] = select(2, stack:write("/work/plain/x/y", "z"))
      for i, e in ipairs(errs) do
        assert.is_table(e, "call " .. i)
        local text = tostring(e)
        assert.is_nil(text:find("/var/lib/docker", 1, true), text)
        assert.is_nil(text:find("/merged", 1, true), text)
        assert.is_nil(text:find("overlay2", 1, true), text)
      end
    end)

    -- every byte that ends or splits a query ('&', '?', '#', '=', '+', '%', a space) and non-ASCII
    -- ones, in the directory (a put's query) and in the file's name (a get's and a stat's)
    it("writes, reads, stats, lists and copies a file whose path holds a query's bytes", function()
      local dir, name = "/work/q a&b?c#d=e+f%25g \xc3\xbc", "f &x=1?#%2F+\xe2\x82\xac.txt"
      local path = dir .. "/" .. name
      sh("mkdir -p " .. h.q(dir))
      assert.is_true(stack:write(path, "odd bytes"))
      assert.equal("odd bytes", sh("cat " .. h.q(path)))
      assert.equal("odd bytes", stack:read(path))
      local st = assert(stack:stat(path))
      assert.same({ name, "file", 9 }, { st.name, st.type, st.size })
      assert.equal(name, names_of(assert(stack:list(dir))))
      assert(stack:download(path, tmp .. "/odd.txt"))
      assert.equal("odd bytes", h.read_file(tmp .. "/odd.txt"))
      h.write_file(tmp .. "/up &=?#%.txt", "up")
      assert.is_true(stack:upload(tmp .. "/up &=?#%.txt", dir))
      assert.equal("up", sh("cat " .. h.q(dir .. "/up &=?#%.txt")))
      -- a file never replaces the odd directory either: the put's guard went with its path
      assert.equal("io", select(2, stack:write(dir, "x")).kind)
    end)

    it("copies directories both ways, as trees, with their modes", function()
      local src = tmp .. "/tree"
      assert(os.execute(table.concat({ "mkdir -p " .. h.q(src .. "/sub/deep"),
        "printf a > " .. h.q(src .. "/a.txt"), "printf run > " .. h.q(src .. "/sub/run.sh"),
        "printf s > " .. h.q(src .. "/sub/deep/secret"), "chmod 750 " .. h.q(src .. "/sub"),
        "chmod 755 " .. h.q(src .. "/sub/run.sh"), "chmod 600 " .. h.q(src .. "/sub/deep/secret"),
        "chmod 644 " .. h.q(src .. "/a.txt") }, " && ")))
      sh("mkdir -p /work/trees")
      assert.is_true(stack:upload(src, "/work/trees"))
      assert.equal(table.concat({ "/work/trees/tree 755", "/work/trees/tree/a.txt 644", "/work/trees/tree/sub 750",
        "/work/trees/tree/sub/deep 755", "/work/trees/tree/sub/deep/secret 600", "/work/trees/tree/sub/run.sh 755" }, "\n"),
        sh("find /work/trees/tree -exec stat -c '%n %a' {} + | sort"):gsub("\n$", ""))
      assert.equal("run", stack:read("/work/trees/tree/sub/run.sh"))
      -- and back: a new directory named by the destination
      local back = tmp .. "/back"
      assert.is_true(stack:download("/work/trees/tree", back) ~= nil)
      assert.equal(host_tree(src), host_tree(back))
      -- into an existing directory: it lands under its own name
      assert(os.execute("mkdir " .. h.q(tmp .. "/into")))
      assert(stack:download("/work/trees/tree", tmp .. "/into"))
      assert.equal(host_tree(src), host_tree(tmp .. "/into/tree"))
      -- a directory never replaces a host file
      h.write_file(tmp .. "/afile", "mine")
      local _, err = stack:download("/work/trees/tree", tmp .. "/afile")
      assert.equal("io", err.kind)
      assert.equal("mine", h.read_file(tmp .. "/afile"))
    end)

    it("sandstack cp copies into a directory and copies trees both ways", function()
      local src = tmp .. "/cp.bin"
      h.write_file(src, "via cp")
      sh("mkdir -p /work/cpdir && echo keep > /work/cpdir/important.txt")
      assert.equal(0, (run("cp", src, stack.session_key .. ":/work/cpdir")))
      assert.equal("via cp", stack:read("/work/cpdir/cp.bin"))
      assert.equal("keep\n", stack:read("/work/cpdir/important.txt"))
      local back = tmp .. "/cpback"
      assert.equal(0, (run("cp", stack.session_key .. ":/work/cpdir", back)))
      assert.equal("cp.bin f 644\nimportant.txt f 644", host_tree(back))
      local code, _, err = run("cp", stack.session_key .. ":/work/cpdir", src)
      assert.equal(1, code)
      assert.matches("^sandstack: io: ", err)
    end)
  end)
end)
