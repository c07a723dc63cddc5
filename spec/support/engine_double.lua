-- Test support: spec/support/engine_double.py (the wire-level stand-in for dockerd; its header
-- lists the modes and answers) started in a fresh /tmp directory, stopped by its pid.
--   local double = require "engine_double"
--   local e = double.start("faults")     -- in setup; "lists", "record" (opts.engine: the real
--                                        -- engine's socket), "tls" (opts.certs: its directory)
--   e.host, e.sock, e.dir (e.port for tls) -- unix://.../engine.sock, for docker_host or DOCKER_HOST
--   e.requests()                         -- what it was asked: {method =, target =, path =, body =}, ...
--   e.deletes(), e.lists()               -- the DELETE paths, the label lists' paths: one a line
--   e.answer("containers", json)         -- lists: a label list's answer (nil json: the empty list)
--   e.forget()                           -- forgets what it was asked
--   e.hold(word, s), e.held()            -- record: requests whose target holds word go on s late
--                                        -- (nil word: none); the targets the engine answered
--   e.reset()                            -- that, and every answer written
--   e.cli { {"ls", "--json"}, ... }      -- each argv through the sandstack command against it
--   e.stop()                             -- in teardown
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

local ARGS = {
  faults = function() return "" end,
  lists = function() return "" end,
  record = function(o) return " " .. h.q(assert(o.engine, "record: opts.engine, the engine's socket")) end,
  tls = function(o) return " " .. h.q(assert(o.certs, "tls: opts.certs, the certificates' directory")) end,
}

-- start(mode[, opts]) -> the running double; raises when it does not come up in 60 s (a loaded
-- machine can take seconds to start Python).
function M.start(mode, opts)
  opts = opts or {}
  local args = assert(ARGS[mode], "engine_double: no mode " .. tostring(mode))(opts)
  local dir = h.must("mktemp -d /tmp/sstest-engine-" .. mode .. ".XXXXXX"):match("%S+")
  local e = { dir = dir, sock = dir .. "/engine.sock" }
  local pid = h.start(("python3 spec/support/engine_double.py %s %s%s >%s 2>&1"):format(mode, h.q(dir), args,
    h.q(dir .. "/log")))
  local up = mode == "tls" and dir .. "/port" or e.sock
  h.wait_for("the engine double on " .. up, function() return select(2, h.sh("test -e " .. h.q(up))) end, 60)
  if mode == "tls" then
    e.port = h.read_file(dir .. "/port")
    e.host = "tcp://127.0.0.1:" .. e.port
  else
    e.host = "unix://" .. e.sock
  end

  function e.requests()
    local out = {}
    for line in (h.read_file(dir .. "/requests.jsonl") or ""):gmatch("[^\n]+") do
      out[#out + 1] = assert(core.json_decode(line), line)
    end
    return out
  end
  -- The paths of the requests `keep` takes, one a line.
  local function paths(keep)
    local out = {}
    for _, r in ipairs(e.requests()) do if keep(r) then out[#out + 1] = r.path .. "\n" end end
    return table.concat(out)
  end
  function e.deletes() return paths(function(r) return r.method == "DELETE" end) end
  local LISTS = { ["/containers/json"] = true, ["/networks"] = true, ["/volumes"] = true }
  function e.lists() return paths(function(r) return r.method == "GET" and LISTS[r.path] end) end
  function e.answer(what, text)
    if text then h.write_file(dir .. "/" .. what, text) else os.remove(dir .. "/" .. what) end
  end
  function e.hold(word, seconds)
    if word then h.write_file(dir .. "/hold", word .. " " .. seconds) else os.remove(dir .. "/hold") end
  end
  function e.held()
    local out = {}
    for line in (h.read_file(dir .. "/held") or ""):gmatch("[^\n]+") do out[#out + 1] = line end
    return out
  end
  function e.forget() h.write_file(dir .. "/requests.jsonl", "") end
  function e.reset()
    for _, w in ipairs { "containers", "networks", "volumes" } do os.remove(dir .. "/" .. w) end
    e.forget()
  end
  -- Runs each argv through cli.main in a child process (this mode's interpreter and build) whose
  -- DOCKER_HOST is the double; returns { {argv =, code =, out =, err =}, ... }.
  function e.cli(argvs)
    h.write_file(dir .. "/argv.json", core.json_encode(argvs))
    local out, ok = h.sh("DOCKER_HOST=" .. h.q(e.host) .. " " .. h.child_command(dir .. "/cli.lua", CHILD) .. " <"
      .. h.q(dir .. "/argv.json"))
    assert(ok, out)
    local res = {}
    for line in out:gmatch("[^\n]+") do res[#res + 1] = assert(core.json_decode(line), line) end
    assert(#res == #argvs, out)
    return res
  end
  function e.stop()
    if pid then h.stop(pid) end
    pid = nil
    if dir:match("^/tmp/sstest%-engine%-") then h.sh("rm -rf " .. h.q(dir)) end
  end
  return e
end

return M
