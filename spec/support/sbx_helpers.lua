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

-- The simulator's templates the exec and file-method specs run against: the default, Debian
-- (dash as /bin/sh, as in sbx's Ubuntu templates), and the busybox one. A real sbx has one.
-- SANDSTACK_SBX_SIM_TEMPLATE (read by the simulator) picks the default for the other specs.
H.templates = H.e2e and { { name = "sbx" } } or {
  { name = "debian", image = "sandstack-test/debian:local" },
  { name = "busybox", image = "sandstack-test/base:local" },
}

-- H.setup("exec", { template = image }) -> env { sbx = path to the sbx command, root = scratch
-- dir, project = label }
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
      opts.template and (" SANDSTACK_SBX_SIM_TEMPLATE=" .. q(opts.template)) or "",
      " exec /usr/bin/python3 ", q(top .. "/spec/support/sbx-sim"), ' "$@"\n' })
    sh("chmod +x " .. q(env.sbx))
    -- prepare the host the way docs/sbx.md says
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
  require("sandstack.sbx.dispose").prefix(backend, env.backend_opts.name_prefix)
  backend:close()
  H.teardown(env)
  return H.containers(env)
end

-- In a describe: before its first test, a private env (H.setup(tag, opts)), a backend on it and
-- one box acquired as key `tag`, handed to use(env, backend, box); after its last, the box
-- disposed and the env torn down, with no container left.
function H.with_box(tag, opts, use)
  local busted, check = require "busted", require "luassert" -- a support module sees no globals
  local env, box
  busted.setup(function()
    env = H.setup(tag, opts)
    local backend = assert(require("sandstack.sbx").backend(env.backend_opts))
    local err
    box, err = backend:acquire { conversation = "conv", key = tag }
    assert(box, tostring(err))
    use(env, backend, box)
  end)
  busted.teardown(function()
    if box then box:dispose() end
    H.teardown(env)
    check.equal(0, H.containers(env))
  end)
end

-- Runs the Lua source in a child under strace (fsync and rename calls only) and returns the
-- trace from the first line holding `from` on (everything when nil). Scratch files go in dir.
function H.strace_writes(dir, source, from)
  local child = h.child_command(dir .. "/child.lua", source)
  -- LeakSanitizer cannot run under ptrace
  h.must(("ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:detect_leaks=0\" strace -f -qq -e trace=write,fsync,fdatasync,rename,renameat,renameat2 -o %s %s")
    :format(q(dir .. "/trace"), child))
  local trace = h.must("cat " .. q(dir .. "/trace"))
  return from and trace:sub((assert(trace:find(from, 1, true), trace))) or trace
end

-- A durable replacement in a trace: the new file fsynced before the rename, and the directory
-- fsynced after it.
function H.assert_synced_rename(trace)
  local check = require "luassert" -- a support module does not see busted's global assert
  local first_sync = trace:find("fsync(", 1, true)
  local rename = trace:find("rename", 1, true)
  check.truthy(first_sync, trace)
  check.truthy(rename, trace)
  check.is_true(first_sync < rename, trace)
  check.truthy(trace:find("fsync(", rename, true), "no fsync of the directory after the rename: " .. trace)
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
    require("sandstack.sbx.dispose").prefix(backend, env.backend_opts.name_prefix)
    backend:close()
  end
  sh("rm -rf " .. q(env.root))
end

-- The sbx commands the simulator has run so far, each an argv list (`sim calls`).
function H.calls(env)
  local out = {}
  for line in (H.sbx(env, "sim", "calls")):gmatch("[^\n]+") do
    out[#out + 1] = assert(require("sandstack.core").json_decode(line), line)
  end
  return out
end

-- How many of the simulator's calls after the first `since` ones start with verb.
function H.count_calls(env, verb, since)
  local n = 0
  for i, argv in ipairs(H.calls(env)) do
    if i > (since or 0) and argv[1] == verb then n = n + 1 end
  end
  return n
end

-- The container behind a simulator sandbox (for checks that must not trust sandstack).
function H.container(env, name)
  return (H.sbx(env, "sim", "container", name)):match("%S+")
end

-- Watches the command lines of this host's processes (its own PID namespace: a simulator
-- container's processes are the guest's, which a real sbx keeps in a VM) until :result() is
-- called. The needles travel in a 0600 file, never on a command line. :result() -> { rounds =,
-- wrappers = processes seen carrying the wrapper's "sandstack-sbx" mark, hits = { cmdline } }.
local SCANNER = [[
import os, sys, time
stop, needles = sys.argv[1], open(sys.argv[2], "rb").read().split(b"\n")
me, ns = str(os.getpid()), os.readlink("/proc/self/ns/pid")
rounds, wrappers, hits = 0, set(), set()
open(stop + ".ready", "w").close()
end = time.time() + 300
while not os.path.exists(stop) and time.time() < end:
    rounds += 1
    for p in os.listdir("/proc"):
        if not p.isdigit() or p == me:
            continue
        try:
            if os.readlink("/proc/%s/ns/pid" % p) != ns:
                continue
            c = open("/proc/%s/cmdline" % p, "rb").read()
        except OSError:
            continue
        if b"sandstack-sbx" in c:
            wrappers.add(p)
        for n in needles:
            if n and n in c:
                hits.add(c.replace(b"\0", b" ")[:300])
print("rounds %d" % rounds)
print("wrappers %d" % len(wrappers))
for c in hits:
    print("hit " + c.decode("latin-1").replace("\n", " "))
]]

function H.watch_cmdlines(needles)
  local dir = h.must("mktemp -d /tmp/sstest-scan.XXXXXX"):match("%S+")
  h.write_file(dir .. "/scan.py", SCANNER)
  h.write_file(dir .. "/needles", table.concat(needles, "\n"))
  sh("chmod 600 " .. q(dir .. "/needles"))
  local p = io.popen("python3 " .. q(dir .. "/scan.py") .. " " .. q(dir .. "/stop") .. " " .. q(dir .. "/needles"))
  for _ = 1, 100 do
    local f = io.open(dir .. "/stop.ready")
    if f then f:close() break end
    sh("sleep 0.05")
  end
  return { result = function()
    h.write_file(dir .. "/stop", "")
    local out = p:read("*a")
    p:close()
    sh("rm -rf " .. q(dir))
    local r = { rounds = tonumber(out:match("rounds (%d+)")), wrappers = tonumber(out:match("wrappers (%d+)")), hits = {} }
    for line in out:gmatch("hit ([^\n]*)") do r.hits[#r.hits + 1] = line end
    return r
  end }
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
  -- the child loads the same build with the same interpreter (an ASan build has its own)
  local dir = package.cpath:match("^([^;]-)/%?%.so") or "./build"
  local asan = io.open(dir .. "/sandstack-asan-lua")
  if asan then asan:close() end
  h.write_file(path, 'package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;./spec/support/?.lua;" .. package.path\n'
    .. 'package.cpath = "' .. dir .. '/?.so;" .. package.cpath\n' .. code)
  local lua = asan and q(dir .. "/sandstack-asan-lua") or (rawget(_G, "jit") and "luajit" or "lua5.4")
  local p = io.popen(lua .. " " .. q(path) .. " 2>&1")
  return { result = function() local out = p:read("*a"); p:close(); os.remove(path); return out end }
end

-- Serialises backend options for a child process.
function H.opts_literal(env)
  local o = env.backend_opts
  return ("{ sbx_path = %q, workspace_root = %q, name_prefix = %q, exec_cleanup_timeout = 30 }")
    :format(o.sbx_path, o.workspace_root, o.name_prefix)
end

return H
