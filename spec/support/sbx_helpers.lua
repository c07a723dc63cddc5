-- Shared set-up of the sbx specs: a private simulator (state dir, container label) per spec
-- file, or the real sbx when SANDSTACK_SBX_E2E=1 (then the simulator-only switches are pending).
local h = require "helpers"

local H = {}

H.e2e = os.getenv("SANDSTACK_SBX_E2E") == "1"
local top = h.must("pwd"):match("[^\n]+")

-- sh(cmd) -> output (stdout and stderr), exit code
local function sh(cmd)
  local out, _, code = h.sh(cmd)
  return out, code
end
H.sh = sh

local q = h.q
H.q = q

-- H.setup("exec") -> env { sbx = path to the sbx command, root = scratch dir, project = label }
function H.setup(tag, opts)
  opts = opts or {}
  local id = tag .. "-" .. h.random_suffix(3)
  local root = "/tmp/sstest-sbx-" .. id
  sh("rm -rf " .. q(root) .. " && mkdir -p " .. q(root))
  local env = { root = root, project = "sstest-sbx-" .. id, workspace_root = root .. "/ws", id = id }
  if H.e2e then
    env.sbx = os.getenv("SANDSTACK_SBX_PATH") or "sbx"
  else
    env.sbx = root .. "/sbx"
    h.write_file(env.sbx, table.concat { "#!/bin/sh\n",
      "SANDSTACK_SBX_SIM_STATE=", q(root .. "/state"), " SANDSTACK_SBX_SIM_PROJECT=", q(env.project),
      " SANDSTACK_SBX_SIM_IDLE=", tostring(opts.idle or 600),
      " exec /usr/bin/python3 ", q(top .. "/spec/support/sbx-sim"), ' "$@"\n' })
    sh("chmod +x " .. q(env.sbx))
    -- prepare the host the way the README says
    sh(q(env.sbx) .. " policy init deny-all")
    sh(q(env.sbx) .. " settings set ssh.agentForwardingEnabled false")
    sh(q(env.sbx) .. " daemon restart")
  end
  env.backend_opts = { sbx_path = env.sbx, workspace_root = env.workspace_root, name_prefix = "sst-" .. id .. "-",
    exec_cleanup_timeout = 30 }
  return env
end

-- A spec file's set-up and tear-down: a private env with a backend on it, then both removed;
-- teardown_backend returns how many containers are left (0 when clean).
function H.setup_backend(tag)
  local env = H.setup(tag)
  return env, assert(require("sandstack.sbx").backend(env.backend_opts))
end

function H.teardown_backend(env, backend)
  backend:dispose_prefix(env.backend_opts.name_prefix)
  H.teardown(env)
  return H.containers(env)
end

-- Runs the sbx command (simulator or real) with a shell-quoted argument list.
function H.sbx(env, ...)
  local parts = { q(env.sbx) }
  for _, a in ipairs({ ... }) do parts[#parts + 1] = q(a) end
  return sh(table.concat(parts, " "))
end

function H.teardown(env)
  if not H.e2e then
    H.sbx(env, "sim", "cleanup")
  else
    local backend = require("sandstack.sbx").backend(env.backend_opts)
    backend:dispose_prefix(env.backend_opts.name_prefix)
  end
  sh("rm -rf " .. q(env.root))
end

-- Containers this simulator still has (0 after a clean teardown).
function H.containers(env)
  local out = sh("docker ps -aq --filter label=io.sandstack.project=" .. env.project)
  local n = 0
  for _ in out:gmatch("%S+") do n = n + 1 end
  return n
end

-- Runs a Lua snippet in a child process (for races and second backend instances); returns a
-- handle whose :result() waits and gives the child's stdout.
function H.spawn(code)
  local path = os.tmpname()
  h.write_file(path, 'package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;./spec/support/?.lua;" .. package.path\n'
    .. 'package.cpath = "./build/?.so;" .. package.cpath\n' .. code)
  local p = io.popen("lua5.4 " .. q(path) .. " 2>&1")
  return { result = function() local out = p:read("*a"); p:close(); os.remove(path); return out end }
end

-- Serialises backend options for a child process.
function H.opts_literal(env)
  local o = env.backend_opts
  return ("{ sbx_path = %q, workspace_root = %q, name_prefix = %q, exec_cleanup_timeout = 30 }")
    :format(o.sbx_path, o.workspace_root, o.name_prefix)
end

return H
