-- sandstack conform: the isolation probes on this engine, as TAP.
return {
  order = 80,
  summary = "re-check the isolation promises on this engine, as TAP",
  usage = "conform [--backend docker|sbx|swarm] [--image IMG] [--forwarder-image IMG] [--subnet-pool CIDR] [--runtime NAME]",
  help = [[  --backend B          docker (default), sbx or swarm
  --image IMG          the sandbox image the probes run in
  --forwarder-image    the forwarder's image
  --subnet-pool CIDR   where the probe stacks' networks are placed
  --runtime NAME       every container under that engine runtime, e.g. runsc (docker only)]],
  options = { backend = "B", image = "IMG", ["forwarder-image"] = "IMG", ["subnet-pool"] = "CIDR", runtime = "NAME" },
  run = function(ctx, args, opt)
    if args[1] then return ctx:usage("conform takes no argument, got " .. args[1]) end
    local b = opt.backend
    if b and b ~= "docker" and b ~= "sbx" and b ~= "swarm" then
      return ctx:usage(("--backend is docker, sbx or swarm, got %q"):format(b))
    end
    -- a runtime is the Docker engine's: sbx has its own microVMs, and silently ignoring it would lie
    if opt.runtime and b == "sbx" then return ctx:fail("invalid", "--runtime applies to the docker backend only") end
    local ok = require("sandstack.conformance").run { backend = b, image = opt.image,
      forwarder_image = opt["forwarder-image"], subnet_pool = opt["subnet-pool"], runtime = opt.runtime }
    return ok and 0 or 1
  end,
}
