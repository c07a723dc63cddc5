-- eng:exec as one call into the C core: the argument and option checks raise at the
-- caller with exec's texts, the Env list keeps its rules, a timeout and a budget end the exec
-- with typed errors, and the bytes come back exactly, against the live engine. Every container
-- carries io.sandstack.project=sstest-exec-<random> and is removed afterwards.
local sandstack = require "sandstack"
local core = sandstack.core

local IMAGE = "sandstack-test/base:local"

describe("eng:exec #docker", function()
  local eng, project, id

  setup(function()
    project = "sstest-exec-" .. core.random_hex(4)
    eng = assert(sandstack.engine { timeout = 30 })
    local c = assert(eng:call("POST", "/containers/create", { Image = IMAGE, Cmd = { "sleep", "300" },
      Labels = { ["io.sandstack.project"] = project } }, { query = { name = project .. "-c" } }))
    id = c.Id
    assert.is_true(eng:call("POST", "/containers/" .. id .. "/start"))
  end)

  teardown(function()
    if id then eng:call("DELETE", "/containers/" .. id, nil, { query = { force = true }, ok = { [404] = true } }) end
    eng:close()
  end)

  -- The message a raised error carries, and whether it names this file (the caller's line).
  local function raised(fn)
    local ok, msg = pcall(fn)
    assert.is_false(ok)
    return tostring(msg)
  end

  it("raises misuse at the caller, with exec's texts", function()
    local cases = {
      { function() eng:exec("", { "true" }) end, "exec: container must be a string" },
      { function() eng:exec(id, {}) end, "exec: argv must be a non-empty list of strings" },
      { function() eng:exec(id, { "a", 1 }) end, "exec: argv must be a list of strings" },
      { function() eng:exec(id, { "true" }, "x") end, "exec: options must be a table" },
      { function() eng:exec(id, { "true" }, { bogus = 1 }) end, "exec: unknown option 'bogus'" },
      { function() eng:exec(id, { "true" }, { max_bytes = "1" }) end, "exec: option 'max_bytes' must be a number, got string" },
      { function() eng:exec(id, { "true" }, { env = "A=1" }) end, "exec: option 'env' must be a table" },
      { function() eng:exec(id, { "true" }, { env = { "A" } }) end, "exec: env entries must be 'K=V' strings" },
      { function() eng:exec(id, { "true" }, { env = { [true] = "x" } }) end, "exec: env keys must be strings" },
      -- these went into the create's body as given (the engine's 400), as its table says they raise
      { function() eng:exec(id, { "true" }, { user = 0 }) end, "exec: option 'user' must be a string" },
      { function() eng:exec(id, { "true" }, { workdir = {} }) end, "exec: option 'workdir' must be a string" },
      { function() eng:exec(id, { "true" }, { stdin = 1 }) end, "exec: option 'stdin' must be a string" },
    }
    -- a number out of range is a refused value: nil, err
    local none, err = eng:exec(id, { "true" }, { timeout = 0 })
    assert.is_nil(none)
    assert.same({ "invalid", "invalid_option", "timeout" }, { err.kind, err.reason, err.option })
    for _, c in ipairs(cases) do
      local msg = raised(c[1])
      assert.truthy(msg:find(c[2], 1, true), msg)
      assert.truthy(msg:find("engine_exec_spec.lua:", 1, true), "not raised at the caller: " .. msg)
    end
  end)

  it("sends the Env list: K=V entries as given, then named ones sorted, values as tostring", function()
    local r = assert(eng:exec(id, { "sh", "-c", 'printf "%s|%s|%s|%s|%s" "$Z" "$A" "$B" "$N" "$T"' },
      { env = { "Z=first", B = "b", A = "a", N = 42, T = true } }))
    assert.equal("first|a|b|42|true", r.stdout)
    assert.equal(0, r.exit_code)
    -- a value JSON cannot carry is refused as core.json_encode refuses it, nothing runs
    local none, err = eng:exec(id, { "true" }, { env = { A = "a\0b" } })
    assert.is_nil(none)
    assert.equal("invalid", err.kind)
  end)

  it("keeps every byte, NUL and invalid UTF-8 included, on both streams", function()
    local r = assert(eng:exec(id, { "sh", "-c", [[printf 'a\000b\377\376c'; printf '\000\300\200' >&2; exit 3]] }))
    assert.equal("a\0b\255\254c", r.stdout)
    assert.equal("\0\192\128", r.stderr)
    assert.equal(3, r.exit_code)
  end)

  it("ends an exec past its timeout with transport/timeout naming the caller's path", function()
    local t0 = core.engine_clock()
    local r, err = eng:exec(id, { "sleep", "20" }, { timeout = 1 })
    assert.is_nil(r)
    assert.equal("transport", err.kind)
    assert.equal("timeout", err.reason)
    assert.equal("POST", err.method)
    assert.matches("^/exec/[%x]+/start$", err.path)
    assert.is_true(core.engine_clock() - t0 < 5)
  end)

  it("stops at exactly the budget: max_bytes bytes pass, one more is output_limit", function()
    local r = assert(eng:exec(id, { "sh", "-c", "head -c 1000 /dev/zero; head -c 24 /dev/zero >&2" }, { max_bytes = 1024 }))
    assert.equal(1000, #r.stdout)
    assert.equal(24, #r.stderr)
    local none, err = eng:exec(id, { "sh", "-c", "head -c 1025 /dev/zero" }, { max_bytes = 1024 })
    assert.is_nil(none)
    assert.equal("output_limit", err.kind)
    assert.equal(1024, err.limit)
  end)

  it("answers a missing container with the engine's 404 on the create path", function()
    local r, err = eng:exec(project .. "-absent/x", { "true" })
    assert.is_nil(r)
    assert.equal("engine", err.kind)
    assert.equal("not_found", err.reason)
    assert.equal(404, err.status)
    assert.equal("POST", err.method)
    assert.equal("/containers/" .. project .. "-absent%2Fx/exec", err.path)
  end)
end)
