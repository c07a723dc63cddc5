-- sandstack.gateway.nginx_conf: the nginx.conf of one gateway node, rendered from its checked
-- configuration (gateway/config.lua). Everything that is policy (auth, limits, routing) is
-- Lua; this file only wires nginx's phases to it and sets the limits nginx itself enforces
-- (body size, timeouts). Values are checked plain words by the time they get here.
local M = {}

local TEMPLATE = [[
# Rendered by `sandstack gateway` from {{source}}: edit that file, not this one.
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;

# The workers' user (config `user`, "name" or "name:group"; docs/gateway.md, "The workers'
# user"). Unless the file names one: "nobody:<the Engine socket's group>", or root where a
# worker needs it (an added proxy's control directory, a warm pool, a swarm's managers).
user {{user}};
worker_processes {{workers}};
daemon off;
pid logs/nginx.pid;
error_log logs/error.log {{error_log_level}};

# Engine calls block for seconds (a stack start): they run on this pool, never in the event loop.
thread_pool sandstack threads={{threads}} max_queue=1024;

events { worker_connections {{worker_connections}}; }

http {
  # No request header is logged: the session secret travels in one.
  log_format sandstack '$remote_addr [$time_local] "$request_method $uri" $status $body_bytes_sent '
                       'upstream=$upstream_addr rt=$request_time';
  access_log logs/access.log sandstack;
  client_body_temp_path tmp/body;
  proxy_temp_path tmp/proxy;
  fastcgi_temp_path tmp/fastcgi;
  uwsgi_temp_path tmp/uwsgi;
  scgi_temp_path tmp/scgi;

  client_max_body_size {{client_max_body_size}};
  client_body_timeout {{client_body_timeout}}s;
  client_header_timeout {{client_header_timeout}}s;
  send_timeout {{send_timeout}}s;
  server_tokens off;

  lua_package_path "{{lua_path}}";
  lua_package_cpath "{{lua_cpath}}";
  lua_worker_thread_vm_pool_size {{vms}};
  lua_shared_dict sandstack_sessions {{dict_size}};
  lua_shared_dict sandstack_metrics 1m;

  init_by_lua_block { require("sandstack.gateway").init("{{config}}") }
  init_worker_by_lua_block { require("sandstack.gateway").init_worker() }

  map $http_upgrade $sandstack_connection {
    default upgrade;
    ''      '';
  }

{{extra_http}}
  server {
    listen {{listen}};
    default_type application/json;

    location = /ping { default_type text/plain; return 200 "pong\n"; }

    location = /health {
      content_by_lua_block { require("sandstack.gateway").health() }
    }

    location = /openapi.json {
      content_by_lua_block { require("sandstack.gateway").openapi() }
    }

    location ~ ^/sessions(?:/(?<sandstack_key>[^/]+))?$ {
      proxy_read_timeout {{create_timeout}}s;
      content_by_lua_block { require("sandstack.gateway").api() }
    }

{{session_routes}}
{{console_routes}}
    location / { return 404 '{"error":{"kind":"not_found","message":"no such route"}}\n'; }
{{extra_server}}
  }

  server {
    listen {{metrics_listen}};
    location = /metrics {
      default_type "text/plain; version=0.0.4";
      content_by_lua_block { require("sandstack.gateway").metrics() }
    }
    location = /ping { default_type text/plain; return 200 "pong\n"; }
{{extra_metrics}}
  }
}
]]

-- The routes of backend "docker": a tenant's snapshots (gateway/snapshots.lua), and the
-- proxied routes, to the session's forwarder on this machine's loopback.
local DOCKER_ROUTES = [[
    location ~ ^/snapshots(?:/(?<sandstack_snapshot>[^/]+))?$ {
      content_by_lua_block { require("sandstack.gateway").snapshots() }
    }

    location ~ ^/sessions/(?<sandstack_key>[a-z0-9][a-z0-9_-]*)(?<sandstack_path>/.*)$ {
      set $sandstack_port "";
      set $sandstack_uri "";
      set $sandstack_open "";
      set $sandstack_sid "";
      access_by_lua_block { require("sandstack.gateway").route() }
      proxy_pass http://127.0.0.1:$sandstack_port$sandstack_uri;
      error_page 502 = @sandstack_reconnect; # the stack restarted on another port: re-read it once
      log_by_lua_block { require("sandstack.gateway").done() }
{{proxy}}
    }

    location @sandstack_reconnect {
      access_by_lua_block { require("sandstack.gateway").reroute() }
      proxy_pass http://127.0.0.1:$sandstack_port$sandstack_uri;
      log_by_lua_block { require("sandstack.gateway").done() }
{{proxy}}
    }
]]

-- The proxied routes of backend "swarm" (gateway/swarm.lua): the upstream is the forwarder on
-- this node's loopback, or the gateway of the node that holds the session. Only to that
-- gateway does the secret go on (it checks it again); the agent never sees it.
local SWARM_ROUTES = [[
    location ~ ^/sessions/(?<sandstack_key>[a-z0-9][a-z0-9_-]*)(?<sandstack_path>/.*)$ {
      set $sandstack_upstream "";
      set $sandstack_uri "";
      set $sandstack_fwd_secret "";
      set $sandstack_forwarded "";
      set $sandstack_open "";
      access_by_lua_block { require("sandstack.gateway").route() }
      proxy_pass http://$sandstack_upstream$sandstack_uri;
      error_page 502 504 = @sandstack_reconnect; # not reached: ask the manager again, once
{{proxy}}
    }

    location @sandstack_reconnect {
      access_by_lua_block { require("sandstack.gateway").reroute() }
      proxy_pass http://$sandstack_upstream$sandstack_uri;
{{proxy}}
    }

    # GET/DELETE /sessions/<key> for a session on another node: to that node's gateway as it came
    location @sandstack_forward {
      proxy_pass http://$sandstack_upstream$request_uri;
      proxy_set_header X-Sandstack-Forwarded 1;
      proxy_connect_timeout {{proxy_connect_timeout}}s;
      proxy_read_timeout {{create_timeout}}s;
    }
]]

-- Proxy settings of both proxied locations. The session secret is the gateway's business:
-- its headers are the backend's (BACKENDS: an empty value drops the header), so the agent sees
-- the client's own Authorization and nothing else of ours but the session key.
local PROXY = [[
      proxy_http_version 1.1;
{{secret_headers}}
      proxy_set_header X-Sandstack-Session $sandstack_key;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $sandstack_connection;
      proxy_buffering off;          # server-sent events and chunked output flow as they come
      proxy_request_buffering off;
      proxy_cache off;
      proxy_connect_timeout {{proxy_connect_timeout}}s;
      proxy_read_timeout {{proxy_read_timeout}}s;
      proxy_send_timeout {{proxy_send_timeout}}s;]]

-- What the rendered file takes from the backend, picked once: its proxied routes, the secret
-- headers of PROXY (docker: stripped; swarm: the variables the route sets, "" for this node's
-- own forwarder, so the secret goes on only to the next gateway) and whether the console is served.
local BACKENDS = {
  docker = { routes = DOCKER_ROUTES, console = true,
    secret_headers = '      proxy_set_header X-Sandstack-Session-Secret "";' },
  swarm = { routes = SWARM_ROUTES, console = false,
    secret_headers = "      proxy_set_header X-Sandstack-Session-Secret $sandstack_fwd_secret;\n"
      .. "      proxy_set_header X-Sandstack-Forwarded $sandstack_forwarded;" },
}

local function fill(template, values)
  return (template:gsub("{{([%w_]+)}}", function(name)
    local v = values[name]
    if v == nil then error("nginx_conf: no value for {{" .. name .. "}}", 0) end
    return tostring(v)
  end))
end

-- render(config, paths) -> text. paths: config (the checked config as JSON, read by
-- init_by_lua), source (the operator's file, for the header), and the overrides a test needs
-- (listen, metrics_listen: any text, e.g. a placeholder of its own harness), and user (the
-- workers' user, when the caller chose it: config.worker_user otherwise).
function M.render(c, paths)
  local v = {}
  for k, x in pairs(c) do if type(x) ~= "table" then v[k] = x end end
  for k, x in pairs(paths) do v[k] = x end
  v.source = v.source or "a Lua table"
  v.user = (v.user or require("sandstack.gateway.config").worker_user(c)):gsub(":", " ", 1) -- nginx's `user name group;`
  local extra = c.nginx or {}
  v.extra_http = extra.http or ""
  v.extra_server = extra.server or ""
  v.extra_metrics = extra.metrics or ""
  local b = assert(BACKENDS[c.backend], "nginx_conf: unknown backend")
  v.secret_headers = b.secret_headers
  v.proxy = fill(PROXY, v)
  v.session_routes = fill(b.routes, v)
  v.console_routes = b.console and require("sandstack.gateway.console").nginx(c) or ""
  return fill(TEMPLATE, v)
end

return M
