-- The session interface on an sbx box, against the simulator (#docker): the same names and
-- result shapes as on sandstack.docker (exec's code/killed/seconds, max_bytes, list, stat,
-- write's mode, upload, download), and the typed unsupported answers for what sbx lacks.
local sbx = require "sandstack.sbx"
local H = require "sbx_helpers"

describe("the session interface on sbx #docker", function()
  local env, backend, box

  setup(function()
    env = H.setup("session", { template = "sandstack-test/base:local" })
    backend = assert(sbx.backend(env.backend_opts))
    local err
    box, err = backend:acquire { conversation = "conv", key = "session" }
    assert(box, tostring(err))
  end)

  teardown(function()
    if box then box:dispose() end
    H.teardown(env)
    assert.equal(0, H.containers(env))
  end)

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
end)
