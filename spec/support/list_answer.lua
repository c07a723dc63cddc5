-- Test support: list_answer_engine.py started in a fresh /tmp directory, for specs that need an
-- engine whose label lists they choose and whose removals they can read, never the shared one.
--   local fake = require("list_answer").start("cliconv")  -- in setup
--   fake.host                      -- unix://.../engine.sock, for docker_host or DOCKER_HOST
--   fake.answer("containers", json) -- nil json: the fake's own empty list
--   fake.deletes()                 -- the DELETEs it received, one path a line
--   fake.stop()                    -- in teardown
local h = require "helpers"

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
  function fake.stop()
    if pid then h.sh("kill " .. pid) end
    pid = nil
    if dir:match("^/tmp/sstest%-") then h.sh("rm -rf " .. h.q(dir)) end
  end
  return fake
end

return M
