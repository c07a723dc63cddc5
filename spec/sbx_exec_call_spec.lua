-- core.sbx_exec, the one call into C behind box:exec: the wrapper's stdin built in C,
-- the sbx CLI run, its stderr split at the nonce. A stand-in for `sbx exec` (a shell script as
-- the prefix) records what it was given, so the framing is checked byte for byte, NUL and
-- invalid UTF-8 included, without a sandbox.
local core = require "sandstack.core"
local h = require "helpers"

local function x(s) return "x" .. core.base64(s) end

describe("core.sbx_exec", function()
  local dir

  setup(function()
    dir = "/tmp/sstest-sbxcall-" .. core.random_hex(4)
    assert(os.execute("mkdir -p " .. h.q(dir)))
  end)

  teardown(function()
    if dir and dir:match("^/tmp/sstest%-sbxcall%-") then os.execute("rm -rf " .. h.q(dir)) end
  end)

  -- The stand-in: sh -c SCRIPT STANDIN, then what sbx_exec appends: sh -c WRAPPER sandstack-sbx
  -- NONCE DIR TOKEN as $1..$7. It saves its stdin and arguments, then runs `body`.
  local function prefix(body)
    return { "sh", "-c", 'cat > "$0.in"; printf "%s\\n" "$@" > "$0.args"; ' .. body, dir .. "/standin" }
  end

  local function job(extra)
    local j = { workspace = "/ws", mount = "/mnt/w", cwd = "/mnt/w/sub", argv = { "echo", "hi" },
      dir = "/tmp/.sandstack-exec", timeout = 20, max_output = 4096 }
    for k, v in pairs(extra or {}) do j[k] = v end
    return j
  end

  it("builds the wrapper's input byte for byte and splits stderr at the nonce", function()
    local argv = { "printf", "a\0b\255\254", "", "\n" }
    local env = { "A=1", "B=\0\192" }
    local r = assert(core.sbx_exec(prefix('printf "sbx chatter\\n%s\\n" "$5" >&2; printf "o\\0ut"; printf "e\\377rr" >&2; exit 3'),
      job { argv = argv, env = env }))
    assert.is_true(r.ran)
    assert.equal("o\0ut", r.stdout)
    assert.equal("e\255rr", r.stderr)
    assert.equal(3, r.exit_code)
    local want = { x("/ws"), x("/mnt/w"), x("/mnt/w/sub"), x("A=1"), x("B=\0\192"), "--" }
    for _, a in ipairs(argv) do want[#want + 1] = x(a) end
    want[#want + 1] = "."
    assert.equal(table.concat(want, "\n") .. "\n", h.read_file(dir .. "/standin.in"))
    local args = {}
    for l in h.read_file(dir .. "/standin.args"):gmatch("([^\n]*)\n") do args[#args + 1] = l end
    assert.equal("sh", args[1])
    assert.equal("-c", args[2])
    assert.equal("sandstack-sbx", args[#args - 3])
    assert.matches("^sandstack%-" .. ("%x"):rep(32) .. "$", args[#args - 2])
    assert.equal("/tmp/.sandstack-exec", args[#args - 1])
    assert.equal(r.token, args[#args])
    assert.matches("^" .. ("%x"):rep(24) .. "$", r.token)
  end)

  it("draws a fresh nonce and token each call", function()
    local a = assert(core.sbx_exec(prefix('printf "%s\\n" "$5" >&2'), job()))
    local b = assert(core.sbx_exec(prefix('printf "%s\\n" "$5" >&2'), job()))
    assert.not_equal(a.token, b.token)
  end)

  it("hands sbx's own stderr back whole when the wrapper never printed the nonce", function()
    local r = assert(core.sbx_exec(prefix('printf "error: sandbox x not found\\n" >&2; exit 1'), job()))
    assert.is_false(r.ran)
    assert.equal("error: sandbox x not found\n", r.stderr)
    assert.equal(1, r.exit_code)
    -- the nonce must be a whole line
    r = assert(core.sbx_exec(prefix('printf "%sx\\n" "$5" >&2'), job()))
    assert.is_false(r.ran)
  end)

  it("stops at the output budget and at the deadline", function()
    local r = assert(core.sbx_exec(prefix('printf "%s\\n" "$5" >&2; head -c 100000 /dev/zero'), job { max_output = 1000 }))
    assert.is_true(r.over_limit)
    r = assert(core.sbx_exec(prefix('printf "%s\\n" "$5" >&2; sleep 20'), job { timeout = 0.5 }))
    assert.is_true(r.timed_out)
  end)

  it("refuses a malformed job as a programming error", function()
    assert.has_error(function() core.sbx_exec(prefix("true"), job { bogus = 1 }) end)
    assert.has_error(function() core.sbx_exec(prefix("true"), job { argv = { "a", 1 } }) end)
    assert.has_error(function() core.sbx_exec(prefix("true"), job { cwd = false }) end)
  end)
end)

describe("core.sbx_run{json = true}", function()
  it("hands back the JSON answer after start-up lines, decoded, or why there is none", function()
    local r = assert(core.sbx_run({ "sh", "-c", [[printf 'Starting daemon...\n{"sandboxes":[{"name":"a"}]}\n']] }, { json = true }))
    assert.equal("a", r.json.sandboxes[1].name)
    assert.is_nil(r.json_error)
    r = assert(core.sbx_run({ "sh", "-c", "echo no json here" }, { json = true }))
    assert.is_nil(r.json)
    assert.equal("no JSON in the output", r.json_error)
    r = assert(core.sbx_run({ "sh", "-c", [[printf '{"a":']] }, { json = true }))
    assert.matches("^not valid JSON near byte %d+$", r.json_error)
    -- without the option the result is as it was
    r = assert(core.sbx_run({ "sh", "-c", [[printf '{"a":1}']] }))
    assert.is_nil(r.json)
    assert.is_nil(r.json_error)
  end)
end)
