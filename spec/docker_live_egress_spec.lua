-- The policy changed live, on a real stack: stack:set_egress widens and narrows the
-- policy of the running proxy sandstack added, shown from inside the sandbox; stack:egress()
-- reads the policy in force back from the proxy; the change works on a handle rebuilt from
-- stack:record(); a bad policy changes nothing; and the control socket the change travels
-- through is out of the sandbox's reach (every way in is attempted, after a control that shows
-- the proxy itself is reachable). The outside is a network namespace of this test on a /28 of
-- 203.0.113.0/24 with a TLS stand-in (spec/support/proxy_standin.py) serving a.test and b.test;
-- the sandbox's probes are spec/support/live_probe.py. Objects: project and netns
-- "sstest-lv-<random>", removed at the end.
local sandstack = require "sandstack"
local h = require "helpers"
local core = sandstack.core
local docker = sandstack.docker
local policy = sandstack.policy

local dh = require "docker_proxy_harness"

local S = dh.stack("lv", "slv", function(r) return 16 * (4 + r % 8) end)
local FORWARDER_IMAGE, CLIENT = S.FORWARDER_IMAGE, S.CLIENT
local PROJECT, top = S.PROJECT, S.top
local addr, sandbox, audit = S.addr, S.sandbox, S.audit

-- The proxy's audit lines reach `docker logs` through the engine's log pipeline, a moment after
-- the proxy wrote them (seconds, on a loaded host): a test that counts them first waits, at most
-- 15 s, for `enough(lines)`, then asserts on the lines as they are.
local function audit_after(enough)
  pcall(h.wait_for, "the proxy's audit lines", function() return enough(audit()) end, 15, 0.1)
  return audit()
end
local function count(lines, pred)
  local n = 0
  for _, l in ipairs(lines) do if pred(l) then n = n + 1 end end
  return n
end

-- c.test:9443 (a credential's host: its origin records the token it gets) stays in every policy
local START = { allow = { "b.test:443", "c.test:9443" } }
local WIDE = { allow = { "a.test:443", "b.test:443", "c.test:9443" } }
local NARROW = { allow = { "a.test:443", "c.test:9443" } }
local S1, S2, S3 = "s1-" .. core.random_hex(14), "s2-" .. core.random_hex(14), "s3-" .. core.random_hex(14)
local function echo_token(secret)
  return { name = "ECHO_TOKEN", host = "c.test", port = 9443, header = "X-Token", secret = secret }
end

-- live_probe.py CMD ARGS... in the sandbox -> its last line, decoded when it is JSON
local function probe(cmd, ...)
  local args = {}
  for i, a in ipairs { ... } do args[i] = h.q(a) end
  local out = h.must(("docker exec -i %s python3 - %s %s < %s"):format(sandbox(), cmd, table.concat(args, " "),
    h.q(top .. "/spec/support/live_probe.py")))
  local last = out:match("([^\n]+)%s*$") or ""
  return core.json_decode(last) or last, out
end

-- curl in the sandbox, through the proxy (HTTPS_PROXY): its stdout, and the exit code
local function curl(url)
  local out, _, code = h.sh(("docker exec %s curl -sS --max-time 20 %s 2>&1"):format(sandbox(), h.q(url)))
  return out, code
end

-- the stack's record, its proxy reached by an Engine exec (the fallback's way)
local function exec_record(stack)
  local rec = core.json_decode(core.json_encode(stack:record()))
  rec.proxy.control = "exec"
  return rec
end

local function egress_render(stack)
  local p, digest = assert(stack:egress())
  return p:render(), digest
end

describe("a live stack's egress changed with set_egress #docker", function()
  local skip_why = S.missing()
  local work, stack, start_err

  lazy_setup(function()
    if skip_why then return end
    work = S.workdir()
    dh.make_certs(work, "sstest-lv-ca", "a.test", { "a.test", "b.test", "c.test" })
    S.outside_up { 2, 3 }
    S.start_standin(work)
    S.start_peer("live_token_standin.py", { work .. "/srv.pem", work .. "/srv.key", work, addr(3) },
      work .. "/tokens.out")
    S.wait_ready(work, { "standin.ready", "tokens.ready" })
    S.build_images()
    local ca = h.read_file(work .. "/ca.pem")
    stack, start_err = docker.start(PROJECT, S.options {
      services = S.trusting(ca),
      egress_policy = START,
      proxy_hosts = { ["a.test"] = addr(2), ["b.test"] = addr(2), ["c.test"] = addr(3) },
      -- a credential turns inspection on, and the sandbox's clients then trust the stack's bundle:
      -- the test CA reaches it (for the tunnelled a.test and b.test) through proxy_upstream_ca
      credentials = { echo_token(S1) }, proxy_upstream_ca = ca,
    })
  end)

  lazy_teardown(function() if not skip_why then S.teardown(stack, work) end end)
  local function ready() return S.ready(skip_why, stack, start_err) end

  it("widens: a.test is refused from the sandbox, then reached once set_egress admits it", function()
    if not ready() then return end
    assert.matches("hello from b.test /one", (curl("https://b.test/one"))) -- control: the proxy serves
    local out, code = curl("https://a.test/one")
    assert.not_equal(0, code, out)
    assert.matches("403", out)
    assert.is_true(assert(stack:set_egress(WIDE)))
    assert.matches("hello from a.test /two", (curl("https://a.test/two")))
    assert.equal(assert(policy.compile(WIDE)):render(), (egress_render(stack)))
    local function control(l) return l.route == "control" end
    local changes = {}
    for _, l in ipairs(audit_after(function(ls) return count(ls, control) >= 1 end)) do
      if control(l) then changes[#changes + 1] = l end
    end
    assert.equal(1, #changes)
    assert.equal("policy_changed", changes[1].event)
    assert.matches("^%x+$", changes[1].old_digest)
    assert.equal(select(2, egress_render(stack)), changes[1].new_digest)
  end)

  it("narrows: a long-lived tunnel to b.test is closed, one to a.test stays open", function()
    if not ready() then return end
    assert(stack:set_egress(WIDE))
    local files = {}
    for _, host in ipairs { "a.test", "b.test" } do
      files[host] = work .. "/hold-" .. host
      -- a tunnel through the proxy in HTTPS_PROXY, held open 40 s (proxy_client.py's hold)
      h.must(S.client_command("hold", { host, "40" }) .. " > " .. h.q(files[host]) .. " 2>&1 &")
    end
    local function line(host) return (h.read_file(files[host]) or "") end
    pcall(h.wait_for, "both tunnels", function()
      return line("a.test"):find("open") and line("b.test"):find("open")
    end, 20)
    assert.matches("open", line("a.test"))
    assert.matches("open", line("b.test"))
    assert(stack:set_egress(NARROW))
    pcall(h.wait_for, "b.test's end", function() return line("b.test"):find("eof") end, 20)
    assert.matches("eof", line("b.test"))
    core.sleep(1)
    assert.not_matches("eof", line("a.test")) -- still admitted: not touched
    local function ends_b(l) return l.host == "b.test" and l["end"] == "policy_changed" end
    local closed
    for _, l in ipairs(audit_after(function(ls) return count(ls, ends_b) >= 1 end)) do
      if ends_b(l) then closed = l end
    end
    assert.truthy(closed, "no audit line ends the b.test tunnel with policy_changed")
    -- and a new tunnel to b.test is refused, while a.test is served
    local out, code = curl("https://b.test/three")
    assert.not_equal(0, code, out)
    assert.matches("hello from a.test /four", (curl("https://a.test/four")))
    assert.equal(assert(policy.compile(NARROW)):render(), (egress_render(stack)))
  end)

  it("a bad policy returns invalid_policy and leaves the one in force", function()
    if not ready() then return end
    assert(stack:set_egress(WIDE))
    local before, digest = egress_render(stack)
    local ok, err = stack:set_egress { allow = { "a.test:443", "b..test" } }
    assert.is_nil(ok)
    assert.equal("invalid", err.kind)
    assert.equal("invalid_policy", err.reason)
    assert.equal(2, err.rule)
    ok, err = stack:set_egress { allow = { { host = "a.test", methods = { "FETCH" } } } }
    assert.is_nil(ok)
    assert.equal("invalid_policy", err.reason)
    -- a policy too large for an exec's environment string (128 KiB) is refused before any exec;
    -- the control directory's socket carries it to the proxy, which judges it (its hosts are
    -- ones the stack's CA cannot vouch for)
    local big = {}
    for i = 1, 200 do
      big[i] = { host = ("h%03d.%s.%s.test"):format(i, ("a"):rep(60), ("b"):rep(60)), methods = { "GET" },
        paths = { "/" .. ("p"):rep(900) .. "/*" } }
    end
    big[#big + 1] = "c.test:9443" -- the credential's host: a policy without it is refused before any exec
    local by_exec = assert(docker.reconnect(exec_record(stack)))
    ok, err = by_exec:set_egress { allow = big }
    by_exec:close()
    assert.is_nil(ok)
    assert.equal("too_large", err.reason)
    if stack.plan.proxy.control == "socket" then
      ok, err = stack:set_egress { allow = big }
      assert.is_nil(ok)
      assert.equal("needs_restart", err.reason)
    end
    local after, digest_after = egress_render(stack)
    assert.equal(before, after)
    assert.equal(digest, digest_after)
    assert.matches("hello from b.test /five", (curl("https://b.test/five")))
    assert.has_error(function() stack:set_egress("a.test") end)
  end)

  it("works on a handle rebuilt from record(), which holds no policy and no secret", function()
    if not ready() then return end
    local rec = core.json_decode(core.json_encode(stack:record()))
    assert.falsy(core.json_encode(rec):find(S.TOKEN, 1, true))
    assert.falsy(core.json_encode(rec):find(S.KEY, 1, true))
    local again = assert(docker.reconnect(rec))
    assert(again:set_egress(assert(policy.compile(START))))
    assert.equal(assert(policy.compile(START)):render(), (egress_render(again)))
    assert.equal(assert(policy.compile(START)):render(), (egress_render(stack))) -- one proxy, read live
    local out, code = curl("https://a.test/six")
    assert.not_equal(0, code, out)
    assert(again:set_egress(WIDE))
    assert.matches("hello from a.test /seven", (curl("https://a.test/seven")))
    again:close()
    -- a record without the added proxy (a stack with its own proxy_service, or none): a typed error
    rec.proxy = nil
    local other = assert(docker.reconnect(rec))
    local ok, err = other:set_egress(WIDE)
    assert.is_nil(ok)
    assert.equal("no_added_proxy", err.reason)
    ok, err = other:egress()
    assert.is_nil(ok)
    assert.equal("no_added_proxy", err.reason)
    other:close()
  end)

  it("the control socket is out of the sandbox's reach (the proxy itself is reachable)", function()
    if not ready() then return end
    assert(stack:set_egress(WIDE))
    local _, digest = egress_render(stack)
    -- the control: the sandbox reaches the proxy on its port, and a unix socket of its own
    local ports = probe("scan", "proxy")
    assert.same({ 3128 }, ports, "the proxy's open TCP ports as the sandbox sees them")
    assert.matches("hello from b.test /ctl", (curl("https://b.test/ctl")))
    h.must(("docker exec -d %s python3 -c %s"):format(sandbox(), h.q(
      "import socket,time\nfor n in ('/tmp/own.sock', '\\0sandbox-own'):\n s=socket.socket(socket.AF_UNIX); s.bind(n); s.listen(); globals()[n]=s\ntime.sleep(60)")))
    core.sleep(1)
    -- looking for it: no socket or control path in the sandbox's filesystem but its own
    local found = probe("find")
    for _, p in ipairs(found.sockets) do assert.not_matches("sandstack", p) end
    assert.truthy(found.sockets[1] and table.concat(found.sockets, " "):find("/tmp/own.sock", 1, true),
      "the search did not even find the sandbox's own socket")
    for _, p in ipairs(found.control) do assert.not_matches("sandstack%-control", p) end
    -- connecting to every path it could be at: the proxy's, the CA volume's two mount points,
    -- the abstract namespace, where the image puts it (@sandstack-control); the sandbox's own
    -- sockets, a file and an abstract name, are the controls
    local tried = probe("unix", "/tmp/own.sock", "@sandbox-own", "/tmp/sandstack-control/control.sock", "/run/sandstack/ca/control.sock",
      "/etc/sandstack/ca/control.sock", "/run/sandstack-control/control.sock", "@sandstack-control",
      "@/tmp/sandstack-control/control.sock", "/run/sandstack/" .. PROJECT .. "/control/control.sock",
      "/proc/1/root/run/sandstack-control/control.sock", "/proc/self/root/run/sandstack-control/control.sock",
      "@/run/sandstack-control/control.sock")
    assert.equal("connected", tried["/tmp/own.sock"])
    assert.equal("connected", tried["@sandbox-own"])
    for p, r in pairs(tried) do
      if p ~= "/tmp/own.sock" and p ~= "@sandbox-own" then assert.not_equal("connected", r, p) end
    end
    -- speaking the control protocol to the one port it reaches: the proxy's HTTP parser refuses it
    local payload = core.json_encode { verb = "set-egress", payload = assert(policy.compile(NARROW)):render() }
    local sent = probe("send", "proxy", "3128", payload .. "\\n")
    assert.not_matches("\"ok\"", sent.first_line)
    assert.matches("^HTTP/1%.1 4%d%d", sent.first_line)
    -- signals: the proxy's process is not in the sandbox's view at all (its own agent is)
    local procs = probe("procs")
    local seen = table.concat(procs, "\n")
    assert.matches("agent", seen)
    assert.not_matches("sandstack%-proxy", seen)
    -- nothing changed
    local _, after = egress_render(stack)
    assert.equal(digest, after)
    assert.matches("hello from b.test /still", (curl("https://b.test/still")))
  end)

  -- the token the origin got for one request from the sandbox, with the placeholder it holds
  local function token_seen(tag)
    local out, _, code = h.sh(("docker exec %s sh -c %s 2>&1"):format(sandbox(), h.q(
      'curl -sS --max-time 20 -H "X-Token: $ECHO_TOKEN" https://c.test:9443/' .. tag)))
    assert.equal(0, code, out)
    assert.matches("seen", out)
    local log = h.read_file(work .. "/tokens.log") or ""
    return log:match("([^\n]*)\n$")
  end

  it("set_credentials rotates a secret live: the origin gets the new one, the sandbox keeps its placeholder", function()
    if not ready() then return end
    assert(stack:set_egress(WIDE))
    local placeholder = assert(stack:credentials().ECHO_TOKEN)
    assert.equal(#S1, #placeholder)
    assert.equal(S1, token_seen("one"))
    assert.is_true(assert(stack:set_credentials { echo_token(S2) }))
    assert.equal(S2, token_seen("two"))
    assert.equal(placeholder, stack:credentials().ECHO_TOKEN)
    -- refusals change nothing: a secret of another length than the placeholder, a name the sandbox
    -- has no placeholder for, a secret the stack option would refuse, a host the policy does not admit
    local bad = echo_token(S3 .. "x")
    local ok, err = stack:set_credentials { bad }
    assert.is_nil(ok)
    assert.equal("invalid_option", err.reason)
    assert.equal("credentials[1].secret", err.option)
    bad = echo_token(S3)
    bad.name = "OTHER_TOKEN"
    ok, err = stack:set_credentials { bad }
    assert.equal("credentials[1].name", err.option)
    ok, err = stack:set_credentials { echo_token("short") }
    assert.equal("credentials[1].secret", err.option)
    bad = echo_token(S3)
    bad.host = "d.test"
    ok, err = stack:set_credentials { bad }
    assert.equal("credentials[1].host", err.option)
    assert.equal(S2, token_seen("three"))
    -- from a record, which holds no secret: the caller passes it again
    local rec = core.json_decode(core.json_encode(stack:record()))
    for _, secret in ipairs { S1, S2, S3 } do assert.falsy(core.json_encode(rec):find(secret, 1, true)) end
    local again = assert(docker.reconnect(rec))
    assert(again:set_credentials { echo_token(S3) })
    assert.equal(S3, token_seen("four"))
    -- a credential dropped (a table without it) can be given again, by a handle rebuilt from the
    -- record taken after the drop too: the sandbox still holds its placeholder, sent as it is
    -- meanwhile. (Before, the drop lost the placeholder: credentials[1].name, "names no credential")
    assert(again:set_credentials {})
    assert.equal(placeholder, token_seen("dropped"))
    local after_drop = assert(docker.reconnect(core.json_decode(core.json_encode(again:record()))))
    again:close()
    assert(after_drop:set_credentials { echo_token(S1) })
    assert.equal(S1, token_seen("five"))
    after_drop:close()
    -- each change an audit line with digests; no secret in the proxy's log or in the sandbox
    local function changed(l) return l.event == "credentials_changed" end
    assert.equal(4, count(audit_after(function(ls) return count(ls, changed) >= 4 end), changed))
    local logs = h.sh("docker logs " .. PROJECT .. "-proxy 2>&1")
    local env = h.sh(("docker exec %s sh -c %s"):format(sandbox(), h.q("env; cat " .. h.SERVICE_ENVIRON)))
    for _, secret in ipairs { S1, S2, S3 } do
      assert.falsy(logs:find(secret, 1, true), "a secret in the proxy's log")
      assert.falsy(env:find(secret, 1, true), "a secret in the sandbox")
    end
  end)

  -- the host's way to the control socket: a file in the stack's control directory
  local function control_dir() return "/run/sandstack/" .. PROJECT end

  it("reaches the proxy through the stack's control directory, mounted into the proxy alone", function()
    if not ready() then return end
    if core.euid() ~= 0 then return pending("not root: the stack's proxy is reached by the exec") end
    assert.equal("socket", stack:record().proxy.control)
    assert.equal("700 0", h.must("stat -c '%a %u' " .. h.q(control_dir())):gsub("%s+$", ""))
    assert.equal("65534 700", h.must("stat -c '%u %a' " .. h.q(control_dir() .. "/control")):gsub("%s+$", ""))
    assert.equal("65534 600", h.must("stat -c '%u %a' " .. h.q(control_dir() .. "/control/control.sock")):gsub("%s+$", ""))
    -- mounted into the proxy's container and no other of the stack
    for _, c in ipairs(stack.plan.containers) do
      local mounts = h.must(("docker inspect -f '{{range .Mounts}}{{.Source}} {{end}}' %s"):format(c.name))
      if c.service == "proxy" then assert.matches(control_dir() .. "/control", mounts, 1, true)
      else assert.falsy(mounts:find("/run/sandstack/", 1, true), c.name .. " mounts " .. mounts) end
    end
    -- a change by the socket is the proxy's audit line, as by the exec
    local function changed(l) return l.event == "policy_changed" end
    local before = count(audit_after(function() return true end), changed)
    assert(stack:set_egress(NARROW))
    assert(stack:set_egress(WIDE))
    local after = count(audit_after(function(ls) return count(ls, changed) >= before + 2 end), changed)
    assert.equal(before + 2, after)
    -- the fallback on the same proxy: an exec of --control finds the socket in its directory
    local again = assert(docker.reconnect(exec_record(stack)))
    assert(again:set_egress(NARROW))
    assert.equal(assert(policy.compile(NARROW)):render(), (egress_render(stack)))
    again:close()
    assert(stack:set_egress(WIDE))
  end)

  it("another container reaches the socket only when given the mount (the probe can reach it)", function()
    if not ready() or stack.plan.proxy.control ~= "socket" then return end
    local net = PROJECT .. "-sbx"
    local function from(mount)
      local out = h.must(("docker run --rm --label io.sandstack.test=%s --network %s %s -i %s python3 - unix "
        .. "/ctl/control.sock /run/sandstack-control/control.sock @sandstack-control %s < %s"):format(PROJECT, net,
        mount and ("-v %s/control:/ctl"):format(control_dir()) or "", CLIENT,
        h.q(control_dir() .. "/control/control.sock"), h.q(top .. "/spec/support/live_probe.py")))
      return core.json_decode(out:match("([^\n]+)%s*$"))
    end
    local with = from(true)
    assert.equal("connected", with["/ctl/control.sock"]) -- the control: the same probe, the mount given
    local without = from(false)
    for p, r in pairs(without) do assert.not_equal("connected", r, p) end
  end)

  it("destroy removes the control directory, and a start that fails leaves none", function()
    if not ready() then return end
    local ok, err = docker.start(PROJECT .. "-fail", { project_name = PROJECT .. "-fail", agent_port = 8080,
      pull = "never", forwarder_image = FORWARDER_IMAGE, proxy_image = "sandstack-test/absent:none",
      services = { { name = "sandbox", image = CLIENT } }, api_key = S.KEY, egress_policy = START })
    assert.is_nil(ok)
    assert.equal("image_missing", err.reason)
    assert.is_nil(core.file_stat("/run/sandstack/" .. PROJECT .. "-fail"))
    local had = core.file_stat(control_dir()) ~= nil
    assert(stack:destroy())
    assert.is_nil(core.file_stat(control_dir()))
    assert.equal(stack.plan.proxy.control == "socket", had)
  end)
end)
