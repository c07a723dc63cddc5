-- The demo stack of examples/demo.sh (`sandstack up examples/demo-stack.lua`): a sandbox with
-- an agent, a database-like sidecar with a healthcheck, and the egress proxy sandstack adds for
-- `egress_policy` (sandstack-proxy; the sandbox's ANTHROPIC_BASE_URL and HTTPS_PROXY point at
-- it). The agent and db use the local test image (spec/support/build-images.sh); the proxy and
-- the forwarder the default images `sandstack images` builds (bootstrap.sh runs it): no registry.
local agent = "sandstack-test/agent:local"
return {
  agent_port = 8080,
  services = {
    { name = "sandbox", image = agent, command = { "agent" }, depends_on = { "db", "proxy" },
      volumes = { { name = "workspace", target = "/workspace" } } },
    { name = "db", image = agent, command = { "agent" }, env = { AGENT_PORT = "5432" }, egress = "none" },
  },
  -- the proxy admits exactly this: the outside stand-in of demo.sh (a plain TCP service that
  -- speaks first, so raw: without it a tunnel must open with a TLS ClientHello), and the model API
  egress_policy = { allow = { { host = "198.51.100.2", port = 8099, raw = true }, "api.anthropic.com:443" } },
  api_key = os.getenv("DEMO_API_KEY") or "sk-demo-real-key-never-in-the-sandbox",
  volumes = { { name = "workspace" } },
  ready = { db = { test = { "agent", "connect", "127.0.0.1", "5432", "500" }, interval = 0.5, retries = 20 } },
  capture_path = "/workspace",
  -- one posture for every container, the forwarder included
  cap_drop = { "ALL" }, security_opt = { "no-new-privileges" }, pids_limit = 256, memory = "256m",
  -- small subnets from a private range, so demo stacks never use up the engine's default pools
  subnet_pool = "10.214.0.0/16",
}
