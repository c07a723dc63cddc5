-- The demo stack of examples/demo.sh (`sandstack up examples/demo-stack.lua`): a sandbox with
-- an agent, a database-like sidecar with a healthcheck, and a proxy-like sidecar with egress
-- that the sandbox's ANTHROPIC_BASE_URL points at. The images are the local test images
-- (spec/support/build-images.sh); the agent echoes requests, so it stands in for both.
local agent = "sandstack-test/agent:local"
return {
  agent_port = 8080,
  forwarder_image = "sandstack-test/socat:local",
  services = {
    { name = "sandbox", image = agent, command = { "agent" }, depends_on = { "db", "proxy" },
      volumes = { { name = "workspace", target = "/workspace" } } },
    { name = "db", image = agent, command = { "agent" }, env = { AGENT_PORT = "5432" }, egress = "none" },
    { name = "proxy", image = agent, command = { "agent" }, env = { AGENT_PORT = "3128" }, egress = "allow", port = 3128 },
  },
  proxy_service = "proxy",
  api_key = os.getenv("DEMO_API_KEY") or "sk-demo-real-key-never-in-the-sandbox",
  volumes = { { name = "workspace" } },
  ready = { db = { test = { "agent", "connect", "127.0.0.1", "5432", "500" }, interval = 0.5, retries = 20 } },
  capture_path = "/workspace",
  -- one posture for every container, the forwarder included
  cap_drop = { "ALL" }, security_opt = { "no-new-privileges" }, pids_limit = 256, memory = "256m",
  -- small subnets from a private range, so demo stacks never use up the engine's default pools
  subnet_pool = "10.214.0.0/16",
}
