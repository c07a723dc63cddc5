-- The module loads, and the small shared pieces behave: errors, JSON bridge, tokens, store.
local sandstack = require "sandstack"
local core = sandstack.core
local h = require "helpers"

describe("sandstack module", function()
  it("loads and has a version", function()
    assert.matches("^%d+%.%d+%.%d+$", sandstack.VERSION)
    assert.equal(core.VERSION, sandstack.VERSION)
  end)

  it("makes error objects with a readable tostring", function()
    local e = core.error("engine", "not_found", "no such container", { status = 404 })
    assert.equal("engine", e.kind)
    assert.equal("not_found", e.reason)
    assert.equal(404, e.status)
    assert.equal("engine: no such container", tostring(e))
    assert.is_true(core.is_error(e))
    assert.is_false(core.is_error({ kind = "engine" }))
  end)

  it("round-trips JSON and refuses what JSON cannot carry", function()
    local s = core.json_encode({ a = { 1, 2, { b = true } }, c = "x" })
    local t = core.json_decode(s)
    assert.same({ a = { 1, 2, { b = true } }, c = "x" }, t)
    local _, err = core.json_encode({ f = function() end })
    assert.equal("invalid", err.kind)
    _, err = core.json_encode({ 1, x = 2 })
    assert.equal("mixed_table", err.reason)
    _, err = core.json_encode({ s = "a\0b" })
    assert.equal("nul_in_string", err.reason)
    local deep = {}
    local cur = deep
    for _ = 1, 100 do cur.x = {}; cur = cur.x end
    _, err = core.json_encode(deep)
    assert.equal("too_deep", err.reason)
    _, err = core.json_decode("{not json")
    assert.equal("bad_json", err.reason)
  end)

  it("mints distinct random tokens", function()
    local a, b = core.random_hex(32), core.random_hex(32)
    assert.equal(64, #a)
    assert.matches("^[0-9a-f]+$", a)
    assert.not_equal(a, b)
  end)

  it("raises a CSPRNG failure as an io/random error object, not a usage error", function()
    -- getrandom(2) is made to fail (EIO) by a preloaded shim in a child of this test mode
    local dir = h.must("mktemp -d /tmp/sstest-util-XXXXXX"):gsub("%s+$", "")
    h.write_file(dir .. "/shim.c", "#include <errno.h>\n#include <sys/types.h>\n"
      .. "ssize_t getrandom(void *b, size_t n, unsigned f) { (void)b; (void)n; (void)f; errno = EIO; return -1; }\n")
    h.must("cc -shared -fPIC -o " .. h.q(dir .. "/shim.so") .. " " .. h.q(dir .. "/shim.c"))
    local cmd = h.child_command(dir .. "/child.lua", [[
      local core = require "sandstack.core"
      local ok, e = pcall(core.random_hex, 4)
      io.write(tostring(ok), " ", tostring(core.is_error(e)), " ", tostring(e.kind), " ", tostring(e.reason),
        " ", tostring(e.errno), " ", tostring(e))
    ]])
    local out = h.must("LD_PRELOAD=" .. h.q(dir .. "/shim.so")
      .. " ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=1 " .. cmd .. " 2>&1")
    os.execute("rm -rf " .. h.q(dir))
    assert.equal("false true io random 5 io: random_hex: cannot read the kernel CSPRNG: Input/output error", out)
  end)

  it("scrubs secrets at any depth and copies the rest", function()
    local store = sandstack.store
    assert.same({ "api_key", "session_token" }, store.secret_keys())
    local rec = { api_key = "k", x = { session_token = "t", y = { api_key = "z", keep = 1 } } }
    local out = store.scrub(rec)
    assert.same({ x = { y = { keep = 1 } } }, out)
    assert.equal("k", rec.api_key) -- the input is untouched
    assert.has_error(function() store.scrub("x") end)
  end)
end)
