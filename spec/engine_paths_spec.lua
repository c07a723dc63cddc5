-- Engine requests are planned in C (csrc/stack/session_requests.c, core.session_requests): a Lua
-- file under lua/sandstack names an operation and never writes an Engine API path. This spec
-- reads every Lua file there as text and fails naming file:line for each string literal that
-- begins with an Engine path ("/containers/", "/exec/", "/_ping", ...), and checks the requests
-- C makes for the operations the Lua files name.
local core = require "sandstack.core"

-- The Engine API's top-level path segments; a literal opening with one of them, followed by
-- '/', '?' or the literal's end, is an Engine path.
local ROOTS = { "containers", "exec", "networks", "volumes", "images", "info", "version", "_ping",
  "events", "build", "swarm", "services", "tasks", "nodes", "secrets", "configs", "plugins", "system",
  "distribution", "commit", "auth", "session" }

-- Files still allowed to hold Engine paths: each entry is still to move to a named operation.
local STILL_TO_MOVE = {}

local function lua_files(root)
  local out = {}
  local p = assert(io.popen("find '" .. root .. "' -name '*.lua' -type f | sort"))
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

-- The Engine path literals of one text: { {line =, text =}, ... }.
local function engine_paths(text)
  local found, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    for _, q in ipairs { '"', "'" } do
      for lit in line:gmatch(q .. "(/[%w_]+[^" .. q .. "]?)") do
        local root, after = lit:match("^/([%w_]+)(.?)$")
        if root and (after == "/" or after == "?" or after == "" or after == q) then
          for _, r in ipairs(ROOTS) do
            if r == root then found[#found + 1] = { line = n, text = line } end
          end
        end
      end
    end
  end
  return found
end

describe("Engine paths in the Lua files", function()
  it("are written only in C: no Lua file under lua/sandstack holds one", function()
    local lines = {}
    for _, file in ipairs(lua_files("lua/sandstack")) do
      local f = assert(io.open(file))
      local text = f:read("a")
      f:close()
      if not STILL_TO_MOVE[file] then
        for _, hit in ipairs(engine_paths(text)) do
          lines[#lines + 1] = file .. ":" .. hit.line .. ": " .. hit.text:gsub("^%s+", "")
        end
      end
    end
    assert(#lines == 0, #lines .. " Engine path literal(s) in Lua (name an operation of "
      .. "core.session_requests instead):\n  " .. table.concat(lines, "\n  "))
  end)

  it("are found by the scan in either quote, and a file path or a URL is not one", function()
    assert.equal(1, #engine_paths('x = eng:call("GET", "/containers/" .. n .. "/json")'))
    assert.equal(1, #engine_paths("x = '/_ping'"))
    assert.equal(1, #engine_paths('p = "/events"'))
    assert.equal(1, #engine_paths('p = "/volumes?x=1"'))
    assert.equal(0, #engine_paths('p = "/tmp/x"'))
    assert.equal(0, #engine_paths('p = "/containersx"'))
    assert.equal(0, #engine_paths('p = "/etc/containers/x"'))
  end)
end)
