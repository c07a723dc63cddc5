-- Test support: list_answer_engine.py started in a fresh /tmp directory, for specs that need an
-- engine whose label lists they choose and whose removals they can read, never the shared one.
--   local fake = require("list_answer").start("cliconv")  -- in setup
--   fake.host                      -- unix://.../engine.sock, for docker_host or DOCKER_HOST
--   fake.answer("containers", json) -- nil json: the fake's own empty list
--   fake.deletes()                 -- the DELETEs it received, one path a line
--   fake.cli { {"ls", "--json"}, ... } -- each argv through the sandstack command against the fake
--   fake.stop()                    -- in teardown
local h = require "helpers"
local core = require "sandstack.core"

-- The child that runs the command: cli.main for each argv, its output caught, one JSON line each.
local CHILD = [[
  local core = require "sandstack.core"
  local cli = require "sandstack.cli"
  local argvs = core.json_decode(io.read("*a"))
  for _, argv in ipairs(argvs) do
    local out, err = {}, {}
    local function sink(buf)
      return { write = function(self, ...) for _, x in ipairs { ... } do buf[#buf + 1] = tostring(x) end return self end,
        flush = function() end }
    end
    local ok, code = pcall(cli.main, argv, sink(out), sink(err))
    io.write(core.json_encode { argv = argv, code = ok and code or -1, out = table.concat(out),
      err = ok and table.concat(err) or ("main raised: " .. tostring(code)) }, "\n")
  end
]]

local M = {}

function M.start(tag)
  local dir = h.must("mktemp -d /tmp/sstest-" .. tag .. ".XXXXXX"):match("%S+")
  local sock = dir .. "/engine.sock"
  local pid = h.must(("python3 spec/support/list_answer_engine.py %s %s >%s 2>&1 & echo $!"):format(h.q(sock), h.q(dir),
    h.q(dir .. "/log"))):match("%d+")
  h.must("for i in $(seq 100); do [ -S " .. h.q(sock) .. " ] && exit 0; sleep 0.05; done; exit 1")
  local fake = { dir = dir, host = "unix://" .. sock }
  function fake.answer(what, text)
    if text then h.write_file(dir .. "/" .. what, text) else os.remove(dir .. "/" .. what) end
  end
  function fake.deletes() return h.read_file(dir .. "/deletes") or "" end
  -- Runs each argv through cli.main in a child process (this mode's interpreter and build) whose
  -- DOCKER_HOST is the fake; returns { {argv =, code =, out =, err =}, ... }.
  function fake.cli(argvs)
    h.write_file(dir .. "/argv.json", core.json_encode(argvs))
    local out, ok = h.sh("DOCKER_HOST=" .. h.q(fake.host) .. " " .. h.child_command(dir .. "/cli.lua", CHILD) .. " <"
      .. h.q(dir .. "/argv.json"))
    assert(ok, out)
    local res = {}
    for line in out:gmatch("[^\n]+") do res[#res + 1] = assert(core.json_decode(line), line) end
    assert(#res == #argvs, out)
    return res
  end
  function fake.stop()
    if pid then h.sh("kill " .. pid) end
    pid = nil
    if dir:match("^/tmp/sstest%-") then h.sh("rm -rf " .. h.q(dir)) end
  end
  return fake
end

return M
