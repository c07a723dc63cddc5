-- The production gateway (sandstack.gateway) in a real nginx for the gateway specs: the
-- configuration is checked by sandstack.gateway.config and rendered by gateway/nginx_conf.lua,
-- exactly as `sandstack gateway` does, then started by nginx_harness (free loopback port, fresh
-- prefix, curl). The LuaJIT build of the C module comes from $SANDSTACK_NGINX_BUILD (default
-- ./build-luajit).
--
--   local gh = require "gateway_harness"
--   local node = gh.start(gh.config{ ... })      -- node.srv is the nginx_harness server
--   node:api("POST", "/sessions/k", { token = gh.TOKENS.alice })
--   node:metrics() -> text
local core = require "sandstack.core"
local h = require "helpers"
local harness = require "nginx_harness"
local config = require "sandstack.gateway.config"
local nginx_conf = require "sandstack.gateway.nginx_conf"

local G = {}

G.root = h.must("pwd"):match("[^\n]+")
G.build = os.getenv("SANDSTACK_NGINX_BUILD") or (G.root .. "/build-luajit")

-- Two tenants; the specs present the tokens, the config holds only their digests.
G.TOKENS = { alice = "alice-" .. core.random_hex(16), bob = "bob-" .. core.random_hex(16) }

local run_id = core.random_hex(3):lower()
G.run_id = run_id
G.PREFIX = "sstest-gw-" .. run_id .. "-"

function G.stack_options(extra)
  local s = {
    agent_port = 8080, ready_timeout = 60, timeout = 90,
    forwarder_image = "sandstack-test/socat:local",
    services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" },
      env = { AGENT_PORT = "8080" } } },
  }
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

-- config(extra) -> a checked gateway configuration for the specs (raises when it is invalid).
function G.config(extra)
  local t = {
    name = "node-" .. run_id, project_prefix = G.PREFIX,
    tenants = {
      { name = "alice", token_sha256 = core.sha256_hex(G.TOKENS.alice), max_sessions = 4 },
      { name = "bob", token_sha256 = core.sha256_hex(G.TOKENS.bob) },
    },
    stack = G.stack_options(),
    expiry_interval = 1,
  }
  for k, v in pairs(extra or {}) do t[k] = v end
  return assert(config.check(t))
end

local Node = {}
Node.__index = Node

-- api(method, path, opts) -> status, doc (decoded JSON or {}), body, headers.
-- opts: token (tenant bearer), secret, headers, body, timeout.
function Node:api(method, path, opts)
  opts = opts or {}
  local headers = {}
  for k, v in pairs(opts.headers or {}) do headers[k] = v end
  if opts.token then headers.Authorization = "Bearer " .. opts.token end
  if opts.secret then headers["X-Sandstack-Session-Secret"] = opts.secret end
  local status, body, hdrs = self.srv:request(method, path, { headers = headers, body = opts.body,
    timeout = opts.timeout or 120 })
  return status, core.json_decode(body or "") or {}, body, hdrs
end

function Node:metrics()
  local out = h.sh("curl -s --max-time 10 http://" .. self.metrics_listen .. "/metrics")
  return out
end

-- A test-only location for the metrics listener (config nginx.metrics, never a shipped
-- config: it shows the records): the session table's raw entry for ?key=, so that a spec can
-- compare the record the gateway routes by with what the engine says.
G.ENTRY_LOCATION = [[location = /sstest/entry { content_by_lua_block {
  ngx.say(ngx.shared.sandstack_sessions:get("s:" .. (ngx.var.arg_key or "")) or "null") } }]]

-- entry(key) -> the session's entry {state, tenant, digest, created, record} or nil; needs
-- G.ENTRY_LOCATION in the node's nginx.metrics.
function Node:entry(key)
  local out = h.sh("curl -s --max-time 10 " .. h.q("http://" .. self.metrics_listen .. "/sstest/entry?key=" .. key))
  return core.json_decode(out)
end

-- wait_adopted(seconds) -> true once worker 0 has adopted the engine's stacks (until then an
-- unknown key is 503, not 404), nil after `seconds`.
function Node:wait_adopted(seconds)
  return pcall(h.wait_for, "the adoption", function()
    return self.srv:error_log():find("sandstack gateway: adoption done", 1, true) ~= nil
  end, seconds or 30, 0.2) or nil
end

function Node:error_log() return self.srv:error_log() end
function Node:access_log() return h.read_file(self.srv.prefix .. "/logs/access.log") or "" end

function Node:pid() return self.srv.pid end

function Node:stop() if self.srv then self.srv:stop() end end

-- The rendered nginx.conf with nginx_harness's placeholders left for it ({{listen}}, {{config}}).
function G.render(c, metrics_listen, extra_paths)
  local paths = { listen = "{{listen}}", metrics_listen = metrics_listen, config = "{{config}}",
    lua_path = (extra_paths or "") .. G.root .. "/lua/?.lua;" .. G.root .. "/lua/?/init.lua;;",
    lua_cpath = G.build .. "/?.so;;", source = "spec/support/gateway_harness.lua" }
  return nginx_conf.render(c, paths)
end

-- start(c, opts) -> node. opts: lua_path_prefix (test doubles, searched before ./lua).
function G.start(c, opts)
  opts = opts or {}
  local mport = harness.free_port()
  local ml = "127.0.0.1:" .. mport
  local template = G.render(c, ml, opts.lua_path_prefix)
  local srv = harness.start({ template = template, config = c, workers = c.workers })
  return setmetatable({ srv = srv, metrics_listen = ml, conf = c }, Node)
end

-- Docker objects of projects starting with prefix (label io.sandstack.project).
function G.objects(prefix)
  local out = {}
  local cmds = {
    containers = "docker ps -a --format '{{.Label \"io.sandstack.project\"}} {{.ID}}' --filter label=io.sandstack.project",
    networks = "docker network ls --format '{{.Label \"io.sandstack.project\"}} {{.ID}}' --filter label=io.sandstack.project",
    volumes = "docker volume ls --format '{{.Label \"io.sandstack.project\"}} {{.Name}}' --filter label=io.sandstack.project",
  }
  for kind, cmd in pairs(cmds) do
    out[kind] = {}
    for line in h.sh(cmd):gmatch("[^\n]+") do
      local p, id = line:match("^(%S+) (%S+)$")
      if p and p:sub(1, #prefix) == prefix then out[kind][#out[kind] + 1] = id end
    end
  end
  return out
end

function G.count(prefix)
  local o = G.objects(prefix)
  return #o.containers + #o.networks + #o.volumes
end

-- Removes everything of projects starting with prefix (a safety net for failed runs).
function G.cleanup(prefix)
  local o = G.objects(prefix)
  if #o.containers > 0 then h.sh("docker rm -fv " .. table.concat(o.containers, " ")) end
  if #o.networks > 0 then h.sh("docker network rm " .. table.concat(o.networks, " ")) end
  if #o.volumes > 0 then h.sh("docker volume rm " .. table.concat(o.volumes, " ")) end
  -- the stacks' control directories (docker/control.lua), which the engine's objects do not
  -- carry: a stack removed here rather than by destroy leaves its directory behind otherwise
  if type(prefix) == "string" and prefix:match("^[%w][%w._-]*$") then
    h.sh("rm -rf /run/sandstack/" .. prefix .. "*")
  end
end

return G
