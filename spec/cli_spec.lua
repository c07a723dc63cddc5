-- bin/sandstack from a checkout: a LUA_PATH or LUA_CPATH the user set wins over the checkout's
-- own lua/ and build/, so a user's own build is the one loaded.
local h = require "helpers"

describe("bin/sandstack search paths", function()
  local dir
  setup(function()
    dir = h.must("mktemp -d /tmp/sstest-cli.XXXXXX"):match("[^\n]+")
    h.must("mkdir -p " .. h.q(dir .. "/sandstack"))
    h.write_file(dir .. "/sandstack/cli.lua",
      'return { main = function() io.write("the user\'s own cli\\n") return 0 end }\n')
  end)
  teardown(function() h.sh("rm -rf " .. h.q(dir)) end)

  local function run(env)
    return h.sh(env .. " lua5.4 bin/sandstack help")
  end

  it("uses the checkout when neither is set (control)", function()
    local out, ok = run("env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4")
    assert.is_true(ok, out)
    assert.matches("sandstack", out)
  end)

  it("loads the Lua files from LUA_PATH when it is set", function()
    local out, ok = run("env -u LUA_PATH_5_4 LUA_PATH=" .. h.q(dir .. "/?.lua;;"))
    assert.is_true(ok, out)
    assert.equal("the user's own cli\n", out)
  end)

  it("loads the C module from LUA_CPATH when it is set, not ./build", function()
    local out, ok = run("env -u LUA_CPATH_5_4 LUA_CPATH=" .. h.q(dir .. "/?.so"))
    assert.is_false(ok, out)
    assert.matches(dir .. "/sandstack/core.so", out, 1, true)
  end)
end)
