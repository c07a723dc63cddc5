-- core.engine_address: the one reading of an Engine address (DOCKER_HOST's forms) for Lua, by the
-- engine client's own parser (csrc/engine/host.c); no Lua file reads the scheme itself.
local core = require "sandstack.core"
local h = require "helpers"

describe("core.engine_address", function()
  it("reads unix, tcp, http and https addresses as the engine client does", function()
    local a = assert(core.engine_address("unix:///run/x.sock"))
    assert.same({ host = "unix:///run/x.sock", unix_path = "/run/x.sock", base = "http://localhost" }, a)
    a = assert(core.engine_address("tcp://10.0.0.7"))
    assert.same({ host = "tcp://10.0.0.7", base = "http://10.0.0.7:2375" }, a)
    assert.equal("https://10.0.0.7:2376", core.engine_address("tcp://10.0.0.7", true).base)
    assert.equal("http://[fd00::1]:2375", core.engine_address("tcp://[fd00::1]").base)
    local none, err = core.engine_address("ssh://me@host")
    assert.is_nil(none)
    assert.same({ "invalid", "bad_host" }, { err.kind, err.reason })
  end)

  it("takes $DOCKER_HOST, then the default socket, when given none", function()
    local lua = (jit and "luajit" or "lua5.4")
    local probe = [[package.cpath = os.getenv("CP") .. ";" .. package.cpath
      local a = require("sandstack.core").engine_address() print(a.host, a.unix_path or "-")]]
    local cp = package.cpath:match("^[^;]+")
    if os.getenv("SANDSTACK_TEST_MODE") == "asan" then return end -- a plain interpreter cannot load the ASan build
    local out = h.must("env -u DOCKER_HOST CP=" .. h.q(cp) .. " " .. lua .. " -e " .. h.q(probe))
    assert.equal("unix:///var/run/docker.sock\t/var/run/docker.sock\n", out)
    out = h.must("DOCKER_HOST=tcp://127.0.0.1:2399 CP=" .. h.q(cp) .. " " .. lua .. " -e " .. h.q(probe))
    assert.equal("tcp://127.0.0.1:2399\t-\n", out)
  end)

  it("is the only reader of an address's scheme under lua/sandstack", function()
    -- a Lua pattern anchored on an Engine scheme ("^unix://", "^tcp://") is a second parser
    local out = h.sh("grep -rnE '\\^(unix|tcp)://' lua/sandstack")
    assert.equal("", out)
  end)
end)
