-- h:spawn on the live engine (#docker): a two-way pipe (JSON lines in and out, stdin's end by
-- a half-close), stderr kept apart, a terminal that resizes, kill, the options, and the errors.
-- One stack serves every test; the last test tears it down and proves nothing is left.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker

local PREFIX = "sstest-spawn-"
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
local BARE = "sandstack/socat:0.1.0" -- the stack image bootstrap builds: socat alone, no shell

local read_until = require("spawn_ngx").read_until

describe("h:spawn on docker #docker", function()
  local stack, project

  setup(function()
    project = PREFIX .. core.random_hex(3)
    stack = assert(docker.start(project, { project_name = project, agent_port = 8080, forwarder_image = SOCAT,
      subnet_pool = "10.214.0.0/16", pull = "never",
      services = { { name = "sandbox", image = AGENT, command = { "agent" } },
        { name = "side", image = AGENT, command = { "sleep", "3600" }, egress = "none" },
        { name = "bare", image = BARE, command = { "-u", "TCP-LISTEN:7000", "STDOUT" }, egress = "none" } } })) -- its entrypoint is socat
  end)

  teardown(function()
    if stack then stack:destroy() end
    docker.reap { prefix = PREFIX }
  end)

  it("is a clean two-way pipe: JSON lines echo back, close_stdin ends the input, the code comes", function()
    local p = assert(stack:spawn({ "cat" }))
    assert.is_false(p.tty)
    local lines = {}
    for i = 1, 50 do lines[i] = core.json_encode { jsonrpc = "2.0", id = i, params = { pad = ("x"):rep(i * 40) } } end
    local sent = table.concat(lines, "\n") .. "\n"
    assert(p:write(sent))
    assert(p:close_stdin())
    local out = {}
    while true do
      local data, stream = p:read(10)
      if not data then
        assert.equal("closed", stream.reason)
        break
      end
      assert.equal("stdout", stream)
      out[#out + 1] = data
    end
    assert.equal(sent, table.concat(out))
    assert.equal(0, p:wait(10))
    local _, err = p:write("late")
    assert.equal("stdin_closed", err.reason)
    p:close()
  end)

  it("keeps stderr apart, in order, and returns the exit code", function()
    local p = assert(stack:spawn({ "sh", "-c", "echo out1; sleep 0.05; echo err1 >&2; sleep 0.05; echo out2; exit 5" }))
    local seen = {}
    while true do
      local data, stream = p:read(10)
      if not data then break end
      seen[#seen + 1] = stream .. ":" .. data
    end
    assert.same({ "stdout:out1\n", "stderr:err1\n", "stdout:out2\n" }, seen)
    assert.equal(5, p:wait(10))
  end)

  it("gives a terminal: stty size reads the spawn size, then the size after a resize", function()
    local p = assert(stack:spawn({ "sh" }, { tty = true, cols = 100, rows = 30, env = { PS1 = "$ " } }))
    assert(p:write("stty size\n"))
    assert.truthy(read_until(p, "30 100"):find("30 100", 1, true))
    assert(p:resize(132, 43))
    assert(p:write("stty size\n"))
    assert.truthy(read_until(p, "43 132"):find("43 132", 1, true))
    assert(p:write("exit 3\n"))
    assert.equal(3, p:wait(10))
  end)

  it("delivers output to on_output while wait runs", function()
    local got = {}
    local p = assert(stack:spawn("printf abc; printf def >&2", { on_output = function(d, s) got[#got + 1] = s .. "=" .. d end }))
    assert.equal(0, p:wait(10))
    table.sort(got) -- the engine copies the two pipes apart: only each stream's order is kept
    assert.same({ "stderr=def", "stdout=abc" }, got)
  end)

  it("signals a process in an image without a shell: the kill runs nothing in its container", function()
    local p = assert(stack:spawn({ "/usr/bin/socat", "-u", "STDIN", "STDOUT" }, { service = "bare" }))
    assert(p:write("x\n"))
    assert.equal("x\n", read_until(p, "\n"))
    assert(p:kill("TERM"))
    assert.is_number(p:wait(10))
    local ok, err = p:kill("TERM")
    assert.is_nil(ok)
    assert.equal("exited", err.kind)
    p:close()
  end)

  it("kills the process and its children in the sandbox", function()
    local count = { "sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null | grep -c '(sleep) [^Z]' || true" }
    local p = assert(stack:spawn({ "sh", "-c", "sleep 300 & echo started; sleep 300; echo never" }))
    assert.equal("started\n", read_until(p, "\n"))
    local before = assert(stack.eng:exec(project .. "-sandbox", count))
    assert.equal("2", before.stdout:match("%d+"))
    assert(p:kill("KILL"))
    local code = assert(p:wait(10))
    assert.equal(137, code)
    local after = assert(stack.eng:exec(project .. "-sandbox", count))
    assert.equal("0", after.stdout:match("%d+"))
    local ok, err = p:kill()
    assert.is_nil(ok)
    assert.equal("exited", err.kind)
  end)

  it("takes env, cwd, user and service", function()
    local p = assert(stack:spawn({ "sh", "-c", 'echo "$FOO|$(pwd)|$(id -u)|$(hostname)"' },
      { env = { FOO = "bar" }, cwd = "/tmp", user = "1000", service = "side" }))
    local out = read_until(p, "\n")
    local host = assert(stack.eng:call("GET", "/containers/" .. project .. "-side/json")).Config.Hostname
    assert.equal("bar|/tmp|1000|" .. host .. "\n", out)
    assert.equal(0, p:wait(10))
  end)

  it("refuses bad calls with typed errors, leaving nothing running", function()
    local ok, msg = pcall(stack.spawn, stack, {})
    assert.is_false(ok)
    assert.matches("spawn: argument 'argv' must be a non-empty list of strings or a string", msg, 1, true)
    assert.has_error(function() stack:spawn({ "sh" }, { colour = 1 }) end)
    local p, err = stack:spawn({ "sh" }, { cols = 0 }) -- a value: refused
    assert.is_nil(p)
    assert.same({ "invalid", "invalid_option", "cols" }, { err.kind, err.reason, err.option })
    assert.has_error(function() stack:spawn({ "sh" }, { tty = "yes" }) end) -- a wrong type: raised
    p, err = stack:spawn({ "sh" }, { service = "nope" })
    assert.equal("invalid", err.kind)
    assert.equal("unknown_service", err.reason)
    local p = assert(stack:spawn({ "true" }))
    local ok; ok, err = p:resize(80, 24)
    assert.is_nil(ok)
    assert.equal("not_a_tty", err.reason)
    assert.equal(0, p:wait(10))
    -- a program that does not exist: the engine's own answer (126/127), never a hang
    p = assert(stack:spawn({ "/nonexistent-program" }))
    local code = assert(p:wait(10))
    assert.truthy(code == 126 or code == 127)
  end)

  it("a read times out, typed, and the process goes on", function()
    local p = assert(stack:spawn({ "cat" }))
    local t0 = core.engine_clock()
    local data, err = p:read(0.2)
    assert.is_nil(data)
    assert.equal("timeout", err.reason)
    assert.truthy(core.engine_clock() - t0 < 2)
    assert(p:write("still here\n"))
    assert.equal("still here\n", read_until(p, "\n"))
    assert(p:close_stdin())
    assert.equal(0, p:wait(10))
  end)

  -- sandstack shell on a pseudo-terminal (spec/support/pty_drive.py), as a person types.
  local function drive(rows, cols, script, argv)
    local h = require "helpers"
    local f = os.tmpname()
    h.write_file(f, core.json_encode(script))
    local cmd = { "python3", "spec/support/pty_drive.py", rows, cols, f, "--", "bin/sandstack", "shell" }
    for _, a in ipairs(argv) do cmd[#cmd + 1] = a end
    local quoted = {}
    for i, a in ipairs(cmd) do quoted[i] = h.q(a) end
    local out = h.sh(table.concat(quoted, " ") .. " 2>/dev/null")
    os.remove(f)
    return assert(core.json_decode(out), out)
  end

  it("sandstack shell: a command typed at a terminal runs, stty size follows a resize, the exit code comes back", function()
    local r = drive(30, 100, {
      { type = "echo hi-$((6*7))\n", expect = "hi-42" },
      { type = "stty size\n", expect = "30 100" },
      { resize = { 41, 123 } },
      { type = "stty size\n", expect = "41 123" },
      { type = "exit 7\n" },
    }, { project })
    assert.is_true(r.steps[1].found, r.steps[1].output)
    assert.is_true(r.steps[2].found, r.steps[2].output)
    assert.is_true(r.steps[4].found, r.steps[4].output)
    assert.equal(7, r.code)
  end)

  it("sandstack shell: raw mode passes Ctrl-C to the shell, which stays", function()
    local r = drive(24, 80, {
      { type = "echo started-$((2*4)); sleep 30; echo not-interrupted\n", expect = "started-8" },
      { pause = 0.3 }, -- sleep is running by now
      { type = "\3echo after-$((1+1))\n", expect = "after-2" },
      { type = "exit\n" },
    }, { project })
    assert.is_true(r.steps[2].found, r.steps[2].output)
    -- the typed line may echo late; the shell's own output would start a line
    assert.falsy(r.steps[2].output:find("\nnot-interrupted", 1, true))
    assert.equal(0, r.code)
  end)

  it("sandstack shell without a terminal is a pipe, and its errors are one line", function()
    local h = require "helpers"
    local out, ok = h.sh("printf 'echo piped-$((2+3))\\n' | bin/sandstack shell " .. h.q(project) .. " -- sh")
    assert.is_true(ok, out)
    assert.equal("piped-5\n", out)
    local _, _, code = h.sh("bin/sandstack shell " .. h.q(project) .. " -- sh -c 'exit 4' </dev/null")
    assert.equal(4, code)
    local msg; msg, _, code = h.sh("bin/sandstack shell sstest-spawn-no-such-stack </dev/null")
    assert.equal(1, code)
    assert.matches("^sandstack: not_found: [^\n]+\n$", msg)
    msg, _, code = h.sh("bin/sandstack shell " .. h.q(project) .. " --service nope </dev/null")
    assert.equal(1, code)
    assert.matches("^sandstack: not_running: [^\n]+\n$", msg)
    _, _, code = h.sh("bin/sandstack shell </dev/null")
    assert.equal(2, code)
  end)

  -- The same process inside an nginx worker, over cosockets (sandstack.docker.cosocket).
  describe("in an nginx worker #nginx", function()
    local srv
    local TEMPLATE = [[
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
user {{user}};
worker_processes 1;
daemon off;
pid logs/nginx.pid;
error_log logs/error.log warn;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path tmp/body;
  proxy_temp_path tmp/proxy;
  fastcgi_temp_path tmp/fastcgi;
  uwsgi_temp_path tmp/uwsgi;
  scgi_temp_path tmp/scgi;
  lua_package_path "{{lua_path}}";
  lua_package_cpath "{{lua_cpath}}";
  server {
    listen {{listen}};
    location = /ping { content_by_lua_block { ngx.say("pong") } }
    location = /pipe { content_by_lua_block { require("spawn_ngx").pipe() } }
    location = /tty { content_by_lua_block { require("spawn_ngx").tty() } }
    location = /slow { content_by_lua_block { require("spawn_ngx").slow() } }
  }
}
]]

    setup(function()
      local root = require("helpers").must("pwd"):match("[^\n]+")
      srv = require("nginx_harness").start { template = TEMPLATE, lua_path_prefix = root .. "/spec/support/?.lua;" }
    end)

    teardown(function() if srv then srv:stop() end end)

    local function get(path)
      local status, body = srv:request("GET", path .. "?project=" .. project, { timeout = 60 })
      assert.equal(200, status, body)
      return assert(core.json_decode(body), body)
    end

    it("is a two-way pipe of JSON lines; close_stdin is unsupported there, kill ends it", function()
      local r = get("/pipe")
      assert.is_true(r.echoed_ok, core.json_encode(r))
      assert.equal("unsupported", r.close_stdin)
      assert.is_true(r.killed, core.json_encode(r))
      assert.equal(143, r.code, core.json_encode(r))
    end)

    it("gives a terminal that resizes", function()
      local r = get("/tty")
      assert.is_true(r.first, core.json_encode(r))
      assert.is_true(r.second, core.json_encode(r))
      assert.equal(3, r.code)
    end)

    it("never blocks the worker: /ping answers while a process runs in the same worker", function()
      local job = srv:spawn("GET", "/slow?project=" .. project, { timeout = 60 })
      local t0 = core.engine_clock()
      while core.engine_clock() - t0 < 0.5 do core.sleep(0.05) end -- the spawn is under way
      -- the process sleeps 4 s: a blocked worker would hold every ping until it ends
      local pings, t1 = 0, core.engine_clock()
      for _ = 1, 5 do
        local status = srv:request("GET", "/ping", { timeout = 10 })
        assert.equal(200, status)
        pings = pings + 1
      end
      assert.truthy(core.engine_clock() - t1 < 3, "the pings waited for the process")
      assert.is_false(job:done(), "the process ended before the pings: nothing was proven")
      local status, body = job:wait(30)
      assert.equal(200, status, body)
      local r = assert(core.json_decode(body), body)
      assert.equal("done\n", r.out)
      assert.equal(0, r.code)
      assert.equal(5, pings)
      assert.is_nil(srv:error_log():find("[error]", 1, true), srv:error_log())
    end)
  end)

  it("is gone with the stack", function()
    assert(stack:destroy())
    stack = nil
    local eng = assert(sandstack.engine {})
    local cs = assert(eng:call("GET", "/containers/json",
      nil, { query = { all = "1", filters = { label = { "io.sandstack.project=" .. project } } } }))
    assert.equal(0, #cs)
    eng:close()
  end)
end)

describe("spawn on sbx", function()
  it("is a typed unsupported error naming the backend", function()
    local box = require("sandstack.sbx.box").new {}
    local p, err = box:spawn({ "sh" })
    assert.is_nil(p)
    assert.equal("unsupported", err.kind)
    assert.equal("sbx", err.backend)
    assert.equal("spawn", err.method)
  end)
end)

describe("the process's frame reader", function()
  local function frame(stream, payload)
    local n = #payload
    return string.char(stream, 0, 0, 0, math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
      math.floor(n / 256) % 256, n % 256) .. payload
  end

  it("hands out each frame's bytes in order, however the stream is cut", function()
    local stream = frame(1, "out1") .. frame(2, "err1") .. frame(2, "") .. frame(1, ("x"):rep(300)) .. frame(0, "in")
    for cut = 1, 13 do
      local fr = core.frame_reader()
      local got = {}
      for i = 1, #stream, cut do
        local pieces = assert(fr:feed(stream:sub(i, i + cut - 1)))
        for j = 1, #pieces, 2 do
          local last = got[#got]
          if last and last[1] == pieces[j] then last[2] = last[2] .. pieces[j + 1]
          else got[#got + 1] = { pieces[j], pieces[j + 1] } end
        end
      end
      assert.same({ { 1, "out1" }, { 2, "err1" }, { 1, ("x"):rep(300) .. "in" } }, got)
      assert.is_false(fr:partial())
    end
  end)

  it("tells a stream cut inside a frame, and refuses one that is not framed", function()
    local fr = core.frame_reader()
    assert(fr:feed(frame(1, "whole") .. frame(1, "cut short"):sub(1, 10)))
    assert.is_true(fr:partial())
    local pieces, err = core.frame_reader():feed("HTTP/1.1 200 OK\r\n")
    assert.is_nil(pieces)
    assert.equal("bad_stream", err.reason)
  end)
end)
