-- Host-side helpers of spec/fileplane_spec.lua: scratch trees, shell, snapshots of what must stay
-- untouched, and child processes (the "guest" that plants links, the writer that is killed).
local core = require "sandstack.core"
local h = require "helpers"

local H = {}

H.q = h.q
H.spit = h.write_file
H.slurp = h.read_file

local function chomp(s) return (s:gsub("\n$", "")) end

-- Runs a shell command; returns its stdout and stderr (one trailing newline cut) and whether it
-- succeeded. H.must: the same output, raising unless it succeeded.
function H.sh(cmd)
  local out, ok = h.sh(cmd)
  return chomp(out), ok
end

function H.must(cmd) return chomp(h.must(cmd)) end

-- A scratch tree: base/ws is the workspace root (guest /sandstack) with work/ in it,
-- base/outside and base/sibling/ws-other hold canaries that must never be read or changed.
-- On /dev/shm when there is one: tmpfs keeps the big writes of the kill test off the disk.
function H.tree()
  local dir = select(2, H.sh("test -d /dev/shm -a -w /dev/shm")) and "/dev/shm" or "/tmp"
  local base = H.must("mktemp -d " .. dir .. "/sstest-fileplane-XXXXXX")
  local t = { base = base, root = base .. "/ws", outside = base .. "/outside", sibling = base .. "/sibling/ws-other" }
  H.must("mkdir -p " .. H.q(t.root .. "/work") .. " " .. H.q(t.outside .. "/p/q") .. " " .. H.q(t.sibling .. "/p/q"))
  t.canary = "CANARY-" .. core.random_hex(8)
  for _, d in ipairs { t.outside, t.sibling } do
    H.spit(d .. "/canary", t.canary)
    H.spit(d .. "/p/q/canary", t.canary)
  end
  return t
end

function H.cleanup(t)
  if t and t.base and t.base:match("^/[%w/]+/sstest%-fileplane%-") then H.sh("rm -rf " .. H.q(t.base)) end
end

-- Everything under dir, with size, mtime, ctime and content hash: equal snapshots mean untouched.
function H.snapshot(dir)
  return H.must("cd " .. H.q(dir) .. " && find . -printf '%p %y %s %T@ %C@ %n\\n' | sort && "
    .. "find . -type f -exec md5sum {} + | sort")
end

-- Probe names that an escaped write or mkdir would create in / and /etc.
function H.probe_name() return "sstest-fileplane-probe-" .. h.random_suffix(6) end

function H.plane(t, extra)
  local opts = { root = t.root }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return assert(core.fileplane_open(opts))
end

-- The Lua 5.4 interpreter and build used by child processes (any test mode).
function H.child_lua()
  return "lua5.4 -e " .. H.q('package.cpath="./build/?.so;" .. package.cpath; package.path="./lua/?.lua;" .. package.path')
end

-- Debian's python3 (pyenv shims on PATH take seconds to start).
function H.python()
  return select(2, H.sh("test -x /usr/bin/python3")) and "/usr/bin/python3" or "python3"
end

-- Starts a background command; returns its pid (tracked: helpers.lua's h.start).
function H.spawn(cmd)
  return h.start("sh -c " .. H.q(cmd) .. " >/dev/null 2>&1 </dev/null")
end

-- Whether the process H.spawn started still runs, read from /proc (no fork: the kill test polls
-- in a tight loop), and is still that process (its start time).
H.alive = h.running
H.kill = h.signal

function H.sleep(s) H.sh("sleep " .. s) end

-- Docker: a container of the test image with the workspace bind-mounted at /sandstack.
function H.project() return "sstest-fileplane-" .. h.random_suffix(4) end

function H.container(project, root, cmd)
  return H.must("docker run -d --label io.sandstack.project=" .. project .. " -v " .. H.q(root) .. ":/sandstack "
    .. "sandstack-test/base:local " .. (cmd or "sleep 600"))
end

function H.docker_exec(id, script) return H.sh("docker exec " .. id .. " bash -c " .. H.q(script)) end

function H.remove_project(project)
  H.sh("docker ps -aq --filter label=io.sandstack.project=" .. project .. " | xargs -r docker rm -f")
end

return H
