-- The proxy's control socket as a file the host reaches without an exec: the control directory
-- (core.control_dir: the module's 0700, control/ of the proxy's uid), the proxy bound there
-- running as uid 65534 and letting in the host's uid as well (SANDSTACK_CONTROL_PEER_UID), one
-- connection carrying one command or a batch (run in order up to the first refusal), and the
-- module's side (core.control_request) with its deadline and typed errors. docker/control.lua's
-- choice of transport is checked on engines of each kind. The proxy listens on loopback only.
local h = require "helpers"
local core = require "sandstack.core"
local control = require "sandstack.docker.control"

local build = package.cpath:match("^%.?/?([^;]-)/%?%.so") or "build"
local PROXY = (h.must("pwd"):gsub("%s+$", "")) .. "/" .. build .. "/sandstack-proxy"
local TOKEN = "tok-" .. core.random_hex(16)

local work
local pids = {}

-- the proxy as uid 65534 with its control socket at sock; env: more variables
local function start_proxy(name, sock, env)
  local vars = { "SANDSTACK_SESSION_TOKEN=" .. TOKEN, "SANDSTACK_EGRESS_POLICY='{\"allow\":[\"a.test:443\"]}'",
    "SANDSTACK_CONTROL_SOCKET=" .. h.q(sock) }
  for k, v in pairs(env or {}) do vars[#vars + 1] = k .. "=" .. h.q(v) end
  local out = work .. "/" .. name .. ".out"
  h.must(("env %s setpriv --reuid=65534 --regid=65534 --clear-groups %s --listen 127.0.0.1 --port 0 >%s 2>&1 & echo $! > %s")
    :format(table.concat(vars, " "), h.q(PROXY), h.q(out), h.q(work .. "/" .. name .. ".pid")))
  pids[#pids + 1] = h.track(h.read_file(work .. "/" .. name .. ".pid"))
  return h.wait_for(name .. "'s control socket", function()
    local text = h.read_file(out) or ""
    return text:find('"control_listening"', 1, true) and text
  end, 5, 0.025)
end

describe("the proxy's control socket reached from the host", function()
  local dir, sock
  lazy_setup(function()
    work = h.must("mktemp -d /tmp/sstest-ctl.XXXXXX"):gsub("%s+$", "")
    h.must("chmod 711 " .. h.q(work)) -- the proxy's uid walks to its directory, as in its container
    dir = work .. "/stack"
    sock = dir .. "/control/control.sock"
  end)
  lazy_teardown(function()
    for _, pid in ipairs(pids) do h.signal(pid, "TERM") end
    if work then h.sh("rm -rf " .. h.q(work)) end
  end)

  it("core.control_dir makes the directory 0700 and control/ the proxy's, and never takes one that exists", function()
    assert.is_true(assert(core.control_dir(dir, 65534, 65534)))
    assert.equal("700", h.must("stat -c %a " .. h.q(dir)):gsub("%s+$", ""))
    assert.equal("65534 700 directory", h.must("stat -c '%u %a %F' " .. h.q(dir .. "/control")):gsub("%s+$", ""))
    local ok, err = core.control_dir(dir, 65534, 65534)
    assert.is_nil(ok)
    assert.equal("exists", err.reason)
    assert.equal("65534", h.must("stat -c %u " .. h.q(dir .. "/control")):gsub("%s+$", "")) -- left as it was
    h.must("chmod 711 " .. h.q(dir))
  end)

  it("answers the host's uid named by SANDSTACK_CONTROL_PEER_UID, one command per connection", function()
    local out = start_proxy("p1", sock, { SANDSTACK_CONTROL_PEER_UID = tostring(core.euid()) })
    assert.matches('"path":"' .. sock:gsub("%p", "%%%0"), out)
    assert.equal("65534 600", h.must("stat -c '%u %a' " .. h.q(sock)):gsub("%s+$", ""))
    local answer = core.json_decode(assert(core.control_request(sock, core.json_encode { verb = "egress" }, 5)))
    assert.is_true(answer.ok)
    assert.equal('{"version":1,"allow":[{"host":"a.test","port":443}]}', answer.rendered)
  end)

  it("runs a batch in order in one connection, up to the first refusal", function()
    local batch = core.json_encode {
      { verb = "set-egress", payload = '{"version":1,"allow":["b.test:443"]}' },
      { verb = "set-egress", payload = "not a policy" },
      { verb = "set-egress", payload = '{"version":1,"allow":["c.test:443"]}' },
    }
    local answer = core.json_decode(assert(core.control_request(sock, batch, 5)))
    assert.is_false(answer.ok)
    assert.equal(2, #answer.answers) -- the third never ran
    assert.is_true(answer.answers[1].ok)
    assert.equal("invalid_policy", answer.answers[2].error)
    local now = core.json_decode(assert(core.control_request(sock, core.json_encode { verb = "egress" }, 5)))
    assert.equal('{"version":1,"allow":[{"host":"b.test","port":443}]}', now.rendered)
  end)

  it("lets in no other uid: without SANDSTACK_CONTROL_PEER_UID the host is closed on", function()
    local other = work .. "/other"
    assert(core.control_dir(other, 65534, 65534))
    h.must("chmod 711 " .. h.q(other))
    start_proxy("p2", other .. "/control/control.sock")
    local ok, err = core.control_request(other .. "/control/control.sock", core.json_encode { verb = "egress" }, 5)
    assert.is_nil(ok)
    assert.equal("no_answer", err.reason)
  end)

  it("says unreachable where nothing listens and timeout when the answer does not come", function()
    local ok, err = core.control_request(work .. "/absent.sock", "{}", 1)
    assert.is_nil(ok)
    assert.equal("proxy", err.kind)
    assert.equal("unreachable", err.reason)
    local mute = work .. "/mute.sock"
    h.must(("python3 -c %s %s >/dev/null 2>&1 & echo $! > %s"):format(h.q(
      "import socket,sys,time\ns=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen()\nc=s.accept()\ntime.sleep(30)"),
      h.q(mute), h.q(work .. "/mute.pid")))
    pids[#pids + 1] = h.track(h.read_file(work .. "/mute.pid"))
    h.wait_for("the mute socket", function() return core.control_is_socket(mute) end, 5, 0.025)
    local t0 = core.engine_clock()
    ok, err = core.control_request(mute, "{}", 0.3)
    assert.is_nil(ok)
    assert.equal("timeout", err.reason)
    assert.is_true(core.engine_clock() - t0 < 2)
  end)

  it("control.remove takes the project's directory and nothing named otherwise", function()
    local saved = control.ROOT
    control.ROOT = work
    local ok, err = pcall(function()
      assert.is_true(assert(control.remove("../etc")))
      assert.is_true(assert(control.remove("absent-project")))
      assert.is_true(assert(control.remove("stack")))
    end)
    control.ROOT = saved
    assert(ok, err)
    assert.is_nil(core.file_stat(dir))
    assert.truthy(core.file_stat(work .. "/other"))
  end)
end)

describe("the control transport a stack gets", function()
  it("is the socket on a local engine for root, and the exec otherwise", function()
    assert.equal("exec", (control.choose { host = "tcp://10.0.0.1:2375" }))
    assert.equal("exec", (control.choose { host = "ssh://user@host" }))
    local expect = core.euid() == 0 and "socket" or "exec"
    assert.equal(expect, (control.choose { host = "unix:///var/run/docker.sock" }))
  end)

  it("is the record's, and the exec for a record that names none", function()
    assert.equal("socket", control.way { plan = { proxy = { added = true, control = "socket" } } })
    assert.equal("exec", control.way { plan = { proxy = { added = true, control = "exec" } } })
    assert.equal("exec", control.way { plan = { proxy = { added = true } } })
  end)
end)
