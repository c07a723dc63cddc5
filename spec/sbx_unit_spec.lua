-- sandstack.sbx without a sandbox: the subprocess runner, the wrapper's parsers, digests, and
-- the egress logic that decides what the host's rules, secrets and governance mean.
local core = require "sandstack.core"
local sbxt = require "sandstack_test.sbx" -- what core.sbx_exec keeps inside: its wrapper, its stderr split
local policy = require "sandstack.policy"
local egress = require "sandstack.sbx.egress"
local sbx = require "sandstack.sbx"
-- internal, reached through its own module (the Backend object has only API.md's methods)
local records = require "sandstack.sbx.records"

local function run(argv, opts) return assert(core.sbx_run(argv, opts)) end

describe("sbx runner", function()
  it("keeps stdout and stderr apart and byte-exact, with the exit code", function()
    local r = run({ "sh", "-c", "printf 'a\\000b\\377'; printf 'E\\n' >&2; exit 7" })
    assert.equal("a\0b\255", r.stdout)
    assert.equal("E\n", r.stderr)
    assert.equal(7, r.exit_code)
    assert.is_false(r.timed_out)
    assert.is_false(r.over_limit)
  end)

  it("passes none of the host's inheritable descriptors to the program", function()
    -- what the program holds open, by target; io.open's FILE and the test module's listener are
    -- not O_CLOEXEC, as a gateway's own files and nginx's listening sockets are not
    local script = 'for f in /proc/$$/fd/*; do readlink "$f"; done'
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    local inherit = require "sandstack_test.inherit"
    local lfd = inherit.listen()
    local function inode(s) return s and s:match("socket:%[%d+%]") end
    local st = assert(io.open("/proc/self/stat"))
    local mypid = st:read("n")
    st:close()
    local ltarget = lfd and core.sbx_run({ "readlink", "/proc/" .. mypid .. "/fd/" .. lfd }) or nil
    -- control: a plain popen child inherits them, so the check below can see a leak
    local p = assert(io.popen(script))
    local control = p:read("a")
    p:close()
    local res = run({ "sh", "-c", script })
    f:close()
    os.remove(path)
    inherit.close(lfd)
    assert.truthy(control:find(path, 1, true), "control: popen's child holds the file")
    assert.is_nil(res.stdout:find(path, 1, true))
    assert.matches("pipe:", res.stdout) -- its own stdout is there: the listing worked
    local sock = inode(ltarget and ltarget.stdout)
    assert.truthy(sock and control:find(sock, 1, true), "control: popen's child holds the listener")
    assert.is_nil(res.stdout:find(sock, 1, true))
    local n = 0
    for _ in res.stdout:gmatch("[^\n]+") do n = n + 1 end
    assert.is_true(n <= 4, res.stdout) -- stdin, stdout, stderr and the directory being listed
  end)

  it("passes stdin when given, else /dev/null", function()
    assert.equal("hello", run({ "cat" }, { stdin = "hello" }).stdout)
    assert.equal("", run({ "cat" }).stdout)
  end)

  it("kills the whole process group at the deadline", function()
    local mark = os.tmpname()
    os.remove(mark)
    -- the grandchild would create the mark after 3 s if it survived the kill
    local r = run({ "sh", "-c", "(sleep 3; touch " .. mark .. ") & sleep 30" }, { timeout = 0.5 })
    assert.is_true(r.timed_out)
    assert.equal(9, r.signal)
    run({ "sleep", "3.5" })
    assert.is_nil(io.open(mark, "r"))
  end)

  it("caps the captured output and ends the child", function()
    local r = run({ "sh", "-c", "while :; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done" }, { max_output = 100000 })
    assert.is_true(r.over_limit)
    assert.is_true(#r.stdout + #r.stderr <= 100000)
    assert.is_truthy(r.signal)
  end)

  it("counts stdout and stderr against one budget", function()
    local r = run({ "sh", "-c", "head -c 600 /dev/zero; head -c 600 /dev/zero >&2" }, { max_output = 1000 })
    assert.is_true(r.over_limit)
    assert.equal(1000, #r.stdout + #r.stderr)
  end)

  it("reports a program that is not on PATH", function()
    local res, err = core.sbx_run({ "sandstack-no-such-program" })
    assert.is_nil(res)
    assert.equal("not_found", err.reason)
  end)

  it("installs no SIGCHLD handler, and survives a host that reaps every child (nginx)", function()
    -- test-only module (spec/support/csrc/sigchld_probe.c): the shipped module has no such hooks
    local sigchld = require "sandstack_test.sigchld"
    assert.equal("default", sigchld.disposition())
    run({ "true" })
    assert.equal("default", sigchld.disposition()) -- the runner changed nothing process-wide
    sigchld.install_reaper() -- now a handler reaps with waitpid(-1, WNOHANG), as nginx's does
    assert.equal("handler", sigchld.disposition())
    local c0 = sigchld.reaped()
    for i = 1, 20 do
      local r = run({ "sh", "-c", "exit " .. i })
      assert.equal(i, r.exit_code) -- the status was not stolen
    end
    assert.equal(c0, sigchld.reaped()) -- and the runner's children raised no SIGCHLD
    -- the reaper is live: an ordinary child (popen) is reaped by it
    local p = io.popen("true")
    run({ "sleep", "1" })
    assert.is_true(sigchld.reaped() > c0)
    pcall(p.close, p)
  end)

  it("ships no test hooks in the module", function()
    for name in pairs(core) do assert.is_nil(name:match("^_sbx_test_"), name) end
  end)
end)

describe("sbx wrapper pieces", function()
  it("base64 matches RFC 4648 vectors", function()
    local v = { [""] = "", f = "Zg==", fo = "Zm8=", foo = "Zm9v", foob = "Zm9vYg==", fooba = "Zm9vYmE=",
      foobar = "Zm9vYmFy" }
    for k, want in pairs(v) do assert.equal(want, core.base64(k)) end
  end)

  it("finds the nonce line and splits chatter from the command's stderr", function()
    local chatter, own = sbxt.split_stderr("Sandbox x started successfully\nN0NCE\nreal\nN0NCE\n", "N0NCE")
    assert.equal("Sandbox x started successfully\n", chatter)
    assert.equal("real\nN0NCE\n", own)
    assert.is_nil(sbxt.split_stderr("error: sandbox 'x' not found\n", "N0NCE"))
    assert.is_nil(sbxt.split_stderr("xN0NCE\nN0NCEx\n", "N0NCE")) -- whole lines only
    assert.is_nil(sbxt.split_stderr("N0NCE", "N0NCE")) -- needs its newline
  end)

  it("skips daemon start-up lines before JSON", function()
    assert.equal('{"a":1}\n', sbxt.json_start('Starting daemon...\n  ok\n{"a":1}\n'))
    assert.is_nil(sbxt.json_start("no json here\n"))
  end)

  it("digests with SHA-256", function()
    assert.equal("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", core.sha256_hex(""))
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", core.sha256_hex("abc"))
    assert.equal("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
      core.sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))
    assert.equal("ba7816bf", core.sha256_hex("abc", 4))
  end)

  it("puts ownership in the name: prefix, conversation, whole key, kind", function()
    local root = os.tmpname()
    os.remove(root)
    local b = assert(sbx.backend{ sbx_path = "/nonexistent", workspace_root = root, name_prefix = "p-" })
    local n1 = records.name_for(b, "conv", "key", "kind")
    assert.matches("^p%-%x+%-%x+%-%x+$", n1)
    assert.equal(records.scope_prefix(b, "conv"), n1:sub(1, #records.scope_prefix(b, "conv")))
    assert.equal(records.key_prefix(b, "conv", "key"), n1:sub(1, #records.key_prefix(b, "conv", "key")))
    assert.not_equal(n1, records.name_for(b, "conv", "key", "other"))
    assert.not_equal(records.key_prefix(b, "conv", "key"), records.key_prefix(b, "conv2", "key")) -- the whole key
    assert.not_equal(records.key_prefix(b, "a", "b\0c"), records.key_prefix(b, "a\0b", "c"))
    b:close()
    os.remove(root)
    assert.has_error(function() sbx.backend{ bogus = 1 } end)
  end)
end)

-- An allowlist from entries { host =, wildcard =, methods = }, compiled: the egress logic takes
-- the policy object, and every host question goes to its C matcher.
local function list(...)
  local allow = {}
  for _, e in ipairs({ ... }) do
    local host = (e.wildcard and "*." or "") .. e.host
    allow[#allow + 1] = e.methods and { host = host, methods = e.methods, paths = e.paths } or host
  end
  return assert(policy.compile { allow = allow })
end
local api = { host = "api.github.com" }
local wild = { host = "example.com", wildcard = true }

describe("durable record writes", function()
  local h = require "helpers"
  it("fsyncs the new record before renaming it over the old one, then the directory", function()
    local _, _, has = h.sh("command -v strace")
    if has ~= 0 then pending("strace is not installed") return end
    local dir = h.must("mktemp -d"):match("[^\n]+")
    local trace = require("sbx_helpers").strace_writes(dir, ("local core = require 'sandstack.core'\n"
      .. "assert(core.write_file_durable(%q, 'new record', 'sbx'))\n"):format(dir .. "/record.json"))
    local f = assert(io.open(dir .. "/record.json"))
    local data = f:read("a")
    f:close()
    h.must("rm -rf " .. h.q(dir))
    assert.equal("new record", data)
    require("sbx_helpers").assert_synced_rename(trace)
  end)

  it("reports a record it cannot write and leaves the old one and no temporary", function()
    local dir = require("helpers").must("mktemp -d"):match("[^\n]+")
    local path = dir .. "/record.json"
    assert(core.write_file_durable(path, "old", "sbx"))
    -- a directory where the record should go cannot be replaced by rename
    h.must("mkdir " .. h.q(dir .. "/sub"))
    local ok, err = core.write_file_durable(dir .. "/sub", "x", "sbx")
    assert.is_nil(ok)
    assert.equal("sbx", err.kind)
    assert.equal("io", err.reason)
    local f = assert(io.open(path))
    assert.equal("old", f:read("a"))
    f:close()
    local left = h.must("ls -A " .. h.q(dir))
    h.must("rm -rf " .. h.q(dir))
    assert.equal("record.json\nsub\n", left)
  end)
end)

describe("sbx custom secret targets are patterns", function()
  local function custom(l, target)
    local _, r = egress.assess(l, { rules = {}, secrets = { secrets = {}, env_only_count = 0,
      custom_secrets = { { scope = "global", env = "T", targets = { target } } } } }, "n")
    return r
  end
  local exact = list({ host = "api.example.com" })
  it("refuses every pattern that matches an allowed host", function()
    for _, t in ipairs({ "*.example.com", "**.example.com", "**", "*", "*.com", "api.example.com.",
      "API.Example.COM", "api.example.com:443", "**.api.example.com", "api.example.com.:443" }) do
      assert.equal("custom_secret", custom(exact, t), t)
    end
  end)
  it("refuses patterns that meet a wildcard allowlist entry", function()
    local w = list({ host = "example.org", wildcard = true })
    for _, t in ipairs({ "*.org", "**.org", "x.example.org", "*.a.example.org", "**.example.org",
      "*.example.org", "deep.a.example.org." }) do
      assert.equal("custom_secret", custom(w, t), t)
    end
    -- *.x never matches x itself, and a sibling apex is another host
    assert.is_nil(custom(list({ host = "example.org" }), "*.example.org"))
    assert.is_nil(custom(w, "example.org"))
    assert.is_nil(custom(w, "*.example.net"))
  end)
  it("leaves disjoint patterns alone, so the check is not simply 'refuse everything'", function()
    for _, t in ipairs({ "other.example.com", "*.other.example.com", "**.example.net", "*.org",
      "example.com", "api.example.com.evil" }) do
      assert.is_nil(custom(exact, t), t)
    end
  end)
end)

describe("sbx egress logic", function()
  it("classifies global allows against the allowlist", function()
    local l = list(api, wild)
    assert.equal("all", l:coverage("**"))
    assert.equal("wider", l:coverage("**.github.com"))
    assert.equal("covered", l:coverage("api.github.com"))
    assert.equal("covered", l:coverage("*.example.com"))
    assert.equal("covered", l:coverage("a.b.example.com"))
    -- admits example.com itself, which the sandbox denies (the allowlist's *.example.com does
    -- not list it): nothing beyond the allowlist
    assert.equal("apex_denied", l:coverage("**.example.com"))
    assert.equal("disjoint", l:coverage("pypi.org"))
    assert.equal("disjoint", l:coverage("github.com"))
    -- a method-limited allowlist entry is not covered by a host-wide global allow
    assert.equal("wider", list({ host = "api.github.com", methods = { "GET" } }):coverage("api.github.com"))
  end)

  it("refuses every host state the spec lists", function()
    local l = list(api)
    local base = { rules = {}, secrets = { secrets = {}, custom_secrets = {}, env_only_count = 0 } }
    local function with(k, v)
      local s = { rules = base.rules, secrets = base.secrets, governance = false }
      s[k] = v
      return s
    end
    assert.truthy(egress.assess(l, base, "n"))
    local _, r = egress.assess(l, with("governance", true), "n")
    assert.equal("governance", r)
    _, r = egress.assess(l, with("secrets", { secrets = { { scope = "global", type = "service", name = "github" } } }), "n")
    assert.equal("service_secret", r)
    _, r = egress.assess(l, with("secrets", { secrets = { { scope = "sandbox:n", type = "service", name = "x" } } }), "n")
    assert.equal("service_secret", r)
    assert.truthy(egress.assess(l, with("secrets", { secrets = { { scope = "sandbox:other", type = "service" } } }), "n"))
    _, r = egress.assess(l, with("secrets", { env_only_count = 1 }), "n")
    assert.equal("env_secret", r)
    _, r = egress.assess(l, with("secrets", { custom_secrets = { { scope = "global", env = "T", targets = { "api.github.com" } } } }), "n")
    assert.equal("custom_secret", r)
    assert.truthy(egress.assess(l, with("secrets", { custom_secrets = { { scope = "global", env = "T", targets = { "other.org" } } } }), "n"))
    local rule = function(res) return { { scope = "global", decision = "allow", resources = { res }, status = "active" } } end
    _, r = egress.assess(l, with("rules", rule("**")), "n")
    assert.equal("global_allow_all", r)
    _, r = egress.assess(l, with("rules", rule("**.github.com")), "n")
    assert.equal("global_allow", r)
    local plan = egress.assess(l, with("rules", rule("pypi.org")), "n")
    assert.same({ "pypi.org" }, plan.deny)
    plan = egress.assess(l, with("rules", rule("api.github.com")), "n")
    assert.same({}, plan.deny)
  end)

  it("expresses the allowlist as sbx rules", function()
    local cmds = egress.commands(list(api, wild, { host = "x.org", methods = { "GET", "POST" }, paths = { "/v1/*" } }), "n")
    assert.same({ "allow", "network", "--sandbox", "n", "api.github.com,**.example.com" }, cmds[1])
    local flat = {}
    for _, c in ipairs(cmds) do flat[#flat + 1] = table.concat(c, " ") end
    assert.is_truthy(table.concat(flat, "\n"):find("deny network --sandbox n example.com", 1, true))
    assert.is_truthy(table.concat(flat, "\n"):find("allow network --sandbox n x.org --method GET,POST --path /v1/**", 1, true))
    assert.is_truthy(table.concat(flat, "\n"):find("allow network --sandbox n x.org --method GET,POST --path /v1\n", 1, true)
      or flat[#flat]:find("--path /v1$"))
  end)

  it("notices drift in rules, globals, secrets and governance", function()
    local l = list(api)
    local own = { { scope = "sandbox:n", decision = "allow", resource_type = "network", resources = { "api.github.com" } },
      { scope = "sandbox:n", decision = "deny", resource_type = "network", resources = { "pypi.org" } } }
    local fp = egress.fingerprint(own, "n")
    local sec = { secrets = {}, custom_secrets = {}, env_only_count = 0 }
    local function st(extra, s, g)
      local rules = {}
      for _, r in ipairs(own) do rules[#rules + 1] = r end
      for _, r in ipairs(extra or {}) do rules[#rules + 1] = r end
      return { rules = rules, secrets = s or sec, governance = g or false }
    end
    local g = function(res) return { scope = "global", decision = "allow", resources = { res }, status = "active" } end
    assert.is_nil(egress.drift(l, st(), "n", fp))
    assert.is_nil(egress.drift(l, st({ g("pypi.org") }), "n", fp)) -- denied for this sandbox at create
    assert.is_nil(egress.drift(l, st({ g("api.github.com") }), "n", fp)) -- admits only allowed hosts
    assert.equal("global_allow", egress.drift(l, st({ g("evil.example") }), "n", fp))
    assert.equal("global_allow", egress.drift(l, st({ g("**.github.com") }), "n", fp))
    assert.equal("rules_changed", egress.drift(l, st({ { scope = "sandbox:n", decision = "allow", resources = { "x" } } }), "n", fp))
    assert.equal("governance", egress.drift(l, st(nil, nil, true), "n", fp))
    assert.equal("service_secret", egress.drift(l, st(nil, { secrets = { { scope = "global", type = "service", name = "g" } } }), "n", fp))
    assert.equal("custom_secret", egress.drift(l, st(nil, { custom_secrets = { { scope = "global", env = "E",
      targets = { "api.github.com" } } } }), "n", fp))
  end)
end)

describe("sbx errors", function()
  it("say their kind once: tostring is sbx: <command>: <what sbx said>", function()
    local cli = require "sandstack.sbx.cli"
    local err = cli.classify({ stderr = "error: sandbox not found\n", exit_code = 1 }, "sbx rm sandstack-x")
    assert.equal("sbx", err.kind)
    assert.equal("not_found", err.reason)
    assert.equal("sbx: rm sandstack-x: sandbox not found", tostring(err))
    -- the other kinds name the command in parentheses, after what to do
    err = cli.classify({ stderr = "error: Not authenticated to Docker\n", exit_code = 1 }, "sbx ls")
    assert.equal("login_required: sbx is not signed in; run `sbx login` (sbx ls)", tostring(err))
  end)
end)
