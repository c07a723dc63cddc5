-- sandstack.engine against the engine double in its faults mode (spec/support/engine_double.py)
-- on a unix socket and over TLS: the faults a real daemon cannot be made to show on cue.
local sandstack = require "sandstack"
local core = sandstack.core
local clock = core.engine_clock
local double = require "engine_double"

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return (out:gsub("%s+$", ""))
end

-- A hijacked exec against the fake's echoing start: bytes out and back, then the half-close
-- (close_stdin) seen by the daemon, whose answer still arrives.
local function hijack_round_trip(eng)
  local process = require "sandstack.docker.process"
  local p = assert(process.spawn(process.engine_io(eng), "echoing", { "cat" }, {}))
  assert(p:write("abc\0\255"))
  assert.equal("abc\0\255", (p:read(5)))
  assert(p:close_stdin())
  local d1, e1 = p:read(5)
  assert.equal("eof-seen", d1, tostring(e1))
  local data, err = p:read(5)
  assert.is_nil(data)
  assert.equal("closed", err.reason)
  assert.equal(5, p:wait(5))
  p:close()
end

describe("sandstack.engine faults", function()
  local fake, dir, sock, eng

  setup(function()
    fake = double.start("faults")
    dir, sock = fake.dir, fake.sock
  end)

  teardown(function() fake.stop() end)

  before_each(function()
    eng = assert(sandstack.engine { host = "unix://" .. sock, timeout = 5 })
  end)

  after_each(function()
    eng:close()
  end)

  it("negotiates from ApiVersion, never MinAPIVersion, and prefixes paths with it", function()
    assert.equal("1.43", eng.api_version)
    local echo = assert(eng:call("GET", "/echo"))
    assert.equal("/v1.43/echo", echo.target)
    echo = assert(eng:call("GET", "/v1.40/echo"))
    assert.equal("/v1.40/echo", echo.target)
    local pinned = assert(sandstack.engine { host = "unix://" .. sock, api_version = "1.24" })
    assert.equal("/v1.24/echo", assert(pinned:call("GET", "/echo")).target)
    pinned:close()
  end)

  it("sends JSON bodies as application/json and body-less POSTs with an explicit zero length", function()
    local echo = assert(eng:call("POST", "/echo", { Image = "x", Cmd = { "a", "b" } }))
    assert.equal("application/json", echo.headers["content-type"])
    assert.same({ Image = "x", Cmd = { "a", "b" } }, core.json_decode(echo.body))
    echo = assert(eng:call("POST", "/echo"))
    assert.equal("0", echo.headers["content-length"])
    assert.is_nil(echo.headers["transfer-encoding"])
    assert.is_nil(echo.headers["content-type"])
    assert.equal("", echo.body)
    echo = assert(eng:call("PUT", "/echo", "raw\0bytes", { content_type = "application/x-tar" }))
    assert.equal("PUT", echo.method)
    assert.equal("application/x-tar", echo.headers["content-type"])
    assert.equal(("raw\0bytes"):gsub(".", function(c) return string.format("%02x", c:byte()) end), echo.body_hex)
    echo = assert(eng:call("DELETE", "/echo", nil, {
      query = { force = true, t = 3, filters = { label = { "a=b c" } } },
      headers = { ["X-Registry-Auth"] = "tok", "X-Other: 1" },
    }))
    assert.equal("DELETE", echo.method)
    assert.equal("/v1.43/echo?filters=%7B%22label%22%3A%5B%22a%3Db%20c%22%5D%7D&force=true&t=3", echo.target)
    assert.equal("tok", echo.headers["x-registry-auth"])
    assert.equal("1", echo.headers["x-other"])
    assert.has_error(function() eng:call("GET", "/echo", nil, { headers = { "X-Bad: a\r\nInjected: b" } }) end)
  end)

  it("hijacks an exec over the unix socket: stdin streams in, its half-close reaches the daemon", function()
    hijack_round_trip(eng)
  end)

  it("keeps one connection alive across requests", function()
    local before = assert(eng:call("GET", "/stats")).connections
    for _ = 1, 5 do assert.is_true(eng:ping()) end
    local after = assert(eng:call("GET", "/stats")).connections
    assert.equal(before, after)
  end)

  it("reports a connection dropped mid-body as a transport error", function()
    local st, err = eng:request("GET", "/drop")
    assert.is_nil(st)
    assert.equal("transport", err.kind)
    assert.equal("closed", err.reason)
    assert.equal("GET", err.method)
    assert.equal("/drop", err.path)
    local v
    v, err = eng:call("GET", "/drop")
    assert.is_nil(v)
    assert.equal("transport", err.kind)
    assert.is_true(eng:ping()) -- the client recovers on a fresh connection
  end)

  it("caps response bodies", function()
    local st, err = eng:request("GET", "/big", nil, { query = { n = 100000 }, max_bytes = 1000 })
    assert.is_nil(st)
    assert.equal("output_limit", err.kind)
    assert.equal(1000, err.limit)
    local small = assert(sandstack.engine { host = "unix://" .. sock, max_bytes = 2000 })
    local v
    v, err = small:call("GET", "/big", nil, { query = { n = 5000 } })
    assert.is_nil(v)
    assert.equal("output_limit", err.kind)
    v = assert(small:call("GET", "/big", nil, { query = { n = 1000 } }))
    assert.equal(501, #v)
    small:close()
  end)

  it("tolerates garbage JSON: request returns the text, call an engine error", function()
    local st, body = eng:request("GET", "/garbage")
    assert.equal(200, st)
    assert.equal("{not json", body)
    local v, err = eng:call("GET", "/garbage")
    assert.is_nil(v)
    assert.equal("engine", err.kind)
    assert.equal("bad_json", err.reason)
    assert.equal(200, err.status)
    assert.equal("{not json", assert(eng:call("GET", "/garbage", nil, { raw = true })))
  end)

  it("takes the message from non-JSON error bodies", function()
    local v, err = eng:call("GET", "/texterr")
    assert.is_nil(v)
    assert.equal("engine", err.kind)
    assert.equal("server_error", err.reason)
    assert.equal(500, err.status)
    assert.equal("plain failure", err.message)
    local _ -- the answer this test does not read
    _, err = eng:call("GET", "/htmlerr")
    assert.equal(502, err.status)
    assert.equal("<html><body>bad?gateway</body></html>", err.message)
    _, err = eng:call("GET", "/jsonerr")
    assert.equal("conflict", err.reason)
    assert.equal("fake conflict", err.message)
    assert.equal(409, assert(eng:request("GET", "/jsonerr")))
    assert.same({ message = "fake conflict" }, eng:call("GET", "/jsonerr", nil, { ok = { [409] = true } }))
    assert.same({ message = "fake conflict" }, eng:call("GET", "/jsonerr", nil, { ok = { 404, 409 } }))
    assert.has_error(function() eng:call("GET", "/jsonerr", nil, { ok = 409 }) end)
  end)

  it("fires the deadline on a server that never answers", function()
    local st, err = eng:request("GET", "/hang", nil, { timeout = 0.3 })
    assert.is_nil(st)
    assert.equal("transport", err.kind)
    assert.equal("timeout", err.reason)
    local quick = assert(sandstack.engine { host = "unix://" .. sock, timeout = 0.3 })
    local v
    v, err = quick:call("GET", "/hang")
    assert.is_nil(v)
    assert.equal("timeout", err.reason)
    quick:close()
  end)

  it("runs submitted requests concurrently: a hung one does not hold up the others", function()
    local hang = eng:submit("GET", "/hang", nil, { timeout = 1 })
    local ping = eng:submit("GET", "/_ping", nil, { raw = true })
    local bad = eng:submit("GET", "/texterr")
    local enc = eng:submit("POST", "/echo", { f = function() end }) -- cannot be encoded
    assert.equal(4, eng:pending())
    -- A blocking call meanwhile is answered although /hang occupies a connection.
    assert.is_true(eng:ping())
    local seen, order = {}, {}
    while eng:pending() > 0 do
      for _, r in ipairs(eng:poll(5)) do
        seen[r.id] = r
        order[#order + 1] = r.id
      end
    end
    assert.is_true(seen[ping].ok)
    assert.equal("OK", seen[ping].body)
    assert.is_false(seen[bad].ok)
    assert.equal(500, seen[bad].status)
    assert.equal("plain failure", seen[bad].err.message)
    assert.is_false(seen[enc].ok)
    assert.equal("invalid", seen[enc].err.kind)
    assert.is_false(seen[hang].ok)
    assert.equal("timeout", seen[hang].err.reason)
    assert.equal(hang, order[#order]) -- the hung one finished last
    assert.same({}, eng:poll(0.1))
  end)

  it("reports an absent or refusing engine as a transport error", function()
    local e, err = sandstack.engine { host = "unix://" .. dir .. "/absent.sock" }
    assert.is_nil(e)
    assert.equal("transport", err.kind)
    assert.equal("unreachable", err.reason)
    -- A socket file nobody listens on refuses connections.
    local dead = dir .. "/dead.sock"
    os.execute("python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('" .. dead .. "')\"")
    e, err = sandstack.engine { host = "unix://" .. dead }
    assert.is_nil(e)
    assert.equal("unreachable", err.reason)
    -- tcp:// to a closed loopback port.
    e, err = sandstack.engine { host = "tcp://127.0.0.1:1", timeout = 2 }
    assert.is_nil(e)
    assert.equal("transport", err.kind)
    -- An unsupported address is refused before any I/O.
    e, err = sandstack.engine { host = "ssh://user@host" }
    assert.is_nil(e)
    assert.equal("invalid", err.kind)
  end)

  it("demultiplexes a framed exec stream from pieces split anywhere", function()
    local r = assert(eng:exec("good", { "x" }))
    local all = {}
    for i = 0, 255 do all[#all + 1] = string.char(i) end
    assert.equal("out\0\255" .. table.concat(all) .. "in", r.stdout)
    assert.equal("err", r.stderr)
    assert.equal(5, r.exit_code)
    local _, err = eng:exec("trunc", { "x" })
    assert.equal("transport", err.kind)
    assert.equal("closed", err.reason)
    _, err = eng:exec("badframe", { "x" })
    assert.equal("transport", err.kind)
    assert.equal("bad_stream", err.reason)
    _, err = eng:exec("good", { "x" }, { max_bytes = 10 })
    assert.equal("output_limit", err.kind)
  end)

  it("counts an exec's timeout from its start: a create slower than the timeout takes none of it", function()
    local r, err = eng:exec("slowcreate", { "x" }, { timeout = 1 })
    assert.is_nil(err)
    assert.same({ "started", "", 5 }, { r.stdout, r.stderr, r.exit_code })
  end)

  it("counts an exec's timeout from its process running: a daemon slow to run it takes none of it", function()
    -- the double runs the process 1.5 s after the start (a loaded host's runc); with timeout = 1
    -- the old deadline, counted from the start request, ended the exec before it had run
    local t = clock()
    local r, err = eng:exec("slowrun", { "x" }, { timeout = 1 })
    assert.is_nil(err, tostring(err))
    assert.same({ "ran", "", 0 }, { r.stdout, r.stderr, r.exit_code })
    assert.is_true(clock() - t >= 1.7, "ended after " .. (clock() - t))
  end)

  it("still ends an exec at its timeout once it runs, with the output so far", function()
    local t = clock()
    local r, err = eng:exec("slowhang", { "x" }, { timeout = 1 })
    local dt = clock() - t
    assert.is_nil(r)
    assert.same({ "transport", "timeout" }, { err.kind, err.reason })
    assert.equal("partial", err.stdout)
    assert.equal("slowhang", err.exec_id)
    -- the process ran at 1.5 s: its second ends at 2.5 s, give or take a poll
    assert.is_true(dt >= 2.4 and dt < 3.5, ("timed out after %.2fs"):format(dt))
  end)

  it("counts an exec's timeout from its process running when stdin is given too", function()
    -- the stdin path is a spawned process (a hijacked attach); the double runs it 1.5 s after the
    -- start, and the old deadline, counted from the spawn, ended the exec before it had run
    local run = require("sandstack.docker.handle_exec").run
    local t = clock()
    local r, err = run(eng, "slowecho", { "cat" }, { stdin = "hi", timeout = 1 }, "docker")
    assert.is_nil(err, tostring(err))
    assert.same({ "hieof-seen", "", 0 }, { r.stdout, r.stderr, r.exit_code })
    assert.is_true(clock() - t >= 1.7, "ended after " .. (clock() - t))
  end)

  it("writes an exec's stdin byte-exact over the hijacked start, then its end", function()
    -- the double echoes each byte it reads as stdout and says "eof-seen" at the half-close
    local bytes = "a\0b\255" .. string.rep("\0\1\2", 30000)
    local r, err = eng:exec("echoing", { "cat" }, { stdin = bytes })
    assert.is_nil(err, tostring(err))
    assert.same({ #bytes + 8, "", 5 }, { #r.stdout, r.stderr, r.exit_code })
    assert.is_true(r.stdout == bytes .. "eof-seen")
    r, err = eng:exec("echoing", { "cat" }, { stdin = "" })
    assert.is_nil(err, tostring(err))
    assert.same({ "eof-seen", 5 }, { r.stdout, r.exit_code })
    assert.has_error(function() eng:exec("echoing", { "cat" }, { stdin = 5 }) end)
  end)

  it("keeps an ended exec's stdout when the engine reports its Pid as 0 (Podman), unless it never ran", function()
    -- Podman answers Pid 0 for every exec that has ended: its output is the program's
    local r = assert(eng:exec("endedpid0", { "x" }))
    assert.same({ "reached", "", 0 }, { r.stdout, r.stderr, r.exit_code })
    -- Docker's Pid 0 with 126: the program never ran, and the engine's text is an error's
    r = assert(eng:exec("notrun", { "nope" }))
    assert.same({ "", 'OCI runtime exec failed: exec: "nope": executable file not found', 126 },
      { r.stdout, r.stderr, r.exit_code })
  end)

  it("reads an event stream split mid-line, and ends it with 'closed'", function()
    local s = assert(eng:events { filters = { type = { "container" } } })
    local got = {}
    while true do
      local ev, why = s:read(5)
      if not ev then
        assert.equal("closed", why.reason, tostring(why))
        assert.equal("transport", why.kind)
        break
      end
      got[#got + 1] = ev.Action .. ev.n
    end
    assert.same({ "create0", "start1", "die2" }, got)
    s:close()
  end)

  it("bounds an event line by the stream's budget, and reports bad lines and errors", function()
    -- The fake picks its misbehaviour from `since`.
    local s = assert(eng:events { since = "long", max_bytes = 65536 })
    local ev, err = s:read(5)
    assert.is_nil(ev)
    assert.equal("output_limit", err.kind)
    s:close()
    s = assert(eng:events { since = "badjson" })
    assert.equal(1, assert(s:read(5)).ok)
    ev, err = s:read(5)
    assert.is_nil(ev)
    assert.equal("bad_json", err.reason)
    s:close()
    s = assert(eng:events { since = "error" })
    ev, err = s:read(5)
    assert.is_nil(ev)
    assert.equal("engine", err.kind)
    assert.equal(500, err.status)
    assert.equal("events broken", err.message)
    ev, err = s:read(1)
    assert.is_nil(ev)
    assert.same({ "transport", "closed" }, { err.kind, err.reason })
  end)

  it("downloads under a budget and removes the partial file on failure", function()
    local file = dir .. "/out.tar"
    local ok, n = eng:download("/archive", file, { query = { n = 3000 } })
    assert.is_true(ok)
    assert.equal(3000, n)
    local _, err = eng:download("/archive", file, { query = { n = 3000 }, max_bytes = 2999 })
    assert.equal("output_limit", err.kind)
    assert.is_nil(io.open(file))
    _, err = eng:download("/archive", file, { query = { drop = 1 } })
    assert.equal("transport", err.kind)
    assert.is_nil(io.open(file))
  end)

  it("fails host I/O of a download as kind io with the errno name, and never follows a link", function()
    local _, err = eng:download("/archive", dir .. "/missing/out.tar", { query = { n = 10 } })
    assert.same({ "io", "ENOENT", dir .. "/missing/out.tar" }, { err.kind, err.reason, err.path })
    local target = dir .. "/target"
    local f = assert(io.open(target, "w")); f:write("keep"); f:close()
    os.execute("ln -s '" .. target .. "' '" .. dir .. "/link'")
    _, err = eng:download("/archive", dir .. "/link", { query = { n = 10 } })
    assert.same({ "io", "ELOOP" }, { err.kind, err.reason })
    f = assert(io.open(target)); assert.equal("keep", f:read("a")); f:close()
    -- a write that fails midway (a 1 KiB file size limit, SIGXFSZ ignored: write says EFBIG)
    local out = require("helpers").sh("trap '' XFSZ; ulimit -f 1; " .. require("helpers").child_command(dir .. "/fsize.lua", ([[
      local e = assert(require("sandstack").engine { host = "unix://%s", api_version = "1.43" })
      local ok, err = e:download("/archive", "%s/big.tar", { query = { n = 5000 } })
      io.write(tostring(ok), " ", err.kind, " ", tostring(err.reason), " ", tostring(err.errno))
      e:close()
    ]]):format(sock, dir)))
    assert.equal("nil io EFBIG 27", out)
    assert.is_nil(io.open(dir .. "/big.tar")) -- the partial file is removed
  end)

  it("streams a tar through a 1 MiB window into place, once; a budget or a drop leaves nothing", function()
    local place = dir .. "/place"
    assert(os.execute("mkdir " .. place))
    local s = assert(eng:stream("/tree", { query = { mib = 5 } }))
    local res = assert(core.archive_place(s.h, s.id, place, "t", {}))
    assert.is_nil(s:close())
    assert.same({ true, 2, 5 * 1024 * 1024 + 5 }, { res.is_dir, res.files, res.bytes })
    local big = assert(io.open(place .. "/t/big", "rb"))
    local data = big:read("a")
    big:close()
    assert.equal(5 * 1024 * 1024, #data)
    assert.same({ 0, 250, 0, (#data - 1) % 251 }, { data:byte(1), data:byte(251), data:byte(252), data:byte(#data) })
    assert.equal("750\n755", sh("stat -c %a " .. place .. "/t " .. place .. "/t/small"))
    -- over the budget: output_limit, nothing of it left
    s = assert(eng:stream("/tree", { query = { mib = 2 } }))
    local _, err = core.archive_place(s.h, s.id, place, "t2", { max_bytes = 1024 * 1024 })
    s:close()
    assert.equal("output_limit", err.kind)
    -- the engine drops the connection inside a file: the transfer's error, nothing left
    s = assert(eng:stream("/tree", { query = { mib = 3, drop = 1 } }))
    _, err = core.archive_place(s.h, s.id, place, "t3", {})
    assert.same({ "engine", "bad_archive" }, { err.kind, err.reason })
    assert.equal("transport", s:close().kind)
    assert.equal("t", sh("ls -A " .. place))
    -- a stream refused by the engine is its error, with nothing begun
    _, err = eng:stream("/jsonerr")
    assert.same({ "engine", 409 }, { err.kind, err.status })
  end)

  it("sends a host directory as a tar made as it is sent, links as links, never followed", function()
    local up = dir .. "/up"
    local long = string.rep("n", 150)
    sh(table.concat({ "mkdir -p " .. up .. "/sub", "printf abc > " .. up .. "/a", "chmod 640 " .. up .. "/a",
      "chmod 700 " .. up .. "/sub", ": > " .. up .. "/sub/empty", "ln -s /etc/passwd " .. up .. "/ln",
      "ln -s " .. string.rep("x", 120) .. " " .. up .. "/longlink", "printf z > " .. up .. "/sub/" .. long,
      "mkfifo " .. up .. "/fifo" }, " && "))
    assert.is_true(eng:upload("/tarlist", "", nil, { tree = up, top = "top", content_type = "application/x-tar" }))
    local got = {}
    for _, m in ipairs(assert(eng:call("GET", "/tarlist"))) do
      got[#got + 1] = ("%s %s %o %d %s %d"):format(m.name, m.type, m.mode, m.size, m.linkname, m.sum)
    end
    table.sort(got)
    assert.same({
      "top 5 755 0  0",
      "top/a 0 640 3  294",
      "top/ln 2 777 0 /etc/passwd 0",
      "top/longlink 2 777 0 " .. string.rep("x", 120) .. " 0",
      "top/sub 5 700 0  0",
      "top/sub/empty 0 644 0  0",
      "top/sub/" .. long .. " 0 644 1  122",
    }, got)
    local _, err = eng:upload("/tarlist", "", nil, { tree = dir .. "/none", top = "top" })
    assert.same({ "io", "ENOENT" }, { err.kind, err.reason })
  end)

  describe("over TLS", function()
    local certs, tls, port

    -- A child interpreter of this mode's build running `script` (a file: the ASan interpreter
    -- takes no -e), for what only the environment can set (helpers.child_command).
    local function lua_cmd(script)
      return require("helpers").child_command(dir .. "/child.lua", script)
    end

    setup(function()
      certs = dir .. "/certs"
      local gen = table.concat({
        "set -e; mkdir -p '%s'; cd '%s'",
        "K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'",
        "openssl req -x509 $K -keyout ca-key.pem -out ca.pem -days 1 -subj /CN=sstest-ca",
        "openssl req -x509 $K -keyout other-key.pem -out other-ca.pem -days 1 -subj /CN=sstest-other-ca",
        "openssl req $K -keyout server-key.pem -out server.csr -subj /CN=127.0.0.1",
        "echo subjectAltName=IP:127.0.0.1 > server.ext",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server.pem -days 1 -extfile server.ext",
        "openssl req $K -keyout key.pem -out client.csr -subj /CN=sstest-client",
        "echo extendedKeyUsage=clientAuth > client.ext",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out cert.pem -days 1 -extfile client.ext",
      }, "\n")
      local ok = os.execute("(" .. string.format(gen, certs, certs) .. "\n) >/dev/null 2>&1")
      assert.is_truthy(ok == true or ok == 0) -- 5.4 returns true, LuaJIT 0
      tls = double.start("tls", { certs = certs })
      port = tls.port
      assert.matches("^%d+$", port)
    end)

    teardown(function() if tls then tls.stop() end end)

    it("hijacks an exec over TLS with the client certificate: stdin streams in, its half-close reaches the daemon", function()
      local e = assert(sandstack.engine { host = "tcp://127.0.0.1:" .. port,
        tls = { ca = certs .. "/ca.pem", cert = certs .. "/cert.pem", key = certs .. "/key.pem" } })
      hijack_round_trip(e)
      e:close()
    end)

    it("talks to tcp:// with the CA, client certificate and key", function()
      local e = assert(sandstack.engine { host = "tcp://127.0.0.1:" .. port,
        tls = { ca = certs .. "/ca.pem", cert = certs .. "/cert.pem", key = certs .. "/key.pem" } })
      assert.equal("1.43", e.api_version)
      assert.is_true(e:ping())
      e:close()
    end)

    it("fails as transport/tls without the client certificate or with an unknown CA", function()
      local e, err = sandstack.engine { host = "tcp://127.0.0.1:" .. port, tls = { ca = certs .. "/ca.pem" } }
      assert.is_nil(e)
      assert.equal("transport", err.kind)
      e, err = sandstack.engine { host = "tcp://127.0.0.1:" .. port,
        tls = { cert = certs .. "/cert.pem", key = certs .. "/key.pem", ca = certs .. "/other-ca.pem" } }
      assert.is_nil(e)
      assert.equal("transport", err.kind)
      assert.equal("tls", err.reason)
      -- verify = false accepts the unknown CA (DOCKER_TLS without DOCKER_TLS_VERIFY).
      e = assert(sandstack.engine { host = "tcp://127.0.0.1:" .. port,
        tls = { cert = certs .. "/cert.pem", key = certs .. "/key.pem", verify = false } })
      assert.is_true(e:ping())
      e:close()
      -- Plain HTTP to a TLS port gets no usable answer.
      e, err = sandstack.engine { host = "tcp://127.0.0.1:" .. port, tls = false, timeout = 3 }
      assert.is_nil(e)
      assert.equal("transport", err.kind)
    end)

    it("takes the host and TLS settings from DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH", function()
      local script = "local e, err = require('sandstack').engine(); " ..
        "io.write(e and (e.api_version .. ' ' .. tostring(e:ping())) or tostring(err)); if e then e:close() end"
      local out = sh(string.format("DOCKER_HOST=tcp://127.0.0.1:%s DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH='%s' %s 2>&1",
        port, certs, lua_cmd(script)))
      assert.equal("1.43 true", out)
      out = sh(string.format("DOCKER_HOST=unix://%s %s 2>&1", sock, lua_cmd(script)))
      assert.equal("1.43 true", out)
      -- Without DOCKER_CERT_PATH (and no ~/.docker) neither our CA nor a client certificate is used.
      out = sh(string.format("HOME=/nonexistent DOCKER_HOST=tcp://127.0.0.1:%s DOCKER_TLS_VERIFY=1 %s 2>&1",
        port, lua_cmd(script)))
      assert.matches("^transport:", out)
    end)
  end)
end)

-- Container removal in destroy and in rollback against the engine's transient
-- answers, as real HTTP answers from the engine double's faults (see its header).
describe("sandstack.docker container removal against a scripted engine", function()
  local batch = require "sandstack.stack.batch"
  local A = require "sandstack.docker.apply"
  local docker = require "sandstack.docker"
  local fake, sock, eng

  setup(function()
    fake = double.start("faults")
    sock = fake.sock
  end)

  teardown(function() fake.stop() end)

  before_each(function() eng = assert(sandstack.engine { host = "unix://" .. sock, timeout = 5 }) end)
  after_each(function() eng:close() end)

  local function attempts(name) return assert(eng:call("GET", "/removals"))[name] end

  it("retries a removal answered 409 'in progress' or 500 until the engine says it is gone", function()
    local ok, err = batch.remove(eng, { containers = { "rm-busy-1", "rm-flaky-1", "rm-plain-1" } })
    assert.is_true(ok, tostring(err))
    assert.equal(3, attempts("rm-busy-1"))
    assert.equal(3, attempts("rm-flaky-1"))
    assert.equal(1, attempts("rm-plain-1"))
  end)

  it("gives up within its bound and names the container that could not be removed", function()
    local t0 = core.engine_clock()
    local ok, err = batch.remove(eng, { containers = { "rm-plain-2", "rm-stuck-2" } })
    assert.is_nil(ok)
    assert.equal("engine", err.kind)
    assert.equal("rm-stuck-2", err.container)
    assert.equal(409, err.status)
    assert.matches("rm%-stuck%-2", err.message)
    assert.equal(batch.REMOVE_ATTEMPTS, attempts("rm-stuck-2"))
    assert.is_true(core.engine_clock() - t0 < 15)
  end)

  it("destroy retries the containers it knows and reports the one that stays", function()
    local plan = assert(docker.plan("k", { agent_port = 8080, image = "x", project_name = "sstest-busy" }))
    local stack = assert(require("sandstack.docker.handle").adopt(plan, nil, { docker_host = "unix://" .. sock, timeout = 5 }))
    assert(stack:destroy())
    assert.equal(3, attempts("sstest-busy-sandbox"))
    assert.equal(3, attempts("sstest-busy-forwarder"))
    stack:close()
    plan = assert(docker.plan("k", { agent_port = 8080, image = "x", project_name = "sstest-stuck" }))
    stack = assert(require("sandstack.docker.handle").adopt(plan, nil, { docker_host = "unix://" .. sock, timeout = 5 }))
    local ok, err = stack:destroy()
    assert.is_nil(ok)
    assert.matches("^sstest%-stuck%-", err.container)
    assert.matches(err.container:gsub("%-", "%%-"), err.message)
    stack:close()
  end)

  it("fails in one shape whether a request runs alone (request) or in a batch (submit/poll)", function()
    local function shape(e)
      return { kind = e.kind, reason = e.reason, message = e.message, status = e.status, method = e.method,
        path = e.path, mt = getmetatable(e) }
    end
    for _, path in ipairs { "/jsonerr", "/htmlerr", "/texterr" } do
      local alone = batch.run(eng, { { "GET", path } })[1]
      local many = batch.run(eng, { { "GET", path }, { "GET", "/_ping" } })
      assert.is_false(alone.ok)
      assert.is_false(many[1].ok)
      assert.is_true(many[2].ok)
      assert.same(shape(alone.err), shape(many[1].err))
      -- and in the shape of the client's own call()
      local _, err = eng:call("GET", path)
      assert.same(shape(err), shape(alone.err))
    end
    local e = batch.run(eng, { { "get", "/jsonerr" } })[1].err
    assert.same({ "engine", "conflict", "fake conflict", 409, "GET", "/jsonerr" },
      { e.kind, e.reason, e.message, e.status, e.method, e.path })
    assert.equal("engine: fake conflict", tostring(e))
    assert.equal("bad?gateway", batch.run(eng, { { "GET", "/htmlerr" } })[1].err.message:match("bad.gateway"))
  end)

  it("rollback retries its containers until they are gone", function()
    local run = { eng = eng, plan = { project = "rb" }, t0 = 0,
      created = { containers = { "rb-busy-3", "rb-flaky-3" }, networks = {}, volumes = {} } }
    A.rollback(run)
    assert.equal(3, attempts("rb-busy-3"))
    assert.equal(3, attempts("rb-flaky-3"))
  end)
end)
