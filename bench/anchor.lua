-- The anchor stack every stack benchmark measures (bench/stack_bench.lua, pool_bench.lua,
-- runsc_bench.lua, crossings_bench.lua): a sandbox with the agent and a volume, a sidecar with a
-- 0.5 s healthcheck the sandbox depends on, and an egress sidecar. One definition, so the
-- benchmarks' ratios are about the same stack.
--   local anchor = dofile("bench/anchor.lua")
--   anchor { project_name =, subnet_pool =, runtime =, ... }   -- any extra start option
local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"

return function(extra)
  local o = {
    agent_port = 8080, forwarder_image = SOCAT, pull = "never",
    services = {
      { name = "sandbox", image = AGENT, command = { "agent" }, depends_on = { "db" },
        volumes = { { name = "workspace", target = "/workspace" } } },
      { name = "db", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "5432" }, egress = "none" },
      { name = "relay", image = AGENT, command = { "agent" }, env = { AGENT_PORT = "3128" }, egress = "allow" },
    },
    volumes = { { name = "workspace" } },
    ready = { db = { test = { "agent", "connect", "127.0.0.1", "5432", "500" }, interval = 0.5, timeout = 2, retries = 20 } },
  }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end
