-- sandstack.conformance_run: what every conformance run (docker: sandstack.conformance; sbx:
-- conformance_sbx.lua; swarm: swarm/conform.lua) shares besides the probes
-- (conformance_probes.lua): its TAP output and the reference stack the probes run against. The
-- runs require this module and the probes, never sandstack.conformance, which dispatches to them.
local M = {}

-- The one TAP writer of every conformance run (docker, swarm, sbx). out: a file (io.stdout) or a
-- function taking each piece of text. t.result returns whether the test passed; t.finish writes
-- the plan line and returns true when none failed (a skip passes) and the results.
function M.tap(out)
  local write = type(out) == "function" and out or function(s) out:write(s) end
  local t = { n = 0, failed = 0, results = {} }
  function t.result(ok, name, detail)
    ok = ok and true or false
    t.n = t.n + 1
    t.results[#t.results + 1] = { ok = ok, name = name }
    write(("%s %d - %s\n"):format(ok and "ok" or "not ok", t.n, name))
    if not ok then
      t.failed = t.failed + 1
      if detail then write("# " .. tostring(detail):gsub("\n", "\n# ") .. "\n") end
    end
    return ok
  end
  function t.skip(name, why)
    t.n = t.n + 1
    t.results[#t.results + 1] = { ok = true, skip = true, name = name }
    write(("ok %d - %s # SKIP %s\n"):format(t.n, name, why))
  end
  function t.diag(s) write("# " .. s .. "\n") end
  function t.skip_all(why) write("1..0 # SKIP " .. why .. "\n") end
  function t.finish()
    write(("1..%d\n"):format(t.n))
    return t.failed == 0, t.results
  end
  return t
end

-- The reference stack of the probes: a sandbox, a sidecar without egress and one with.
function M.stack_opts(opts)
  local image = opts.image or "sandstack-test/agent:local"
  return {
    project_name = opts.project, agent_port = 8080, docker_host = opts.docker_host,
    forwarder_image = opts.forwarder_image or "sandstack-test/socat:local",
    subnet_pool = opts.subnet_pool, pull = opts.pull or "never",
    services = {
      { name = "sandbox", image = image, command = { "agent" } },
      { name = "db", image = image, command = { "agent" }, env = { AGENT_PORT = "5432" }, egress = "none" },
      { name = "relay", image = image, command = { "agent" }, env = { AGENT_PORT = "3128" }, egress = "allow" },
    },
    ready = { db = { test = { "agent", "connect", "127.0.0.1", "5432", "500" }, interval = 0.5 } },
    cap_drop = { "ALL" }, security_opt = { "no-new-privileges" }, pids_limit = 256,
    runtime = opts.runtime,
  }
end

return M
