-- Every refusal and fault of spec 001's host-state list, each by putting the host into that
-- state (through sbx's own commands where it has one, else a simulator switch) and back.
local sbx = require "sandstack.sbx"
local H = require "sbx_helpers"

local allow = { "api.github.com" }

describe("sbx host checks #docker", function()
  local env, backend
  setup(function() env, backend = H.setup_backend("host") end)
  teardown(function() assert.equal(0, H.teardown_backend(env, backend)) end)

  local function owned()
    local out = H.sbx(env, "ls", "--json")
    local n = 0
    for _ in out:gmatch(env.backend_opts.name_prefix:gsub("%-", "%%-")) do n = n + 1 end
    return n
  end

  local function refused(opts, kind, reason)
    local box, err = backend:acquire(opts)
    assert.is_nil(box)
    assert.equal(kind, err.kind)
    if reason then assert.equal(reason, err.reason) end
    assert.equal(0, owned()) -- nothing left behind
    return err
  end

  it("refuses SSH agent forwarding", function()
    if H.e2e and os.getenv("SANDSTACK_SBX_E2E_HOST") ~= "1" then pending("changes host state: SANDSTACK_SBX_E2E_HOST=1") return end
    H.sbx(env, "settings", "set", "ssh.agentForwardingEnabled", "true")
    local err = refused({ conversation = "c", key = "ssh" }, "host_not_confined", "ssh_agent_forwarding")
    assert.matches("sbx daemon restart", err.message)
    H.sbx(env, "settings", "set", "ssh.agentForwardingEnabled", "false")
  end)

  it("finds the forwarded agent socket in a new sandbox when the daemon was not restarted", function()
    if H.e2e and os.getenv("SANDSTACK_SBX_E2E_HOST") ~= "1" then pending("changes host state: SANDSTACK_SBX_E2E_HOST=1") return end
    H.sbx(env, "settings", "set", "ssh.agentForwardingEnabled", "true")
    H.sbx(env, "daemon", "restart")
    H.sbx(env, "settings", "set", "ssh.agentForwardingEnabled", "false") -- no restart: still forwarding
    local err = refused({ conversation = "c", key = "sock" }, "host_not_confined", "ssh_agent_socket")
    assert.matches("sbx daemon restart", err.message)
    H.sbx(env, "daemon", "restart")
    local box = assert(backend:acquire{ conversation = "c", key = "sock" })
    assert(box:dispose())
  end)

  it("refuses a registered MCP server", function()
    if H.e2e and os.getenv("SANDSTACK_SBX_E2E_HOST") ~= "1" then pending("changes host state: SANDSTACK_SBX_E2E_HOST=1") return end
    H.sbx(env, "mcp", "add", "docs", "--url", "http://127.0.0.1:9/mcp")
    refused({ conversation = "c", key = "mcp" }, "host_not_confined", "mcp_server")
    H.sbx(env, "mcp", "rm", "docs")
  end)

  it("raises login_required when the login lapsed", function()
    if H.e2e then pending("needs a person or DOCKER_PAT to sign in again") return end
    H.sbx(env, "logout", "--yes")
    local err = refused({ conversation = "c", key = "login" }, "login_required")
    assert.matches("sbx login", err.message)
    H.sbx(env, "login")
  end)

  it("raises daemon_fault naming `sbx daemon restart` when the daemon lost its engine", function()
    if H.e2e then pending("needs the simulator's engine-lost switch") return end
    local box = assert(backend:acquire{ conversation = "lost", key = "k" })
    H.sbx(env, "sim", "engine-lost", "on")
    local _, err = backend:acquire{ conversation = "c", key = "engine" }
    assert.equal("daemon_fault", err.kind)
    assert.matches("sbx daemon restart", err.message)
    -- a disposal reports the sandboxes as unreachable, not gone, and keeps the second record
    local _, derr = backend:dispose_scope("lost")
    assert.equal("daemon_fault", derr.kind)
    assert.equal("unreachable", derr.reason)
    local f = io.open(box.workspace, "r")
    assert.truthy(f)
    f:close()
    H.sbx(env, "daemon", "restart")
    local res = assert(backend:dispose_scope("lost"))
    assert.same({ box.name }, res.removed)
    assert.is_nil(io.open(box.workspace, "r"))
  end)

  -- "not listed" is what a daemon without its engine says of every sandbox
  it("Box:dispose keeps the workspace of a sandbox sbx cannot list, and reports it unreachable", function()
    if H.e2e then pending("needs the simulator's engine-lost switch") return end
    local box = assert(backend:acquire{ conversation = "lostbox", key = "k" })
    assert(box:write("keep.txt", "data"))
    H.sbx(env, "sim", "engine-lost", "on")
    local ok, err = box:dispose()
    H.sbx(env, "sim", "engine-lost", "off")
    assert.is_nil(ok)
    assert.equal("daemon_fault", err.kind)
    assert.equal("unreachable", err.reason)
    local found = H.sh("find " .. H.q(box.workspace) .. " -name keep.txt")
    assert.matches("keep.txt", found, 1, true, "the live sandbox's workspace was deleted")
    assert.is_true(owned() > 0) -- the sandbox itself is still there
    assert.is_true(box:dispose())
    assert.is_nil(io.open(box.workspace, "r"))
    assert.equal(0, owned())
  end)

  it("create's rollback keeps the workspace when sbx cannot confirm the sandbox is gone", function()
    if H.e2e then pending("needs the simulator's engine-lost switch") return end
    -- an sbx that loses its engine right after a create succeeded
    local wrapper = env.root .. "/sbx-loses-engine"
    local f = assert(io.open(wrapper, "w"))
    f:write("#!/bin/sh\n", H.q(env.sbx), ' "$@"; rc=$?\n',
      '[ "$1" != create ] || ', H.q(env.sbx), " sim engine-lost on >/dev/null\nexit $rc\n")
    f:close()
    H.sh("chmod +x " .. H.q(wrapper))
    local opts = {}
    for k, v in pairs(env.backend_opts) do opts[k] = v end
    opts.sbx_path = wrapper
    local b2 = assert(sbx.backend(opts))
    local box, err = b2:acquire{ conversation = "lostcreate", key = "k" }
    H.sbx(env, "sim", "engine-lost", "off")
    assert.is_nil(box)
    assert.truthy(err.cleanup_error, tostring(err))
    assert.equal("unreachable", err.cleanup_error.reason)
    local name = require("sandstack.sbx.records").name_for(b2, "lostcreate", "k", "default")
    local entries = require("sandstack.core").listdir(env.workspace_root .. "/" .. name) or {}
    local ws = {}
    for _, e in ipairs(entries) do if e:match("^ws%-") then ws[#ws + 1] = e end end
    assert.equal(1, #ws, "the workspace under the live sandbox was deleted: " .. table.concat(entries, " "))
    assert.is_true(owned() > 0) -- and so is the sandbox
    assert(backend:dispose{ conversation = "lostcreate", key = "k" })
    assert.equal(0, owned())
  end)

  describe("with egress = allowlist", function()
    local function allowlist(key) return { conversation = "c", key = key, egress = "allowlist", egress_allow = allow } end

    it("refuses a global allow wider than the request, and allow-all", function()
      if H.e2e and os.getenv("SANDSTACK_SBX_E2E_HOST") ~= "1" then pending("changes host state") return end
      H.sbx(env, "policy", "allow", "network", "**.github.com")
      refused(allowlist("wide"), "host_not_confined", "global_allow")
      H.sbx(env, "policy", "rm", "network", "--resource", "**.github.com", "--force")
      H.sbx(env, "policy", "allow", "network", "**")
      refused(allowlist("all"), "host_not_confined", "global_allow_all")
      H.sbx(env, "policy", "rm", "network", "--resource", "**", "--force")
    end)

    it("refuses stored and environment service secrets", function()
      if H.e2e and os.getenv("SANDSTACK_SBX_E2E_HOST") ~= "1" then pending("changes host state") return end
      H.sbx(env, "secret", "set", "-g", "github", "-t", "gho_dummy")
      refused(allowlist("secret"), "host_not_confined", "service_secret")
      H.sbx(env, "secret", "rm", "-g", "github", "--force")
      if not H.e2e then
        H.sbx(env, "sim", "env-secrets", "1")
        refused(allowlist("envsecret"), "host_not_confined", "env_secret")
        H.sbx(env, "sim", "env-secrets", "0")
      end
    end)

    it("refuses a custom secret the allowlist reaches, and allows one it does not", function()
      if H.e2e and os.getenv("SANDSTACK_SBX_E2E_HOST") ~= "1" then pending("changes host state") return end
      H.sbx(env, "secret", "set-custom", "-g", "--host", "api.github.com", "--env", "TOK", "--value", "v",
        "--placeholder", "sst-ph1")
      refused(allowlist("custom"), "host_not_confined", "custom_secret")
      H.sbx(env, "secret", "rm", "--placeholder", "sst-ph1", "--force")
      -- targets are sbx patterns: a wildcard or an absolute name reaches the allowed host too
      for i, target in ipairs({ "*.github.com", "**", "api.github.com." }) do
        H.sbx(env, "secret", "set-custom", "-g", "--host", target, "--env", "TOK", "--value", "v",
          "--placeholder", "sst-pw" .. i)
        refused(allowlist("customw" .. i), "host_not_confined", "custom_secret")
        H.sbx(env, "secret", "rm", "--placeholder", "sst-pw" .. i, "--force")
      end
      H.sbx(env, "secret", "set-custom", "-g", "--host", "other.example", "--env", "TOK", "--value", "v",
        "--placeholder", "sst-ph2")
      local box = assert(backend:acquire(allowlist("custom2")))
      assert(box:dispose())
      H.sbx(env, "secret", "rm", "--placeholder", "sst-ph2", "--force")
    end)

    it("refuses active governance", function()
      if H.e2e then pending("needs an organization with governance") return end
      H.sbx(env, "sim", "governance", "on")
      refused(allowlist("gov"), "host_not_confined", "governance")
      H.sbx(env, "sim", "governance", "off")
    end)

    it("closed egress needs none of these checks", function()
      if H.e2e and os.getenv("SANDSTACK_SBX_E2E_HOST") ~= "1" then pending("changes host state") return end
      H.sbx(env, "policy", "allow", "network", "**")
      H.sbx(env, "secret", "set", "-g", "github", "-t", "gho_dummy")
      local box = assert(backend:acquire{ conversation = "c", key = "closed" })
      -- the sandbox's own ** deny beats the global allow-all
      local out, code = H.sbx(env, "policy", "check", "network", "--json", "--sandbox", box.name, "api.github.com")
      assert.matches('"allowed": false', out)
      assert.equal(1, code)
      assert(box:dispose())
      H.sbx(env, "secret", "rm", "-g", "github", "--force")
      H.sbx(env, "policy", "rm", "network", "--resource", "**", "--force")
    end)

    it("a change after acquire retires the sandbox, seen by another backend instance and process", function()
      if H.e2e and os.getenv("SANDSTACK_SBX_E2E_HOST") ~= "1" then pending("changes host state") return end
      local box1 = assert(backend:acquire(allowlist("drift")))
      local other = assert(sbx.backend(env.backend_opts))
      local box2 = assert(other:acquire(allowlist("drift")))
      assert.equal(box1.id, box2.id)
      assert.equal(0, assert(box1:exec({ "true" })).exit_code)
      -- a global allow for a host beyond the allowlist
      H.sbx(env, "policy", "allow", "network", "evil.example")
      local _, err = box1:exec({ "true" })
      assert.equal("retired", err.kind)
      assert.equal("global_allow", err.drift)
      -- the other instance's handle refuses from the record alone
      _, err = box2:exec({ "true" })
      assert.equal("retired", err.kind)
      -- another process's acquire replaces it (the new sandbox denies the new global allow)
      local child = H.spawn(([[
        local sbx = require "sandstack.sbx"
        local b = assert(sbx.backend(%s))
        local box, err = b:acquire{ conversation = "c", key = "drift", egress = "allowlist", egress_allow = { "api.github.com" } }
        print(box and ("id=" .. box.id) or ("err=" .. tostring(err)))
        local r = box and box:exec({ "true" })
        print(r and ("exit=" .. r.exit_code) or "")
      ]]):format(H.opts_literal(env)))
      local out = child:result()
      local id = out:match("id=(%S+)")
      assert.truthy(id, out)
      assert.not_equal(box1.id, id)
      assert.matches("exit=0", out)
      local pol = H.sbx(env, "policy", "ls", box1.name, "--json")
      assert.matches("evil.example", pol)
      H.sbx(env, "policy", "rm", "network", "--resource", "evil.example", "--force")
      -- a global allow that admits only allowed hosts is left in place
      local box3 = assert(backend:acquire(allowlist("drift")))
      H.sbx(env, "policy", "allow", "network", "api.github.com")
      assert.equal(0, assert(box3:exec({ "true" })).exit_code)
      H.sbx(env, "policy", "rm", "network", "--resource", "api.github.com", "--force")
      -- a service secret appearing later retires it too
      H.sbx(env, "secret", "set", "-g", "github", "-t", "gho_dummy")
      _, err = box3:exec({ "true" })
      assert.equal("retired", err.kind)
      assert.equal("service_secret", err.drift)
      H.sbx(env, "secret", "rm", "-g", "github", "--force")
      assert(backend:dispose{ conversation = "c", key = "drift" })
    end)

    it("a kill that cannot run retires the sandbox; the next acquire replaces it", function()
      local o = {}
      for k, v in pairs(env.backend_opts) do o[k] = v end
      o.exec_cleanup_timeout = 0.001 -- the second exec cannot even start in that time
      local fast = assert(sbx.backend(o))
      local box = assert(fast:acquire{ conversation = "c", key = "killfail" })
      local _, err = box:exec({ "sleep", "300" }, { timeout = 1 })
      assert.equal("timeout", err.kind)
      assert.is_false(err.killed)
      _, err = box:exec({ "true" })
      assert.equal("retired", err.kind)
      local again = assert(backend:acquire{ conversation = "c", key = "killfail" })
      assert.not_equal(box.id, again.id)
      assert(again:dispose())
    end)
  end)
end)
