-- An engine that cannot be reached is named by its address, and a server that is not a Docker
-- Engine is said to be one. Over a unix socket curl's own text says "localhost port 80"; the
-- error names the socket and why (no such file, refused). No Docker needed: a missing socket, a
-- plain file, and a small HTTP server on a unix socket that answers 404 to everything.
local h = require "helpers"
local sandstack = require "sandstack"

local NOT_DOCKER = [[
import http.server, os, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = b"404 page not found\n"
        self.send_response(404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def address_string(self):
        return "unix"
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
S(sys.argv[1], H).serve_forever()
]]

describe("the engine's address in errors", function()
  local dir, pid

  setup(function()
    dir = h.must("mktemp -d /tmp/sstest-engaddr.XXXXXX"):match("%S+")
    h.write_file(dir .. "/notdocker.py", NOT_DOCKER)
    pid = h.start(("python3 %s %s >/dev/null 2>&1"):format(h.q(dir .. "/notdocker.py"), h.q(dir .. "/web.sock")))
    h.must("for i in $(seq 100); do [ -S " .. h.q(dir .. "/web.sock") .. " ] && exit 0; sleep 0.05; done; exit 1")
    h.write_file(dir .. "/plain", "")
  end)

  teardown(function()
    if pid then h.stop(pid) end
    if dir then h.sh("rm -rf " .. h.q(dir)) end
  end)

  it("names a unix socket that is missing or not listening, never localhost port 80", function()
    for _, c in ipairs { { "missing.sock", "No such file or directory" }, { "plain", "Connection refused" } } do
      local host = "unix://" .. dir .. "/" .. c[1]
      local eng, err = sandstack.engine { host = host, timeout = 5 }
      assert.is_nil(eng)
      assert.equal("transport", err.kind)
      assert.equal("unreachable", err.reason)
      assert.matches("cannot reach the engine at " .. host, err.message, 1, true)
      assert.matches(c[2], err.message, 1, true)
      assert.is_nil(err.message:find("port 80", 1, true), err.message)
      assert.equal(host, err.engine)
    end
  end)

  it("says a server that answers /version as no Docker Engine does is not one", function()
    local host = "unix://" .. dir .. "/web.sock"
    local eng, err = sandstack.engine { host = host, timeout = 5 }
    assert.is_nil(eng)
    assert.equal("engine", err.kind)
    assert.equal("not_docker", err.reason)
    assert.equal(404, err.status)
    assert.matches("the server at " .. host .. " is not a Docker Engine", err.message, 1, true)
    assert.matches("DOCKER_HOST", err.message, 1, true)
  end)
end)
