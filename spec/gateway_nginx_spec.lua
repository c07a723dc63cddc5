-- The production gateway (sandstack.gateway) in a real nginx with real stacks: authentication
-- (each claim tested by attempting the attack), limits, proxying with the agent's own
-- Authorization untouched, streaming (chunked, server-sent events, WebSocket) and metrics.
-- Needs nginx and the engine: #nginx #docker (the luajit and asan modes exclude nginx).
-- nginx runs LuaJIT only; the luajit and asan modes exclude #nginx and load nothing here.
if jit or os.getenv("SANDSTACK_TEST_MODE") == "asan" then return end
local core = require "sandstack.core"
local h = require "helpers"
local gh = require "gateway_harness"

local TOKENS, PREFIX = gh.TOKENS, gh.PREFIX .. "a-"

-- A stand-in agent for streaming, in Perl (the only interpreter in sandstack-test/debian):
-- GET /sse?n=N: N server-sent events a second apart; GET /ws: a WebSocket that echoes text
-- frames. The image has no SHA-1, so the server knows the handshake answer for the RFC 6455
-- sample key only (the client below sends that key and checks the answer, as a client must).
local STREAM_AGENT = [=[
use IO::Socket::INET; $SIG{CHLD}='IGNORE'; $|=1;
my $s=IO::Socket::INET->new(LocalPort=>$ENV{AGENT_PORT},Listen=>64,ReuseAddr=>1) or die;
my %acc=('dGhlIHNhbXBsZSBub25jZQ=='=>'s3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
while(my $c=$s->accept){ next if fork; $c->autoflush(1); my $h='';
 while(<$c>){ $h.=$_; last if /^\r?\n$/ }
 my ($p)=$h=~m{^GET (\S+)}; $p//='/';
 if($p=~m{^/sse\?n=(\d+)}){ print $c "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
  for my $i (1..$1){ print $c "data: tick $i\n\n"; sleep 1 } }
 elsif($p eq '/ws' && $h=~/Sec-WebSocket-Key: (\S+)/i){ my $a=$acc{$1}//'unknown';
  print $c "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: $a\r\n\r\n";
  while(read($c,my $b,2)==2){ my ($b0,$b1)=unpack('CC',$b); my $n=$b1&127; last if $n>125;
   read($c,my $m,4); read($c,my $d,$n); my @k=unpack('C4',$m);
   my $t=join('',map{chr(ord(substr($d,$_,1))^$k[$_%4])}0..$n-1);
   last if ($b0&15)==8; print $c pack('CC',0x81,length "echo:$t")."echo:$t" } }
 else{ my $b="ok $p\n"; print $c "HTTP/1.1 200 OK\r\nContent-Length: ".length($b)."\r\nConnection: close\r\n\r\n$b" }
 close $c; exit 0 }
]=]

-- A WebSocket client (Python's standard library): handshake with the sample key, checks the
-- accept value, sends one masked text frame, prints the text frame that comes back.
local WS_CLIENT = [[
import socket, sys, base64, hashlib, os
host, port, path, secret = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
key = "dGhlIHNhbXBsZSBub25jZQ=="
s = socket.create_connection((host, port), timeout=10)
s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
  "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nX-Sandstack-Session-Secret: %s\r\n\r\n"
  % (path, host, key, secret)).encode())
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
want = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
lines = head.decode().split("\r\n")
if " 101 " not in lines[0] or ("Sec-WebSocket-Accept: " + want) not in lines:
    print("HANDSHAKE " + " | ".join(lines)); sys.exit(1)
msg = b"hello over ws"; mask = os.urandom(4)
s.sendall(bytes([0x81, 0x80 | len(msg)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(msg)))
b0, b1 = s.recv(1)[0], s.recv(1)[0]
data = b""
while len(data) < (b1 & 127):
    data += s.recv((b1 & 127) - len(data))
print("FRAME " + data.decode())
]]

local function tmpfile(name, text)
  local dir = h.must("mktemp -d /tmp/sstest-gw.XXXXXX"):match("[^\n]+")
  h.write_file(dir .. "/" .. name, text)
  return dir .. "/" .. name, dir
end

describe("gateway: authentication, limits and proxying #nginx #docker", function()
  local node
  local s = {} -- key -> {secret =}

  setup(function()
    local c = gh.config {
      project_prefix = PREFIX, max_sessions = 3, client_max_body_size = "2k",
      tenants = {
        { name = "alice", token_sha256 = core.sha256_hex(TOKENS.alice), max_sessions = 2 },
        { name = "bob", token_sha256 = core.sha256_hex(TOKENS.bob) },
      },
      -- test-only: shows the whole session table, to prove no secret is in it
      nginx = { metrics = [[location = /dump { content_by_lua_block {
        local d = ngx.shared.sandstack_sessions
        for _, k in ipairs(d:get_keys(0)) do ngx.say(k, " ", tostring(d:get(k))) end } }]] },
    }
    node = gh.start(c)
  end)

  teardown(function()
    if node then node:stop() end
    gh.cleanup(PREFIX)
  end)

  it("runs its workers unprivileged, in the Engine socket's group (nothing here needs root)", function()
    local gid = h.sh("stat -L -c %g " .. h.q((os.getenv("DOCKER_HOST") or "unix:///var/run/docker.sock"):gsub("^unix://", "")))
    local workers = h.sh("ps -o uid=,gid=,args= --ppid " .. node:pid())
    local n = 0
    for uid, g, args in workers:gmatch("%s*(%d+)%s+(%d+)%s+([^\n]*)") do
      if args:find("worker process", 1, true) then
        n = n + 1
        assert.same({ "65534", gid:match("%d+") }, { uid, g }, args)
      end
    end
    assert.is_true(n >= 1, "no worker process under the master: " .. workers)
  end)

  it("refuses to create without a valid tenant token, starting nothing", function()
    assert.equal(401, (node:api("POST", "/sessions/nope")))
    assert.equal(401, (node:api("POST", "/sessions/nope", { token = "not-a-token" })))
    assert.equal(401, (node:api("POST", "/sessions/nope", { headers = { Authorization = "Basic " .. TOKENS.alice } })))
    -- a token's digest is not a token
    assert.equal(401, (node:api("POST", "/sessions/nope", { token = core.sha256_hex(TOKENS.alice) })))
    assert.equal(0, gh.count(PREFIX))
  end)

  it("creates sessions with a key of the client's or the gateway's choosing", function()
    local st, doc, body = node:api("POST", "/sessions/a1", { token = TOKENS.alice })
    assert.equal(201, st, body .. node:error_log())
    assert.equal("a1", doc.key)
    assert.matches("^" .. ("%x"):rep(64) .. "$", doc.secret)
    assert.equal("/sessions/a1/", doc.endpoint_path)
    s.a1 = doc
    st, doc, body = node:api("POST", "/sessions", { token = TOKENS.bob })
    assert.equal(201, st, body)
    assert.matches("^%x+$", doc.key)
    s.b = doc
    assert.are_not.equal(s.a1.secret, s.b.secret)
    -- a key is taken in its tenant's own key space (another tenant's POST of it: gateway_tenants_spec)
    assert.equal(409, (node:api("POST", "/sessions/a1", { token = TOKENS.alice })))
  end)

  it("proxies with the secret, stripped, and passes the agent's own Authorization through", function()
    local st, _, body = node:api("GET", "/sessions/a1/echo/x?y=1", { secret = s.a1.secret,
      headers = { Authorization = "Bearer agent-own-token" } })
    assert.equal(200, st, body)
    assert.truthy(body:find("GET /echo/x?y=1", 1, true), body)
    assert.truthy(body:find("Authorization: Bearer agent-own-token", 1, true), body)
    assert.is_nil(body:lower():find("x-sandstack-session-secret", 1, true), body)
    assert.is_nil(body:find(s.a1.secret, 1, true), body)
  end)

  it("never routes a request without the right secret to the stack", function()
    local before = #node:access_log()
    -- no secret is 401; a secret that opens no session of this key is 404, as for a free key
    -- the secret with its last digit changed (to "1" when it is "0": "0" would be the secret itself)
    local last = s.a1.secret:sub(64) == "0" and "1" or "0"
    local attempts = {
      { {}, 401 }, { { secret = "" }, 401 }, { { secret = s.b.secret }, 404 },
      { { secret = s.a1.secret:sub(1, 63) .. last }, 404 }, { { secret = s.a1.secret .. "0" }, 404 },
      { { secret = core.sha256_hex(s.a1.secret) }, 404 }, { { secret = s.a1.secret .. ("0"):rep(2000) }, 404 },
    }
    for i, a in ipairs(attempts) do
      local st, doc = node:api("GET", "/sessions/a1/echo/attack" .. i, a[1])
      assert.equal(a[2], st, "attempt " .. i)
      assert.equal(a[2] == 401 and "unauthorized" or "not_found", doc.error.kind)
    end
    -- the gateway answered all of them itself: no upstream was contacted
    local log = node:access_log():sub(before + 1)
    local n = 0
    for line in log:gmatch("[^\n]+") do
      if line:find("/echo/attack", 1, true) then
        n = n + 1
        assert.truthy(line:find("upstream=- ", 1, true), line)
      end
    end
    assert.equal(#attempts, n)
  end)

  it("hides another tenant's session (404) and needs the secret to read or delete", function()
    assert.equal(404, (node:api("GET", "/sessions/a1", { token = TOKENS.bob, secret = s.a1.secret })))
    assert.equal(404, (node:api("DELETE", "/sessions/a1", { token = TOKENS.bob, secret = s.a1.secret })))
    assert.equal(401, (node:api("DELETE", "/sessions/a1", { token = TOKENS.alice })))
    assert.equal(401, (node:api("DELETE", "/sessions/a1", { token = TOKENS.alice, secret = s.b.secret })))
    assert.equal(401, (node:api("DELETE", "/sessions/a1", { secret = s.a1.secret })))
    local st, doc = node:api("GET", "/sessions/a1", { token = TOKENS.alice, secret = s.a1.secret })
    assert.equal(200, st)
    assert.equal("ready", doc.state)
    assert.is_nil(doc.record)
    assert.equal(404, (node:api("GET", "/sessions/nosuch/echo", { secret = s.a1.secret })))
  end)

  it("keeps only digests: not in the dict, the logs or the engine's labels", function()
    local dump = h.sh("curl -s http://" .. node.metrics_listen .. "/dump")
    assert.truthy(dump:find(core.sha256_hex(s.a1.secret), 1, true), dump)
    for _, x in ipairs { s.a1, s.b } do
      assert.is_nil(dump:find(x.secret, 1, true))
      assert.is_nil(node:error_log():find(x.secret, 1, true))
      assert.is_nil(node:access_log():find(x.secret, 1, true))
    end
    local project = require("sandstack.gateway").project_for(node.conf, "alice", "a1")
    local inspect = h.sh("docker inspect $(docker ps -aq --filter label=io.sandstack.project=" .. project .. ")")
    assert.truthy(inspect:find('"io.sandstack.gateway.secret-sha256": "' .. core.sha256_hex(s.a1.secret), 1, true))
    assert.is_nil(inspect:find(s.a1.secret, 1, true))
    assert.is_nil(inspect:find(TOKENS.alice, 1, true))
  end)

  it("caps a tenant and the node with 429 and Retry-After", function()
    local st, doc, body = node:api("POST", "/sessions/a2", { token = TOKENS.alice })
    assert.equal(201, st, body)
    s.a2 = doc
    local st3, doc3, _, hd = node:api("POST", "/sessions/a3", { token = TOKENS.alice })
    assert.equal(429, st3)
    assert.equal("limit", doc3.error.kind)
    assert.truthy(tonumber(hd["retry-after"]))
    -- bob has no cap of his own, but the node's (3) is reached
    local stb, docb, _, hb = node:api("POST", "/sessions/b2", { token = TOKENS.bob })
    assert.equal(429, stb)
    assert.matches("gateway session limit", docb.error.message)
    assert.truthy(tonumber(hb["retry-after"]))
    local left = gh.count(PREFIX .. "a3") + gh.count(PREFIX .. "b2")
    if left > 0 then -- say what was there (seen once in a loaded CI run, not reproduced)
      io.stderr:write(require("helpers").sh("docker ps -a --format '{{.Names}} {{.Status}} {{.Label \"io.sandstack.project\"}}'"
        .. " --filter label=io.sandstack.project"))
      io.stderr:write(node:error_log():sub(-4000), "\n")
    end
    assert.equal(0, left)
  end)

  it("caps request bodies (client_max_body_size)", function()
    local st = node:api("POST", "/sessions/a1/echo", { secret = s.a1.secret, body = ("x"):rep(4096) })
    assert.equal(413, st)
    local ok = node:api("POST", "/sessions/a1/echo", { secret = s.a1.secret, body = ("x"):rep(1000) })
    assert.equal(200, ok)
  end)

  it("streams chunked answers as they come", function()
    local out = h.sh("curl -sN --max-time 20 -H 'X-Sandstack-Session-Secret: " .. s.a1.secret .. "' "
      .. node.srv:url("/sessions/a1/stream?n=3") .. " | while IFS= read -r l; do echo \"$(date +%s.%N) $l\"; done")
    local times = {}
    for t in out:gmatch("(%d+%.%d+) ") do times[#times + 1] = tonumber(t) end
    assert.is_true(#times >= 3, out)
    -- a buffered proxy would deliver every line at once, at the end
    assert.is_true(times[#times] - times[1] >= 1.5, out)
  end)

  it("counts sessions, starts and failures in /metrics", function()
    local m = node:metrics()
    assert.truthy(m:find('sandstack_gateway_sessions{state="ready"} 3', 1, true), m)
    assert.truthy(m:find('sandstack_gateway_starts_total{how="cold"} 3', 1, true), m)
    assert.truthy(m:find('sandstack_gateway_failures_total{kind="limit_tenant"} 1', 1, true), m)
    assert.truthy(m:find('sandstack_gateway_failures_total{kind="limit_global"} 1', 1, true), m)
    assert.truthy(m:find('sandstack_gateway_start_seconds_count 3', 1, true), m)
    assert.truthy(m:find('sandstack_gateway_start_seconds_bucket{le="+Inf"} 3', 1, true), m)
    assert.truthy(m:find("# TYPE sandstack_gateway_start_seconds histogram", 1, true), m)
    -- not on the API listener
    assert.equal(404, (node:api("GET", "/metrics")))
  end)

  it("deletes every session and leaves nothing", function()
    for _, k in ipairs { "a1", "a2" } do
      local st, _, body = node:api("DELETE", "/sessions/" .. k, { token = TOKENS.alice, secret = s[k].secret })
      assert.equal(200, st, body)
    end
    assert.equal(200, (node:api("DELETE", "/sessions/" .. s.b.key, { token = TOKENS.bob, secret = s.b.secret })))
    assert.equal(404, (node:api("GET", "/sessions/a1/echo", { secret = s.a1.secret })))
    assert.equal(0, gh.count(PREFIX))
    local m = node:metrics()
    assert.truthy(m:find('sandstack_gateway_destroyed_total{reason="deleted"} 3', 1, true), m)
  end)
end)

describe("gateway: server-sent events and WebSocket upgrades #nginx #docker", function()
  local node, secret, script_dir
  local P = gh.PREFIX .. "w-"

  setup(function()
    local script
    script, script_dir = tmpfile("agent.pl", STREAM_AGENT)
    local stack = gh.stack_options {
      services = { { name = "sandbox", image = "sandstack-test/debian:local",
        command = { "perl", "-e", h.read_file(script) } } },
    }
    node = gh.start(gh.config { project_prefix = P, stack = stack })
  end)

  teardown(function()
    if node then node:stop() end
    gh.cleanup(P)
    if script_dir then os.execute("rm -rf " .. h.q(script_dir)) end
  end)

  it("passes server-sent events through as they are sent", function()
    local st, doc, body = node:api("POST", "/sessions/sse", { token = TOKENS.alice })
    assert.equal(201, st, body .. node:error_log())
    secret = doc.secret
    local out = h.sh("curl -sN --max-time 20 -H 'X-Sandstack-Session-Secret: " .. secret .. "' "
      .. node.srv:url("/sessions/sse/sse?n=3") .. " | while IFS= read -r l; do [ -n \"$l\" ] && echo \"$(date +%s.%N) $l\"; done")
    local times, ticks = {}, 0
    for t, rest in out:gmatch("(%d+%.%d+) ([^\n]*)") do
      times[#times + 1] = tonumber(t)
      if rest:match("^data: tick %d$") then ticks = ticks + 1 end
    end
    assert.equal(3, ticks, out)
    assert.is_true(times[3] - times[1] >= 1.5, out)
  end)

  it("upgrades to a WebSocket and carries frames both ways", function()
    local client, dir = tmpfile("ws.py", WS_CLIENT)
    local out = h.sh("python3 " .. h.q(client) .. " 127.0.0.1 " .. node.srv.port .. " /sessions/sse/ws " .. secret)
    -- without the right secret the upgrade never reaches the agent: the secret opens no session
    -- of this key (404, as for a key no one holds)
    local bad = h.sh("python3 " .. h.q(client) .. " 127.0.0.1 " .. node.srv.port .. " /sessions/sse/ws wrong")
    os.execute("rm -rf " .. h.q(dir))
    assert.equal("FRAME echo:hello over ws\n", out)
    assert.matches("HANDSHAKE HTTP/1.1 404", bad)
    assert.matches("Content%-Type: application/json", bad)
  end)

  it("removes the session", function()
    assert.equal(200, (node:api("DELETE", "/sessions/sse", { token = TOKENS.alice, secret = secret })))
    assert.equal(0, gh.count(P))
  end)
end)

describe("sandstack gateway (the command) #nginx #docker", function()
  it("renders nginx.conf from the Lua config and runs nginx in the foreground", function()
    local harness = require "nginx_harness"
    local dir = h.must("mktemp -d /tmp/sstest-gwcli.XXXXXX"):match("[^\n]+")
    local port, mport = harness.free_port(), harness.free_port()
    local c = gh.config { listen = "127.0.0.1:" .. port, metrics_listen = "127.0.0.1:" .. mport,
      project_prefix = gh.PREFIX .. "c-", lua_cpath = gh.build .. "/?.so;;" }
    -- the checked config written back as the Lua file an operator would keep
    local function lua(v)
      if type(v) == "string" then return ("%q"):format(v) end
      if type(v) ~= "table" then return tostring(v) end
      local parts = {}
      for k, x in pairs(v) do parts[#parts + 1] = "[" .. lua(k) .. "]=" .. lua(x) end
      return "{" .. table.concat(parts, ",") .. "}"
    end
    h.write_file(dir .. "/config.lua", "return " .. lua(c))
    local out = h.sh("lua5.4 bin/sandstack gateway --config " .. h.q(dir .. "/config.lua") .. " --prefix "
      .. h.q(dir .. "/p") .. " --render")
    assert.matches("rendered .*/p/conf/nginx.conf", out)
    -- mktemp's directory is 0700: unprivileged workers could not reach their temp files there
    assert.matches("(workers: root, as its prefix is under " .. dir .. " (mode 0700)", out, 1, true)
    h.write_file(dir .. "/named.lua", "local c = dofile(" .. ("%q"):format(dir .. "/config.lua")
      .. ") c.user = 'nobody:nogroup' return c")
    local refused, rok = h.sh("lua5.4 bin/sandstack gateway --config " .. h.q(dir .. "/named.lua") .. " --prefix "
      .. h.q(dir .. "/q") .. " --render 2>&1")
    assert.is_falsy(rok, refused)
    assert.matches("the workers' user nobody:nogroup cannot enter " .. dir .. " (mode 0700), where its prefix is",
      refused, 1, true)
    local conf = h.read_file(dir .. "/p/conf/nginx.conf")
    assert.truthy(conf:find("listen 127.0.0.1:" .. port .. ";", 1, true))
    assert.truthy(conf:find("daemon off;", 1, true))
    local pid = h.start("lua5.4 bin/sandstack gateway --config " .. h.q(dir .. "/config.lua") .. " --prefix "
      .. h.q(dir .. "/p") .. " >" .. h.q(dir .. "/out") .. " 2>&1 </dev/null")
    local up, health = pcall(h.wait_for, "the health check", function()
      local body = h.sh("curl -s --max-time 5 http://127.0.0.1:" .. port .. "/health")
      return body:find('"engine_api"', 1, true) and body
    end, 20, 0.2)
    local master = h.track((h.read_file(dir .. "/p/logs/nginx.pid") or ""):match("%d+"))
    if master then h.signal(master, "TERM") end
    pcall(h.wait_for, "the exit", function() return not h.running(pid) end, 15, 0.2)
    local log = h.read_file(dir .. "/out") or ""
    os.execute("rm -rf " .. h.q(dir))
    assert.truthy(up and health, log)
    assert.truthy(health:find('"node":"' .. c.name .. '"', 1, true), health)
  end)
end)
