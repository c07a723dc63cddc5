-- What the original sbx backend's own suites expect of it, the sbx parts. The first
-- half needs no sbx and runs in every mode: option values, the runner's exact budget, the
-- egress matcher's answers for sbx patterns, a malformed `mcp ls`, and the box's path rules
-- that refuse before any sbx call. The second half (#docker) drives the simulator: removal and
-- reclaim in the guest, exec's cwd and shell-string form, the exact output budget, a template
-- without /bin/bash, and a daemon whose listing is empty while sandboxes run.
local core, policy, sbx = require "sandstack.core", require "sandstack.policy", require "sandstack.sbx"
local h, H = require "helpers", require "sbx_helpers"
-- internals, reached through their own modules
local records, boxes, egress = require "sandstack.sbx.records", require "sandstack.sbx.box", require "sandstack.sbx.egress"

local function scratch() return h.must("mktemp -d /tmp/sstest-sbxfid.XXXXXX"):match("%S+") end

local function refused(kind, reason, v, err, what)
  assert(v == nil, (what or "") .. ": expected a refusal, got " .. tostring(v))
  assert(core.is_error(err), (what or "") .. ": no error object")
  assert.equal(kind, err.kind, (what or "") .. ": " .. tostring(err.message))
  if reason then assert.equal(reason, err.reason, (what or "") .. ": " .. tostring(err.message)) end
  return err
end

describe("sbx backend options", function()
  local root
  before_each(function() root = scratch() end)
  after_each(function() h.sh("rm -rf " .. h.q(root)) end)

  local function backend(extra)
    local o = { sbx_path = "/nonexistent/sbx", workspace_root = root, name_prefix = "f-" }
    for k, v in pairs(extra) do o[k] = v end
    return sbx.backend(o)
  end

  it("refuses values of the wrong shape as invalid, naming the option", function()
    local cases = {
      { "cpus", 0 }, { "cpus", -2 }, { "cpus", 1.5 },
      { "memory", "lots" }, { "memory", "" }, { "memory", 0 }, { "memory", "2 g" },
      { "max_output_bytes", 1.5 }, { "max_output_bytes", 0 }, { "max_output_bytes", -1 },
      { "storage_base", "relative/work" }, { "storage_base", "/work" }, { "storage_base", "/a/../b" },
    }
    local mistyped = { { "cpus", "2" }, { "max_output_bytes", "8" }, { "memory", true } }
    for _, t in ipairs { "exec_timeout", "command_timeout", "create_timeout", "exec_cleanup_timeout" } do
      for _, bad in ipairs { math.huge, -math.huge, 0 / 0, 0, -1 } do cases[#cases + 1] = { t, bad } end
      mistyped[#mistyped + 1] = { t, true }
      mistyped[#mistyped + 1] = { t, "600" }
    end
    for _, c in ipairs(mistyped) do -- a wrong type is a programming error: it raises, naming the option
      local ok, msg = pcall(backend, { [c[1]] = c[2] })
      assert.is_false(ok, c[1] .. "=" .. tostring(c[2]))
      assert.truthy(tostring(msg):find("option '" .. c[1] .. "' must be", 1, true), tostring(msg))
    end
    for _, c in ipairs(cases) do
      local b, err = backend { [c[1]] = c[2] }
      refused("invalid", "invalid_option", b, err, c[1] .. "=" .. tostring(c[2]))
      assert.equal(c[1], err.option)
      assert.truthy(err.message:find(c[1], 1, true), err.message)
    end
    -- the control: well-formed values make a backend
    local b = assert(backend { cpus = 4, memory = "1024m", exec_timeout = 0.5, create_timeout = 900,
      max_output_bytes = 4096, storage_base = "/srv/box/work" })
    b:close()
    b = assert(backend { memory = 2 * 1024 ^ 3 })
    b:close()
  end)
end)

describe("sbx runner budget", function()
  it("accepts exactly max_output bytes and ends the command one byte past them", function()
    local exact = assert(core.sbx_run({ "sh", "-c", "printf 12345; printf 678 >&2" }, { max_output = 8 }))
    assert.is_false(exact.over_limit)
    assert.equal(0, exact.exit_code)
    assert.equal("12345", exact.stdout)
    assert.equal("678", exact.stderr)
    local over = assert(core.sbx_run({ "sh", "-c", "printf 12345; printf 6789 >&2" }, { max_output = 8 }))
    assert.is_true(over.over_limit)
    assert.equal(8, #over.stdout + #over.stderr)
  end)
end)

describe("sbx egress patterns (csrc/policy/coverage.c)", function()
  local none = { secrets = {}, custom_secrets = {}, env_only_count = 0 }
  local function global(res) return { { scope = "global", decision = "allow", resources = { res }, status = "active" } } end

  it("a global **.x beside an allowlist *.x admits nothing more, so acquire keeps it", function()
    local l = assert(policy.compile { allow = { "*.example.com" } })
    assert.equal("apex_denied", l:coverage("**.example.com"))
    local plan = assert(egress.assess(l, { rules = global("**.example.com"), secrets = none }, "n"))
    assert.same({}, plan.deny)
    -- the sandbox's own deny of the apex is what makes it so
    local flat = {}
    for _, c in ipairs(egress.commands(l, "n")) do flat[#flat + 1] = table.concat(c, " ") end
    assert.truthy(table.concat(flat, "\n"):find("deny network --sandbox n example.com", 1, true))
    -- the controls: where the allowlist does not admit the subdomains, or only some methods,
    -- the same global opens more and is refused
    local _, reason = egress.assess(assert(policy.compile { allow = { "api.example.com" } }),
      { rules = global("**.example.com"), secrets = none }, "n")
    assert.equal("global_allow", reason)
    _, reason = egress.assess(assert(policy.compile { allow = { { host = "*.example.com", methods = { "GET" } } } }),
      { rules = global("**.example.com"), secrets = none }, "n")
    assert.equal("global_allow", reason)
    assert.equal("covered", assert(policy.compile { allow = { "*.example.com", "example.com" } }):coverage("**.example.com"))
  end)

  it("refuses a global rule with glob characters, naming it, instead of a deny that could not be exact", function()
    for _, allow in ipairs { { "api.example.com" }, { "*.example.com" }, { "other.org" } } do
      local l = assert(policy.compile { allow = allow })
      for _, res in ipairs { "api?.example.com", "api[!1].example.com", "api[12].example.com", "a*.example.com",
        "*.api?.example.com", "**.b[x].example.com", "api?.example.com:443" } do
        assert.equal("glob", l:coverage(res), res)
        local plan, reason, detail = egress.assess(l, { rules = global(res), secrets = none }, "n")
        assert.is_nil(plan, res)
        assert.equal("global_allow_glob", reason, res)
        assert.truthy(detail:find(res, 1, true), detail)
        -- and a rule that appears after acquire retires the sandbox
        assert.equal("global_allow_glob", egress.drift(l, { rules = global(res), secrets = none }, "n", ""))
      end
      -- the controls: sbx's own wildcard forms and an IPv6 literal are no globs
      for _, res in ipairs { "*.example.com", "**.example.com", "[2001:db8::1]:443", "pypi.org" } do
        assert.not_equal("glob", l:coverage(res), res)
      end
    end
  end)
end)

describe("sbx host checks against a malformed sbx", function()
  it("reports a malformed `mcp ls` answer as malformed, never as a registered server", function()
    local root = scratch()
    finally(function() h.sh("rm -rf " .. h.q(root)) end)
    local fake = root .. "/sbx"
    h.write_file(fake, table.concat {
      "#!/bin/sh\n",
      'case "$1 $2" in\n',
      '  "settings get") echo false ;;\n',
      '  "mcp ls") cat "$(dirname "$0")/mcp.json" ;;\n',
      '  *) echo "error: unexpected" >&2; exit 1 ;;\n',
      "esac\n" })
    h.must("chmod +x " .. h.q(fake))
    local b = assert(sbx.backend { sbx_path = fake, workspace_root = root .. "/ws", name_prefix = "f-" })
    for _, answer in ipairs { '{"gateway":{"name":"LOCAL"}}', '{"servers":null}', '{"servers":"none"}' } do
      h.write_file(root .. "/mcp.json", answer .. "\n")
      local err = refused("sbx", "malformed", b:acquire { conversation = "c", key = "k" })
      assert.falsy(err.message:find("registered", 1, true), err.message)
    end
    for _, answer in ipairs { "42", "[]" } do -- no JSON object at all: sbx's answer is unreadable
      h.write_file(root .. "/mcp.json", answer .. "\n")
      refused("sbx", "bad_json", b:acquire { conversation = "c", key = "k" })
    end
    -- the controls: a real server list is refused by name; a non-table entry does not crash
    h.write_file(root .. "/mcp.json", '{"servers":[{"name":"github"},"odd"]}\n')
    local err = refused("host_not_confined", "mcp_server", b:acquire { conversation = "c", key = "k" })
    assert.truthy(err.message:find("github", 1, true), err.message)
    h.write_file(root .. "/mcp.json", '{"servers":[]}\n')
    -- the empty list passes the MCP check; the next call (ls) is what fails here
    err = select(2, b:acquire { conversation = "c", key = "k" })
    assert.equal("sbx", err.kind)
    assert.truthy(err.message:find("unexpected", 1, true), err.message)
    b:close()
  end)
end)

-- A Box on a recorded local workspace whose sbx cannot run: everything below is refused (or
-- answered) before any sbx call, so a call that reached sbx would fail with kind "sbx".
describe("sbx box path rules without a guest", function()
  local root, b, box, ws
  before_each(function()
    root = scratch()
    b = assert(sbx.backend { sbx_path = "/nonexistent/sbx", workspace_root = root, name_prefix = "u-" })
    assert(core.mkdir(root .. "/u-box"))
    ws = root .. "/u-box/ws"
    assert(core.mkdir(ws, 493))
    assert(core.mkdir(ws .. "/work", 493))
    assert(records.write(b, "u-box", { name = "u-box", id = "id-1" }))
    box = boxes.new { backend = b, name = "u-box", id = "id-1", workspace = ws, mount = "/sandstack",
      work_dir = "/sandstack/work", egress = "closed" }
  end)
  after_each(function()
    box:close()
    b:close()
    h.sh("rm -rf " .. h.q(root))
  end)

  it("refuses to remove or reclaim the working directory in any spelling", function()
    h.write_file(ws .. "/work/keep", "keep")
    for _, path in ipairs { ".", "./", "a/..", "/sandstack/work", "/sandstack/work/." } do
      refused("invalid", "working_directory", box:remove(path, { recursive = true }))
      refused("invalid", nil, box:reclaim(path))
    end
    refused("invalid", "root", box:remove("/sandstack", { recursive = true }))
    refused("invalid", "root", box:reclaim("/sandstack"))
    assert.equal("keep", h.read_file(ws .. "/work/keep"))
  end)

  it("removing or reclaiming what is not there succeeds, without a guest", function()
    assert.is_true(box:remove("missing"))
    assert.is_true(box:remove("missing/deeper", { recursive = true }))
    assert.is_true(box:reclaim("missing"))
    assert.is_true(box:reclaim("/sandstack/work/missing/x", { timeout = 5 }))
    assert.is_true(box:reclaim("missing", { cwd = "/sandstack/work" }))
    -- the control: a target that is there needs the guest, and this one has none
    h.write_file(ws .. "/work/present", "x")
    local _, err = box:remove("present")
    assert.equal("sbx", err.kind)
  end)

  it("refuses paths and an exec cwd that climb above the working directory", function()
    h.write_file(ws .. "/outside", "host")
    refused("invalid", "outside", box:write("../outside", "PWNED"))
    refused("invalid", "outside", box:read("../outside"))
    refused("invalid", "outside", box:attributes("../outside"))
    refused("invalid", "outside", box:remove("../outside"))
    refused("invalid", "outside", box:reclaim("../outside"))
    refused("invalid", "placement", box:reclaim("sub/f.txt")) -- a relative target names a child
    refused("invalid", "outside", box:exec({ "true" }, { cwd = "../" }))
    refused("invalid", "outside", box:exec({ "true" }, { cwd = "a/../.." }))
    assert.equal("host", h.read_file(ws .. "/outside"))
    -- the control: inside is fine, relative to the per-call cwd as well
    assert.is_true(box:write("sub/f.txt", "in"))
    assert.equal("in", box:read("f.txt", { cwd = "sub" }))
    assert.equal("in", box:read("f.txt", { cwd = "/sandstack/work/sub", max_bytes = 2 }))
    refused("output_limit", nil, box:read("f.txt", { cwd = "sub", max_bytes = 1 }))
  end)

  it("refuses budgets and timeouts that are not well-formed, before any sbx call", function()
    for _, bad in ipairs { 1.5, 0, -1, 0 / 0 } do
      local err = refused("invalid", "invalid_option", box:exec_bounded({ "true" }, { max_output_bytes = bad }))
      assert.equal("max_output_bytes", err.option)
    end
    for _, bad in ipairs { math.huge, 0 / 0, 0 } do
      refused("invalid", "invalid_option", box:exec({ "true" }, { timeout = bad }))
      refused("invalid", "invalid_option", box:reclaim("missing", { timeout = bad }))
    end
    for _, bad in ipairs { true, "600" } do -- a wrong type raises
      assert.has_error(function() box:exec({ "true" }, { timeout = bad }) end)
      assert.has_error(function() box:reclaim("missing", { timeout = bad }) end)
    end
    assert.has_error(function() box:exec_bounded({ "true" }, { max_output_bytes = "8" }) end)
    assert.has_error(function() box:exec("") end)
    assert.has_error(function() box:reclaim("x", { bogus = 1 }) end)
    assert.has_error(function() box:remove("x", { bogus = 1 }) end)
  end)
end)

describe("sbx fidelity in a sandbox #docker", function()
  local env, backend, box
  setup(function()
    env, backend = H.setup_backend("fid")
    box = assert(backend:acquire { conversation = "fid", key = "k" })
  end)
  teardown(function()
    H.sbx(env, "sim", "list-glitch", "off")
    H.sbx(env, "sim", "engine-lost", "off")
    assert.equal(0, H.teardown_backend(env, backend))
  end)

  local function guest(script) return assert(box:exec({ "sh", "-c", script })) end

  local function entries(name)
    local out = {}
    for _, e in ipairs(core.listdir(env.workspace_root .. "/" .. name) or {}) do out[#out + 1] = e end
    table.sort(out)
    return out
  end

  it("never removes the working directory; removes children; a missing path is already removed", function()
    assert(box:write("keep.txt", "keep"))
    for _, path in ipairs { ".", "./", "a/..", "/sandstack/work" } do
      refused("invalid", "working_directory", box:remove(path, { recursive = true }))
    end
    assert.equal("keep\n", guest("cat keep.txt; echo").stdout)
    assert.equal(0, guest("test -d /sandstack/work").exit_code)
    assert.is_true(box:remove("never-there"))
    assert.is_true(box:reclaim("never-there"))
    -- the controls, seen by the guest itself
    assert(box:write("d/e/f.txt", "x"))
    assert.is_true(box:reclaim("e", { cwd = "d", timeout = 30 }))
    assert.equal("gone\n", guest("test -e d/e || echo gone").stdout)
    assert.is_true(box:remove("d", { recursive = true }))
    assert.equal("gone\n", guest("test -e d || echo gone").stdout)
  end)

  it("refuses an exec cwd above the working directory; runs a shell-command string", function()
    assert(box:write("sub/x", "x"))
    refused("invalid", "outside", box:exec({ "touch", "escaped" }, { cwd = "../" }))
    assert.equal("no\n", guest("test -e /sandstack/escaped && echo yes || echo no").stdout)
    assert.equal("/sandstack/work/sub\n", assert(box:exec({ "pwd" }, { cwd = "sub" })).stdout)
    local r = assert(box:exec("echo $((40 + 2)) | tr 4 x; echo err >&2; exit 3", { cwd = "sub" }))
    assert.same({ "x2\n", "err\n", 3 }, { r.stdout, r.stderr, r.exit_code })
    assert.equal("a b\n", assert(box:exec({ "echo", "a b" })).stdout) -- the argv form stays verbatim
  end)

  it("accepts output of exactly max_output_bytes; one byte more is output_limit", function()
    -- the wrapper's nonce line ("sandstack-" .. 32 hex digits .. "\n") counts against the budget
    local nonce_line = #("sandstack-" .. core.random_hex(16)) + 1
    local n = 1000
    local r = assert(box:exec_bounded({ "head", "-c", tostring(n), "/dev/zero" }, { max_output_bytes = n + nonce_line }))
    assert.equal(n, #r.stdout)
    local err = refused("output_limit", nil, box:exec_bounded({ "head", "-c", tostring(n + 1), "/dev/zero" },
      { max_output_bytes = n + nonce_line }))
    assert.equal(n + nonce_line, err.limit)
    assert.is_true(err.killed)
  end)

  it("the simulator's malformed `mcp ls` answer is malformed, not a registered server", function()
    H.sbx(env, "sim", "mcp-answer", '{"gateway":{"name":"LOCAL"}}')
    local _, err = backend:acquire { conversation = "fid", key = "mcp" }
    H.sbx(env, "sim", "mcp-answer", "off")
    refused("sbx", "malformed", nil, err)
    assert.truthy((H.sbx(env, "mcp", "ls", "--json")):find('"servers": []', 1, true)) -- the switch is off again
  end)

  it("a template without /bin/bash fails acquire naming /bin/bash, and leaves no directory", function()
    local name = records.name_for(backend, "fid", "nobash", "default")
    local err = refused("sbx", "missing_bash", backend:acquire { conversation = "fid", key = "nobash",
      image = "sandstack-test/agent:local" })
    assert.truthy(err.message:find("/bin/bash", 1, true), err.message)
    assert.same({}, entries(name))
    assert.is_nil(io.open(env.workspace_root .. "/" .. name))
  end)

  it("a running sandbox missing from sbx ls is daemon_fault, and the refused create leaves nothing", function()
    assert(box:write("keep.txt", "keep"))
    local before = entries(box.name)
    H.sbx(env, "sim", "list-glitch", "on")
    local err = refused("daemon_fault", "not_listed", backend:acquire { conversation = "fid", key = "k" })
    assert.truthy(err.message:find("sbx daemon restart", 1, true), err.message)
    assert.same(before, entries(box.name)) -- no second ws-* directory
    H.sbx(env, "sim", "list-glitch", "off")
    -- the sandbox was never touched: the next acquire finds it warm, files and all
    local again = assert(backend:acquire { conversation = "fid", key = "k" })
    assert.equal(box.id, again.id)
    assert.equal("keep", assert(again:read("keep.txt")))
    again:close()
    -- a daemon without its engine refuses the create itself: nothing is left for a new key
    local name = records.name_for(backend, "fid", "lost", "default")
    H.sbx(env, "sim", "engine-lost", "on")
    refused("daemon_fault", nil, backend:acquire { conversation = "fid", key = "lost" })
    H.sbx(env, "sim", "engine-lost", "off")
    assert.is_nil(io.open(env.workspace_root .. "/" .. name))
  end)
end)

-- The daemon states a disposal and an acquire must tell apart, each played by the
-- simulator: a listing glitch (ls lists nothing, every sandbox answers), a lost engine (ls lists
-- nothing, every sandbox command fails "backend unavailable") and one sandbox that answers but
-- is not listed. In none of them may a sandbox a user can still reach lose its files, and none
-- may lead to a second `sbx create` of a name the host has a record for.
describe("sbx daemon states that disposal and acquire tell apart #docker", function()
  local env, backend
  setup(function() env, backend = H.setup_backend("states") end)
  teardown(function()
    H.sbx(env, "sim", "list-glitch", "off")
    H.sbx(env, "sim", "engine-lost", "off")
    assert.equal(0, H.teardown_backend(env, backend))
  end)

  -- The sandbox's container, straight from the engine (never through sandstack or sbx ls).
  local function running(name)
    return h.sh("docker ps -q --filter label=io.sandstack.project=" .. env.project
      .. " --filter label=io.sandstack.sbx-sim.sandbox=" .. name):match("%S+") ~= nil
  end

  local function host_entries(name)
    local out = core.listdir(env.workspace_root .. "/" .. name) or {}
    table.sort(out)
    return out
  end

  local STATES = {
    { "a sandbox that answers but is not listed", function(name, on) H.sbx(env, "sim", "unlisted", name, on) end,
      "unreachable" },
    { "a listing glitch", function(_, on) H.sbx(env, "sim", "list-glitch", on) end, "unreachable" },
    { "a lost engine", function(_, on) H.sbx(env, "sim", "engine-lost", on) end, "unreachable" },
  }

  it("box:dispose() in each state is unreachable, and keeps the sandbox, its record and its workspace", function()
    local box = assert(backend:acquire { conversation = "st", key = "dispose" })
    assert(box:write("keep.txt", "keep"))
    local before = host_entries(box.name)
    for _, st in ipairs(STATES) do
      local what, switch, reason = st[1], st[2], st[3]
      local calls = #H.calls(env)
      switch(box.name, "on")
      local ok, err = box:dispose()
      switch(box.name, "off")
      refused("daemon_fault", reason, ok, err, what)
      assert.truthy(err.message:find("sbx daemon restart", 1, true), what .. ": " .. err.message)
      assert.equal(0, H.count_calls(env, "rm", calls), what .. ": sbx rm was run")
      assert.is_true(running(box.name), what .. ": the sandbox is gone")
      assert.same(before, host_entries(box.name), what)
      assert.equal("keep", h.read_file(box.workspace .. "/work/keep.txt"), what)
      assert.equal(box.id, records.read(backend, box.name).id, what)
      -- the handle still works, and the guest still has its file
      assert.equal("keep", assert(box:exec({ "cat", "keep.txt" })).stdout, what)
    end
    -- the control: with the daemon well, the same handle disposes of its sandbox and workspace
    assert.is_true(box:dispose())
    assert.is_false(running(box.name))
    assert.same({}, host_entries(box.name))
    -- and a name that sbx says is gone is disposed of without a daemon fault
    local other = assert(backend:acquire { conversation = "st", key = "gone" })
    H.sbx(env, "rm", "--force", other.name)
    assert.is_true(other:dispose())
    assert.same({}, host_entries(other.name))
  end)

  it("acquire in each state creates nothing, keeps the record and the workspace, and names the restart", function()
    local box = assert(backend:acquire { conversation = "st", key = "warm" })
    assert(box:write("keep.txt", "keep"))
    local before = host_entries(box.name)
    local reasons = { "not_listed", "not_listed", "backend_unavailable" }
    for i, st in ipairs(STATES) do
      local what, switch = st[1], st[2]
      local calls = #H.calls(env)
      switch(box.name, "on")
      local again, err = backend:acquire { conversation = "st", key = "warm" }
      switch(box.name, "off")
      refused("daemon_fault", reasons[i], again, err, what)
      assert.truthy(err.message:find("sbx daemon restart", 1, true), what .. ": " .. err.message)
      assert.equal(0, H.count_calls(env, "create", calls), what .. ": sbx create was run")
      assert.same(before, host_entries(box.name), what) -- no second ws-* directory
      assert.equal(box.id, records.read(backend, box.name).id, what)
      assert.equal("keep", h.read_file(box.workspace .. "/work/keep.txt"), what)
    end
    -- the control: once the daemon is well, the same key is the same sandbox, files and all
    local calls = #H.calls(env)
    local again = assert(backend:acquire { conversation = "st", key = "warm" })
    assert.equal(box.id, again.id)
    assert.equal("keep", assert(again:read("keep.txt")))
    assert.equal(0, H.count_calls(env, "create", calls))
    again:close()
    -- and a key whose sandbox sbx says is gone is created again
    H.sbx(env, "rm", "--force", box.name)
    local fresh = assert(backend:acquire { conversation = "st", key = "warm" })
    assert.not_equal(box.id, fresh.id)
    assert.equal(1, H.count_calls(env, "create", calls))
    assert.is_true(fresh:dispose())
    box:close()
  end)
end)
