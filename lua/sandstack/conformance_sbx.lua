-- The sbx conformance suites of spec 001's Verification section, as TAP: EXEC, EGRESS,
-- EGRESS_METHODS and reach. Re-run them on every sbx version you install:
--   sandstack conform --backend sbx       (calls run{} below)
--   require("sandstack.conformance_sbx").run{ sbx_path = "sbx", suites = { "EXEC" } }
-- Each run makes its own sandboxes under a fresh name prefix and disposes of them at the end.
-- EGRESS checks the rules sbx holds for the sandbox (`sbx policy check network --sandbox`),
-- the same decisions its proxy enforces; no test sends traffic to any outside address.
local core = require "sandstack.core"
local sbx = require "sandstack.sbx"
-- the suites ask sbx itself what it holds, through the backend's own CLI runner
local cli = require "sandstack.sbx.cli"
local dispose = require "sandstack.sbx.dispose"
local tap = require("sandstack.conformance_run").tap

local M = {}

M.suites = { "EXEC", "EGRESS", "EGRESS_METHODS", "reach" }

local function check_network(backend, name, target)
  local v = cli.json(backend, { "policy", "check", "network", "--json", "--sandbox", name, target }, { ok_codes = { [1] = true } })
  return v and v.allowed
end

local function suite_exec(t, b)
  local box, err = b:acquire{ conversation = "conform", key = "exec" }
  if not t.result(box, "EXEC: acquire a closed sandbox", err) then return end
  local bin = {}
  for i = 1, 255 do bin[#bin + 1] = string.char(i) end
  bin = table.concat(bin)
  local r, e = box:exec({ "sh", "-c", 'printf "%s" "$1"; printf "err" >&2; exit 3', "sh", bin })
  t.result(r and r.stdout == bin, "EXEC: stdout is byte-exact", e or (r and #r.stdout))
  t.result(r and r.stderr == "err", "EXEC: stderr is kept apart", e or (r and r.stderr))
  t.result(r and r.exit_code == 3, "EXEC: the command's exit code", e or (r and r.exit_code))
  r = box:exec({ "sh", "-c", 'printf "[%s]" "$@"', "sh", "", "a\n" })
  t.result(r and r.stdout == "[][a\n]", "EXEC: empty and newline-ended arguments pass through")
  r = box:exec({ "true" }, { cwd = box.mount .. "/no-such-dir" })
  t.result(r and r.exit_code == 125, "EXEC: a missing cwd exits 125")
  local _, te = box:exec({ "sh", "-c", "sh -c 'sleep 300' & echo $! > conform.pid; sleep 300" }, { timeout = 2 })
  t.result(te and te.kind == "timeout", "EXEC: timeout", te)
  r = box:exec({ "sh", "-c", 'kill -0 "$(cat conform.pid)" 2>/dev/null && echo alive || echo gone' })
  t.result(r and r.stdout == "gone\n", "EXEC: the timed-out command's group is gone", r and r.stdout)
  local _, oe = box:exec_bounded({ "sh", "-c", "yes" }, { max_output_bytes = 65536 })
  t.result(oe and oe.kind == "output_limit", "EXEC: output past the budget is output_limit", oe)
  r = box:exec({ "true" })
  t.result(r and r.exit_code == 0, "EXEC: the sandbox is kept after timeout and output_limit")
  box:dispose()
end

local function suite_egress(t, b)
  local closed, err = b:acquire{ conversation = "conform", key = "closed" }
  if t.result(closed, "EGRESS: acquire a closed sandbox", err) then
    t.result(check_network(b, closed.name, "api.github.com") == false, "EGRESS: closed denies a named host")
    t.result(check_network(b, closed.name, "1.1.1.1:53") == false, "EGRESS: closed denies a raw address")
    closed:dispose()
  end
  local box
  box, err = b:acquire{ conversation = "conform", key = "allow", egress = "allowlist",
    egress_allow = { "api.example.com", "*.svc.example" } }
  if not t.result(box, "EGRESS: acquire an allowlist sandbox", err) then return end
  t.result(check_network(b, box.name, "api.example.com") == true, "EGRESS: an exact host is admitted")
  t.result(check_network(b, box.name, "api.example.com:8443") == true, "EGRESS: on every port")
  t.result(check_network(b, box.name, "example.com") == false, "EGRESS: its parent is not")
  t.result(check_network(b, box.name, "a.b.svc.example") == true, "EGRESS: a wildcard admits subdomains at any depth")
  t.result(check_network(b, box.name, "svc.example") == false, "EGRESS: a wildcard does not admit its apex")
  t.result(check_network(b, box.name, "other.example") == false, "EGRESS: anything else is denied")
  box:dispose()
end

local function suite_methods(t, b)
  local box, err = b:acquire{ conversation = "conform", key = "methods", egress = "allowlist",
    egress_allow = { { host = "api.example.com", methods = { "GET" }, paths = { "/v1/*" } } } }
  if not t.result(box, "EGRESS_METHODS: acquire with a method and path rule", err) then return end
  local pol = cli.json(b, { "policy", "ls", box.name, "--json" })
  local targets = {}
  for _, r in ipairs(pol and pol.rules or {}) do
    if r.scope == "sandbox:" .. box.name and r.decision == "allow" then
      for _, h in ipairs(r.http_targets or {}) do targets[#targets + 1] = h end
    end
  end
  local paths, methods_ok = {}, #targets > 0
  for _, h in ipairs(targets) do
    paths[h.path or ""] = true
    methods_ok = methods_ok and type(h.methods) == "table" and #h.methods == 1 and h.methods[1] == "GET"
  end
  t.result(methods_ok, "EGRESS_METHODS: sbx holds the rule with GET only")
  t.result(paths["/v1"] and paths["/v1/**"], "EGRESS_METHODS: /v1/* becomes /v1 and /v1/**")
  local _, perr = b:acquire{ conversation = "conform", key = "methods2", egress = "allowlist",
    egress_allow = { "*.example.org", { host = "example.org", methods = { "GET" } } } }
  t.result(perr and perr.kind == "invalid", "EGRESS_METHODS: a method rule beside a covering wildcard is refused", perr)
  box:dispose()
end

local function suite_reach(t, b)
  local a, err = b:acquire{ conversation = "conform", key = "reach-a" }
  if not t.result(a, "reach: acquire sandbox A", err) then return end
  local c
  c, err = b:acquire{ conversation = "conform", key = "reach-b" }
  if not t.result(c, "reach: acquire sandbox B", err) then a:dispose() return end
  local secret = core.random_hex(8)
  a:exec({ "sh", "-c", "printf %s " .. secret .. " > reach.txt" })
  local r = c:exec({ "sh", "-c", "cat " .. a.workspace .. "/work/reach.txt 2>/dev/null; cat reach.txt 2>/dev/null; true" })
  t.result(r and not r.stdout:find(secret, 1, true), "reach: B cannot read A's workspace")
  r = c:exec({ "sh", "-c", "ls " .. c.mount })
  t.result(r and r.exit_code == 0, "reach: B sees its own workspace at the storage base's parent")
  r = a:exec({ "sh", "-c", "ls /run/ssh-agent.sock 2>/dev/null; echo done" })
  t.result(r and r.stdout == "done\n", "reach: no forwarded SSH agent socket")
  a:dispose()
  c:dispose()
end

local runners = { EXEC = suite_exec, EGRESS = suite_egress, EGRESS_METHODS = suite_methods, reach = suite_reach }

-- run{ sbx_path =, workspace_root =, suites = {...}, out = function(s) end or a file } -> ok, passed, failed
function M.run(opts)
  opts = opts or {}
  local t = tap(opts.out or io.write)
  local bopts = { name_prefix = "sstconf-" .. core.random_hex(3) .. "-" }
  for _, k in ipairs({ "sbx_path", "workspace_root", "exec_cleanup_timeout" }) do bopts[k] = opts[k] end
  local b, err = sbx.backend(bopts)
  if not b then
    t.skip_all("cannot set up the sbx backend: " .. tostring(err))
    return false, 0, 0
  end
  for _, name in ipairs(opts.suites or M.suites) do
    local fn = runners[name]
    if not fn then error("conformance_sbx: unknown suite " .. tostring(name)) end
    t.diag("suite " .. name)
    local ok, perr = pcall(fn, t, b)
    if not ok then t.result(false, name .. ": raised", perr) end
  end
  dispose.prefix(b, bopts.name_prefix)
  b:close()
  local all = t.finish()
  return all, t.n - t.failed, t.failed
end

return M
