-- A three-node swarm for the swarm specs (spec/swarm_cluster_spec.lua): spec/support/swarm-cluster.sh
-- brings it up and down; this file reads what it printed and gives the spec the few things it
-- does outside sandstack: a command in a node's network namespace, starts in child processes
-- (each through sandstack.swarm.start, printing the stack's record), a node's labelled objects.
-- Everything is named <prefix>...; cleanup() stops what this run started.
local core = require "sandstack.core"
local h = require "helpers"

local W = {}

W.root = h.must("pwd"):match("[^\n]+")
-- SSTEST_SWARM_PREFIX or SANDSTACK_SWARM_PREFIX: a run's own prefix (sstest-...-); else
-- SANDSTACK_SWARM_NAME (whose run it is) goes into the names: several runs share one engine
W.prefix = os.getenv("SSTEST_SWARM_PREFIX") or os.getenv("SANDSTACK_SWARM_PREFIX")
  or ("sstest-" .. (os.getenv("SANDSTACK_SWARM_NAME") or "sw") .. "-" .. core.random_hex(2):lower() .. "-")
assert(W.prefix:match("^sstest%-[a-z0-9-]*%-$"), "a swarm run's prefix must be sstest-[a-z0-9-]*-")
W.lua_cpath = package.cpath
W.lua_path = package.path
local CLUSTER = "bash " .. h.q(W.root .. "/spec/support/swarm-cluster.sh")
local q = h.q

local run = { pids = {}, dir = nil, up = false }

function W.workdir()
  if not run.dir then run.dir = h.must("mktemp -d /tmp/" .. W.prefix .. "XXXXXX"):match("[^\n]+") end
  return run.dir
end

local function parse_env(text)
  local env = {}
  for k, v in text:gmatch("([%w_]+)=([^\n]*)") do env[k] = v end
  return env
end

-- up() -> cluster { nodes = { {index, name, pid, sock, host, ip} }, manager = "unix://...", up_seconds }
function W.up()
  run.up = true
  local out, ok = h.sh(CLUSTER .. " up " .. q(W.prefix) .. " 2>" .. q(W.workdir() .. "/up.err"))
  if not ok then error("swarm-cluster.sh up failed:\n" .. out .. (h.read_file(run.dir .. "/up.err") or ""), 0) end
  local env = parse_env(out)
  local c = { nodes = {}, up_seconds = tonumber(env.UP_SECONDS) }
  for i = 1, 3 do
    c.nodes[i] = { index = i, name = env["NODE" .. i .. "_NAME"], pid = tonumber(env["NODE" .. i .. "_PID"]),
      sock = env["NODE" .. i .. "_SOCK"], ip = env["NODE" .. i .. "_IP"] }
    c.nodes[i].host = "unix://" .. c.nodes[i].sock
    assert(c.nodes[i].pid and c.nodes[i].sock, "swarm-cluster.sh up printed:\n" .. out)
  end
  c.manager = "unix://" .. env.MANAGER_SOCK
  W.cluster = c
  return c
end

function W.stop_node(i)
  h.must(CLUSTER .. " stop-node " .. q(W.prefix) .. " " .. i)
end

function W.start_node(i)
  local env = parse_env(h.must(CLUSTER .. " start-node " .. q(W.prefix) .. " " .. i))
  W.cluster.nodes[i].pid = tonumber(env["NODE" .. i .. "_PID"])
end

-- A shell command in node i's network namespace (only there: the node's loopback, its listeners).
function W.in_node(i, cmd)
  return h.sh(("nsenter -t %d -n -- sh -c %s"):format(W.cluster.nodes[i].pid, q(cmd)))
end

-- A listener in node i's namespace on 0.0.0.0:port that accepts and closes; its pid is kept.
function W.listen(i, port)
  local pid = tonumber(h.must(("nsenter -t %d -n -- socat TCP-LISTEN:%d,fork,reuseaddr OPEN:/dev/null"
    .. " >/dev/null 2>&1 </dev/null & echo $!"):format(W.cluster.nodes[i].pid, port)):match("%d+"))
  W.track(pid)
  return pid
end

-- A process of the run's (killed at cleanup, only while it is that process: helpers.lua's
-- h.track keeps its start time, which tells it from a later process that got the same pid).
function W.track(pid)
  pid = h.track(pid)
  if pid then run.pids[#run.pids + 1] = pid end
end

-- The IPv4 addresses of node i's namespace, loopback excepted.
function W.addresses(i)
  local out = {}
  for ip in W.in_node(i, "ip -4 -o addr show"):gmatch("inet (%d+%.%d+%.%d+%.%d+)/") do
    if not ip:match("^127%.") then out[#out + 1] = ip end
  end
  return out
end

-- start_many(jobs, workers) -> { [key] = {ok =, record =, err =, seconds =} }: jobs ({ {key =,
-- opts =} }) dealt over `workers` child processes, each starting its keys one after another with
-- sandstack.swarm.start(key, opts) and printing one JSON line per key (the record, never the
-- handle: a handle is this process's; the record is what another process reconnects from).
local CHILD = [=[
local core = require "sandstack.core"
local swarm = require "sandstack.swarm"
local f = assert(io.open(arg[1], "rb"))
local jobs = core.json_decode(f:read("*a"))
f:close()
for _, job in ipairs(jobs) do
  local opts = job.opts
  if os.getenv("SANDSTACK_SWARM_TRACE") then
    opts.on_event = function(ev)
      io.stderr:write(("# %s %.2f %s %s %s\n"):format(ev.project, ev.elapsed, ev.phase, tostring(ev.service or ""),
        tostring(ev.node or ev.network or "")))
    end
  end
  local t0 = core.engine_clock()
  local stack, err = swarm.start(job.key, opts)
  local line = { key = job.key, seconds = core.engine_clock() - t0 }
  if stack then line.record = stack:record(); stack:close() else line.err = { kind = err.kind, reason = err.reason,
    message = err.message, node = err.node } end
  io.write(core.json_encode(line), "\n")
  io.flush()
end
]=]
function W.start_many(jobs, workers)
  local dir = W.workdir()
  h.write_file(dir .. "/child.lua", CHILD)
  local groups = {}
  for i, job in ipairs(jobs) do
    local g = (i - 1) % workers + 1
    groups[g] = groups[g] or {}
    table.insert(groups[g], job)
  end
  local pids = {}
  for g, js in ipairs(groups) do
    local jf = dir .. "/jobs-" .. g .. ".json"
    h.write_file(jf, core.json_encode(js))
    local out = dir .. "/start-" .. g .. ".out"
    local cmd = ("cd %s && LUA_PATH=%s LUA_CPATH=%s lua5.4 %s %s > %s 2>&1 & echo $!"):format(q(W.root),
      q(W.lua_path), q(W.lua_cpath), q(dir .. "/child.lua"), q(jf), q(out))
    pids[g] = tonumber(h.must(cmd):match("%d+"))
    W.track(pids[g])
  end
  for _, pid in ipairs(pids) do
    while h.running(pid) do core.sleep(0.2) end
  end
  local results = {}
  for g in ipairs(groups) do
    local text = h.read_file(dir .. "/start-" .. g .. ".out") or ""
    for line in text:gmatch("[^\n]+") do
      local r = line:sub(1, 1) == "{" and core.json_decode(line)
      if type(r) == "table" and r.key then
        r.ok = r.record ~= nil
        results[r.key] = r
      elseif os.getenv("SANDSTACK_SWARM_TRACE") or not line:match("^# sandstack%-") then
        io.stderr:write("# swarm start child: ", line, "\n")
      end
    end
  end
  return results
end

-- The projects (io.sandstack.project) of the objects on node i's own engine, by kind.
function W.node_projects(i)
  local eng = assert(require("sandstack").engine { host = W.cluster.nodes[i].host })
  local f = { label = { "io.sandstack.project" } }
  local out = { containers = {}, networks = {}, volumes = {}, any = {} }
  local cs = assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } }))
  for _, c in ipairs(cs) do
    local p = c.Labels["io.sandstack.project"]
    out.containers[p] = (out.containers[p] or 0) + 1
    out.any[p] = true
  end
  for _, n in ipairs(assert(eng:call("GET", "/networks", nil, { query = { filters = f } }))) do
    -- a node's own networks only: a manager lists every overlay of the swarm as well
    local p = n.Scope ~= "swarm" and n.Labels["io.sandstack.project"]
    if p then
      out.networks[p] = (out.networks[p] or 0) + 1
      out.any[p] = true
    end
  end
  local vs = assert(eng:call("GET", "/volumes", nil, { query = { filters = f } }))
  for _, v in ipairs(vs.Volumes or {}) do
    local p = v.Labels["io.sandstack.project"]
    out.volumes[p] = (out.volumes[p] or 0) + 1
    out.any[p] = true
  end
  eng:close()
  return out
end

local running = h.running

function W.cleanup()
  for i = #run.pids, 1, -1 do
    h.signal(run.pids[i], "TERM")
  end
  -- a process ends some time after its TERM (nsenter waits for its child): up to 10 s, then KILL
  -- (these are the run's own processes, by pid)
  for round = 1, 100 do
    local alive = {}
    for _, pid in ipairs(run.pids) do if running(pid) then alive[#alive + 1] = pid end end
    if #alive == 0 then break end
    if round == 50 then for _, pid in ipairs(alive) do
      h.signal(pid, "KILL")
    end end
    core.sleep(0.1)
  end
  if run.up then h.sh(CLUSTER .. " down " .. q(W.prefix)) end
  if run.dir and run.dir:match("^/tmp/sstest%-sw%-") then h.sh("rm -rf " .. q(run.dir)) end
end

-- What is left of this run on the host: engines, networks, directories, processes.
function W.leftovers()
  local left = {}
  for _, pid in ipairs(run.pids) do
    if running(pid) then left[#left + 1] = "process " .. pid end
  end
  for line in h.sh("docker ps -a --filter label=io.sandstack.test=nested-engine --format '{{.Names}}'"):gmatch("[^\n]+") do
    if line:find(W.prefix, 1, true) then left[#left + 1] = "container " .. line end
  end
  for line in h.sh("docker network ls --filter label=io.sandstack.test=nested-engine --format '{{.Name}}'"):gmatch("[^\n]+") do
    if line:find(W.prefix, 1, true) then left[#left + 1] = "network " .. line end
  end
  local state = os.getenv("SANDSTACK_NESTED_DIR") or "/var/lib/sandstack-nested"
  for line in h.sh("ls -d " .. q(state) .. "/" .. W.prefix .. "* 2>/dev/null"):gmatch("[^\n]+") do
    left[#left + 1] = "directory " .. line
  end
  return left
end

return W
