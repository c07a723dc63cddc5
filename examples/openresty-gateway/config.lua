-- The production gateway's configuration (docs/gateway.md): one node.
--   sandstack gateway --config examples/openresty-gateway/config.lua --prefix /var/lib/sandstack-gw
-- renders nginx.conf from this file and runs nginx in the foreground.
return {
  name = "gw1",                      -- this node: its stacks are labelled io.sandstack.gateway=gw1
  listen = "127.0.0.1:8088",         -- sessions API and proxy (put TLS in front, or add it via nginx.server)
  metrics_listen = "127.0.0.1:9145", -- GET /metrics, Prometheus text
  project_prefix = "gw1-",           -- projects gw1-<key>.<tenant tag>; the pool's are gw1-pool-<hex>

  -- Tenants present `Authorization: Bearer <token>`; only the token's SHA-256 is kept here:
  --   printf %s "$TOKEN" | sha256sum
  tenants = {
    { name = "team-a", token_sha256 = "0000000000000000000000000000000000000000000000000000000000000000",
      max_sessions = 20 },
  },
  max_sessions = 100,   -- the node's cap; beyond it (or a tenant's) POST /sessions gets 429
  idle_ttl = 1800,      -- no proxied request for 30 min: destroyed
  max_ttl = 86400,      -- a day at most, busy or not
  client_max_body_size = "10m",
  proxy_read_timeout = 3600,  -- streams may stay open this long without a byte

  workers = 2, threads = 8, vms = 32,
  pool = { size = 2, max = 8 },      -- warm stacks; drop this line for cold starts only

  -- The stack of each session: the options of sandstack.docker.start (docs/docker.md).
  stack = {
    agent_port = 8080,
    ready_timeout = 60,
    forwarder_image = "sandstack-test/socat:local",
    services = {
      { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" } },
    },
  },
}
