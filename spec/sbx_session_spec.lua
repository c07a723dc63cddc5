-- The session interface on an sbx box, against the simulator (#docker): the same names and
-- result shapes as on sandstack.docker (exec's code/killed/seconds, max_bytes, list, stat,
-- write's mode, upload, download), and the typed unsupported answers for what sbx lacks.
local H = require "sbx_helpers"

describe("the session interface on sbx #docker", function()
  local box
  H.with_box("session", { template = "sandstack-test/base:local" }, function(_, _, x) box = x end)

  it("execs with the session's result shape", function()
    local r = assert(box:exec("echo hi; exit 3"))
    assert.same({ 3, 3, "hi\n", false }, { r.code, r.exit_code, r.stdout, r.killed })
    assert.is_true(r.seconds > 0)
    local _, err = box:exec({ "yes" }, { max_bytes = 4096 })
    assert.equal("output_limit", err.kind)
    assert.is_true(err.killed)
    _, err = box:exec({ "sleep", "30" }, { timeout = 1 })
    assert.equal("timeout", err.kind)
    assert.is_true(err.killed)
  end)

  it("answers unsupported for a sidecar, stdin and what sbx lacks", function()
    local _, err = box:exec({ "true" }, { service = "db" })
    assert.same({ "unsupported", "sbx", "exec" }, { err.kind, err.backend, err.method })
    _, err = box:exec({ "cat" }, { stdin = "x" })
    assert.equal("unsupported", err.kind)
    for _, m in ipairs { "logs", "stats", "pause" } do
      local r, e = box[m](box)
      assert.is_nil(r)
      assert.same({ "unsupported", "sbx", m }, { e.kind, e.backend, e.method })
    end
  end)

  it("writes with a mode, reads, stats and lists", function()
    assert.is_true(box:write("notes.txt", "hello", { mode = tonumber("600", 8) }))
    assert.equal("hello", box:read("notes.txt"))
    local st = assert(box:stat("notes.txt"))
    assert.same({ "notes.txt", "file", 5, tonumber("600", 8) }, { st.name, st.type, st.size, st.mode })
    assert(box:mkdir("sub"))
    assert(box:write("sub/a.txt", "a"))
    local names = {}
    for _, m in ipairs(assert(box:list("."))) do names[#names + 1] = m.name .. ":" .. m.type end
    assert.is_truthy(table.concat(names, " "):find("notes.txt:file", 1, true))
    assert.is_truthy(table.concat(names, " "):find("sub:directory", 1, true))
    assert.is_true(box:remove("sub", { recursive = true }))
  end)

  it("uploads and downloads a host file", function()
    local src, dst = os.tmpname(), os.tmpname()
    local f = assert(io.open(src, "wb"))
    f:write(("0123456789"):rep(10000))
    f:close()
    assert.is_true(box:upload(src, "up.bin"))
    assert.equal(100000, box:download("up.bin", dst))
    local same = os.execute("cmp -s " .. src .. " " .. dst)
    os.remove(src)
    os.remove(dst)
    assert.is_truthy(same)
  end)

  describe("copies with docker cp's rules", function()
    local tmp
    setup(function()
      tmp = os.tmpname()
      os.remove(tmp)
      assert(os.execute("mkdir -m 700 " .. tmp))
    end)
    teardown(function() os.execute("rm -rf " .. tmp) end)

    local function host_tree(dir)
      local p = io.popen("cd " .. dir .. " && find . -mindepth 1 -printf '%P %y %m\\n' | sort")
      local out = p:read("a")
      p:close()
      return out
    end

    it("refuses a write to a directory, and uploads onto a directory into it", function()
      assert(box:mkdir("keep"))
      assert(box:write("keep/important.txt", "keep"))
      local ok, err = box:write("keep", "x")
      assert.is_nil(ok)
      assert.same({ "io", "EISDIR" }, { err.kind, err.reason })
      assert.equal("keep", box:read("keep/important.txt"))
      local f = assert(io.open(tmp .. "/big.bin", "wb"))
      f:write("payload")
      f:close()
      assert.is_true(box:upload(tmp .. "/big.bin", "keep"))
      assert.equal("payload", box:read("keep/big.bin"))
      assert.equal("keep", box:read("keep/important.txt"))
    end)

    it("copies directories both ways, as trees, with their modes", function()
      local src = tmp .. "/tree"
      assert(os.execute(table.concat({ "mkdir -p " .. src .. "/sub/deep", "printf a > " .. src .. "/a.txt",
        "printf run > " .. src .. "/sub/run.sh", "printf s > " .. src .. "/sub/deep/secret", "chmod 750 " .. src .. "/sub",
        "chmod 755 " .. src .. "/sub/run.sh", "chmod 600 " .. src .. "/sub/deep/secret", "chmod 644 " .. src .. "/a.txt" },
        " && ")))
      assert(box:mkdir("trees"))
      assert.is_true(box:upload(src, "trees"))
      assert.equal("run", box:read("trees/tree/sub/run.sh"))
      local r = assert(box:exec("cd trees/tree && find . -mindepth 1 -exec stat -c '%n %a' {} + | sort"))
      assert.equal("./a.txt 644\n./sub 750\n./sub/deep 755\n./sub/deep/secret 600\n./sub/run.sh 755\n", r.stdout)
      assert(box:download("trees/tree", tmp .. "/back"))
      assert.equal(host_tree(src), host_tree(tmp .. "/back"))
      local _, err = box:download("trees/tree", tmp .. "/big.bin")
      assert.equal("io", err.kind)
    end)

    it("refuses a download over its budget, leaving nothing", function()
      assert(box:write("large.bin", string.rep("x", 4096)))
      local _, err = box:download("large.bin", tmp .. "/large.bin", { max_bytes = 1000 })
      assert.same({ "output_limit", 1000 }, { err.kind, err.limit })
      assert.is_nil(io.open(tmp .. "/large.bin"))
      assert.equal(4096, box:download("large.bin", tmp .. "/large.bin", { max_bytes = 4096 }))
    end)
  end)
end)
