-- Content handlers for docker_process_nginx_spec: h:spawn's process over cosockets inside an
-- nginx worker (sandstack.docker.cosocket). Each answers one JSON document.
local core = require "sandstack.core"
local cosocket = require "sandstack.docker.cosocket"

local M = {}

local function record()
  local args = ngx.req.get_uri_args()
  return { project = args.project, sandbox = "sandbox", containers = { { service = "sandbox" } } }
end

local function reply(t)
  ngx.header["Content-Type"] = "application/json"
  ngx.say(core.json_encode(t))
end

-- Reads p's output until it holds pattern (plain) or the time is up; returns all of it. Shared
-- with docker_process_spec (the clock is the C core's, the same in and out of nginx).
function M.read_until(p, pattern, seconds)
  local got, deadline = {}, core.engine_clock() + (seconds or 10)
  while core.engine_clock() < deadline do
    local data = p:read(math.max(0.01, deadline - core.engine_clock()))
    if not data then break end
    got[#got + 1] = data
    if table.concat(got):find(pattern, 1, true) then break end
  end
  return table.concat(got)
end
local read_until = M.read_until

-- JSON lines through cat, then close_stdin (unsupported here) and a kill.
function M.pipe()
  local p, err = cosocket.spawn(record(), { "cat" })
  if not p then return reply { error = tostring(err) } end
  local lines = {}
  for i = 1, 20 do lines[i] = core.json_encode { id = i, pad = ("y"):rep(i * 30) } end
  local sent = table.concat(lines, "\n") .. "\n"
  assert(p:write(sent))
  local echoed = read_until(p, lines[20] .. "\n")
  local _, cerr = p:close_stdin()
  local killed, kerr = p:kill("TERM")
  local code, werr = p:wait(10)
  p:close()
  reply { echoed_ok = echoed == sent, close_stdin = cerr and cerr.kind, killed = killed == true,
    kill_error = kerr and tostring(kerr), code = code, wait_error = werr and tostring(werr) }
end

-- A terminal: stty size before and after a resize, then an exit code.
function M.tty()
  local p, err = cosocket.spawn(record(), { "sh" }, { tty = true, cols = 100, rows = 30 })
  if not p then return reply { error = tostring(err) } end
  p:write("stty size\n")
  local first = read_until(p, "30 100")
  p:resize(120, 40)
  p:write("stty size\n")
  local second = read_until(p, "40 120")
  p:write("exit 3\n")
  local code = p:wait(10)
  p:close()
  reply { first = first:find("30 100", 1, true) ~= nil, second = second:find("40 120", 1, true) ~= nil, code = code }
end

-- A process that takes a while: the worker keeps answering meanwhile.
function M.slow()
  local t0 = ngx.now()
  local p, err = cosocket.spawn(record(), { "sh", "-c", "sleep 4; echo done" })
  if not p then return reply { error = tostring(err) } end
  local out = read_until(p, "done\n")
  local code = p:wait(10)
  p:close()
  reply { out = out, code = code, seconds = ngx.now() - t0 }
end

return M
