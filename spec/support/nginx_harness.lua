-- A real nginx for the specs: Debian's nginx with lua-nginx-module, running an nginx.conf
-- template in the foreground on a free loopback port, from a prefix dir of its own under /tmp.
-- The gateway specs render their template from the production module's configuration
-- (spec/support/gateway_harness.lua); this file only fills the placeholders left in it, starts
-- and stops nginx, and speaks HTTP through curl, so requests can also run in the background
-- while others are made.
--
--   local harness = require "nginx_harness"
--   local srv = harness.start{ template = text_with_placeholders, config = {...} }
--   local status, body, headers = srv:request("POST", "/sessions/a", { timeout = 120 })
--   local job = srv:spawn("POST", "/sessions/b"); ...; job:wait(120) -> status, body, headers
--   srv:stop()
local core = require "sandstack.core"
local h = require "helpers"

local H = {}

local root = h.must("pwd"):match("[^\n]+") -- the specs run from the repository's top directory
local build = os.getenv("SANDSTACK_NGINX_BUILD") or (root .. "/build-luajit") -- nginx's Lua is LuaJIT

local sh_quote, read_file, write_file = h.q, h.read_file, h.write_file

local function sleep(s)
  os.execute("sleep " .. s)
end

local alive = h.running -- by pid and start time: a pid alone may name a later process

-- A port nothing listens on right now (the kernel's pick); nginx may still lose a race for it,
-- in which case start() tries another.
function H.free_port()
  local out, ok = h.sh("python3 -c 'import socket; s = socket.socket(); "
    .. "s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])'")
  assert(ok, "free_port: " .. out)
  return tonumber(out:match("%d+"))
end

local function render(template, values)
  return (template:gsub("{{([%w_]+)}}", function(name)
    local v = values[name]
    assert(v ~= nil, "nginx template: no value for {{" .. name .. "}}")
    return tostring(v)
  end))
end

local Server = {}
Server.__index = Server

function Server:url(path)
  return "http://127.0.0.1:" .. self.port .. path
end

-- The curl command line of one request; the answer lands in files named after `tag`.
function Server:curl_command(method, path, opts, tag)
  opts = opts or {}
  local base = self.prefix .. "/client/" .. tag
  local args = { "curl", "-sS", "-o", base .. ".body", "-D", base .. ".head",
    "-w", "%{http_code}", "-X", method, "--max-time", tostring(opts.timeout or 30) }
  if opts.body then
    write_file(base .. ".req", opts.body)
    args[#args + 1] = "--data-binary"
    args[#args + 1] = "@" .. base .. ".req"
  end
  for k, v in pairs(opts.headers or {}) do
    args[#args + 1] = "-H"
    args[#args + 1] = k .. ": " .. v
  end
  args[#args + 1] = self:url(path)
  for i, a in ipairs(args) do args[i] = sh_quote(a) end
  return table.concat(args, " "), base
end

local function parse_answer(base)
  local code = tonumber((read_file(base .. ".code") or ""):match("%d+"))
  local headers = {}
  for line in (read_file(base .. ".head") or ""):gmatch("[^\r\n]+") do
    local k, v = line:match("^([^:]+):%s*(.*)$")
    if k then headers[k:lower()] = v end
  end
  return code, read_file(base .. ".body") or "", headers
end

function Server:next_tag()
  self.seq = self.seq + 1
  return "r" .. self.seq
end

-- request(method, path, opts) -> status (nil when no answer came), body, headers
-- opts: body (string), headers ({name = value}), timeout (seconds, default 30)
function Server:request(method, path, opts)
  local cmd, base = self:curl_command(method, path, opts, self:next_tag())
  os.execute(cmd .. " > " .. sh_quote(base .. ".code") .. " 2> " .. sh_quote(base .. ".err"))
  return parse_answer(base)
end

local Job = {}
Job.__index = Job

function Job:done()
  return read_file(self.base .. ".rc") ~= nil
end

-- wait(timeout) -> status, body, headers (status nil when curl got no answer in time)
function Job:wait(timeout)
  local deadline = os.time() + (timeout or 60)
  while not self:done() do
    assert(os.time() <= deadline, "request still running after " .. tostring(timeout) .. " s")
    sleep(0.1)
  end
  return parse_answer(self.base)
end

-- spawn(method, path, opts) -> job: the same request, running in the background.
function Server:spawn(method, path, opts)
  local cmd, base = self:curl_command(method, path, opts, self:next_tag())
  local q = sh_quote
  os.execute("( " .. cmd .. " > " .. q(base .. ".code") .. " 2> " .. q(base .. ".err")
    .. "; echo $? > " .. q(base .. ".rc.tmp") .. "; mv " .. q(base .. ".rc.tmp") .. " "
    .. q(base .. ".rc") .. " ) </dev/null >/dev/null 2>&1 &")
  return setmetatable({ base = base }, Job)
end

function Server:error_log()
  return read_file(self.prefix .. "/logs/error.log") or ""
end

-- stop(): fast shutdown (TERM), KILL after 15 s, then the prefix dir goes.
function Server:stop()
  if self.pid then h.stop(self.pid, 15) end
  self.pid = nil
  if self.prefix and self.prefix:match("^/tmp/sandstack%-nginx%.") then
    os.execute("rm -rf " .. sh_quote(self.prefix))
  end
end

local function launch(self, values, template)
  write_file(self.prefix .. "/conf/nginx.conf", render(template, values))
  local out, ok = h.sh("cd " .. sh_quote(self.prefix) .. " && nginx -p " .. sh_quote(self.prefix .. "/")
    .. " -c conf/nginx.conf > logs/stdout 2>&1 < /dev/null & echo $!")
  assert(ok, out)
  self.pid = h.track(out:match("%d+"))
  for _ = 1, 100 do
    if not alive(self.pid) then return false end
    local status = self:request("GET", "/ping", { timeout = 2 })
    if status == 200 then return true end
    sleep(0.1)
  end
  return false
end

local function boot(self, opts)
  local template = assert(opts.template, "nginx_harness.start: a template is needed")
  for _, d in ipairs({ "conf", "logs", "tmp", "client" }) do
    assert(os.execute("mkdir -p " .. sh_quote(self.prefix .. "/" .. d)))
  end
  write_file(self.prefix .. "/conf/gateway.json", assert(core.json_encode(opts.config or {})))
  local values = {
    user = "root", -- the Docker socket is root:docker 0660
    workers = opts.workers or 1,
    threads = opts.threads or 8,
    vms = opts.vms or 2 * (opts.threads or 8),
    lua_path = (opts.lua_path_prefix or "") .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;;",
    lua_cpath = build .. "/?.so;;",
    config = self.prefix .. "/conf/gateway.json",
  }
  for _ = 1, 5 do
    self.port = H.free_port()
    values.listen = "127.0.0.1:" .. self.port
    if launch(self, values, template) then return end
    local stdout = read_file(self.prefix .. "/logs/stdout") or ""
    if not stdout:find("Address already in use", 1, true) then
      error("nginx did not start:\n" .. stdout .. self:error_log(), 0)
    end
    if self.pid then h.signal(self.pid, "KILL") end
  end
  error("nginx: no free port after 5 attempts", 0)
end

-- start(opts) -> server. opts: template (an nginx.conf text; it must serve GET /ping and may
-- hold the placeholders {{listen}}, {{config}}, {{user}}, {{workers}}, {{threads}}, {{vms}},
-- {{lua_path}}, {{lua_cpath}}), config (a table, written as JSON to the file {{config}} names),
-- workers (1), threads (8), vms (2 * threads), lua_path_prefix (searched before ./lua: test
-- doubles). Raises with nginx's own output when it does not come up, after removing whatever
-- it had made.
function H.start(opts)
  opts = opts or {}
  -- mktemp's 0700 would close the prefix to unprivileged workers, whose temp files are in it
  local out, ok = h.sh("d=$(mktemp -d /tmp/sandstack-nginx.XXXXXX) && chmod 0711 \"$d\" && echo \"$d\"")
  assert(ok, out)
  local self = setmetatable({ prefix = out:match("[^\n]+"), seq = 0 }, Server)
  local booted, err = pcall(boot, self, opts)
  if not booted then
    self:stop()
    error(err, 0)
  end
  return self
end

return H
